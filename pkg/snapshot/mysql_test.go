package snapshot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// myRows consolidates updates: per collection, row text -> summed diff.
type myRows struct {
	mu       sync.Mutex
	rows     map[string]map[string]int64
	byID     map[string]map[string]string // collection -> first column -> row (inserts only)
	times    map[string]int               // "partition/time" -> count
	progress map[string]frontier.Frontier
	errs     []string
}

func newMyRows() *myRows {
	return &myRows{rows: map[string]map[string]int64{}, byID: map[string]map[string]string{}, times: map[string]int{}, progress: map[string]frontier.Frontier{}}
}

func rowText(cols []arrow.Array, i int) (id, row string) {
	parts := make([]string, len(cols))
	for j, c := range cols {
		if c.IsNull(i) {
			parts[j] = "NULL"
		} else {
			parts[j] = c.ValueStr(i)
		}
	}
	return parts[0], strings.Join(parts, "|")
}

func (s *myRows) add(coll string, rec arrow.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cols, times, diffs, parts := pipe.SplitData(rec)
	if parts == nil {
		return fmt.Errorf("record of %s without _partition", coll)
	}
	if s.rows[coll] == nil {
		s.rows[coll], s.byID[coll] = map[string]int64{}, map[string]string{}
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		id, row := rowText(cols, i)
		s.rows[coll][row] += diffs.Value(i)
		if s.rows[coll][row] == 0 {
			delete(s.rows[coll], row)
		}
		if diffs.Value(i) > 0 {
			s.byID[coll][id] = row
		}
		s.times[fmt.Sprintf("%s/%d", parts.Value(i), times.Value(i))]++
	}
	return nil
}

// Snapshot sink.
func (s *myRows) Data(coll string, rec arrow.Record) error { return s.add(coll, rec) }
func (s *myRows) Progress(coll string, f frontier.Frontier) error {
	s.progress[coll] = f
	return nil
}

// streamRows is a replicate.MySQLSink into myRows.
type streamRows struct {
	*myRows
	last frontier.Frontier
}

func (s *streamRows) Data(coll string, rec arrow.Record) error     { return s.add(coll, rec) }
func (s *streamRows) Progress(_ string, f frontier.Frontier) error { s.last = f; return nil }
func (s *streamRows) Error(coll string, at frontier.Time, m string) error {
	s.errs = append(s.errs, coll+": "+m)
	return nil
}

func (s *streamRows) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}

func myExec(t testing.TB, conn *client.Conn, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := conn.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func myConnect(t testing.TB, m *testenv.MariaDB) *client.Conn {
	t.Helper()
	c, err := m.Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// myWriter runs writes on a connection of its own until stop.
type myWriter struct {
	writes atomic.Int64 // done
	stop   func()
}

// startMyWriter runs write (the i-th write, from 0) again and again until
// stop or its first error.
func startMyWriter(t testing.TB, m *testenv.MariaDB, write func(w *client.Conn, i int64) error) *myWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mw := &myWriter{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w, err := m.Connect(ctx, "")
		if err != nil {
			return
		}
		defer w.Close()
		for ctx.Err() == nil {
			if write(w, mw.writes.Load()) != nil {
				return
			}
			mw.writes.Add(1)
		}
	}()
	mw.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(mw.stop)
	return mw
}

func myPosition(t testing.TB, m *testenv.MariaDB) (string, frontier.Frontier) {
	t.Helper()
	srv, err := replicate.OpenServer(context.Background(), upstream.MustParseMySQL(m.URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Conn.Close()
	p, f, err := srv.Position(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

const typesTable = `CREATE TABLE %s.types (
	id int PRIMARY KEY, ti tinyint, tiu tinyint unsigned, si smallint, siu smallint unsigned,
	mi mediumint, miu mediumint unsigned, i int, iu int unsigned, bi bigint, biu bigint unsigned,
	de decimal(20,6), dw decimal(50,10), f float, d double, c char(5), vc varchar(50), tx text,
	bn binary(4), vb varbinary(20), bl blob, dt date, dtm datetime(6), dtm0 datetime, ts timestamp(3) NULL,
	tm time(3), yr year, js json, en enum('a','b','c'), st set('x','y','z'), bt bit(10), bt64 bit(64))`

var typesRows = []string{
	`(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
	  -12345678901234.123456, 1234567890123456789012345678901234567890.0123456789, 0.1234567, 3.141592653589793, 'ab  ', 'héllo wörld', 'line1\nline2',
	  'ab', x'00ff10', x'deadbeef00', '1000-01-01', '2024-02-29 23:59:59.123456', '9999-12-31 23:59:59', '2038-01-19 03:14:07.999',
	  '-838:59:59.000', 2155, '{"a": [1, 2.5, "x"], "b": null}', 'c', 'x,z', b'1010101010', x'ffffffffffffffff')`,
	`(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0,
	  0.000001, -0.0000000001, -1e-30, -1.7976931348623157e308, '', '', '',
	  '', '', '', '1970-01-01', '1970-01-01 00:00:00.000001', '1970-01-01 00:00:00', '1970-01-01 00:00:01.000',
	  '00:00:00.001', 1901, '[]', 'a', '', b'0', x'00')`,
	`(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	`(4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1.5, 2.25, 1e30, 1e-300, 'z', '😀', repeat('x', 3000),
	  'abcd', '', repeat('y', 70000), '0000-00-00', '0000-00-00 00:00:00', '2000-01-01 12:00:00', NULL,
	  '838:59:59.999', 0, '"s"', 'b', 'y', b'1', x'8000000000000000')`,
}

// TestMySQLTypesAgree checks that every supported type gives the same
// Arrow value from the snapshot (text protocol) as from the binlog (row
// events), NULLs included, and that a snapshot rewound to the position
// before the rows were written is empty (copy and rewind cancel exactly).
func TestMySQLTypesAgree(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	conn := myConnect(t, m)
	myExec(t, conn, fmt.Sprintf(typesTable, db))
	startPos, start := myPosition(t, m)
	myExec(t, conn, "SET sql_mode = ''", "SET time_zone = '+00:00'")
	for _, r := range typesRows {
		myExec(t, conn, fmt.Sprintf("INSERT INTO %s.types VALUES %s", db, r))
	}
	_, end := myPosition(t, m)
	coll := db + ".types"
	ctx := context.Background()

	snap := newMyRows()
	res, err := MySQL(ctx, MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{coll}}, snap)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewound() != 0 || res.Rows() != int64(len(typesRows)) {
		t.Fatalf("snapshot: %d rows, %d rewound", res.Rows(), res.Rewound())
	}
	stream := &streamRows{myRows: newMyRows()}
	if err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{coll}, Start: startPos, StopAt: end}, stream); err != nil {
		t.Fatal(err)
	}
	if len(stream.errs) > 0 {
		t.Fatalf("stream errors: %v", stream.errs)
	}
	for id := 1; id <= len(typesRows); id++ {
		k := fmt.Sprint(id)
		a, b := snap.byID[coll][k], stream.byID[coll][k]
		if a == "" || a != b {
			t.Errorf("row %d differs:\nsnapshot: %s\nbinlog:   %s", id, a, b)
		}
	}
	t.Logf("row 1: %s", snap.byID[coll]["1"])
	t.Logf("row 4: %.300s", snap.byID[coll]["4"])

	// Rewound to before the inserts: time 0 is the empty table.
	again := newMyRows()
	res, err = MySQL(ctx, MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{coll}, Start: start}, again)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewound() != int64(len(typesRows)) || len(again.rows[coll]) != 0 {
		t.Fatalf("rewound snapshot: %d rewound, contents %v", res.Rewound(), again.rows[coll])
	}
	if !again.progress[coll].Equal(start) && !start.IsEmpty() {
		t.Fatalf("progress %s, want %s", again.progress[coll], start)
	}
}

// TestMySQLSnapshotDefinite takes snapshots at different moments while a
// writer runs: rewound to the first one's position, all have identical
// time-0 contents. The second one runs on three connections (FLUSH TABLES
// WITH READ LOCK) with primary-key ranges.
func TestMySQLSnapshotDefinite(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	conn := myConnect(t, m)
	myExec(t, conn,
		fmt.Sprintf("CREATE TABLE %s.acct (id int PRIMARY KEY, bal bigint NOT NULL, note varchar(40))", db),
		fmt.Sprintf("CREATE TABLE %s.ev (id bigint unsigned AUTO_INCREMENT PRIMARY KEY, acct int, v double)", db))
	var vals []string
	for i := range 2000 {
		vals = append(vals, fmt.Sprintf("(%d, 100, 'n%d')", i, i))
	}
	myExec(t, conn, fmt.Sprintf("INSERT INTO %s.acct VALUES %s", db, strings.Join(vals, ",")))
	myExec(t, conn, fmt.Sprintf("ANALYZE TABLE %s.acct", db))

	r := rand.New(rand.NewPCG(1, 2))
	writer := startMyWriter(t, m, func(w *client.Conn, i int64) error {
		a, b := r.IntN(2000), r.IntN(2000)
		if _, err := w.Execute("BEGIN"); err != nil {
			return err
		}
		_, _ = w.Execute(fmt.Sprintf("UPDATE %s.acct SET bal = bal - 7, note = 'w%d' WHERE id = %d", db, i, a))
		_, _ = w.Execute(fmt.Sprintf("UPDATE %s.acct SET bal = bal + 7 WHERE id = %d", db, b))
		_, _ = w.Execute(fmt.Sprintf("INSERT INTO %s.ev (acct, v) VALUES (%d, %f)", db, a, r.Float64()))
		if r.IntN(5) == 0 {
			_, _ = w.Execute(fmt.Sprintf("DELETE FROM %s.ev ORDER BY id LIMIT 1", db))
		}
		_, err := w.Execute("COMMIT")
		return err
	})
	writes := &writer.writes
	ctx := context.Background()
	for writes.Load() < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	tables := []string{db + ".acct", db + ".ev"}
	first := newMyRows()
	res1, err := MySQL(ctx, MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: tables}, first)
	if err != nil {
		t.Fatal(err)
	}
	w1 := writes.Load()
	for writes.Load() < w1+200 {
		time.Sleep(10 * time.Millisecond)
	}
	second := newMyRows()
	res2, err := MySQL(ctx, MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: tables, Start: res1.Start, Parallel: 3, RangeRows: 300}, second)
	if err != nil {
		t.Fatal(err)
	}
	writer.stop()
	third := newMyRows()
	res3, err := MySQL(context.Background(), MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: tables, Start: res1.Start, Parallel: 2}, third)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot 1 at %s; 2 at %s (locked %v, %d rewound, acct in %d ranges); 3 at %s (%d rewound); %d writer transactions",
		res1.SnapshotPos, res2.SnapshotPos, res2.Locked, res2.Rewound(), res2.Tables[0].Ranges, res3.SnapshotPos, res3.Rewound(), writes.Load())
	if res2.Rewound() == 0 || res2.Tables[0].Ranges < 2 || !res2.Locked {
		t.Fatalf("second snapshot: rewound %d, ranges %d, locked %v", res2.Rewound(), res2.Tables[0].Ranges, res2.Locked)
	}
	for _, c := range tables {
		for name, s := range map[string]*myRows{"second": second, "third": third} {
			if d := myDiffRows(first.rows[c], s.rows[c]); d != "" {
				t.Errorf("%s: %s snapshot differs from the first: %s", c, name, d)
			}
			if !s.progress[c].Equal(first.progress[c]) {
				t.Errorf("%s: %s progress %s, first %s", c, name, s.progress[c], first.progress[c])
			}
		}
		for r, n := range first.rows[c] {
			if n != 1 {
				t.Fatalf("%s: row %s has multiplicity %d", c, r, n)
			}
		}
	}
	// Time 0 is the tables as of the start: the balances still sum up.
	var sum int64
	for r := range first.rows[tables[0]] {
		var id, bal int64
		fmt.Sscanf(strings.ReplaceAll(r, "|", " "), "%d %d", &id, &bal)
		sum += bal
	}
	if sum != 200000 {
		t.Fatalf("balances sum to %d at time 0", sum)
	}
}

func myDiffRows(a, b map[string]int64) string {
	var out []string
	for r, n := range a {
		if b[r] != n {
			out = append(out, fmt.Sprintf("%s: %d vs %d", r, n, b[r]))
		}
	}
	for r, n := range b {
		if _, ok := a[r]; !ok {
			out = append(out, fmt.Sprintf("%s: 0 vs %d", r, n))
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("... %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

// Error implements pipe.Sink; a snapshot never reports one.
func (s *myRows) Error(coll string, at frontier.Time, msg string) error {
	return fmt.Errorf("snapshot reported an error of %s at %v: %s", coll, at, msg)
}

func (s *myRows) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}
