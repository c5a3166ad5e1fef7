package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// snapRecordChunks is what the resume test reads of a snapshot record
// (docs/format-store.md, "Resumable snapshots").
type snapRecordChunks struct {
	Tables []struct {
		Chunks []struct {
			LSN  uint64 `json:"snapshot_lsn"`
			Pos  string `json:"snapshot_pos"`
			Rows int64  `json:"rows"`
		} `json:"chunks"`
	} `json:"tables"`
}

// readSnapRecordChunks returns the done and total chunks of the snapshot
// record of source in dir, ok false while there is none.
func readSnapRecordChunks(dir, source string) (done, total int, rows int64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "staged", source, "snapshot", store.SnapshotRecordName))
	if err != nil {
		return 0, 0, 0, false
	}
	var r snapRecordChunks
	if json.Unmarshal(b, &r) != nil {
		return 0, 0, 0, false
	}
	for _, tb := range r.Tables {
		for _, c := range tb.Chunks {
			total++
			if c.LSN != 0 || c.Pos != "" {
				done++
				rows += c.Rows
			}
		}
	}
	return done, total, rows, true
}

var stagedLineRe = regexp.MustCompile(`msg="snapshot staged".* rows_copied=(\d+) rows_resumed=(\d+)`)

// TestIngestSnapshotResume: rtrctl ingest gets SIGKILL at about half of
// the initial snapshot of a 300k-row table while a writer changes it;
// the restart copies only the chunks the first run did not finish (at
// most 60% of the rows) at a newer snapshot, rewinds them to the slot's
// start with the others, and the table ends exact against upstream at a
// wait-recent time. Nothing staged is visible to a reader meanwhile, and
// nothing staged is left at the end.
//
// full: REPLICA IDENTITY FULL under updates, inserts, deletes and moves
// of rows between key ranges, copied on two connections. default-inserts: identity DEFAULT (primary
// key) under inserts: resumed too. default-updates: identity DEFAULT
// under every kind of change: an update to a row older than the slot
// cannot be rewound without its old row, so the restart may copy anew
// (it says so); either way the table ends exact.
func TestIngestSnapshotResume(t *testing.T) {
	for _, c := range []struct {
		name, identity string
		insertsOnly    bool
	}{{"full", "FULL", false}, {"default-inserts", "DEFAULT", true}, {"default-updates", "DEFAULT", false}} {
		t.Run(c.name, func(t *testing.T) {
			frac, log := snapshotResume(t, c.identity, c.insertsOnly)
			anew := strings.Contains(log, "copying anew")
			switch {
			case c.name == "default-updates" && anew:
				t.Logf("copied anew: %.1f%% of the rows copied in the second run", 100*frac)
			case frac > 0.6:
				t.Errorf("the second run copied %.1f%% of the rows again, want at most 60%%", 100*frac)
			}
		})
	}
}

// snapshotResume runs the test with the table's replica identity and its
// writes (inserts only, or every kind); it returns the fraction of the
// rows the second run copied and its log.
func snapshotResume(t *testing.T, identity string, insertsOnly bool) (float64, string) {
	const rows = 300000
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	execAll(t, conn,
		"CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, name text NOT NULL)",
		"ALTER TABLE big REPLICA IDENTITY "+identity,
		fmt.Sprintf("INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %d) g", rows),
		"ANALYZE big",
		"CREATE PUBLICATION pub FOR TABLE big",
	)
	slot := "rtr_resume_" + rrRandom()
	t.Cleanup(func() { // after the processes are killed (cleanups run last first)
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			c.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			c.Close(context.Background())
		}
	})

	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--store", dir,
		"--interval", "50ms", "--compact-every", "0", "--progress-interval", "1ns"}
	if identity == "FULL" {
		args = append(args, "--parallel", "2") // chunks done out of order
	}
	first, deadline := startPlanned(t, args, dir, "pg")

	// Writes all through the snapshot once it is planned, each a
	// transaction of its own.
	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close(context.Background())
		next := int64(rows)
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := rand.Int64N(rows) + 1
			var q string
			var args []any
			op := rand.IntN(4)
			if insertsOnly {
				op = 1
			}
			switch op {
			case 0:
				q, args = "UPDATE big SET n = n + 1 WHERE id = $1", []any{id}
			case 1:
				next++
				q = fmt.Sprintf("INSERT INTO big VALUES (%d, 7, 'new %d')", next, next)
			case 2:
				q, args = "DELETE FROM big WHERE id = $1", []any{id}
			default: // into the last key range, copied last
				q, args = fmt.Sprintf("UPDATE big SET id = id + %d WHERE id = $1", 2*rows), []any{id}
			}
			if _, err := w.Exec(context.Background(), q, args...); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()

	doneRows := killAtHalf(t, first, dir, "pg", []string{"public.big"}, deadline)
	t.Logf("%d writes so far", writes.Load())
	second, frac, log := resumeSnapshot(t, args, dir, "pg", doneRows)
	time.Sleep(300 * time.Millisecond) // writes after the snapshot too
	halt()
	t.Logf("%d writes", writes.Load())
	anew := strings.Contains(log, "copying anew")
	// (A snapshot copied anew creates the slot with its copy: nothing to
	// rewind.)
	if !anew && !regexp.MustCompile(`msg="snapshot rewound".* rewound=[1-9]`).MatchString(log) {
		t.Errorf("nothing was rewound; the test's writes did not overlap the snapshot:\n%s", log)
	}

	// Exact at a wait-recent time after the last write.
	at, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", "", "--timeout", "60s")
	if code != exitOK {
		t.Fatalf("wait-recent: exit %d: %s", code, stderr)
	}
	out, stderr, code := runCLI(t, "", "read", dir, "public.big", "--format", "csv", "--as-of", strconv.FormatUint(at, 10))
	if code != exitOK {
		t.Fatalf("read: exit %d: %s", code, stderr)
	}
	got := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		got[l]++
	}
	want := map[string]int{}
	rs, err := conn.Query(t.Context(), "SELECT id::text || ',' || n::text || ',' || name FROM big")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var l string
		if err := rs.Scan(&l); err != nil {
			t.Fatal(err)
		}
		want[l]++
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for l, n := range want {
		if got[l] != n {
			diffs = append(diffs, fmt.Sprintf("%s: store %d, upstream %d", l, got[l], n))
		}
	}
	for l, n := range got {
		if _, ok := want[l]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: store %d, upstream 0", l, n))
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("the store differs from upstream at %d in %d rows (of %d), e.g. %v", at, len(diffs), len(want), diffs[:min(len(diffs), 5)])
	}

	second.signal(syscall.SIGTERM)
	if code := second.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("second ingest after SIGTERM: exit %d\nstderr:\n%s", code, second.stderr.Bytes())
	}
	checkSnapshotRemoved(t, dir, "pg")
	t.Logf("%d rows upstream, exact at %d", len(want), at)
	return frac, log
}

// killAtHalf SIGKILLs p once the snapshot record of source in dir has at
// least half its chunks done (failing at deadline), checks what the kill
// leaves (progress lines in p's log, nothing of collections visible, the
// staged files, status saying the snapshot was interrupted), puts a
// stray staged file in the directory for the restart to sweep, and
// returns the rows of the chunks done.
func killAtHalf(t *testing.T, p *proc, dir, source string, collections []string, deadline time.Time) int64 {
	t.Helper()
	var done, total int
	for {
		var ok bool
		if done, total, _, ok = readSnapRecordChunks(dir, source); ok && total > 0 && 2*done >= total {
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("the first ingest did not get half through its snapshot (%d of %d chunks)\nstderr:\n%s", done, total, p.stderr.Bytes())
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.kill(t)
	if total < 8 {
		t.Fatalf("the snapshot has %d chunks, want at least 8 for the test to mean something", total)
	}
	done, _, doneRows, _ := readSnapRecordChunks(dir, source)
	t.Logf("killed with %d of %d chunks done (%d rows)", done, total, doneRows)
	if !strings.Contains(string(p.stderr.Bytes()), `msg="snapshot progress"`) {
		t.Errorf("no progress line in the first run's log:\n%s", p.stderr.Bytes())
	}

	// Nothing staged is visible: the collections have no rows and no
	// batch, though the staged directory holds the finished chunks.
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range collections {
		sh, err := st.Shard(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		info, err := sh.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Upper != 0 || len(info.Batches) != 0 {
			t.Errorf("after the kill %s has upper %d and %d batches, want nothing", c, info.Upper, len(info.Batches))
		}
	}
	sdir := filepath.Join(dir, "staged", source, "snapshot")
	staged, _ := os.ReadDir(sdir)
	if len(staged) < 2 {
		t.Errorf("%d staged files after the kill, want the record and the chunks' files", len(staged))
	}

	// status says the snapshot was interrupted, and how far it got.
	var sn *snapshotStatus
	for _, src := range statusOf(t, dir).Sources {
		if src.Name == source {
			sn = src.Snapshot
		}
	}
	chunks := 0
	if sn != nil {
		for _, tp := range sn.Tables {
			chunks += tp.Chunks
		}
	}
	if sn == nil || sn.Running || len(sn.Tables) != len(collections) || chunks != total {
		t.Errorf("status after the kill: %+v, want the snapshot interrupted with %d chunks", sn, total)
	}

	// A stray staged file (as a crash while a run was written leaves) is
	// swept at the restart.
	stray := filepath.Join(sdir, strayStagedFile)
	if err := os.WriteFile(stray, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	return doneRows
}

// strayStagedFile is the name of the stray file killAtHalf leaves.
const strayStagedFile = "00000000000000000000-00000000000000000000-00000000000000aa.arrow"

// resumeSnapshot starts the ingest of args again after killAtHalf, waits
// for its snapshot to be done, and checks that it resumed the doneRows
// of the record (unless it copied anew) and swept the stray file. It
// returns the process, the fraction of the rows it copied again (from
// its "snapshot staged" line) and its log so far.
func resumeSnapshot(t *testing.T, args []string, dir, source string, doneRows int64) (*proc, float64, string) {
	t.Helper()
	p := startProc(t, nil, args...)
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(string(p.stderr.Bytes()), `msg="snapshot done"`) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("the second ingest did not finish its snapshot\nstderr:\n%s", p.stderr.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := string(p.stderr.Bytes())
	m := stagedLineRe.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no snapshot staged line in the second run's log:\n%s", log)
	}
	copied, _ := strconv.ParseInt(m[1], 10, 64)
	resumed, _ := strconv.ParseInt(m[2], 10, 64)
	frac := float64(copied) / float64(copied+resumed)
	t.Logf("second run: %d rows copied again, %d resumed: %.1f%% of the snapshot copied again", copied, resumed, 100*frac)
	if resumed != doneRows && !strings.Contains(log, "copying anew") {
		t.Errorf("the second run resumed %d rows, the record had %d", resumed, doneRows)
	}
	if m := regexp.MustCompile(`msg="snapshot resumed".* stray_files_removed=(\d+)`).FindStringSubmatch(log); m == nil || m[1] == "0" {
		t.Errorf("the restart did not sweep the stray staged file: %v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "staged", source, "snapshot", strayStagedFile)); !os.IsNotExist(err) {
		t.Errorf("stray staged file after the restart: %v", err)
	}
	return p, frac, log
}

// checkSnapshotRemoved checks that the staged snapshot of source in dir
// is gone (after its commit).
func checkSnapshotRemoved(t *testing.T, dir, source string) {
	t.Helper()
	sdir := filepath.Join(dir, "staged", source, "snapshot")
	if _, err := os.Stat(sdir); !os.IsNotExist(err) {
		left, _ := os.ReadDir(sdir)
		t.Errorf("the snapshot's staged directory is still there after its commit (%d files): %v", len(left), err)
	}
}

// startPlanned starts the ingest of args and waits until the snapshot
// record of source in dir exists (the snapshot is planned); it returns
// the process and the deadline for its snapshot.
func startPlanned(t *testing.T, args []string, dir, source string) (*proc, time.Time) {
	t.Helper()
	p := startProc(t, nil, args...)
	deadline := time.Now().Add(90 * time.Second)
	for _, _, _, ok := readSnapRecordChunks(dir, source); !ok; _, _, _, ok = readSnapRecordChunks(dir, source) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("the first ingest planned no snapshot\nstderr:\n%s", p.stderr.Bytes())
		}
		time.Sleep(time.Millisecond)
	}
	return p, deadline
}
