package main

// Integration tests of `rtrctl ingest` against a real PostgreSQL, on the
// conformance suite's bank (internal/ingesttest: its fixture, writer,
// checks and wait): crash restarts (the seed's multi-table snapshot bug,
// a SIGKILL loop under the writer), slot safety, one ingest per store,
// SIGTERM, equivalence with the stages run by hand, metrics and status.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// bankLog is the log of a fresh bank fixture's upstream.
func bankLog(lay ingesttest.Layout) *ingesttest.Log {
	return ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
}

// applyLogged runs sets upstream as one transaction and logs it.
func applyLogged(t *testing.T, fx ingesttest.Fixture, log *ingesttest.Log, sets ...ingesttest.Set) []ingesttest.Pos {
	t.Helper()
	pos, err := fx.Apply(ctxT(t), sets)
	if err != nil {
		t.Fatal(err)
	}
	log.Append(ingesttest.Txn{Sets: sets, Pos: pos})
	return pos
}

// checkTimes is the suite's check 2 on the store dir.
func checkTimes(t *testing.T, dir string, lay ingesttest.Layout, log *ingesttest.Log) ingesttest.TimesReport {
	t.Helper()
	rep, err := ingesttest.CheckTimes(ctxT(t), dir, lay, log)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return rep
}

// TestIngestSeedMultiTableRestart is the seed's multi-table bug: ingest
// dies after the snapshot of one table (public.acc_a) is durable and
// before the other's is. The slot starts before the first transaction,
// so the snapshots rewind it; the restart snapshots public.acc_b alone,
// later, and both tables' time 0 is the upstream as of the slot's start
// (public.acc_a not doubled). Every readable time is an upstream state the
// frontier allows (check 2), the last one the upstream's.
func TestIngestSeedMultiTableRestart(t *testing.T) {
	fx, db := newPGBank(t)
	fx.slot = db.newSlotName(t)
	db.createSlot(t, fx.slot)
	const source = "pg"
	lay := fx.Layout(source)
	a, b := lay.Collections()[0], lay.Collections()[1]
	log := bankLog(lay)
	set := func(coll, id string, balance int64, op ingesttest.Op) ingesttest.Set {
		return ingesttest.Set{Coll: coll, ID: id, Balance: balance, Op: op}
	}
	upd, ins, del := ingesttest.Update, ingesttest.Insert, ingesttest.Delete
	// Every transaction updates, inserts and deletes (keeping the sum).
	applyLogged(t, fx, log, set(a, "1", 900, upd), set(b, "2", 1100, upd), set(a, "2", 950, upd), set(b, "9", 50, ins), set(a, "3", 2000, upd), set(b, "8", 0, del))
	dir := t.TempDir() + "/store"
	args := append(fx.IngestArgs(dir, source), "--interval", "50ms")
	p := startProc(t, []string{"RTR_FAULT_EXIT_AFTER_COMMIT=" + a}, args...)
	if code := p.wait(t, 60*time.Second); code != 137 {
		t.Fatalf("ingest with the fault hook: exit %d, want 137\nstderr:\n%s", code, p.stderr.Bytes())
	}
	// The fault hit where it should: a's snapshot durable, b's not.
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctxT(t), source)
	if err != nil || len(bs) != 1 {
		t.Fatalf("after the crash: bindings %v (err %v), want the snapshot's one", bs, err)
	}
	for tb, durable := range map[string]bool{a: true, b: false} {
		sh, err := st.Shard(ctxT(t), tb)
		if err != nil {
			t.Fatal(err)
		}
		if got := sh.Upper() > bs[0].Time; got != durable {
			t.Fatalf("after the crash: %s upper %d, snapshot binding at %d: durable %v, want %v", tb, sh.Upper(), bs[0].Time, got, durable)
		}
	}
	// More changes before the restart: the second snapshot (of b) happens
	// at a later LSN than the first, and must still land on the same
	// time-0 contents.
	applyLogged(t, fx, log, set(b, "1", 970, upd), set(a, "9", 30, ins), set(b, "3", 2000, upd), set(a, "8", 0, del))
	applyLogged(t, fx, log, set(a, "4", 993, upd), set(b, "4", 1007, upd), set(a, "5", 1050, upd), set(b, "9", 0, del))

	p = startProc(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{p}, 60*time.Second)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d, want 0\nstderr:\n%s", code, p.stderr.Bytes())
	}
	snapLine := regexp.MustCompile(`msg=snapshot [^\n]*tables="?\[([^\]]*)\]`).FindSubmatch(p.stderr.Bytes())
	if snapLine == nil || string(snapLine[1]) != b {
		t.Errorf("the restart should snapshot %s only; log says %q\nstderr:\n%s", b, snapLine, p.stderr.Bytes())
	}
	rep := checkTimes(t, dir, lay, log)
	if rep.Bindings < 2 || rep.Reached[source] != rep.Units[source] {
		t.Errorf("%d readable bindings reaching upstream state %d of %d, want the snapshot's and later ones reaching the last", rep.Bindings, rep.Reached[source], rep.Units[source])
	}
	// Time 0 (the snapshot's binding): both tables as of the slot's start,
	// every account once.
	t0, s0, err := ingesttest.FirstBinding(ctxT(t), dir, lay.Sources[0])
	if err != nil {
		t.Fatal(err)
	}
	if t0 != bs[0].Time {
		t.Errorf("the first binding is at %d, the snapshot's at %d", t0, bs[0].Time)
	}
	if d := ingesttest.Diff(s0, ingesttest.InitialState(lay.Collections())); d != "" {
		t.Errorf("time 0 is not the upstream as of the slot's start: %s", d)
	}
	// Before the snapshot's time every table is empty.
	for _, c := range lay.Collections() {
		sh, err := st.Shard(ctxT(t), c)
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Refresh(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if sh.Since() < bs[0].Time {
			rec, err := sh.ReadAsOf(ctxT(t), bs[0].Time-1)
			if err != nil {
				t.Fatal(err)
			}
			if rec.NumRows() != 0 {
				t.Errorf("%s just before the snapshot's time: %d rows", c, rec.NumRows())
			}
			rec.Release()
		}
	}
	t.Logf("%d readable bindings checked; upstream states 0..%d seen", rep.Bindings, rep.Reached[source])
}

// TestIngestKillLoop is the suite's kill loop (check 4, with checks 2, 5
// and 7) at length: 36 SIGKILLs, the first five during or right after the
// snapshot, with background compaction and one at the end. Besides, after
// every kill the slot is not confirmed beyond the store's durable frontier
// (the slot's start while only snapshots are durable: they stand for the
// tables as of it), and at the end it has advanced.
func TestIngestKillLoop(t *testing.T) {
	start := time.Now()
	fx, db := newPGBank(t)
	fx.slot = db.newSlotName(t)
	slot0 := db.createSlot(t, fx.slot)
	var acked int
	r := ingesttest.KillLoop(t, fx.h, fx, ingesttest.KillOptions{
		Source: "pg", Kills: 36, Early: 5, MinRun: 30 * time.Millisecond, MaxRun: 1430 * time.Millisecond,
		Args: []string{"--interval", "50ms", "--compact-every", "1s"}, Compact: true,
		AfterKill: func(k int, dir string) {
			conf := db.slotConfirmed(t, fx.slot)
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
		},
		BeforeStop: func(string) {
			deadline := time.Now().Add(20 * time.Second)
			for db.slotConfirmed(t, fx.slot) <= slot0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		},
	})
	conf := db.slotConfirmed(t, fx.slot)
	durable := durableLSN(statusOf(t, r.Dir))
	if conf <= slot0 || conf > durable {
		t.Errorf("at the end: slot confirmed at %s, want beyond its start %s and at most the durable frontier %s", conf, slot0, durable)
	}
	t.Logf("%d kills in %s, %d transactions; slot acknowledged after %d kills; %d binding reads compared across kills, %d bindings checked at the end",
		r.Kills, time.Since(start).Round(time.Millisecond), r.Txns, acked, r.Reads, r.Times.Bindings)
}

// TestIngestKillLoopStaged is the kill loop with every update not yet
// bound staged in the store past 4 KiB (--txn-memory 4096): SIGKILLs while staged
// files are written, committed or left behind replay to the same
// definite result, and no staged file outlives its commit.
func TestIngestKillLoopStaged(t *testing.T) {
	fx, db := newPGBank(t)
	fx.slot = db.newSlotName(t)
	slot0 := db.createSlot(t, fx.slot)
	r := ingesttest.KillLoop(t, fx.h, fx, ingesttest.KillOptions{
		Source: "pg", Kills: 10, Early: 2, MinRun: 30 * time.Millisecond, MaxRun: 1430 * time.Millisecond,
		Args: []string{"--interval", "50ms", "--compact-every", "0", "--txn-memory", "4096"},
		BeforeStop: func(dir string) {
			if _, err := os.Stat(filepath.Join(dir, "staged", "pg")); err != nil {
				t.Errorf("nothing was staged: %v", err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for db.slotConfirmed(t, fx.slot) <= slot0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		},
	})
	left, _ := os.ReadDir(filepath.Join(r.Dir, "staged", "pg"))
	if len(left) != 0 {
		t.Errorf("%d staged files left after a clean stop", len(left))
	}
	t.Logf("%d kills, %d transactions, %d binding reads compared", r.Kills, r.Txns, r.Reads)
}

// TestIngestSecondProcess: a second ingest of the same store and source
// fails at once with a clear message, and the first goes on.
func TestIngestSecondProcess(t *testing.T) {
	fx, _ := newPGBank(t)
	lay := fx.Layout("pg")
	dir := t.TempDir() + "/store"
	args := append(fx.IngestArgs(dir, "pg"), "--interval", "50ms")
	first := startProc(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{first}, 60*time.Second)

	began := time.Now()
	second := startProc(t, nil, args...)
	if code := second.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("second ingest: exit %d, want 1\nstderr:\n%s", code, second.stderr.Bytes())
	}
	took := time.Since(began)
	stderr := string(second.stderr.Bytes())
	if !strings.Contains(stderr, "another rtrctl ingest") || !strings.Contains(stderr, fmt.Sprintf("pid %d", first.cmd.Process.Pid)) {
		t.Errorf("second ingest's message does not say another ingest (pid %d) holds the store:\n%s", first.cmd.Process.Pid, stderr)
	}
	if strings.Contains(stderr, "msg=snapshot") || strings.Contains(stderr, "msg=resume") {
		t.Errorf("the second ingest started work before failing:\n%s", stderr)
	}

	// The first goes on and the store stays consistent.
	log := bankLog(lay)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 2 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	w.Halt(t)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{first}, 60*time.Second)
	first.signal(syscall.SIGTERM)
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("first ingest after SIGTERM: exit %d\nstderr:\n%s", code, first.stderr.Bytes())
	}
	rep := checkTimes(t, dir, lay, log)
	t.Logf("second ingest failed in %s; %d transactions, %d bindings checked", took.Round(time.Millisecond), log.Len(), rep.Bindings)
}

var metricsAddrRe = regexp.MustCompile(`msg=metrics addr=(\S+)`)

// metricsOf waits for the metrics address in p's log and scrapes it.
func metricsOf(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := metricsAddrRe.FindSubmatch(p.stderr.Bytes()); m != nil {
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
			t.Fatalf("no metrics address logged\nstderr:\n%s", p.stderr.Bytes())
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
	fx, db := newPGBank(t)
	lay := fx.Layout("pg")
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, append(fx.IngestArgs(dir, "pg"), "--interval", "1h", "--metrics-addr", "127.0.0.1:0")...)
	// Wait for the snapshot to be durable.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if d, err := durablePos(ctxT(t), dir, "pg"); err == nil && d > 0 {
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no snapshot durable\nstderr:\n%s", p.stderr.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := bankLog(lay)
	a, b := lay.Collections()[0], lay.Collections()[1]
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "1", Balance: 970}, ingesttest.Set{Coll: b, ID: "9", Balance: 30, Op: ingesttest.Insert})
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "2", Balance: 993}, ingesttest.Set{Coll: b, ID: "2", Balance: 1007})
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
	if d, err := durablePos(ctxT(t), dir, "pg"); err != nil || d >= target {
		t.Fatalf("the store is durable to %s (err %v) before SIGTERM already; the test proves nothing", d, err)
	}
	received := time.Now()
	t.Logf("replication received %s after %s", target, received.Sub(began).Round(time.Millisecond))
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d, want 0\nstderr:\n%s", code, p.stderr.Bytes())
	}
	t.Logf("exit 0 %s after SIGTERM", time.Since(received).Round(time.Millisecond))
	if d, err := durablePos(ctxT(t), dir, "pg"); err != nil || d < target {
		t.Fatalf("after SIGTERM the store is durable to %s only (err %v), below %s which replication had received", d, err, target)
	}
	checkTimes(t, dir, lay, log)
	ingesttest.WaitEqual(t, fx, dir, lay, nil, 10*time.Second)
	if !strings.Contains(string(p.stderr.Bytes()), "msg=stopped") {
		t.Errorf("no 'stopped' line in the log:\n%s", p.stderr.Bytes())
	}
}

// TestIngestMetricsAndStatus scrapes the Prometheus endpoint and reads
// `rtrctl status` while ingest runs and after it stopped.
func TestIngestMetricsAndStatus(t *testing.T) {
	fx, db := newPGBank(t)
	lay := fx.Layout("pg")
	colls := lay.Collections()
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, append(fx.IngestArgs(dir, "pg"), "--interval", "50ms", "--metrics-addr", "127.0.0.1:0")...)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{p}, 60*time.Second)
	// Inserts only (of empty accounts), so that every row is ingested once.
	log := bankLog(lay)
	var sets []ingesttest.Set
	for i := 1; i <= 10; i++ {
		sets = append(sets, ingesttest.Set{Coll: colls[1], ID: strconv.Itoa(100 + i), Op: ingesttest.Insert})
	}
	applyLogged(t, fx, log, sets...)
	pos := applyLogged(t, fx, log, ingesttest.Set{Coll: colls[0], ID: "101", Op: ingesttest.Insert})
	upstream := frontier.LSN(pos[0].Hi + 1) // the insert position after the last commit
	ingesttest.WaitEqualLog(t, dir, lay, log, binProc{p}, 60*time.Second)
	// Rows committed: the snapshot's plus the inserts, each once.
	want := map[string]float64{colls[0]: ingesttest.Accounts + 1, colls[1]: ingesttest.Accounts + 10}
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
	t.Logf("rtr_rows_ingested_total: %s %v, %s %v", colls[0], metricValue(text, "rtr_rows_ingested_total", `"`+colls[0]+`"`),
		colls[1], metricValue(text, "rtr_rows_ingested_total", `"`+colls[1]+`"`))
	if v := metricValue(text, "rtr_source_position", `source="pg"`); v < float64(upstream) {
		t.Errorf("rtr_source_position %v, want at least %d", v, upstream)
	}

	// status while running, with the upstream's lag.
	s := statusOf(t, dir, "--dsn", db.dsn)
	if len(s.Collections) != len(colls) || len(s.Sources) != 1 {
		t.Fatalf("status: %+v", s)
	}
	rows := map[string]int64{}
	for i, c := range s.Collections {
		if c.Name != colls[i] || c.Source != "pg" || c.Upper == 0 || c.Frontier == nil || frontier.LSN(c.Frontier.Pos()) < upstream || c.Rows <= 0 {
			t.Errorf("status collection %d: %+v (frontier %v), want %s of pg with upper, frontier >= %s and rows", i, c, c.Frontier, colls[i], upstream)
		}
		rows[c.Name] = c.Rows
	}
	if rows[colls[0]] != ingesttest.Accounts+1 || rows[colls[1]] != ingesttest.Accounts+10 {
		t.Errorf("status rows %v, want %d and %d", rows, ingesttest.Accounts+1, ingesttest.Accounts+10)
	}
	src := s.Sources[0]
	if src.Name != "pg" || src.Kind != "pg" || !src.Running || src.Bindings == 0 || src.Upstream == nil || src.LagBytes == nil || src.LagMillis == nil {
		t.Errorf("status source: %+v", src)
	}
	if src.Upstream != nil && src.Frontier != nil && *src.LagBytes != src.Upstream.Pos()-min(src.Upstream.Pos(), src.Frontier.Pos()) {
		t.Errorf("lag %d bytes, upstream %s, frontier %s", *src.LagBytes, src.Upstream, src.Frontier)
	}
	out := mustRun(t, "", "status", dir)
	for _, w := range []string{"COLLECTION", colls[1], "running"} {
		if !strings.Contains(out, w) {
			t.Errorf("status text lacks %q:\n%s", w, out)
		}
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	if s := statusOf(t, dir); s.Sources[0].Running || s.Sources[0].LagBytes != nil {
		t.Errorf("status after stop: %+v", s.Sources[0])
	}
}

// TestIngestPipedEquivalence runs the stages by hand (snapshot | reclock |
// store append, then replicate --stop-at | reclock | store append, as
// docs/operations.md shows) and `rtrctl ingest` over the same changes, on
// separate slots: both stores end equal to the tables, and each passes
// check 2 against the writer's log.
func TestIngestPipedEquivalence(t *testing.T) {
	fx, db := newPGBank(t)
	lay := fx.Layout("pg")
	slotP, slotI := db.newSlotName(t), db.newSlotName(t)
	db.createSlot(t, slotP)
	db.createSlot(t, slotI)
	log := bankLog(lay)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 2 * time.Millisecond})
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
	ing := startProc(t, nil, append(fx.IngestArgs(dirI, "pg"), "--slot", slotI, "--interval", "50ms")...)
	time.Sleep(500 * time.Millisecond)
	w.Halt(t)
	stop := frontierJSONOf(t, "--source", "pg", "--dsn", db.dsn).Native
	pipeline(`"$RTR" replicate --source pg --publication rtr --slot "$SLOT" --stop-at ` + stop + ` | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	ingesttest.WaitEqual(t, fx, dirI, lay, binProc{ing}, 60*time.Second)
	ing.signal(syscall.SIGTERM)
	if code := ing.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, ing.stderr.Bytes())
	}
	stopLSN, err := frontier.ParseLSN(stop)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := durablePos(ctxT(t), dirP, "pg"); err != nil || d < stopLSN {
		t.Errorf("the piped store is durable to %s (err %v), below --stop-at %s", d, err, stopLSN)
	}
	repP, repI := checkTimes(t, dirP, lay, log), checkTimes(t, dirI, lay, log)
	ingesttest.WaitEqual(t, fx, dirP, lay, nil, 10*time.Second)
	// Step 2 again: replicate never confirmed the slot, so the same
	// changes come again and are recognised as a replay: every time keeps
	// its contents.
	before, err := ingesttest.RecordReads(ctxT(t), dirP, lay)
	if err != nil {
		t.Fatal(err)
	}
	pipeline(`"$RTR" replicate --source pg --publication rtr --slot "$SLOT" --stop-at ` + stop + ` | "$RTR" reclock --store "$STORE" | "$RTR" store append "$STORE"`)
	after, err := ingesttest.RecordReads(ctxT(t), dirP, lay)
	if err != nil {
		t.Fatal(err)
	}
	if err := ingesttest.CompareReads(before, after); err != nil {
		t.Errorf("running replicate again changed the piped store: %v", err)
	}
	if repP.Bindings < 2 {
		t.Errorf("piped store: %d readable bindings, want the snapshot's and the replication's", repP.Bindings)
	}
	t.Logf("%d transactions; piped store %d bindings, ingest store %d bindings", log.Len(), repP.Bindings, repI.Bindings)
}
