package ingesttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/recency"
)

// Harness makes fixtures of one source kind.
type Harness interface {
	Name() string
	// New makes a fresh upstream namespace (a database, topics) holding
	// the suite's bank collections with Accounts accounts each of
	// Balance, and returns its fixture.
	New(t *testing.T) Fixture
	// Run starts the rtrctl binary with args (and extra environment).
	Run(t *testing.T, env []string, args ...string) Proc
}

// Proc is a running rtrctl process.
type Proc interface {
	// Kill sends SIGKILL and waits; it fails the test when the process
	// had exited already.
	Kill(t *testing.T)
	// Stop sends SIGTERM and returns the exit status.
	Stop(t *testing.T) int
	// Wait waits for the process to exit and returns its status.
	Wait(t *testing.T) int
	Exited() bool
	Stderr() string
}

// Caps are what a source can do; a check a source lacks the capability
// for is not part of its run.
type Caps struct {
	// Snapshot: the collections begin with a definite snapshot at time 0.
	Snapshot bool
	// Acks: the source acknowledges upstream (Fixture.Acked).
	Acks bool
}

// Fixture is one upstream namespace with the bank collections.
type Fixture interface {
	// IngestArgs are the rtrctl ingest arguments for this upstream.
	IngestArgs(store, sourceID string) []string
	// Layout is where the collections land in a store with sourceID.
	Layout(sourceID string) Layout
	Caps() Caps
	// Apply runs tx's sets upstream as one transaction (as separate
	// writes in order, for a source that has none) and returns where each
	// landed in source time. An error leaves the outcome unknown: the
	// writer reads the upstream to find out.
	Apply(ctx context.Context, sets []Set) ([]Pos, error)
	// Read reads the upstream's current contents.
	Read(ctx context.Context) (State, error)
	// Position is a source time at or after every committed write's
	// (its Hi), for placing a transaction whose commit was not answered.
	Position(ctx context.Context) (Pos, error)
	// RestartUpstream makes the upstream go away and come back in the
	// middle of a write load (the i-th time, from 0).
	RestartUpstream(t *testing.T, i int)
	// Retries counts the evidence that the ingest retried after the
	// upstream went away: the retry lines of its stderr (and, for a
	// source whose client reconnects silently, the reconnections the
	// upstream refused while it was away).
	Retries(stderr string) int
	// Acked is how far the upstream may forget, per source id.
	Acked(t *testing.T, sourceID string) map[string]frontier.Frontier
	// BreakCollection makes an upstream event that must become a definite
	// error of coll alone.
	BreakCollection(t *testing.T, coll string)
}

// Truncater is a Fixture whose upstream can empty a collection in one
// statement (TRUNCATE); Run adds check 8 for it.
type Truncater interface {
	// Truncate empties coll upstream, then writes rows (account ->
	// balance) into it: in the TRUNCATE's own transaction where the
	// upstream allows it (PostgreSQL), else right after it.
	Truncate(t *testing.T, coll string, rows map[string]int64)
}

// Bank dimensions: small, so that every binding can be read.
const (
	Accounts = 8
	Balance  = 1000
)

// InitialState is the bank before any transfer, for collections colls.
func InitialState(colls []string) State {
	s := State{}
	for _, c := range colls {
		s[c] = map[string]int64{}
		for i := 1; i <= Accounts; i++ {
			s[c][fmt.Sprint(i)] = Balance
		}
	}
	return s
}

// Writer runs bank transactions (transfers, accounts opened and closed)
// against a fixture and logs the committed ones.
type Writer struct {
	Log        *Log
	stop       context.CancelFunc
	done       chan struct{}
	mu         sync.Mutex
	err        error
	failures   int // writes that failed (then re-read)
	unanswered int // of which committed
}

// WriterOptions configure StartWriter.
type WriterOptions struct {
	// Collections the transactions touch (default: all of the log).
	Collections []string
	// Pause between transactions.
	Pause time.Duration
}

// StartWriter starts bank transactions on fx, logging them in log, until
// Halt.
func StartWriter(t *testing.T, fx Fixture, log *Log, o WriterOptions) *Writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{Log: log, stop: cancel, done: make(chan struct{})}
	colls := o.Collections
	if len(colls) == 0 {
		for c := range log.Current() {
			colls = append(colls, c)
		}
		sort.Strings(colls)
	}
	go func() {
		defer close(w.done)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
		model := log.Current()
		next := map[string]int{} // the next new account id, per collection
		for c, rows := range model {
			for id := range rows {
				n, _ := strconv.Atoi(id)
				next[c] = max(next[c], n+1)
			}
		}
		for ctx.Err() == nil {
			sets := transaction(rng, model, colls, next)
			// A transaction once begun is seen through (stopping the
			// writer must not leave a write unlogged): not ctx.
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			pos, err := fx.Apply(wctx, sets)
			cancel()
			if err != nil {
				// Unknown outcome: the upstream says.
				w.mu.Lock()
				w.failures++
				w.mu.Unlock()
				after := model.Clone()
				for _, s := range sets {
					after.apply(s)
				}
				var now State
				for deadline := time.Now().Add(2 * time.Minute); ; {
					var rerr error
					if now, rerr = fx.Read(context.Background()); rerr == nil {
						break
					}
					if time.Now().After(deadline) {
						w.setErr(fmt.Errorf("after a failed write (%v) the upstream cannot be read: %w", err, rerr))
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				switch {
				case Diff(now, model) == "":
					continue // not committed
				case Diff(now, after) == "":
					// Committed, unanswered: it sits after the last logged
					// transaction and before the upstream's position now.
					cur, perr := fx.Position(context.Background())
					if perr != nil {
						w.setErr(fmt.Errorf("a transaction committed unanswered (%v), and its position cannot be bounded: %w", err, perr))
						return
					}
					lo := uint64(0)
					if _, txns := log.Read(); len(txns) > 0 {
						last := txns[len(txns)-1].Pos
						lo = last[len(last)-1].Lo
					}
					pos = nil
					for range sets {
						pos = append(pos, Pos{Partition: cur.Partition, Lo: lo, Hi: cur.Hi})
					}
					w.mu.Lock()
					w.unanswered++
					w.mu.Unlock()
				default:
					w.setErr(fmt.Errorf("after a failed write (%v) the upstream is neither before nor after it: %s", err, Diff(now, after)))
					return
				}
			}
			if pos == nil {
				continue
			}
			for _, s := range sets {
				model.apply(s)
			}
			log.Append(Txn{Sets: sets, Pos: pos})
			if o.Pause > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(o.Pause):
				}
			}
		}
	}()
	t.Cleanup(func() { w.stop(); <-w.done })
	return w
}

// transaction draws the writer's next transaction on model, among the
// accounts of colls: mostly a transfer between two accounts, else an
// account opened (id next[coll]) with money from another, or one closed
// into another, each collection keeping between Accounts/2 and
// 2*Accounts accounts.
func transaction(rng *rand.Rand, model State, colls []string, next map[string]int) []Set {
	var all []Set // every account, with its balance
	for _, c := range colls {
		ids := make([]string, 0, len(model[c]))
		for id := range model[c] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			all = append(all, Set{Coll: c, ID: id, Balance: model[c][id]})
		}
	}
	a := all[rng.IntN(len(all))]
	b := a
	for b == a {
		b = all[rng.IntN(len(all))]
	}
	amt := int64(1 + rng.IntN(50))
	switch r := rng.IntN(100); {
	case r < 15 && len(model[b.Coll]) < 2*Accounts:
		id := strconv.Itoa(next[b.Coll])
		next[b.Coll]++
		a.Balance -= amt
		return []Set{a, {Coll: b.Coll, ID: id, Balance: amt, Op: Insert}}
	case r < 30 && len(model[a.Coll]) > Accounts/2:
		b.Balance += a.Balance
		return []Set{b, {Coll: a.Coll, ID: a.ID, Op: Delete}}
	}
	a.Balance, b.Balance = a.Balance-amt, b.Balance+amt
	return []Set{a, b}
}

func (w *Writer) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

// Err is the writer's error, if it stopped on one.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Failures counts the writes that failed and were resolved by reading
// the upstream.
func (w *Writer) Failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failures
}

// Unanswered counts the failed writes that had committed.
func (w *Writer) Unanswered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unanswered
}

// Halt stops the writer; it fails the test on a write error.
func (w *Writer) Halt(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	if err := w.Err(); err != nil {
		t.Fatalf("writer: %v", err)
	}
}

// WaitEqual waits until the store's latest contents equal the upstream's
// (read from the upstream itself), or fails the test after timeout.
func WaitEqual(t *testing.T, fx Fixture, dir string, lay Layout, p Proc, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		if p != nil && p.Exited() {
			t.Fatalf("ingest exited while catching up\nstderr:\n%s", tail(p.Stderr()))
		}
		want, err := fx.Read(t.Context())
		if err == nil {
			var got State
			if got, err = Latest(t.Context(), dir, lay); err == nil {
				if last = Diff(got, want); last == "" && len(got) == len(want) {
					return time.Since(start)
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			var stderr string
			if p != nil {
				stderr = tail(p.Stderr())
			}
			t.Fatalf("the store did not reach the upstream's contents within %s: %s\nstderr:\n%s", timeout, last, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// Run runs every check against h, each in a subtest with a fresh
// fixture and store.
func Run(t *testing.T, h Harness) {
	t.Run("snapshot", func(t *testing.T) {
		fx := h.New(t)
		if !fx.Caps().Snapshot {
			t.Logf("%s has no snapshot: check 1 is not part of its run", h.Name())
			return
		}
		testSnapshot(t, h, fx)
	})
	t.Run("kill", func(t *testing.T) { testKill(t, h, h.New(t)) })
	t.Run("errors", func(t *testing.T) { testErrors(t, h, h.New(t)) })
	t.Run("restart", func(t *testing.T) { testRestart(t, h, h.New(t)) })
	t.Run("truncate", func(t *testing.T) {
		fx := h.New(t)
		tr, ok := fx.(Truncater)
		if !ok {
			t.Logf("%s has no TRUNCATE: check 8 is not part of its run", h.Name())
			return
		}
		testTruncate(t, h, fx, tr)
	})
}

// newLog is the log of a fresh fixture.
func newLog(fx Fixture, source string) *Log {
	return NewLog(InitialState(fx.Layout(source).Collections()))
}

func checkTimes(t *testing.T, dir string, lay Layout, log *Log) TimesReport {
	t.Helper()
	rep, err := CheckTimes(t.Context(), dir, lay, log)
	if err != nil {
		t.Fatalf("check 2 (changes at their source time): %v", err)
	}
	return rep
}

// testSnapshot is check 1: rows present before the ingest and writes
// during its snapshot give a time-0 that is a consistent upstream state;
// an ingest that dies after the first collection's snapshot is durable,
// copied to a second store whose collections are all missing, snapshots
// them again later (writes went on) and gets identical time-0 contents.
func testSnapshot(t *testing.T, h Harness, fx Fixture) {
	const source = "conf"
	lay := fx.Layout(source)
	colls := lay.Collections()
	log := newLog(fx, source)
	w := StartWriter(t, fx, log, WriterOptions{Pause: 2 * time.Millisecond})
	for log.Len() < 20 {
		time.Sleep(5 * time.Millisecond)
	}
	dirA := filepath.Join(t.TempDir(), "a")
	p := h.Run(t, []string{"RTR_FAULT_EXIT_AFTER_COMMIT=" + colls[0]}, append(fx.IngestArgs(dirA, source), "--interval", "30ms")...)
	if code := p.Wait(t); code != 137 {
		t.Fatalf("ingest with the fault hook: exit %d, want 137\nstderr:\n%s", code, p.Stderr())
	}
	txnsAtCrash := log.Len()
	// Store B: a copy of A without its collections.
	dirB := filepath.Join(t.TempDir(), "b")
	if err := copyStoreWithout(dirA, dirB, colls); err != nil {
		t.Fatal(err)
	}
	for log.Len() < txnsAtCrash+30 {
		time.Sleep(5 * time.Millisecond)
	}
	p = h.Run(t, nil, append(fx.IngestArgs(dirB, source), "--interval", "30ms")...)
	time.Sleep(500 * time.Millisecond)
	w.Halt(t)
	took := WaitEqual(t, fx, dirB, lay, p, 90*time.Second)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	rep := checkTimes(t, dirB, lay, log)
	// Time 0 in A (the first snapshot) and in B (the second one).
	sc := lay.Sources[0]
	stA, err := openStore(t.Context(), dirA)
	if err != nil {
		t.Fatal(err)
	}
	shA, err := stA.Shard(t.Context(), colls[0])
	if err != nil {
		t.Fatal(err)
	}
	bsA, _, err := stA.Bindings(t.Context(), sc.ID)
	if err != nil || len(bsA) != 1 {
		t.Fatalf("store A after the crash: bindings %v (err %v), want the snapshot's one", bsA, err)
	}
	a0, err := readAccounts(t.Context(), shA, bsA[0].Time)
	if err != nil {
		t.Fatal(err)
	}
	tB, b0, err := FirstBinding(t.Context(), dirB, sc)
	if err != nil {
		t.Fatal(err)
	}
	if tB != bsA[0].Time {
		t.Fatalf("store B's first binding is at %d, A's at %d", tB, bsA[0].Time)
	}
	if d := Diff(State{colls[0]: b0[colls[0]]}, State{colls[0]: a0}); d != "" {
		t.Errorf("check 1: %s as of time 0 differs between the first snapshot and the second: %s", colls[0], d)
	}
	if b0.Sum() != InitialState(colls).Sum() {
		t.Errorf("check 1: the sum of balances at time 0 is %d, want %d", b0.Sum(), InitialState(colls).Sum())
	}
	if !strings.Contains(p.Stderr(), "msg=snapshot ") {
		t.Errorf("store B's ingest did not snapshot:\n%s", p.Stderr())
	}
	t.Logf("check 1: %d transactions before the first snapshot's crash, %d in all; time 0 identical in both stores (%d accounts of %s); %d bindings checked (check 2), prefix %d of %d reached; caught up in %s",
		txnsAtCrash, log.Len(), len(a0), colls[0], rep.Bindings, rep.Reached[sc.ID], rep.Units[sc.ID], took.Round(time.Millisecond))
}

// testKill is check 4 (identical reads after SIGKILL and resume), with
// check 2 on the result, check 5 (ownership refusal) and check 7 (the
// acknowledgement never passes the durable frontier) while it runs.
func testKill(t *testing.T, h Harness, fx Fixture) {
	r := KillLoop(t, h, fx, KillOptions{})
	t.Logf("check 4: %d SIGKILLs under %d transactions, %d binding reads identical across them; check 2: %d bindings, prefixes %v of %v; check 5: refused; check 7: %d acknowledgements compared (%d samples)",
		r.Kills, r.Txns, r.Reads, r.Times.Bindings, r.Times.Reached, r.Times.Units, r.AckCompared, r.AckSamples)
}

// KillOptions shape a KillLoop.
type KillOptions struct {
	// Source is the ingest's source id (default "conf").
	Source string
	// Kills is the number of SIGKILLs (default 4).
	Kills int
	// Early is how many of the first kills come while the snapshot runs
	// or just after it: once the ingest logs "msg=snapshot " or
	// "msg=resume ", within 80 ms.
	Early int
	// MinRun and MaxRun bound how long the other runs last before their
	// kill (default 300 ms and 1.2 s).
	MinRun, MaxRun time.Duration
	// Args are added to the fixture's ingest arguments (default
	// --interval 20ms --compact-every 0).
	Args []string
	// Compact compacts the store after the last run, which must leave
	// every read the same.
	Compact bool
	// AfterKill, if set, runs after kill k (from 0) with the store's
	// directory; BeforeStop once the last run has caught up with the
	// upstream, before its SIGTERM.
	AfterKill  func(k int, dir string)
	BeforeStop func(dir string)
	// Stderr, if set, is given each run's stderr once it ended.
	Stderr func(stderr string)
}

// KillReport is what a KillLoop checked.
type KillReport struct {
	Dir   string
	Kills int
	// Txns is the number of committed transactions, Reads the binding
	// reads compared across the kills.
	Txns, Reads int
	Times       TimesReport
	// AckSamples and AckCompared count check 7's samples and those that
	// compared an acknowledgement with a durable frontier.
	AckSamples, AckCompared int
}

// KillLoop is check 4: ingests of fx, each SIGKILLed at a random moment
// while a writer runs; after every kill every binding read before reads
// the same (and check 7 holds). The last run takes three seconds (a Kafka
// --group commits every two), refuses a second ingest of the store with
// another source id (check 5), catches up with the upstream once the
// writer stopped (contents and durable frontier) and ends with SIGTERM
// and exit 0. Then check 2 holds over every binding and the store equals
// the upstream.
func KillLoop(t *testing.T, h Harness, fx Fixture, o KillOptions) KillReport {
	t.Helper()
	if o.Source == "" {
		o.Source = "conf"
	}
	if o.Kills == 0 {
		o.Kills = 4
	}
	if o.MinRun == 0 && o.MaxRun == 0 {
		o.MinRun, o.MaxRun = 300*time.Millisecond, 1200*time.Millisecond
	}
	if o.Args == nil {
		o.Args = []string{"--interval", "20ms", "--compact-every", "0"}
	}
	lay := fx.Layout(o.Source)
	log := newLog(fx, o.Source)
	rep := KillReport{Dir: filepath.Join(t.TempDir(), "store"), Kills: o.Kills}
	dir := rep.Dir
	args := append(fx.IngestArgs(dir, o.Source), o.Args...)
	w := StartWriter(t, fx, log, WriterOptions{Pause: 3 * time.Millisecond})
	seen := Reads{}
	compare := func(what string) {
		t.Helper()
		if err := w.Err(); err != nil {
			t.Fatalf("writer: %v", err)
		}
		now, err := RecordReads(t.Context(), dir, lay)
		if err != nil {
			t.Fatal(err)
		}
		if err := CompareReads(seen, now); err != nil {
			t.Fatalf("check 4 %s: %v", what, err)
		}
		seen = now
	}
	sampleAck := func() {
		if fx.Caps().Acks {
			rep.AckSamples++
			if checkAck(t, fx, dir, lay, o.Source) {
				rep.AckCompared++
			}
		}
	}
	for k := 0; k < o.Kills; k++ {
		p := h.Run(t, nil, args...)
		run := o.MinRun + rand.N(o.MaxRun-o.MinRun+1)
		if k < o.Early {
			WaitStderr(t, p, "msg=snapshot ", "msg=resume ")
			run = rand.N(80 * time.Millisecond)
		}
		for until := time.Now().Add(run); time.Now().Before(until); time.Sleep(30 * time.Millisecond) {
			sampleAck()
		}
		p.Kill(t)
		if o.Stderr != nil {
			o.Stderr(p.Stderr())
		}
		sampleAck()
		compare(fmt.Sprintf("after kill %d", k))
		if o.AfterKill != nil {
			o.AfterKill(k, dir)
		}
	}
	// The last run: check 5 against it, then catch up and stop.
	p := h.Run(t, nil, args...)
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(30 * time.Millisecond) {
		sampleAck()
	}
	other := h.Run(t, nil, fx.IngestArgs(dir, "intruder")...)
	if code := other.Wait(t); code == 0 || !strings.Contains(other.Stderr(), "belongs to source") {
		t.Errorf("check 5: a second ingest with another source id: exit %d, stderr:\n%s", code, other.Stderr())
	}
	w.Halt(t)
	took := WaitEqual(t, fx, dir, lay, p, 90*time.Second)
	WaitEqualLog(t, dir, lay, log, p, 30*time.Second)
	if o.BeforeStop != nil {
		o.BeforeStop(dir)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	if o.Stderr != nil {
		o.Stderr(p.Stderr())
	}
	t.Logf("caught up %s after the writer stopped", took.Round(time.Millisecond))
	compare("after the last run")
	if o.Compact {
		st, err := openStore(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Compact(t.Context()); err != nil {
			t.Fatalf("compact: %v", err)
		}
		compare("after compaction")
	}
	rep.Times = checkTimes(t, dir, lay, log)
	want, err := fx.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Latest(t.Context(), dir, lay)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(got, want); d != "" {
		t.Errorf("at the end the store differs from the upstream: %s", d)
	}
	for _, ts := range seen {
		rep.Reads += len(ts)
	}
	rep.Txns = log.Len()
	if fx.Caps().Acks && rep.AckCompared == 0 {
		t.Errorf("check 7: no acknowledgement was ever compared")
	}
	return rep
}

// WaitStderr waits until p logs one of the strings.
func WaitStderr(t *testing.T, p Proc, any ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		stderr := p.Stderr()
		for _, s := range any {
			if strings.Contains(stderr, s) {
				return
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the ingest did not log any of %q\nstderr:\n%s", any, tail(stderr))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkAck samples check 7 once: the acknowledgement, then the durable
// frontier (which only grows), must cover it. It reports whether a
// comparison was made (there is a durable binding and an acknowledgement).
func checkAck(t *testing.T, fx Fixture, dir string, lay Layout, source string) bool {
	t.Helper()
	acked := fx.Acked(t, source)
	compared := false
	for _, sc := range lay.Sources {
		a, ok := acked[sc.ID]
		if !ok || a.IsEmpty() {
			continue
		}
		d, err := Durable(t.Context(), dir, sc.ID)
		if err != nil || d.IsEmpty() {
			continue
		}
		if !d.Covers(a) {
			t.Errorf("check 7: source %s acknowledged %s upstream, beyond its durable frontier %s", sc.ID, a, d)
		}
		compared = true
	}
	return compared
}

// testErrors is check 3: a definite error of one collection, while the
// other keeps following the upstream.
func testErrors(t *testing.T, h Harness, fx Fixture) {
	const source = "conf"
	lay := fx.Layout(source)
	colls := lay.Collections()
	log := newLog(fx, source)
	dir := filepath.Join(t.TempDir(), "store")
	p := h.Run(t, nil, append(fx.IngestArgs(dir, source), "--interval", "20ms")...)
	WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	broken, ok := colls[0], colls[1]
	fx.BreakCollection(t, broken)
	w := StartWriter(t, fx, log, WriterOptions{Collections: []string{ok}, Pause: 3 * time.Millisecond})
	var msg string
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if msg, err = CollectionError(t.Context(), dir, broken); err == nil && msg != "" {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("check 3: no definite error of %s (err %v)\nstderr:\n%s", broken, err, tail(p.Stderr()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for log.Len() < 30 {
		time.Sleep(10 * time.Millisecond)
	}
	w.Halt(t)
	okLay := Layout{Atomic: lay.Atomic}
	for _, sc := range lay.Sources {
		for _, c := range sc.Collections {
			if c == ok {
				okLay.Sources = append(okLay.Sources, SourceColls{ID: sc.ID, Collections: []string{ok}})
			}
		}
	}
	want := func() State {
		s, err := fx.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return State{ok: s[ok]}
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		got, err := Latest(t.Context(), dir, okLay)
		if err == nil && Diff(got, want()) == "" {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("check 3: %s does not follow the upstream after %s broke: %v %s\nstderr:\n%s", ok, broken, err, Diff(got, want()), tail(p.Stderr()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	if err := ReadLast(t.Context(), dir, broken); err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("check 3: reading %s at its last time: %v, want its definite error", broken, err)
	}
	t.Logf("check 3: %s has the definite error %q; %s followed %d more transactions exactly", broken, msg, ok, log.Len())
}

// testRestart is check 6: the upstream goes away twice under a write
// load; the ingest keeps running, retries, and ends equal to it.
func testRestart(t *testing.T, h Harness, fx Fixture) {
	const source = "conf"
	lay := fx.Layout(source)
	log := newLog(fx, source)
	dir := filepath.Join(t.TempDir(), "store")
	p := h.Run(t, nil, append(fx.IngestArgs(dir, source), "--interval", "20ms")...)
	WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	w := StartWriter(t, fx, log, WriterOptions{Pause: 3 * time.Millisecond})
	var recover []string
	for i := 0; i < 2; i++ {
		for n := log.Len(); log.Len() < n+30; {
			if err := w.Err(); err != nil {
				t.Fatalf("writer: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		fx.RestartUpstream(t, i)
		before := log.Len()
		start := time.Now()
		for log.Len() < before+10 {
			if err := w.Err(); err != nil {
				t.Fatalf("writer: %v", err)
			}
			if time.Since(start) > 60*time.Second {
				t.Fatalf("the writer did not resume after restart %d", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if p.Exited() {
			t.Fatalf("check 6: ingest exited after upstream restart %d\nstderr:\n%s", i, tail(p.Stderr()))
		}
		// Caught up with what the writer did so far.
		took := WaitEqualLog(t, dir, lay, log, p, 90*time.Second)
		recover = append(recover, took.Round(time.Millisecond).String())
	}
	w.Halt(t)
	WaitEqual(t, fx, dir, lay, p, 90*time.Second)
	if p.Exited() {
		t.Fatalf("check 6: ingest exited\nstderr:\n%s", tail(p.Stderr()))
	}
	retries := fx.Retries(p.Stderr())
	if retries == 0 {
		t.Errorf("check 6: no retry seen\nstderr:\n%s", tail(p.Stderr()))
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	rep := checkTimes(t, dir, lay, log)
	t.Logf("check 6: 2 upstream restarts under %d transactions (%d failed writes resolved by reading the upstream, %d of them committed unanswered); %d retries seen; caught up %v after each; check 2: %d bindings",
		log.Len(), w.Failures(), w.Unanswered(), retries, recover, rep.Bindings)
}

// WaitEqualLog waits until the store's durable frontier of every source
// is past the log's transactions at the call (the writer may go on: the
// store may be ahead of the log, so contents are checked after it stops).
func WaitEqualLog(t *testing.T, dir string, lay Layout, log *Log, p Proc, timeout time.Duration) time.Duration {
	t.Helper()
	_, txns := log.Read()
	past := map[string][]Pos{}
	for _, sc := range lay.Sources {
		coll := ""
		if !lay.Atomic {
			coll = sc.Collections[0]
		}
		var pos []Pos
		for _, u := range steps(txns, coll) {
			pos = append(pos, u.pos...)
		}
		past[sc.ID] = pos
	}
	return WaitDurable(t, dir, past, p, timeout)
}

// WaitDurable waits until the store has a durable frontier (past its
// first binding's) for every source of past, surely beyond each of the
// source's positions there, or fails the test after timeout.
func WaitDurable(t *testing.T, dir string, past map[string][]Pos, p Proc, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		done := true
		var err error
		n := 0
		for src, pos := range past {
			n += len(pos)
			var d frontier.Frontier
			if d, err = Durable(t.Context(), dir, src); err != nil || d.IsEmpty() {
				done = false
				continue
			}
			for _, p := range pos {
				done = done && p.surely(d)
			}
		}
		if done {
			return time.Since(start)
		}
		if p.Exited() || time.Since(start) > timeout {
			t.Fatalf("the store's durable frontier did not pass %d positions within %s (%v)\nstderr:\n%s", n, timeout, err, tail(p.Stderr()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testTruncate is check 8: a TRUNCATE empties the collection at its own
// time, and rows written after it (in its transaction, too) are its new
// contents: a recency answer after it never shows the old rows, the
// other collections keep following the upstream, and after a SIGKILL the
// reads at every binding replay identically.
func testTruncate(t *testing.T, h Harness, fx Fixture, tr Truncater) {
	const source = "conf"
	lay := fx.Layout(source)
	colls := lay.Collections()
	dir := filepath.Join(t.TempDir(), "store")
	args := append(fx.IngestArgs(dir, source), "--interval", "20ms")
	p := h.Run(t, nil, args...)
	WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	log := newLog(fx, source)
	w := StartWriter(t, fx, log, WriterOptions{Collections: colls[1:], Pause: 3 * time.Millisecond})
	trunc := colls[0]
	recent := func(what string, want map[string]int64) {
		t.Helper()
		st, err := openStore(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		res, err := recency.Wait(t.Context(), st, recency.Options{Collection: trunc, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("check 8: wait-recent %s: %v\nstderr:\n%s", what, err, tail(p.Stderr()))
		}
		sh, err := st.Shard(t.Context(), trunc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAccounts(t.Context(), sh, res.Time)
		if err != nil {
			t.Fatalf("check 8: read %s as of the recency answer %d %s: %v", trunc, res.Time, what, err)
		}
		if d := Diff(State{trunc: got}, State{trunc: want}); d != "" {
			t.Fatalf("check 8: %s as of the recency answer %d %s: %s", trunc, res.Time, what, d)
		}
	}
	tr.Truncate(t, trunc, nil)
	recent("after TRUNCATE", map[string]int64{})
	refill := map[string]int64{"1": 11, "2": 22, "3": 33}
	tr.Truncate(t, trunc, refill)
	recent("after TRUNCATE and inserts", refill)
	before, err := RecordReads(t.Context(), dir, lay)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill(t)
	w.Halt(t)
	if err := w.Err(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	p = h.Run(t, nil, args...)
	WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	after, err := RecordReads(t.Context(), dir, lay)
	if err != nil {
		t.Fatal(err)
	}
	if err := CompareReads(before, after); err != nil {
		t.Fatalf("check 8 after SIGKILL: %v", err)
	}
	t.Logf("check 8: TRUNCATE and TRUNCATE+insert read exactly at their recency answers; %d transactions on the other collections; reads identical across a SIGKILL", log.Len())
}
