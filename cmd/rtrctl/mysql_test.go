package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// myDB is a fresh MariaDB database.
type myDB struct {
	m    *testenv.MariaDB
	name string
	conn *client.Conn
}

func newMyDB(t *testing.T, m *testenv.MariaDB) *myDB {
	t.Helper()
	d := &myDB{m: m, name: m.CreateDatabase(t)}
	d.conn = d.connect(t)
	return d
}

func (d *myDB) connect(t *testing.T) *client.Conn {
	t.Helper()
	c, err := d.m.Connect(ctxT(t), d.name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (d *myDB) exec(t *testing.T, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := d.conn.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// upstream is the server's GTID position as a frontier.
func (d *myDB) upstream(t *testing.T) frontier.Frontier {
	t.Helper()
	r, err := d.conn.Execute("SELECT @@global.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.GetString(0, 0)
	_, f, err := replicate.ParsePosition(true, s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// rows reads a table as row text -> 1, formatted as the store's rows.
func (d *myDB) rows(t *testing.T, table string, cols []string) map[string]int64 {
	t.Helper()
	r, err := d.conn.Execute(fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), table))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i := range r.RowNumber() {
		vals := make([]string, len(cols))
		for j := range cols {
			vals[j], _ = r.GetString(i, j)
		}
		out[strings.Join(vals, "|")]++
	}
	return out
}

// myBankSetup creates the bank-and-orders tables in d.
func myBankSetup(t *testing.T, d *myDB) []collSpec {
	d.exec(t,
		"CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)",
		"CREATE TABLE orders (id bigint PRIMARY KEY, nlines int NOT NULL, customer varchar(40) NOT NULL)",
		"CREATE TABLE order_lines (order_id bigint, line int, amount int NOT NULL, PRIMARY KEY (order_id, line))")
	var acc, ord, lines []string
	for i := 1; i <= bankAccounts; i++ {
		acc = append(acc, fmt.Sprintf("(%d, %d)", i, bankStart))
	}
	for o := 1; o <= 300; o++ {
		ord = append(ord, fmt.Sprintf("(%d, 3, 'c%d')", o, o))
		for l := 1; l <= 3; l++ {
			lines = append(lines, fmt.Sprintf("(%d, %d, %d)", o, l, o*l))
		}
	}
	d.exec(t, "INSERT INTO accounts VALUES "+strings.Join(acc, ","),
		"INSERT INTO orders VALUES "+strings.Join(ord, ","),
		"INSERT INTO order_lines VALUES "+strings.Join(lines, ","))
	return []collSpec{
		{d.name + ".accounts", 1, []string{"id", "balance"}},
		{d.name + ".order_lines", 2, []string{"order_id", "line", "amount"}},
		{d.name + ".orders", 1, []string{"id", "nlines", "customer"}},
	}
}

// myBankWriter runs the bank workload of ingest_helpers_test.go on MariaDB.
type myBankWriter struct {
	stop context.CancelFunc
	done chan struct{}
	err  error
	txns int
}

func startMyBankWriter(t *testing.T, d *myDB, pause time.Duration) *myBankWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn := d.connect(t)
	w := &myBankWriter{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var orders []int64
		for i := int64(1); i <= 300; i++ {
			orders = append(orders, i)
		}
		next := int64(1000)
		rng := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
		for ctx.Err() == nil {
			var qs []string
			switch r := rng.IntN(100); {
			case r < 55:
				a, b := 1+rng.IntN(bankAccounts), 1+rng.IntN(bankAccounts)
				amt := 1 + rng.IntN(50)
				qs = []string{fmt.Sprintf("UPDATE accounts SET balance = balance - %d WHERE id = %d", amt, a),
					fmt.Sprintf("UPDATE accounts SET balance = balance + %d WHERE id = %d", amt, b)}
			case r < 85:
				next++
				n := 1 + rng.IntN(5)
				qs = []string{fmt.Sprintf("INSERT INTO orders VALUES (%d, %d, 'c%d')", next, n, next)}
				var ls []string
				for l := 1; l <= n; l++ {
					ls = append(ls, fmt.Sprintf("(%d, %d, %d)", next, l, l*7))
				}
				qs = append(qs, "INSERT INTO order_lines VALUES "+strings.Join(ls, ","))
				orders = append(orders, next)
			case r < 93 && len(orders) > 0:
				o := orders[rng.IntN(len(orders))]
				qs = []string{fmt.Sprintf("INSERT INTO order_lines SELECT %d, max(line) + 1, 1 FROM order_lines WHERE order_id = %d", o, o),
					fmt.Sprintf("UPDATE orders SET nlines = nlines + 1 WHERE id = %d", o)}
			case len(orders) > 0:
				i := rng.IntN(len(orders))
				o := orders[i]
				orders = append(orders[:i], orders[i+1:]...)
				qs = []string{fmt.Sprintf("DELETE FROM order_lines WHERE order_id = %d", o), fmt.Sprintf("DELETE FROM orders WHERE id = %d", o)}
			}
			qs = append(append([]string{"BEGIN"}, qs...), "COMMIT")
			for _, q := range qs {
				if _, err := conn.Execute(q); err != nil {
					if ctx.Err() == nil {
						w.err = fmt.Errorf("%s: %w", q, err)
					}
					return
				}
			}
			w.txns++
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}()
	t.Cleanup(func() { w.stop(); <-w.done })
	return w
}

func (w *myBankWriter) halt(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

// myBankChecks are bankChecks with the collections renamed.
func myBankChecks(db string) walkOpts {
	o := bankChecks()
	inner := o.onChange
	o.onChange = func(coll string, vals []string, diff int64) {
		inner("public."+strings.TrimPrefix(coll, db+"."), vals, diff)
	}
	return o
}

// myCaughtUp waits until the store's bindings cover the upstream position
// and every collection is durable past that binding.
func myCaughtUp(t *testing.T, d *myDB, dir, source string, specs []collSpec) {
	t.Helper()
	up := d.upstream(t)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
		if err == nil {
			bs, _, err := st.Bindings(ctxT(t), source)
			if err == nil {
				k := sort.Search(len(bs), func(i int) bool { return bs[i].Frontier.Covers(up) })
				if k < len(bs) {
					ok := true
					for _, s := range specs {
						sh, err := st.Shard(ctxT(t), s.name)
						if err != nil || sh.Refresh(ctxT(t)) != nil || sh.Upper() <= bs[k].Time {
							ok = false
						}
					}
					if ok {
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("ingest did not catch up with %s", up)
}

// TestMySQLIngestKillLoop SIGKILLs a MariaDB ingest at random moments
// (20 times, fewer than the PostgreSQL loop's 36 to keep the run short)
// while the bank-and-orders writer runs: every binding time is
// transactionally consistent with no row twice, times bound before keep
// their contents, and at the end the store equals the tables.
func TestMySQLIngestKillLoop(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	specs := myBankSetup(t, d)
	dir := t.TempDir() + "/store"
	writer := startMyBankWriter(t, d, 3*time.Millisecond)
	var tables []string
	for _, s := range specs {
		tables = append(tables, s.name)
	}
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", strings.Join(tables, ","),
		"--store", dir, "--interval", "50ms", "--compact-every", "1s", "--parallel", "2"}
	seen := map[uint64]string{}
	const kills = 20
	start := time.Now()
	var walked int
	for k := range kills {
		p := startProc(t, nil, args...)
		dur := time.Duration(30+rand.IntN(1200)) * time.Millisecond
		if k < 3 {
			waitLog(t, p, "msg=snapshot ", "msg=resume ")
			dur = time.Duration(rand.IntN(60)) * time.Millisecond
		}
		time.Sleep(dur)
		p.kill(t)
		if writer.err != nil {
			t.Fatalf("writer: %v", writer.err)
		}
		w := walkStore(t, dir, "mysql", specs, withAsOf(myBankChecks(d.name), func(i, n int) bool { return i == n-1 || i%97 == 0 }))
		walked += len(w.readable)
		for tm, h := range seen {
			if got, ok := w.hashes[tm]; !ok || got != h {
				t.Fatalf("kill %d: the contents at time %d changed or vanished after a restart (%q, was %q)", k, tm, got, h)
			}
		}
		for tm, h := range w.hashes {
			seen[tm] = h
		}
		t.Logf("kill %d after %s: %d bindings, %d readable", k, dur, len(w.bindings), len(w.readable))
	}
	loop := time.Since(start)
	p := startProc(t, nil, args...)
	writer.halt(t)
	myCaughtUp(t, d, dir, "mysql", specs)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("final ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.bytes())
	}
	w := walkStore(t, dir, "mysql", specs, withAsOf(myBankChecks(d.name), func(i, n int) bool { return i == n-1 }))
	for tm, h := range seen {
		if w.hashes[tm] != h {
			t.Fatalf("at the end: the contents at time %d changed", tm)
		}
	}
	for _, s := range specs {
		want := d.rows(t, s.name, s.cols)
		if got := w.last[s.name].rows; !equalRows(got, want) {
			t.Errorf("%s: the store at the end differs from SELECT: %s", s.name, rowsDiff(got, want))
		}
	}
	t.Logf("%d kills in %s, %d writer transactions, %d binding times checked across kills, %d at the end",
		kills, loop.Round(time.Millisecond), writer.txns, walked, len(w.readable))
}

// startMyIngest runs ingest.RunMySQL in-process until the test ends.
func startMyIngest(t *testing.T, dsnStr, dir string, tables []string) {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ingest.Run(ctx, ingest.NewMySQL(ingest.MySQLConfig{Upstream: upstream.MustParseMySQL(dsnStr), Tables: tables}), st, ingest.Options{CompactEvery: -1})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ingest: %v", err)
		}
	})
}

// waitIngestReady waits until the ingest writing to dir has recorded its
// source and its snapshot is in: wait-recent answers.
func waitIngestReady(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--timeout", "5s", "--wait-for-ingest")
		if code == exitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait-recent never answered: %s", stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMySQLWaitRecent is the seed scenario on MariaDB: with ingestion
// behind a 300 ms proxy, a plain read right after a commit misses the new
// rows, and a read as of wait-recent's t has exactly them. On an idle
// server wait-recent answers quickly.
func TestMySQLWaitRecent(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v varchar(20))")
	table := d.name + ".items"
	proxy := testenv.StartProxy(t, m.Addr())
	dir := t.TempDir()
	startMyIngest(t, proxy.DSN(m.URL()), dir, []string{table})
	waitRecent := func() (uint64, time.Duration) {
		began := time.Now()
		out, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--timeout", "20s")
		if code != exitOK {
			t.Fatalf("wait-recent: exit %d: %s", code, stderr)
		}
		tm, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("wait-recent printed %q", out)
		}
		return tm, time.Since(began)
	}
	count := func(args ...string) int {
		out, stderr, code := runCLI(t, "", append([]string{"read", dir, table, "--format", "csv"}, args...)...)
		if code != exitOK {
			t.Fatalf("read: exit %d: %s", code, stderr)
		}
		return strings.Count(out, "\n") - 1
	}
	waitIngestReady(t, dir)
	proxy.SetLatencyDir(testenv.ToClient, 300*time.Millisecond)
	n := 0
	var took []time.Duration
	for round := range 5 {
		var vals []string
		for range 4 {
			n++
			vals = append(vals, fmt.Sprintf("(%d, 'r%d')", n, round))
		}
		d.exec(t, "INSERT INTO items VALUES "+strings.Join(vals, ","))
		if got := count(); got >= n {
			t.Fatalf("round %d: the plain read already sees %d rows; the proxy does not slow ingestion enough", round, got)
		}
		tm, dur := waitRecent()
		took = append(took, dur)
		if got := count("--as-of", strconv.FormatUint(tm, 10)); got != n {
			t.Fatalf("round %d: read as of %d sees %d rows, want exactly %d", round, tm, got, n)
		}
	}
	t.Logf("behind 300 ms: wait-recent took %v", took)

	proxy.SetLatency(0)
	waitRecent()
	var ds []time.Duration
	for range 20 {
		_, dur := waitRecent()
		ds = append(ds, dur)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("idle upstream, 20 wait-recent calls: min %v, p50 %v, max %v", ds[0], ds[10], ds[19])
	if ds[10] > 5*time.Second {
		t.Fatalf("idle wait-recent p50 %v", ds[10])
	}
}

// TestMySQLWaitRecentBusy: wait-recent while another client keeps writing
// to the server, with ingestion behind a 300 ms link. A waiter that is
// behind nudges the stream every 20 ms; a nudge used to run the idle
// check (two queries on the control connection, each a round trip over
// the slow link) even while the last check's mark was still ahead of the
// stream, so the stream did little else and wait-recent timed out.
func TestMySQLWaitRecentBusy(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBOptions{})
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v varchar(20))")
	table := d.name + ".items"
	proxy := testenv.StartProxy(t, m.Addr())
	dir := t.TempDir()
	startMyIngest(t, proxy.DSN(m.URL()), dir, []string{table})
	waitIngestReady(t, dir)
	proxy.SetLatencyDir(testenv.ToClient, 300*time.Millisecond)
	// Another database's table, written to about 200 times a second.
	other := newMyDB(t, m)
	other.exec(t, "CREATE TABLE t (id int PRIMARY KEY)")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := other.conn.Execute(fmt.Sprintf("INSERT INTO t VALUES (%d)", id)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	var took []time.Duration
	for i := range 15 {
		d.exec(t, fmt.Sprintf("INSERT INTO items VALUES (%d, 'b')", i))
		began := time.Now()
		out, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--timeout", "15s")
		if code != exitOK {
			t.Fatalf("call %d: wait-recent: exit %d after %v: %s", i, code, time.Since(began), stderr)
		}
		took = append(took, time.Since(began))
		tm := strings.TrimSpace(out)
		rows, stderr, code := runCLI(t, "", "read", dir, table, "--format", "csv", "--as-of", tm)
		if code != exitOK {
			t.Fatalf("read: exit %d: %s", code, stderr)
		}
		if got := strings.Count(rows, "\n") - 1; got != i+1 {
			t.Fatalf("call %d: read as of %s sees %d rows, want %d", i, tm, got, i+1)
		}
	}
	t.Logf("beside a writer, behind 300 ms: wait-recent took %v", took)
}

// TestMySQLCLI runs snapshot and replicate --source mysql and reads their
// pipes back.
func TestMySQLCLI(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v varchar(10))", "INSERT INTO t VALUES (1, 'a'), (2, 'b')")
	out, stderr, code := runCLI(t, "", "snapshot", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name+".t")
	if code != exitOK {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, m.Password) {
		t.Fatal("password on stderr")
	}
	kinds := readKinds(t, out)
	if kinds["data "+d.name+".t"] != 2 || kinds["progress "+d.name+".t"] != 1 {
		t.Fatalf("snapshot pipe: %v\n%s", kinds, stderr)
	}
	r, _ := d.conn.Execute("SELECT @@global.gtid_binlog_pos")
	start, _ := r.GetString(0, 0)
	d.exec(t, "UPDATE t SET v = 'z' WHERE id = 1", "DELETE FROM t WHERE id = 2")
	stop := d.upstream(t)
	out, stderr, code = runCLI(t, "", "replicate", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name+".t",
		"--start-gtid", start, "--stop-at", stop.String())
	if code != exitOK {
		t.Fatalf("replicate: exit %d: %s", code, stderr)
	}
	kinds = readKinds(t, out)
	if kinds["data "+d.name+".t"] != 3 || kinds["progress "] < 1 {
		t.Fatalf("replicate pipe: %v", kinds)
	}
	_, stderr, code = runCLI(t, "", "snapshot", "--source", "mysql", "--dsn", m.URL())
	if code != exitUsage || !strings.Contains(stderr, "--tables") {
		t.Fatalf("snapshot without tables: exit %d: %s", code, stderr)
	}
}

// readKinds counts rows per "kind collection" in a pipe.
func readKinds(t *testing.T, data string) map[string]int {
	t.Helper()
	rd := pipe.NewReader(bytes.NewReader([]byte(data)), nil)
	out := map[string]int{}
	for {
		s, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for {
			rec, err := s.NextRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out[string(s.Header.Kind)+" "+s.Header.Collection] += int(rec.NumRows())
		}
	}
}

// TestMySQLIngestResnapshot is the seed's multi-table bug on MariaDB: the
// ingest dies right after the first table's snapshot commit, the tables
// change, and the restarted ingest snapshots the second table again,
// rewound to the first binding's GTID position, so both tables' time 0
// is the same moment and the end equals the tables.
func TestMySQLIngestResnapshot(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 1), (2, 2)", "INSERT INTO b VALUES (1, 10), (2, 20)")
	specs := []collSpec{{d.name + ".a", 1, []string{"id", "v"}}, {d.name + ".b", 1, []string{"id", "v"}}}
	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name + ".a," + d.name + ".b", "--store", dir, "--interval", "20ms"}
	p := startProc(t, []string{"RTR_FAULT_EXIT_AFTER_COMMIT=" + d.name + ".a"}, args...)
	if code := p.wait(t, 30*time.Second); code != 137 {
		t.Fatalf("exit %d, want 137\n%s", code, p.stderr.bytes())
	}
	// Time 0 must be the tables as they were before these changes.
	d.exec(t, "UPDATE b SET v = 21 WHERE id = 2", "DELETE FROM b WHERE id = 1", "INSERT INTO b VALUES (3, 30)", "UPDATE a SET v = 9 WHERE id = 1")
	p = startProc(t, nil, args...)
	myCaughtUp(t, d, dir, "mysql", specs)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.bytes())
	}
	if !strings.Contains(string(p.stderr.bytes()), "rewound=4") {
		t.Fatalf("the second snapshot did not rewind 4 updates (an update is two):\n%s", p.stderr.bytes())
	}
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctxT(t), "mysql")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		coll string
		want map[string]int64
	}{{d.name + ".a", map[string]int64{"1|1": 1, "2|2": 1}}, {d.name + ".b", map[string]int64{"1|10": 1, "2|20": 1}}} {
		sh, err := st.Shard(ctxT(t), c.coll)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAsOf(ctxT(t), sh, bs[0].Time)
		if err != nil {
			t.Fatal(err)
		}
		if !equalRows(got, c.want) {
			t.Fatalf("%s at the first binding: %s", c.coll, rowsDiff(got, c.want))
		}
	}
	w := walkStore(t, dir, "mysql", specs, walkOpts{})
	for _, s := range specs {
		if want := d.rows(t, s.name, s.cols); !equalRows(w.last[s.name].rows, want) {
			t.Errorf("%s at the end: %s", s.name, rowsDiff(w.last[s.name].rows, want))
		}
	}
}

func TestParseStopAt(t *testing.T) {
	for in, want := range map[string]string{
		"0:43,1:8":     "mariadb 0:43,1:8",
		"0-1-42,1-2-7": "mariadb 0:43,1:8",
		"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42": "mysql 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42",
	} {
		f, err := parseStopAt(in)
		if err != nil || string(f.Domain())+" "+f.String() != want {
			t.Errorf("%q: %s %s %v", in, f.Domain(), f, err)
		}
	}
	if _, err := parseStopAt("nonsense"); err == nil {
		t.Fatal("accepted")
	}
}
