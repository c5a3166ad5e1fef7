package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
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

// TestMySQLIngestKillLoop is the suite's kill loop (check 4, with checks
// 2 and 5) at length on MariaDB: 20 SIGKILLs (fewer than the PostgreSQL
// loop's 36 to keep the run short), the first three during or right after
// the snapshot, a snapshot on two connections, background compaction and
// one at the end.
func TestMySQLIngestKillLoop(t *testing.T) {
	h := &myHarness{m: testenv.SharedMariaDB(t)}
	start := time.Now()
	r := ingesttest.KillLoop(t, h, h.New(t), ingesttest.KillOptions{
		Source: "mysql", Kills: 20, Early: 3, MinRun: 30 * time.Millisecond, MaxRun: 1230 * time.Millisecond,
		Args: []string{"--interval", "50ms", "--compact-every", "1s", "--parallel", "2"}, Compact: true,
	})
	t.Logf("%d kills in %s, %d writer transactions, %d binding reads compared across kills, %d bindings checked at the end",
		r.Kills, time.Since(start).Round(time.Millisecond), r.Txns, r.Reads, r.Times.Bindings)
}

// TestMySQLIngestKillLoopStaged is the MariaDB kill loop with every
// update not yet bound staged past 4 KiB (--txn-memory 4096, per GTID
// domain): SIGKILLs at any point replay to the same definite result.
func TestMySQLIngestKillLoopStaged(t *testing.T) {
	h := &myHarness{m: testenv.SharedMariaDB(t)}
	r := ingesttest.KillLoop(t, h, h.New(t), ingesttest.KillOptions{
		Source: "mysql", Kills: 8, Early: 2, MinRun: 30 * time.Millisecond, MaxRun: 1230 * time.Millisecond,
		Args: []string{"--interval", "50ms", "--compact-every", "0", "--txn-memory", "4096"},
		BeforeStop: func(dir string) {
			if _, err := os.Stat(filepath.Join(dir, "staged", "mysql")); err != nil {
				t.Errorf("nothing was staged: %v", err)
			}
		},
	})
	if left, _ := os.ReadDir(filepath.Join(r.Dir, "staged", "mysql")); len(left) != 0 {
		t.Errorf("%d staged files left after a clean stop", len(left))
	}
	t.Logf("%d kills, %d writer transactions, %d binding reads compared", r.Kills, r.Txns, r.Reads)
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

// eachPipeRecord calls fn with every record of every stream of a pipe,
// and the stream's header.
func eachPipeRecord(t *testing.T, data string, fn func(h pipe.Header, rec arrow.Record)) {
	t.Helper()
	rd := pipe.NewReader(bytes.NewReader([]byte(data)), nil)
	for {
		s, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return
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
			fn(s.Header, rec)
		}
	}
}

// readKinds counts rows per "kind collection" in a pipe.
func readKinds(t *testing.T, data string) map[string]int {
	t.Helper()
	out := map[string]int{}
	eachPipeRecord(t, data, func(h pipe.Header, rec arrow.Record) {
		out[string(h.Kind)+" "+h.Collection] += int(rec.NumRows())
	})
	return out
}

// TestMySQLIngestResnapshot is the seed's multi-table bug on MariaDB: the
// ingest dies right after the first table's snapshot commit, the tables
// change, and the restarted ingest takes the second table's time 0 from
// the staged snapshot the first run finished (copied at the first
// binding's GTID position: nothing to copy or rewind), so both tables'
// time 0 is the same moment and the end equals the tables.
func TestMySQLIngestResnapshot(t *testing.T) {
	fx := (&myHarness{m: testenv.SharedMariaDB(t)}).New(t)
	const source = "mysql"
	lay := fx.Layout(source)
	a, b := lay.Collections()[0], lay.Collections()[1]
	dir := t.TempDir() + "/store"
	args := append(fx.IngestArgs(dir, source), "--interval", "20ms")
	p := startProc(t, []string{"RTR_FAULT_EXIT_AFTER_COMMIT=" + a}, args...)
	if code := p.wait(t, 30*time.Second); code != 137 {
		t.Fatalf("exit %d, want 137\n%s", code, p.stderr.Bytes())
	}
	// Time 0 must be the tables as they were before these changes: of b
	// an update, an insert and a delete (4 row events: an update is two).
	log := bankLog(lay)
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "1", Balance: 900}, ingesttest.Set{Coll: b, ID: "2", Balance: 1100})
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "2", Balance: 950}, ingesttest.Set{Coll: b, ID: "9", Balance: 50, Op: ingesttest.Insert})
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "3", Balance: 2000}, ingesttest.Set{Coll: b, ID: "1", Op: ingesttest.Delete})
	p = startProc(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{p}, 60*time.Second)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.Bytes())
	}
	if !regexp.MustCompile(`msg="snapshot staged".* rows_copied=0 rows_resumed=[1-9]`).Match(p.stderr.Bytes()) || !strings.Contains(string(p.stderr.Bytes()), "rewound=0") {
		t.Fatalf("the second snapshot did not take the staged copy of the first as it was:\n%s", p.stderr.Bytes())
	}
	_, s0, err := ingesttest.FirstBinding(ctxT(t), dir, lay.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	if d := ingesttest.Diff(s0, ingesttest.InitialState(lay.Collections())); d != "" {
		t.Fatalf("time 0 is not the tables before the changes: %s", d)
	}
	checkTimes(t, dir, lay, log)
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
