package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func TestCheckBinlogSettings(t *testing.T) {
	good := map[string]string{"log_bin": "1", "binlog_format": "ROW", "binlog_row_image": "FULL", "gtid_mode": "ON"}
	if err := replicate.CheckBinlogSettings(true, good); err != nil {
		t.Fatal(err)
	}
	if err := replicate.CheckBinlogSettings(false, good); err != nil {
		t.Fatal(err)
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, c := range []struct {
		mariadb    bool
		vars       map[string]string
		msg, fix   string
		notMariaDB bool
	}{
		{true, with("log_bin", "0"), "binary log is off", "log_bin = mysql-bin", false},
		{true, with("binlog_format", "MIXED"), "binlog_format is MIXED", "SET GLOBAL binlog_format = 'ROW'", false},
		{true, with("binlog_row_image", "MINIMAL"), "binlog_row_image is MINIMAL", "SET GLOBAL binlog_row_image = 'FULL'", false},
		{false, with("gtid_mode", "OFF"), "gtid_mode is OFF", "SET GLOBAL gtid_mode = ON", false},
		{false, with("gtid_mode", "ON_PERMISSIVE"), "gtid_mode is ON_PERMISSIVE", "enforce_gtid_consistency", false},
		{false, with("log_bin", "OFF"), "binary log is off", "gtid_mode = ON", false},
	} {
		err := replicate.CheckBinlogSettings(c.mariadb, c.vars)
		if err == nil || !errors.Is(err, replicate.ErrBinlogSettings) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(hint.Of(err), c.fix) {
			t.Errorf("%v: got %v (hint %q)", c.vars, err, hint.Of(err))
		}
	}
	// MariaDB has no gtid_mode: it is not checked.
	if err := replicate.CheckBinlogSettings(true, with("gtid_mode", "")); err != nil {
		t.Fatal(err)
	}
}

func TestMariaDBStartPos(t *testing.T) {
	f, _ := frontier.New(frontier.DomainMariaDB, map[string]uint64{"0": 43, "1": 1, "2": 8})
	for _, c := range []struct{ state, want string }{
		{"0-1-50,2-3-9", "0-1-42,2-3-7"},
		{"0-7-40,0-1-50,2-3-7,2-4-30", "0-1-42,2-3-7"}, // the server whose last seq is the least at or past it
	} {
		got, err := replicate.MariaDBStartPos(f, c.state)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.state, got, err, c.want)
		}
	}
	if _, err := replicate.MariaDBStartPos(f, "0-1-10,2-3-9"); !errors.Is(err, replicate.ErrPurged) {
		t.Fatalf("server behind the store: %v", err)
	}
	if got, err := replicate.MariaDBStartPos(frontier.Empty(frontier.DomainMariaDB), "0-1-5"); err != nil || got != "" {
		t.Fatalf("empty: %q %v", got, err)
	}
	if !replicate.PosAtLeast("mysql-bin.000010", 4, "mysql-bin.000009", 900) || replicate.PosAtLeast("mysql-bin.000002", 100, "mysql-bin.000002", 101) {
		t.Fatal("PosAtLeast")
	}
}

// mySink records a MySQL stream.
type mySink struct {
	mu       sync.Mutex
	rows     map[string]map[string]int64 // collection -> row -> diff
	seen     []string                    // "coll diff row @partition/time"
	progress []frontier.Frontier
	errs     []string
	resets   []string
	onProg   func(frontier.Frontier)
}

func newMySink() *mySink { return &mySink{rows: map[string]map[string]int64{}} }

func (s *mySink) Data(coll string, rec arrow.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cols, times, diffs, parts := pipe.SplitData(rec)
	if s.rows[coll] == nil {
		s.rows[coll] = map[string]int64{}
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		vals := make([]string, len(cols))
		for j, c := range cols {
			vals[j] = c.ValueStr(i)
			if c.IsNull(i) {
				vals[j] = "NULL"
			}
		}
		row := strings.Join(vals, "|")
		s.rows[coll][row] += diffs.Value(i)
		if s.rows[coll][row] == 0 {
			delete(s.rows[coll], row)
		}
		s.seen = append(s.seen, fmt.Sprintf("%s %+d %s @%s/%d", coll, diffs.Value(i), row, parts.Value(i), times.Value(i)))
	}
	return nil
}
func (s *mySink) Progress(_ string, f frontier.Frontier) error {
	s.mu.Lock()
	if n := len(s.progress); n > 0 && !f.Covers(s.progress[n-1]) {
		s.mu.Unlock()
		return fmt.Errorf("progress went back from %s to %s", s.progress[n-1], f)
	}
	s.progress = append(s.progress, f)
	cb := s.onProg
	s.mu.Unlock()
	if cb != nil {
		cb(f)
	}
	return nil
}
func (s *mySink) Error(coll string, at frontier.Time, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf("%s @%s/%d: %s", coll, at.Partition, at.Pos, msg))
	return nil
}
func (s *mySink) last() frontier.Frontier {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.progress) == 0 {
		return frontier.Frontier{}
	}
	return s.progress[len(s.progress)-1]
}

func myConn(t testing.TB, m *testenv.MariaDB) *client.Conn {
	t.Helper()
	c, err := m.Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func myRun(t testing.TB, c *client.Conn, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func myString(t testing.TB, c *client.Conn, q string) string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	s, _ := r.GetString(0, 0)
	return s
}

// streamUntil runs StreamMySQL in the background; stop ends it.
func streamUntil(t *testing.T, cfg replicate.MySQLConfig, sink pipe.Sink) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- replicate.StreamMySQL(ctx, cfg, sink) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func myWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMySQLStream checks updates, times (the GTID of each transaction),
// progress after each commit and DDL handling against MariaDB.
func TestMySQLStream(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	c := myConn(t, m)
	myRun(t, c, fmt.Sprintf("CREATE TABLE %s.a (id int PRIMARY KEY, v varchar(20))", db),
		fmt.Sprintf("CREATE TABLE %s.b (id int PRIMARY KEY, n bigint)", db))
	sink := newMySink()
	stop := streamUntil(t, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".a", db + ".b"}}, sink)
	myWaitFor(t, "first progress", func() bool { return sink.last().Domain() != "" })

	gtid := func() string { return myString(t, c, "SELECT @@last_gtid") }
	var want []string
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.a VALUES (1, 'one'), (2, 'two')", db))
	g1 := gtid()
	myRun(t, c, "BEGIN", fmt.Sprintf("UPDATE %s.a SET v = 'uno' WHERE id = 1", db), fmt.Sprintf("INSERT INTO %s.b VALUES (7, 70)", db),
		fmt.Sprintf("DELETE FROM %s.a WHERE id = 2", db), "COMMIT")
	g2 := gtid()
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.a VALUES (3, NULL)", db))
	myRun(t, c, fmt.Sprintf("TRUNCATE TABLE %s.b", db))
	g4 := gtid()
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.b VALUES (8, 80)", db))
	at := func(g string) string {
		p, err := frontier.ParseMariaDBPos(g)
		if err != nil || len(p) != 1 {
			t.Fatalf("gtid %q: %v", g, err)
		}
		return fmt.Sprintf("@%d/%d", p[0].Domain, p[0].Seq)
	}
	want = append(want,
		db+".a +1 1|one "+at(g1), db+".a +1 2|two "+at(g1),
		db+".a -1 1|one "+at(g2), db+".a +1 1|uno "+at(g2), db+".b +1 7|70 "+at(g2), db+".a -1 2|two "+at(g2))
	_, upstream, err := replicate.ParsePosition(true, myString(t, c, "SELECT @@global.gtid_binlog_pos"))
	if err != nil {
		t.Fatal(err)
	}
	myWaitFor(t, "progress to the upstream position", func() bool { return sink.last().Covers(upstream) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Records of different collections of one transaction may come in
	// either order: compare each transaction's updates as sets.
	sort.Strings(want[2:6])
	got6 := append([]string(nil), sink.seen[:6]...)
	sort.Strings(got6[2:6])
	if got := strings.Join(got6, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	// The TRUNCATE resets b at its own transaction; b goes on after it.
	if len(sink.seen) != 9 || !strings.HasPrefix(sink.seen[6], db+".a +1 3|NULL") || sink.seen[7] != db+".b reset "+at(g4) ||
		!strings.HasPrefix(sink.seen[8], db+".b +1 8|80") {
		t.Fatalf("after the truncate: %v", sink.seen[6:])
	}
	if len(sink.errs) != 0 {
		t.Fatalf("errors: %v", sink.errs)
	}
	if _, ok := sink.rows[db+".b"]["7|70"]; ok {
		t.Fatalf("b still holds its truncated row: %v", sink.rows[db+".b"])
	}
	// Progress after each commit is beyond it.
	p1, _ := frontier.ParseMariaDBPos(g1)
	found := false
	for _, f := range sink.progress {
		if f.Equal(p1.Upper()) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no progress at %s: %v", p1.Upper(), sink.progress)
	}
}

// TestMySQLSettingsErrors starts MariaDB with each wrong setting.
func TestMySQLSettingsErrors(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     testenv.MariaDBOptions
		msg, fix string
	}{
		{"log_bin off", testenv.MariaDBOptions{NoLogBin: true}, "the binary log is off", "log_bin = mysql-bin"},
		{"statement format", testenv.MariaDBOptions{BinlogFormat: "STATEMENT"}, "binlog_format is STATEMENT", "SET GLOBAL binlog_format = 'ROW'"},
		{"minimal image", testenv.MariaDBOptions{BinlogRowImage: "MINIMAL"}, "binlog_row_image is MINIMAL", "SET GLOBAL binlog_row_image = 'FULL'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := testenv.StartMariaDB(t, c.opts)
			err := replicate.StreamMySQL(context.Background(), replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL())}, newMySink())
			if !errors.Is(err, replicate.ErrBinlogSettings) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(hint.Of(err), c.fix) {
				t.Fatalf("got %v (hint %q)", err, hint.Of(err))
			}
			if strings.Contains(err.Error(), m.Password) || strings.Contains(hint.Of(err), m.Password) {
				t.Fatal("password in the error")
			}
			t.Logf("%v\nhint: %s", err, hint.Of(err))
		})
	}
}

// TestMySQLAltered: without a sink that re-snapshots (TableChanger),
// ALTER TABLE ADD COLUMN stops that collection with an error at the
// ALTER's own transaction; the other collection goes on.
func TestMySQLAltered(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	c := myConn(t, m)
	myRun(t, c, fmt.Sprintf("CREATE TABLE %s.a (id int PRIMARY KEY, v int)", db),
		fmt.Sprintf("CREATE TABLE %s.b (id int PRIMARY KEY, v int)", db))
	sink := newMySink()
	stop := streamUntil(t, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".a", db + ".b"}}, sink)
	myWaitFor(t, "first progress", func() bool { return sink.last().Domain() != "" })
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.a VALUES (1, 1)", db), fmt.Sprintf("INSERT INTO %s.b VALUES (1, 1)", db),
		fmt.Sprintf("ALTER TABLE %s.a ADD COLUMN w int", db))
	g := myString(t, c, "SELECT @@last_gtid")
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.a VALUES (2, 2, 2)", db))
	myRun(t, c, fmt.Sprintf("INSERT INTO %s.b VALUES (2, 2)", db), fmt.Sprintf("INSERT INTO %s.a VALUES (3, 3, 3)", db))
	_, upstream, _ := replicate.ParsePosition(true, myString(t, c, "SELECT @@global.gtid_binlog_pos"))
	myWaitFor(t, "progress", func() bool { return sink.last().Covers(upstream) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p, _ := frontier.ParseMariaDBPos(g)
	if len(sink.errs) != 1 || !strings.Contains(sink.errs[0], "altered") || !strings.Contains(sink.errs[0], fmt.Sprintf("@0/%d", p[0].Seq)) ||
		!strings.Contains(sink.errs[0], "re-snapshot") {
		t.Fatalf("errors: %v", sink.errs)
	}
	t.Logf("error: %s", sink.errs[0])
	if len(sink.rows[db+".a"]) != 1 || len(sink.rows[db+".b"]) != 2 {
		t.Fatalf("rows: %v", sink.rows)
	}
}

// TestMySQLPurged resumes from a position whose binlog was purged.
func TestMySQLPurged(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBOptions{})
	c := myConn(t, m)
	myRun(t, c, "CREATE DATABASE d", "CREATE TABLE d.t (id int PRIMARY KEY)", "INSERT INTO d.t VALUES (1)")
	old := myString(t, c, "SELECT @@global.gtid_binlog_pos")
	myRun(t, c, "INSERT INTO d.t VALUES (2)", "FLUSH BINARY LOGS", "INSERT INTO d.t VALUES (3)", "FLUSH BINARY LOGS")
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := r.GetString(0, 0)
	// MariaDB keeps binlogs InnoDB may still need for crash recovery
	// until its checkpoint passes them: retry until they are gone.
	myWaitFor(t, "the purge", func() bool {
		myRun(t, c, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", cur))
		r, err := c.Execute("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		first, _ := r.GetString(0, 0)
		return first == cur
	})
	err = replicate.StreamMySQL(context.Background(), replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{"d.t"}, Start: old}, newMySink())
	if !errors.Is(err, replicate.ErrPurged) || !strings.Contains(hint.Of(err), "new store") {
		t.Fatalf("got %v (hint %q)", err, hint.Of(err))
	}
	t.Logf("%v\nhint: %s", err, hint.Of(err))
}

// TestMySQLKillConnection kills the replication connection between and
// inside transactions (one of 3000 rows handed over 100 at a time): every
// row arrives exactly once at its transaction's time.
func TestMySQLKillConnection(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	c := myConn(t, m)
	killer := myConn(t, m)
	myRun(t, c, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY, v varchar(100))", db))
	var mu sync.Mutex
	var sessions []uint32
	sink := newMySink()
	var kills int
	stop := streamUntil(t, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".t"}, FlushRows: 100, MaxBackoff: 200 * time.Millisecond,
		OnSession: func(id uint32) {
			mu.Lock()
			sessions = append(sessions, id)
			mu.Unlock()
		}}, sink)
	myWaitFor(t, "first progress", func() bool { return sink.last().Domain() != "" })
	myWaitFor(t, "the first session", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sessions) > 0
	})
	kill := func() {
		mu.Lock()
		id, n := sessions[len(sessions)-1], len(sessions)
		mu.Unlock()
		if _, err := killer.Execute(fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatalf("kill %d: %v", id, err)
		}
		kills++
		myWaitFor(t, "a new session", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(sessions) > n
		})
	}
	id := 0
	for round := range 6 {
		for range 20 {
			id++
			myRun(t, c, fmt.Sprintf("INSERT INTO %s.t VALUES (%d, 'r%d')", db, id, round))
		}
		if round%2 == 0 {
			kill() // between transactions (or while they stream)
			continue
		}
		// A large transaction; kill once part of it has been handed over.
		var vals []string
		for range 3000 {
			id++
			vals = append(vals, fmt.Sprintf("(%d, repeat('x', 90))", id))
		}
		before := len(sink.seen)
		myRun(t, c, fmt.Sprintf("INSERT INTO %s.t VALUES %s", db, strings.Join(vals, ",")))
		myWaitFor(t, "part of the large transaction", func() bool {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return len(sink.seen) > before+300
		})
		kill()
	}
	_, upstream, _ := replicate.ParsePosition(true, myString(t, c, "SELECT @@global.gtid_binlog_pos"))
	myWaitFor(t, "progress", func() bool { return sink.last().Covers(upstream) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(sessions)
	mu.Unlock()
	if n != kills+1 {
		t.Fatalf("%d sessions after %d kills", n, kills)
	}
	// Every row exactly once, with diff +1, each at one time.
	count := map[string]int{}
	for _, s := range sink.seen {
		f := strings.Fields(s)
		if f[1] != "+1" {
			t.Fatalf("unexpected update %s", s)
		}
		count[strings.Split(f[2], "|")[0]]++
	}
	var bad []string
	for i := 1; i <= id; i++ {
		if count[fmt.Sprint(i)] != 1 {
			bad = append(bad, fmt.Sprintf("%d x%d", i, count[fmt.Sprint(i)]))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 || len(sink.seen) != id {
		t.Fatalf("%d rows, %d updates; wrong: %v", id, len(sink.seen), bad[:min(len(bad), 10)])
	}
	t.Logf("%d rows exactly once over %d sessions (%d kills)", id, n, kills)
}

// TestMySQLIdleProgress measures how soon progress reaches the server's
// position after it was read, idle and while other databases are written.
func TestMySQLIdleProgress(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	other := m.CreateDatabase(t)
	c := myConn(t, m)
	myRun(t, c, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY)", db), fmt.Sprintf("CREATE TABLE %s.o (id int AUTO_INCREMENT PRIMARY KEY)", other))
	sink := newMySink()
	nudge := make(chan struct{}, 1)
	stop := streamUntil(t, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".t"}, Nudge: nudge, HeartbeatPeriod: 200 * time.Millisecond}, sink)
	myWaitFor(t, "first progress", func() bool { return sink.last().Domain() != "" })
	measure := func(write bool) time.Duration {
		if write {
			myRun(t, c, fmt.Sprintf("INSERT INTO %s.o VALUES ()", other))
		}
		_, up, _ := replicate.ParsePosition(true, myString(t, c, "SELECT @@global.gtid_binlog_pos"))
		began := time.Now()
		select {
		case nudge <- struct{}{}:
		default:
		}
		myWaitFor(t, "progress", func() bool { return sink.last().Covers(up) })
		return time.Since(began)
	}
	for _, write := range []bool{false, true} {
		var ds []time.Duration
		for range 20 {
			ds = append(ds, measure(write))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("writes to another database %v: min %v, median %v, max %v", write, ds[0], ds[10], ds[19])
		if ds[10] > 2*time.Second {
			t.Fatalf("median %v", ds[10])
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestParsePosition(t *testing.T) {
	const u = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
	s, f, err := replicate.ParsePosition(false, u+":1-5:7-9")
	if err != nil {
		t.Fatal(err)
	}
	// A gap: the start set is the set itself, progress its prefix.
	if s != strings.ToLower(u)+":1-5:7-9" || f.Domain() != frontier.DomainMySQL || f.Get(strings.ToLower(u)) != 6 {
		t.Fatalf("%q %s", s, f)
	}
	if g := frontier.GTIDSetOf(f).String(); g != strings.ToLower(u)+":1-5" {
		t.Fatalf("resume set %q", g)
	}
	s, f, err = replicate.ParsePosition(true, "1-2-7,0-1-42")
	if err != nil || s != "0-1-42,1-2-7" || f.String() != "0:43,1:8" {
		t.Fatalf("%q %s %v", s, f, err)
	}
	if _, _, err := replicate.ParsePosition(true, "0-1"); err == nil {
		t.Fatal("bad position accepted")
	}
	if _, _, err := replicate.ParsePosition(false, u+":tag:1-5"); err == nil {
		t.Fatal("tagged gtid accepted")
	}
}

func (s *mySink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rows, coll)
	s.seen = append(s.seen, fmt.Sprintf("%s reset @%s/%d", coll, at.Partition, at.Pos))
	s.resets = append(s.resets, fmt.Sprintf("%s @%s/%d", coll, at.Partition, at.Pos))
	return nil
}
