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
			Rows int64  `json:"rows"`
		} `json:"chunks"`
	} `json:"tables"`
}

// readSnapRecordChunks returns the done and total chunks of dir's pg
// snapshot record, ok false while there is none.
func readSnapRecordChunks(dir string) (done, total int, rows int64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "staged", "pg", "snapshot", store.SnapshotRecordName))
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
			if c.LSN != 0 {
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
	first := startProc(t, nil, args...)

	// Writes all through the snapshot once it is planned, each a
	// transaction of its own.
	deadline := time.Now().Add(90 * time.Second)
	for _, _, _, ok := readSnapRecordChunks(dir); !ok; _, _, _, ok = readSnapRecordChunks(dir) {
		if first.exited() || time.Now().After(deadline) {
			t.Fatalf("the first ingest planned no snapshot\nstderr:\n%s", first.stderr.bytes())
		}
		time.Sleep(time.Millisecond)
	}
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

	var done, total int
	var doneRows int64
	for {
		var ok bool
		if done, total, doneRows, ok = readSnapRecordChunks(dir); ok && total > 0 && 2*done >= total {
			break
		}
		if first.exited() || time.Now().After(deadline) {
			t.Fatalf("the first ingest did not get half through its snapshot (%d of %d chunks)\nstderr:\n%s", done, total, first.stderr.bytes())
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.kill(t)
	if total < 8 {
		t.Fatalf("the snapshot has %d chunks, want at least 8 for the test to mean something", total)
	}
	done, _, doneRows, _ = readSnapRecordChunks(dir)
	t.Logf("killed with %d of %d chunks done (%d rows), %d writes so far", done, total, doneRows, writes.Load())
	if !strings.Contains(string(first.stderr.bytes()), `msg="snapshot progress"`) {
		t.Errorf("no progress line in the first run's log:\n%s", first.stderr.bytes())
	}

	// Nothing staged is visible: the collection has no rows and no
	// batch, though the staged directory holds the finished chunks.
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(t.Context(), "public.big")
	if err != nil {
		t.Fatal(err)
	}
	info, err := sh.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Upper != 0 || len(info.Batches) != 0 {
		t.Errorf("after the kill the collection has upper %d and %d batches, want nothing", info.Upper, len(info.Batches))
	}
	staged, _ := os.ReadDir(filepath.Join(dir, "staged", "pg", "snapshot"))
	if len(staged) < 2 {
		t.Errorf("%d staged files after the kill, want the record and the chunks' files", len(staged))
	}

	// status says the snapshot was interrupted, and how far it got.
	var sn *snapshotStatus
	for _, src := range statusOf(t, dir).Sources {
		if src.Name == "pg" {
			sn = src.Snapshot
		}
	}
	if sn == nil || sn.Running || len(sn.Tables) != 1 || sn.Tables[0].Chunks != total {
		t.Errorf("status after the kill: %+v, want the snapshot interrupted with %d chunks", sn, total)
	}

	// A stray staged file (as a crash while a run was written leaves) is
	// swept at the restart.
	stray := filepath.Join(dir, "staged", "pg", "snapshot", "00000000000000000000-00000000000000000000-00000000000000aa.arrow")
	if err := os.WriteFile(stray, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}

	second := startProc(t, nil, args...)
	deadline = time.Now().Add(120 * time.Second)
	for !strings.Contains(string(second.stderr.bytes()), `msg="snapshot done"`) {
		if second.exited() || time.Now().After(deadline) {
			t.Fatalf("the second ingest did not finish its snapshot\nstderr:\n%s", second.stderr.bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // writes after the snapshot too
	halt()
	log := string(second.stderr.bytes())
	m := stagedLineRe.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no snapshot staged line in the second run's log:\n%s", log)
	}
	copied, _ := strconv.ParseInt(m[1], 10, 64)
	resumed, _ := strconv.ParseInt(m[2], 10, 64)
	frac := float64(copied) / float64(copied+resumed)
	t.Logf("second run: %d rows copied again, %d resumed: %.1f%% of the snapshot copied again; %d writes", copied, resumed, 100*frac, writes.Load())
	anew := strings.Contains(log, "copying anew")
	if resumed != doneRows && !anew {
		t.Errorf("the second run resumed %d rows, the record had %d", resumed, doneRows)
	}
	if m := regexp.MustCompile(`msg="snapshot resumed".* stray_files_removed=(\d+)`).FindStringSubmatch(log); m == nil || m[1] == "0" {
		t.Errorf("the restart did not sweep the stray staged file: %v", m)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray staged file after the restart: %v", err)
	}
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
		t.Fatalf("second ingest after SIGTERM: exit %d\nstderr:\n%s", code, second.stderr.bytes())
	}
	if _, err := os.Stat(filepath.Join(dir, "staged", "pg", "snapshot")); !os.IsNotExist(err) {
		left, _ := os.ReadDir(filepath.Join(dir, "staged", "pg", "snapshot"))
		t.Errorf("the snapshot's staged directory is still there after its commit (%d files): %v", len(left), err)
	}
	t.Logf("%d rows upstream, exact at %d", len(want), at)
	return frac, log
}
