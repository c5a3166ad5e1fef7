package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const crashEnv = "RTRSTORE_CRASH_DIR"

var crashFields = testFields

// crashUpdates is the deterministic content of the crash child's i-th
// append, over [10i, 10i+10): three inserts, and a retraction of a row of
// the previous non-empty append. Every third append is progress only.
func crashUpdates(i int) []upd {
	empty := func(i int) bool { return i%3 == 2 }
	if empty(i) {
		return nil
	}
	base := uint64(10 * i)
	var ups []upd
	for j := 0; j < 3; j++ {
		ups = append(ups, upd{[]any{int64(3*i + j), fmt.Sprint("v", i)}, base + uint64(3*j), 1})
	}
	p := i - 1
	if p >= 0 && empty(p) {
		p--
	}
	if p >= 0 {
		ups = append(ups, upd{[]any{int64(3*p + 1), fmt.Sprint("v", p)}, base + 5, -1})
	}
	return ups
}

// crashGen reports whether the crash child starts a new generation (a
// truncate) before its i-th append, at 10i.
func crashGen(i int) bool { return i%5 == 4 }

// TestCrashChild is the child of TestCrash: it appends in a loop, printing
// each committed upper, replaying its last append (and the generation
// start before it) first. Before every fifth append it starts a new
// generation with the same schema, so the replayed append and the
// compactions meet generations. It does nothing unless started by
// TestCrash.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		return
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(3)
	}
	s, err := Open(ctx, dir, Options{Retain: 40 * time.Millisecond, Grace: time.Nanosecond, KeepManifests: 3})
	if err != nil {
		fail(err)
	}
	sh := createTest(t, s, "crash.t", crashFields)
	i := int(sh.Upper() / 10)
	if i > 0 {
		if crashGen(i - 1) {
			res, err := sh.NewGeneration(ctx, uint64(10*(i-1)), testSchema(crashFields))
			if err != nil || res.Status != Skipped {
				fail(fmt.Errorf("replay of the generation at %d: %+v, %v", 10*(i-1), res, err))
			}
		}
		rec := buildRecord(t, crashFields, crashUpdates(i-1))
		res, err := sh.Append(ctx, uint64(10*(i-1)), uint64(10*i), rec)
		rec.Release()
		if err != nil || res.Status != Skipped {
			fail(fmt.Errorf("replay of append %d: %+v, %v", i-1, res, err))
		}
	}
	for ; ; i++ {
		if crashGen(i) {
			// Skipped when it was committed before a kill.
			if _, err := sh.NewGeneration(ctx, uint64(10*i), testSchema(crashFields)); err != nil {
				fail(err)
			}
		}
		rec := buildRecord(t, crashFields, crashUpdates(i))
		res, err := sh.Append(ctx, uint64(10*i), uint64(10*i+10), rec)
		rec.Release()
		if err != nil {
			fail(err)
		}
		fmt.Println("committed", res.Upper)
		if i%4 == 3 {
			if _, err := sh.Compact(ctx); err != nil {
				fail(err)
			}
		}
	}
}

// TestCrash kills the appending child with SIGKILL at random moments, at
// least 50 times, and checks after each kill that the store reads as some
// prefix of the appends that includes every reported commit.
func TestCrash(t *testing.T) { forBackends(t, testCrash) }

func testCrash(t *testing.T, b testBackend) {
	dir := b.dir(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 7))
	reported := uint64(0)
	kills := 60
	if b.s3() {
		kills = 24 // each run opens the store and its shard over HTTP
	}
	for k := 0; k < kills; k++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), childEnv(t, dir)...), crashEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var lines []string
		first := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			once := sync.Once{}
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
				once.Do(func() { close(first) })
			}
		}()
		// Half the kills land at a random moment after start (possibly
		// during open or the replay), half after the first commit.
		if k%2 == 1 {
			select {
			case <-first:
			case <-done:
			}
		}
		time.Sleep(time.Duration(r.IntN(25000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		werr := cmd.Wait()
		mu.Lock()
		for _, l := range lines {
			if strings.HasPrefix(l, "ERROR") {
				t.Fatalf("kill %d: child failed: %s", k, l)
			}
			if u, ok := strings.CutPrefix(l, "committed "); ok {
				v, _ := strconv.ParseUint(u, 10, 64)
				if v <= reported {
					t.Fatalf("kill %d: child reported upper %d after %d", k, v, reported)
				}
				reported = v
			}
		}
		mu.Unlock()
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			t.Fatalf("kill %d: child exited without being killed: %v\n%s", k, werr, strings.Join(lines, "\n"))
		}
		// A commit that landed just before the kill, before the child could
		// report it, is durable all the same: it is the base of the next run.
		reported = verifyCrashStore(t, ctx, dir, reported, r)
	}
	if reported < uint64(10*kills/2) {
		t.Fatalf("only %d appends committed over %d runs; the test did not exercise much", reported/10, kills)
	}
	t.Logf("%d kills, %d appends committed", kills, reported/10)
}

// verifyCrashStore checks the store after a kill and returns its upper.
func verifyCrashStore(t *testing.T, ctx context.Context, dir string, reported uint64, r *rand.Rand) uint64 {
	t.Helper()
	s, err := Open(ctx, dir, Options{Retain: -1, FS: baseFS(t, dir)})
	if err != nil {
		t.Fatalf("open after kill: %v", err)
	}
	sh, err := s.Shard(ctx, "crash.t")
	if errors.Is(err, ErrNotFound) && reported == 0 {
		return 0
	}
	if err != nil {
		t.Fatalf("open shard after kill: %v", err)
	}
	upper, since := sh.Upper(), sh.Since()
	if upper%10 != 0 {
		t.Fatalf("upper %d is not the end of an append", upper)
	}
	if upper < reported {
		t.Fatalf("lost a commit: upper %d, child reported %d committed", upper, reported)
	}
	if upper > reported+10 {
		t.Fatalf("upper %d is more than one append beyond the reported %d", upper, reported)
	}
	n := int(upper / 10)
	m := &model{}
	for i := 0; i < n; i++ {
		m.ups = append(m.ups, crashUpdates(i)...)
		if crashGen(i) {
			m.gens = append(m.gens, uint64(10*i))
		}
	}
	if upper == 0 {
		return 0
	}
	// Every generation start is one the child made; those above since
	// (and below the upper) are all there.
	have := map[uint64]bool{}
	for _, g := range sh.Generations() {
		have[g.Start] = true
		if g.Start != 0 && (g.Start%10 != 0 || !crashGen(int(g.Start/10)) || g.Start > upper) {
			t.Fatalf("generation at %d, which the child did not start", g.Start)
		}
	}
	for _, g := range m.gens {
		if g > since && !have[g] {
			t.Fatalf("generation at %d is missing (since %d, upper %d): %+v", g, since, upper, sh.Generations())
		}
	}
	times := []uint64{since, upper - 1}
	for i := 0; i < 6; i++ {
		times = append(times, since+uint64(r.IntN(int(upper-since))))
	}
	for _, at := range times {
		checkAsOf(t, ctx, sh, m, 2, at)
	}
	checkChanges(t, ctx, sh, m, 2, since, upper-1)
	return upper
}
