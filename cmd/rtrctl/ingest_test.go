package main

// Integration tests of `rtrctl ingest` against a real PostgreSQL: crash
// restarts (the seed's multi-table snapshot bug, a SIGKILL loop under a
// transactional workload), slot safety, one ingest per store, SIGTERM,
// equivalence with the stages run by hand, metrics and status.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func ingestArgs(db *ingestDB, slot, dir string, extra ...string) []string {
	return append([]string{"ingest", "--source", "pg", "--dsn", db.dsn, "--publication", "rtr", "--slot", slot, "--store", dir}, extra...)
}

// seedStep is one upstream transaction of the seed scenario: its SQL, its
// effect on the model and the insert positions read before and after it
// (its commit LSN c satisfies before <= c < after).
type seedStep struct {
	sql           string
	apply         func(m seedModel)
	before, after frontier.LSN
}

// seedModel: table -> row ("id|v") -> multiplicity.
type seedModel map[string]map[string]int64

func (m seedModel) clone() seedModel {
	c := seedModel{}
	for t, rows := range m {
		c[t] = map[string]int64{}
		for r, n := range rows {
			c[t][r] = n
		}
	}
	return c
}

func (m seedModel) set(table string, id int, v string) {
	for r := range m[table] {
		if strings.HasPrefix(r, strconv.Itoa(id)+"|") {
			delete(m[table], r)
		}
	}
	if v != "" {
		m[table][fmt.Sprintf("%d|%s", id, v)] = 1
	}
}

// TestIngestSeedMultiTableRestart is the seed's multi-table bug: ingest
// dies after the snapshot of one table (public.a) is durable and before
// the others' are. After a restart every table is right at every readable
// time, and public.a's time-0 contents are not doubled.
func TestIngestSeedMultiTableRestart(t *testing.T) {
	db := newIngestDB(t,
		"CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, v text)", "CREATE TABLE c (id int PRIMARY KEY, v text)",
		"ALTER TABLE a REPLICA IDENTITY FULL", "ALTER TABLE b REPLICA IDENTITY FULL", "ALTER TABLE c REPLICA IDENTITY FULL",
		"INSERT INTO a SELECT g, 'init' FROM generate_series(1, 20) g",
		"INSERT INTO b SELECT g, 'init' FROM generate_series(1, 20) g",
		"INSERT INTO c SELECT g, 'init' FROM generate_series(1, 20) g",
		"CREATE PUBLICATION rtr FOR TABLE a, b, c",
	)
	model := seedModel{}
	for _, tb := range []string{"public.a", "public.b", "public.c"} {
		model[tb] = map[string]int64{}
		for i := 1; i <= 20; i++ {
			model.set(tb, i, "init")
		}
	}
	states := []seedModel{model.clone()}
	slot := db.newSlotName(t)
	db.createSlot(t, slot)
	steps := []*seedStep{
		{sql: "UPDATE a SET v = 'w1' WHERE id <= 5; DELETE FROM b WHERE id > 15; INSERT INTO c SELECT g, 'w1' FROM generate_series(21, 25) g",
			apply: func(m seedModel) {
				for i := 1; i <= 5; i++ {
					m.set("public.a", i, "w1")
				}
				for i := 16; i <= 20; i++ {
					m.set("public.b", i, "")
				}
				for i := 21; i <= 25; i++ {
					m.set("public.c", i, "w1")
				}
			}},
		{sql: "INSERT INTO a SELECT g, 'w2' FROM generate_series(100, 105) g; UPDATE b SET v = 'w2' WHERE id <= 3; DELETE FROM c WHERE id <= 2",
			apply: func(m seedModel) {
				for i := 100; i <= 105; i++ {
					m.set("public.a", i, "w2")
				}
				for i := 1; i <= 3; i++ {
					m.set("public.b", i, "w2")
				}
				m.set("public.c", 1, "")
				m.set("public.c", 2, "")
			}},
		{sql: "DELETE FROM a WHERE id = 10; UPDATE c SET v = 'w3' WHERE id = 21; INSERT INTO b VALUES (50, 'w3')",
			apply: func(m seedModel) {
				m.set("public.a", 10, "")
				m.set("public.c", 21, "w3")
				m.set("public.b", 50, "w3")
			}},
	}
	run := func(s *seedStep) {
		s.before = db.insertLSN(t)
		execAll(t, db.conn, "BEGIN; "+s.sql+"; COMMIT")
		s.after = db.insertLSN(t)
		s.apply(model)
		states = append(states, model.clone())
	}
	// The slot starts before step 1, so the first snapshot rewinds it.
	run(steps[0])
	dir := t.TempDir() + "/store"
	p := startProc(t, []string{"RTR_FAULT_EXIT_AFTER_COMMIT=public.a"}, ingestArgs(db, slot, dir, "--interval", "50ms")...)
	if code := p.wait(t, 60*time.Second); code != 137 {
		t.Fatalf("ingest with the fault hook: exit %d, want 137\nstderr:\n%s", code, p.stderr.bytes())
	}
	// The fault hit where it should: a's snapshot durable, b's and c's not.
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctxT(t), "pg")
	if err != nil || len(bs) != 1 {
		t.Fatalf("after the crash: bindings %v (err %v), want the snapshot's one", bs, err)
	}
	for tb, durable := range map[string]bool{"public.a": true, "public.b": false, "public.c": false} {
		sh, err := st.Shard(ctxT(t), tb)
		if err != nil {
			t.Fatal(err)
		}
		if got := sh.Upper() > bs[0].Time; got != durable {
			t.Fatalf("after the crash: %s upper %d, snapshot binding at %d: durable %v, want %v", tb, sh.Upper(), bs[0].Time, got, durable)
		}
	}
	// More changes before the restart: the second snapshot (of b and c)
	// happens at a later LSN than the first, and must still land on the
	// same time-0 contents.
	run(steps[1])
	run(steps[2])

	p = startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "50ms")...)
	waitCaughtUp(t, db, dir, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d, want 0\nstderr:\n%s", code, p.stderr.bytes())
	}
	snapLine := regexp.MustCompile(`msg=snapshot [^\n]*tables="?\[([^\]]*)\]`).FindSubmatch(p.stderr.bytes())
	if snapLine == nil || string(snapLine[1]) != "public.b public.c" {
		t.Errorf("the restart should snapshot public.b and public.c only; log says %q\nstderr:\n%s", snapLine, p.stderr.bytes())
	}

	specs := []collSpec{{"public.a", 1, nil}, {"public.b", 1, nil}, {"public.c", 1, nil}}
	maxState := 0
	w := walkStore(t, dir, "pg", specs, walkOpts{
		asOf: func(i, n int) bool { return true },
		check: func(b frontier.Binding, cs map[string]*contents) string {
			// The states this frontier may show: steps surely below it
			// are in, steps surely at or above it are out.
			f := frontier.LSN(b.Frontier.Pos())
			lo, hi := 0, 0
			for _, s := range steps {
				if s.after <= f {
					lo++
				}
				if s.before < f {
					hi++
				}
			}
			for k := lo; k <= hi && k < len(states); k++ {
				ok := true
				for tb, want := range states[k] {
					if !equalRows(cs[tb].rows, want) {
						ok = false
					}
				}
				if ok {
					maxState = max(maxState, k)
					return ""
				}
			}
			var d []string
			for tb, want := range states[lo] {
				if !equalRows(cs[tb].rows, want) {
					d = append(d, tb+": "+rowsDiff(cs[tb].rows, want))
				}
			}
			return fmt.Sprintf("contents match none of the upstream states %d..%d; against state %d: %s", lo, hi, lo, strings.Join(d, "; "))
		},
	})
	if len(w.readable) < 2 || w.readable[0].Time != bs[0].Time {
		t.Fatalf("readable bindings %v, want the snapshot's (%d) and later ones", w.readable, bs[0].Time)
	}
	if maxState != len(states)-1 {
		t.Errorf("the store reached upstream state %d, want %d", maxState, len(states)-1)
	}
	// public.a at time 0 (the snapshot's binding): exactly the 20 rows as
	// of the slot, each once.
	sh, err := st.Shard(ctxT(t), "public.a")
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Refresh(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	got, err := readAsOf(ctxT(t), sh, bs[0].Time)
	if err != nil {
		t.Fatal(err)
	}
	if !equalRows(got, states[0]["public.a"]) {
		t.Errorf("public.a at the snapshot's time: %s", rowsDiff(got, states[0]["public.a"]))
	}
	// Before the snapshot's time every table is empty.
	for _, s := range specs {
		sh, _ := st.Shard(ctxT(t), s.name)
		sh.Refresh(ctxT(t))
		if sh.Since() < bs[0].Time {
			if rows, err := readAsOf(ctxT(t), sh, bs[0].Time-1); err != nil || len(rows) != 0 {
				t.Errorf("%s just before the snapshot's time: %d rows, err %v", s.name, len(rows), err)
			}
		}
	}
	for _, tb := range []string{"a", "b", "c"} {
		if want := db.tableRows(t, tb, []string{"id", "v"}); !equalRows(w.last["public."+tb].rows, want) {
			t.Errorf("public.%s at the end: %s", tb, rowsDiff(w.last["public."+tb].rows, want))
		}
	}
	t.Logf("%d bindings, %d readable, %d ReadAsOf reads checked; upstream states 0..%d seen", len(w.bindings), len(w.readable), w.asOfReads, maxState)
}

// bankChecks are the workload's invariants at every binding time.
func bankChecks() walkOpts {
	var bank *bankState
	opts := walkOpts{}
	opts.onChange = func(coll string, vals []string, diff int64) {
		if bank == nil {
			bank = newBankState()
		}
		bank.apply(coll, vals, diff)
	}
	opts.check = func(b frontier.Binding, cs map[string]*contents) string {
		if bank == nil {
			return "no updates at all"
		}
		return bank.check()
	}
	return opts
}

// TestIngestKillLoop SIGKILLs ingest at random moments, at least 30
// times, while a writer runs transfers (the sum of balances is invariant)
// and multi-line orders (the header stores the number of lines). After
// every kill: the slot is not confirmed beyond the store's durable
// frontier, every binding time is transactionally consistent with no row
// twice, and every time bound before still holds the same contents. At the
// end the store equals the tables.
func TestIngestKillLoop(t *testing.T) {
	start := time.Now()
	db := newIngestDB(t, bankDDL...)
	slot := db.newSlotName(t)
	slot0 := db.createSlot(t, slot)
	dir := t.TempDir() + "/store"
	writer := startBankWriter(t, db.dsn, 3*time.Millisecond)
	args := ingestArgs(db, slot, dir, "--interval", "50ms", "--compact-every", "1s")

	seen := map[uint64]string{} // binding time -> contents hash
	const kills = 36
	var acked, snapshots, walked int
	for k := 0; k < kills; k++ {
		p := startProc(t, nil, args...)
		d := time.Duration(30+rand.IntN(1400)) * time.Millisecond
		if k < 5 {
			// The first kills come while the snapshot runs (it takes
			// tens of milliseconds here), or just after it.
			waitLog(t, p, "msg=snapshot ", "msg=resume ")
			d = time.Duration(rand.IntN(80)) * time.Millisecond
		}
		time.Sleep(d)
		p.kill(t)
		writer.failed(t)
		snapshots += strings.Count(string(p.stderr.bytes()), "msg=snapshot ")

		// Slot safety: confirmed_flush_lsn never beyond the durable
		// source frontier (the slot's start while only snapshots are
		// durable: they stand for the tables as of it).
		conf := db.slotConfirmed(t, slot)
		durable := frontier.LSN(0)
		if _, err := os.Stat(dir + "/rtrstore.json"); err == nil {
			durable = durableLSN(statusOf(t, dir))
		}
		if conf > max(durable, slot0) {
			t.Fatalf("kill %d: slot confirmed at %s, beyond the store's durable frontier %s (slot start %s)", k, conf, durable, slot0)
		}
		if conf > slot0 {
			acked++
		}

		w := walkStore(t, dir, "pg", bankCollections, withAsOf(bankChecks(), func(i, n int) bool { return i == n-1 || i%97 == 0 }))
		walked += len(w.readable)
		bound := map[uint64]bool{}
		for _, b := range w.bindings {
			bound[b.Time] = true
		}
		for tm, h := range seen {
			if !bound[tm] {
				t.Fatalf("kill %d: binding time %d is gone", k, tm)
			}
			if got, ok := w.hashes[tm]; !ok {
				t.Fatalf("kill %d: time %d was readable and is not anymore", k, tm)
			} else if got != h {
				t.Fatalf("kill %d: the contents at time %d changed after a restart (hash %s, was %s)", k, tm, got, h)
			}
		}
		for tm, h := range w.hashes {
			seen[tm] = h
		}
		t.Logf("kill %d after %s: %d bindings, %d readable, slot %s, durable %s", k, d, len(w.bindings), len(w.readable), conf, durable)
	}
	loop := time.Since(start)

	// Catch up without a writer, stop cleanly, and compare.
	p := startProc(t, nil, args...)
	writer.halt(t)
	target := waitCaughtUp(t, db, dir, p)
	deadline := time.Now().Add(20 * time.Second)
	for db.slotConfirmed(t, slot) <= slot0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("final ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.bytes())
	}
	conf := db.slotConfirmed(t, slot)
	durable := durableLSN(statusOf(t, dir))
	if conf <= slot0 || conf > durable {
		t.Errorf("at the end: slot confirmed at %s, want beyond its start %s and at most the durable frontier %s", conf, slot0, durable)
	}
	// Compaction must not change any readable time either.
	st, err := store.Open(ctxT(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Compact(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	w := walkStore(t, dir, "pg", bankCollections, withAsOf(bankChecks(), func(i, n int) bool { return true }))
	for tm, h := range seen {
		if w.hashes[tm] != h {
			t.Fatalf("at the end: the contents at time %d changed (hash %s, was %s)", tm, w.hashes[tm], h)
		}
	}
	if last := w.readable[len(w.readable)-1]; frontier.LSN(last.Frontier.Pos()) < target {
		t.Errorf("last readable binding %v is below the upstream %s", last, target)
	}
	for _, s := range bankCollections {
		want := db.tableRows(t, s.name, s.cols)
		if got := w.last[s.name].rows; !equalRows(got, want) {
			t.Errorf("%s: the store at the end differs from SELECT *: %s", s.name, rowsDiff(got, want))
		}
	}
	t.Logf("%d kills in %s (%s in all), %d transactions written %v; %d snapshots started; slot acknowledged after %d kills; %d binding times checked across kills, %d at the end with %d ReadAsOf reads",
		kills, loop.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), writer.txns, writer.counter, snapshots, acked, walked, len(w.readable), w.asOfReads)
}

// waitLog waits until p logs one of the strings.
func waitLog(t *testing.T, p *proc, any ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		log := string(p.stderr.bytes())
		for _, s := range any {
			if strings.Contains(log, s) {
				return
			}
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("rtrctl did not log any of %q\nstderr:\n%s", any, log)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func withAsOf(o walkOpts, asOf func(i, n int) bool) walkOpts {
	o.asOf = asOf
	return o
}

// TestIngestSecondProcess: a second ingest of the same store and source
// fails at once with a clear message, and the first goes on.
func TestIngestSecondProcess(t *testing.T) {
	db := newIngestDB(t, bankDDL...)
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"
	first := startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "50ms")...)
	waitCaughtUp(t, db, dir, first)

	began := time.Now()
	second := startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "50ms")...)
	if code := second.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("second ingest: exit %d, want 1\nstderr:\n%s", code, second.stderr.bytes())
	}
	took := time.Since(began)
	stderr := string(second.stderr.bytes())
	if !strings.Contains(stderr, "another rtrctl ingest") || !strings.Contains(stderr, fmt.Sprintf("pid %d", first.cmd.Process.Pid)) {
		t.Errorf("second ingest's message does not say another ingest (pid %d) holds the store:\n%s", first.cmd.Process.Pid, stderr)
	}
	if strings.Contains(stderr, "msg=snapshot") || strings.Contains(stderr, "msg=resume") {
		t.Errorf("the second ingest started work before failing:\n%s", stderr)
	}

	// The first goes on and the store stays consistent.
	writer := startBankWriter(t, db.dsn, 2*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	writer.halt(t)
	waitCaughtUp(t, db, dir, first)
	first.signal(syscall.SIGTERM)
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("first ingest after SIGTERM: exit %d\nstderr:\n%s", code, first.stderr.bytes())
	}
	w := walkStore(t, dir, "pg", bankCollections, withAsOf(bankChecks(), func(i, n int) bool { return i == n-1 || i%10 == 0 }))
	for _, s := range bankCollections {
		if want := db.tableRows(t, s.name, s.cols); !equalRows(w.last[s.name].rows, want) {
			t.Errorf("%s at the end: %s", s.name, rowsDiff(w.last[s.name].rows, want))
		}
	}
	t.Logf("second ingest failed in %s; %d transactions, %d bindings checked", took.Round(time.Millisecond), writer.txns, len(w.readable))
}

var metricsAddrRe = regexp.MustCompile(`msg=metrics addr=(\S+)`)

// metricsOf waits for the metrics address in p's log and scrapes it.
func metricsOf(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := metricsAddrRe.FindSubmatch(p.stderr.bytes()); m != nil {
			resp, err := http.Get("http://" + string(m[1]) + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
			}
			return string(b)
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no metrics address logged\nstderr:\n%s", p.stderr.bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue returns the value of the sample name{labels...}, or -1.
func metricValue(text, name string, labels ...string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

// TestIngestSIGTERM: with a binding interval of an hour nothing after the
// snapshot is bound while ingest runs; SIGTERM binds and commits what the
// source completed, and ingest exits 0.
func TestIngestSIGTERM(t *testing.T) {
	db := newIngestDB(t, bankDDL...)
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "1h", "--metrics-addr", "127.0.0.1:0")...)
	// Wait for the snapshot to be durable.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
		if err == nil {
			if d, ok := storeDurable(t, st); ok && d > 0 {
				break
			}
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no snapshot durable\nstderr:\n%s", p.stderr.bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	execAll(t, db.conn,
		"BEGIN; INSERT INTO orders VALUES (5001, 2, 'term'); INSERT INTO order_lines VALUES (5001, 1, 10), (5001, 2, 20); COMMIT",
		"BEGIN; UPDATE accounts SET balance = balance - 7 WHERE id = 1; UPDATE accounts SET balance = balance + 7 WHERE id = 2; COMMIT",
	)
	target := db.insertLSN(t)
	began := time.Now()
	// Wait until replication has received it (the metric of the source's
	// progress), not until it is committed.
	deadline = time.Now().Add(30 * time.Second)
	for metricValue(metricsOf(t, p), "rtr_source_position", `source="pg"`) < float64(target) {
		if time.Now().After(deadline) {
			t.Fatalf("replication progress did not reach %s\n%s", target, metricsOf(t, p))
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := storeDurable(t, st); d >= target {
		t.Fatalf("the store is durable to %s before SIGTERM already; the test proves nothing", d)
	}
	received := time.Now()
	t.Logf("replication received %s after %s", target, received.Sub(began).Round(time.Millisecond))
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d, want 0\nstderr:\n%s", code, p.stderr.bytes())
	}
	t.Logf("exit 0 %s after SIGTERM", time.Since(received).Round(time.Millisecond))
	if d, _ := storeDurable(t, st); d < target {
		t.Fatalf("after SIGTERM the store is durable to %s only, below %s which replication had received", d, target)
	}
	w := walkStore(t, dir, "pg", bankCollections, withAsOf(bankChecks(), func(i, n int) bool { return true }))
	for _, s := range bankCollections {
		if want := db.tableRows(t, s.name, s.cols); !equalRows(w.last[s.name].rows, want) {
			t.Errorf("%s after SIGTERM: %s", s.name, rowsDiff(w.last[s.name].rows, want))
		}
	}
	if !strings.Contains(string(p.stderr.bytes()), "msg=stopped") {
		t.Errorf("no 'stopped' line in the log:\n%s", p.stderr.bytes())
	}
}

// TestIngestMetricsAndStatus scrapes the Prometheus endpoint and reads
// `rtrctl status` while ingest runs and after it stopped.
func TestIngestMetricsAndStatus(t *testing.T) {
	db := newIngestDB(t, bankDDL...)
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "50ms", "--metrics-addr", "127.0.0.1:0")...)
	waitCaughtUp(t, db, dir, p)
	execAll(t, db.conn,
		"BEGIN; INSERT INTO orders SELECT g, 2, 'm' FROM generate_series(6001, 6010) g; INSERT INTO order_lines SELECT o, l, 1 FROM generate_series(6001, 6010) o, generate_series(1, 2) l; COMMIT",
		"INSERT INTO accounts VALUES (1001, 0)",
	)
	upstream := waitCaughtUp(t, db, dir, p)
	// Rows committed: the snapshot's plus the inserts, each once.
	want := map[string]float64{"public.accounts": bankAccounts + 1, "public.orders": 310, "public.order_lines": 920}
	var text string
	deadline := time.Now().Add(10 * time.Second)
	for {
		text = metricsOf(t, p)
		ok := true
		for c, n := range want {
			ok = ok && metricValue(text, "rtr_rows_ingested_total", `collection="`+c+`"`, `source="pg"`) == n
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rtr_rows_ingested_total is not %v:\n%s", want, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range []string{"rtr_commits_total", "rtr_store_upper_ms"} {
		for c := range want {
			if metricValue(text, m, `collection="`+c+`"`) <= 0 {
				t.Errorf("metric %s of %s missing or zero:\n%s", m, c, text)
			}
		}
	}
	t.Logf("rtr_rows_ingested_total: accounts %v, orders %v, order_lines %v", metricValue(text, "rtr_rows_ingested_total", "public.accounts"),
		metricValue(text, "rtr_rows_ingested_total", `"public.orders"`), metricValue(text, "rtr_rows_ingested_total", "public.order_lines"))
	if v := metricValue(text, "rtr_source_position", `source="pg"`); v < float64(upstream) {
		t.Errorf("rtr_source_position %v, want at least %d", v, upstream)
	}

	// status while running, with the upstream's lag.
	s := statusOf(t, dir, "--dsn", db.dsn)
	if len(s.Collections) != 3 || len(s.Sources) != 1 {
		t.Fatalf("status: %+v", s)
	}
	rows := map[string]int64{}
	for i, c := range s.Collections {
		if c.Name != bankCollections[i].name || c.Source != "pg" || c.Upper == 0 || c.Frontier == nil || frontier.LSN(c.Frontier.Pos()) < upstream || c.Rows <= 0 {
			t.Errorf("status collection %d: %+v (frontier %v), want %s of pg with upper, frontier >= %s and rows", i, c, c.Frontier, bankCollections[i].name, upstream)
		}
		rows[c.Name] = c.Rows
	}
	if rows["public.order_lines"] != 920 || rows["public.orders"] != 310 {
		t.Errorf("status rows %v, want 920 order lines and 310 orders", rows)
	}
	src := s.Sources[0]
	if src.Name != "pg" || src.Kind != "pg" || !src.Running || src.Bindings == 0 || src.Upstream == nil || src.LagBytes == nil || src.LagMillis == nil {
		t.Errorf("status source: %+v", src)
	}
	if src.Upstream != nil && src.Frontier != nil && *src.LagBytes != src.Upstream.Pos()-min(src.Upstream.Pos(), src.Frontier.Pos()) {
		t.Errorf("lag %d bytes, upstream %s, frontier %s", *src.LagBytes, src.Upstream, src.Frontier)
	}
	out := mustRun(t, "", "status", dir)
	for _, w := range []string{"COLLECTION", "public.order_lines", "running"} {
		if !strings.Contains(out, w) {
			t.Errorf("status text lacks %q:\n%s", w, out)
		}
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.bytes())
	}
	if s := statusOf(t, dir); s.Sources[0].Running || s.Sources[0].LagBytes != nil {
		t.Errorf("status after stop: %+v", s.Sources[0])
	}
}

// TestIngestPipedEquivalence runs the stages by hand (snapshot | reclock |
// store append, then replicate --stop-at | reclock | store append, as
// docs/operations.md shows) and `rtrctl ingest` over the same changes, on
// separate slots: both stores end equal to the tables, and each is
// consistent at every binding time.
func TestIngestPipedEquivalence(t *testing.T) {
	db := newIngestDB(t, bankDDL...)
	slotP, slotI := db.newSlotName(t), db.newSlotName(t)
	db.createSlot(t, slotP)
	db.createSlot(t, slotI)
	writer := startBankWriter(t, db.dsn, 2*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // changes after both slots: both snapshots rewind

	bin := rtrctlBin(t)
	dirP, dirI := t.TempDir()+"/piped", t.TempDir()+"/ingest"
	pipeline := func(script string) {
		t.Helper()
		cmd := exec.Command("bash", "-o", "pipefail", "-c", script)
		cmd.Env = append(os.Environ(), "RTR="+bin, "RTR_PG_DSN="+db.dsn, "STORE="+dirP, "SLOT="+slotP)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	// The store exists before the stages start: two stages opening a new
	// directory at the same instant race in store.Open (one sees the
	// other's fresh subdirectories and refuses a "not empty" directory).
	if _, err := store.Open(ctxT(t), dirP, store.Options{}); err != nil {
		t.Fatal(err)
	}
	pipeline(`"$RTR" snapshot --source pg --publication rtr --slot "$SLOT" | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	ing := startProc(t, nil, ingestArgs(db, slotI, dirI, "--interval", "50ms")...)
	time.Sleep(500 * time.Millisecond)
	writer.halt(t)
	stop := frontierJSONOf(t, "--source", "pg", "--dsn", db.dsn).Native
	pipeline(`"$RTR" replicate --source pg --publication rtr --slot "$SLOT" --stop-at ` + stop + ` | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	waitCaughtUp(t, db, dirI, ing)
	ing.signal(syscall.SIGTERM)
	if code := ing.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, ing.stderr.bytes())
	}
	stopLSN, err := frontier.ParseLSN(stop)
	if err != nil {
		t.Fatal(err)
	}
	stP, err := store.Open(ctxT(t), dirP, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := storeDurable(t, stP); d < stopLSN {
		t.Errorf("the piped store is durable to %s, below --stop-at %s", d, stopLSN)
	}
	every := func(i, n int) bool { return i == n-1 || i%5 == 0 }
	wP := walkStore(t, dirP, "pg", bankCollections, withAsOf(bankChecks(), every))
	wI := walkStore(t, dirI, "pg", bankCollections, withAsOf(bankChecks(), every))
	for _, s := range bankCollections {
		want := db.tableRows(t, s.name, s.cols)
		if !equalRows(wP.last[s.name].rows, want) {
			t.Errorf("%s piped: %s", s.name, rowsDiff(wP.last[s.name].rows, want))
		}
		if !equalRows(wI.last[s.name].rows, wP.last[s.name].rows) {
			t.Errorf("%s: ingest and the piped stages differ: %s", s.name, rowsDiff(wI.last[s.name].rows, wP.last[s.name].rows))
		}
	}
	// Step 2 again: replicate never confirmed the slot, so the same
	// changes come again and are recognised as a replay: every time keeps
	// its contents.
	pipeline(`"$RTR" replicate --source pg --publication rtr --slot "$SLOT" --stop-at ` + stop + ` | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	again := walkStore(t, dirP, "pg", bankCollections, bankChecks())
	for tm, h := range wP.hashes {
		if again.hashes[tm] != h {
			t.Errorf("running replicate again changed the piped store at time %d", tm)
		}
	}
	if len(wP.readable) < 2 {
		t.Errorf("piped store: %d readable bindings, want the snapshot's and the replication's", len(wP.readable))
	}
	t.Logf("%d transactions; piped store %d bindings, ingest store %d bindings", writer.txns, len(wP.readable), len(wI.readable))
}
