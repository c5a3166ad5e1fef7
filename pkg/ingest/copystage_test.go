package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// pgTotals are a table's row count, sum of id and sum of length(v).
type pgTotals struct{ rows, ids, lens int64 }

// storeTotals reads coll's pgTotals from st at its latest time.
func storeTotals(t *testing.T, st *store.Store, coll string) (pgTotals, bool) {
	t.Helper()
	sh, err := st.Shard(t.Context(), coll)
	if errors.Is(err, store.ErrNotFound) {
		return pgTotals{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Refresh(t.Context()); err != nil || sh.Upper() == 0 {
		return pgTotals{}, false
	}
	rec, err := sh.ReadAsOf(t.Context(), sh.Upper()-1)
	if err != nil {
		return pgTotals{}, false
	}
	defer rec.Release()
	ids, vs := rec.Column(0).(*array.Int32), rec.Column(1).(*array.String)
	diffs := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
	var got pgTotals
	for i := 0; i < int(rec.NumRows()); i++ {
		d := diffs.Value(i)
		got.rows += d
		got.ids += d * int64(ids.Value(i))
		got.lens += d * int64(len(vs.Value(i)))
	}
	return got, true
}

// pgTable is a database with table t (id int PRIMARY KEY, v text) in
// publication p, and a store to ingest it into with slot slot.
type pgTable struct {
	dsn, slot string
	conn      *pgx.Conn
	st        *store.Store
}

func newPGTable(t *testing.T, slot string, setup ...string) *pgTable {
	t.Helper()
	dsn := testenv.SharedPostgres(t).CreateDatabase(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	t.Cleanup(func() { dropSlot(dsn, slot) })
	pt := &pgTable{dsn: dsn, slot: slot, conn: conn, st: openStore(t)}
	pt.exec(t, append([]string{"CREATE TABLE t (id int PRIMARY KEY, v text)", "CREATE PUBLICATION p FOR TABLE t"}, setup...)...)
	return pt
}

func (pt *pgTable) exec(t *testing.T, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := pt.conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// totals are the table's upstream.
func (pt *pgTable) totals(t *testing.T) pgTotals {
	t.Helper()
	var w pgTotals
	if err := pt.conn.QueryRow(t.Context(), "SELECT count(*), coalesce(sum(id), 0), coalesce(sum(length(v)), 0) FROM t").Scan(&w.rows, &w.ids, &w.lens); err != nil {
		t.Fatal(err)
	}
	return w
}

// pgRun is an ingest of a pgTable running in the background.
type pgRun struct {
	logs   testenv.LogBuffer
	cancel context.CancelFunc
	done   chan error
}

func (pt *pgTable) start(cfg PGConfig) *pgRun {
	r := &pgRun{done: make(chan error, 1)}
	cfg.Upstream, cfg.Publication, cfg.Slot = upstream.MustParsePostgres(pt.dsn), "p", pt.slot
	cfg.Logger = slog.New(slog.NewTextHandler(&r.logs, nil))
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go func() {
		r.done <- Run(ctx, NewPG(cfg), pt.st, Options{Interval: 20 * time.Millisecond, CompactEvery: -1, Logger: cfg.Logger})
	}()
	return r
}

// wait waits until the store holds the table as upstream has it now and
// until says so of the log.
func (r *pgRun) wait(t *testing.T, pt *pgTable, until func(log string) bool) {
	t.Helper()
	want := pt.totals(t)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, ok := storeTotals(t, pt.st, "public.t")
		if ok && got == want && until(r.logs.String()) {
			return
		}
		if time.Now().After(deadline) {
			r.stop(t)
			t.Fatalf("after 90s the store has %+v (ok %v), upstream %+v; log:\n%s", got, ok, want, r.logs.String())
		}
	}
}

// stop stops the ingest and returns its log.
func (r *pgRun) stop(t *testing.T) string {
	t.Helper()
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
		if err := <-r.done; err != nil {
			t.Errorf("ingest: %v\nlog:\n%s", err, r.logs.String())
		}
	}
	return r.logs.String()
}

// TestPGResnapshotStagedInRuns: a --resnapshot of a table several copy
// records large, with a small copy budget, stages the copy in more than
// one run and never holds more than one copy record's rows in memory (so
// never the whole table), and the collection is exact after it; no
// staged copy file is left once it is committed.
func TestPGResnapshotStagedInRuns(t *testing.T) {
	const rows = 3*snapshot.DefaultBatchRows + 1000
	pt := newPGTable(t, "rtr_resnap_runs", "ALTER TABLE t REPLICA IDENTITY FULL",
		fmt.Sprintf("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, %d) g", rows))
	r := pt.start(PGConfig{})
	r.wait(t, pt, func(string) bool { return true })
	r.stop(t)
	pt.exec(t, "UPDATE t SET v = 'changed' WHERE id % 1000 = 0", "DELETE FROM t WHERE id % 999 = 0")
	done := regexp.MustCompile(`msg="re-snapshot done".* rows=(\d+) .*runs=(\d+) rows_held_peak=(\d+)`)
	r = pt.start(PGConfig{Resnapshot: []string{"public.t"}, CopyMemory: 64 << 10})
	r.wait(t, pt, done.MatchString)
	m := done.FindStringSubmatch(r.stop(t))
	copied, _ := strconv.Atoi(m[1])
	runs, _ := strconv.Atoi(m[2])
	peak, _ := strconv.Atoi(m[3])
	if want := int(pt.totals(t).rows); copied != want {
		t.Errorf("the re-snapshot copied %d rows, the table has %d", copied, want)
	}
	if runs < 2 {
		t.Errorf("the copy of %d rows was staged in %d runs, want more than one (a 64 KiB budget)", copied, runs)
	}
	// The copy comes in records of at most DefaultBatchRows rows; each
	// one passes the budget, so at most one is held.
	if peak > snapshot.DefaultBatchRows || peak >= copied {
		t.Errorf("the copy held %d rows in memory at once, want at most one copy record's (%d) of the %d", peak, snapshot.DefaultBatchRows, copied)
	}
	st := pt.st
	files, err := os.ReadDir(filepath.Join(st.Dir(), "staged", "pg", "copies"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(files) > 0 {
		t.Errorf("%d staged copy files left after the commit: %v", len(files), files)
	}
	t.Logf("%d rows copied in %d runs, at most %d held", copied, runs, peak)
}

// TestPGResnapshotInterrupted is TestMySQLIngestResnapshotInterrupted
// for PostgreSQL: the re-snapshot's copy waits, creating the slot of its
// snapshot, for a transaction with an xid to end; with its walsender
// terminated, or the ingest stopped, it is copied again and the
// collection ends exact.
func TestPGResnapshotInterrupted(t *testing.T) {
	pt := newPGTable(t, "rtr_resnap_cut", "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")
	blocker, err := pgx.Connect(t.Context(), pt.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(context.Background())
	query := func(c *pgx.Conn, qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := c.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	r := pt.start(PGConfig{})
	t.Cleanup(func() { r.stop(t) })
	r.wait(t, pt, func(string) bool { return true })
	// blockedCopy makes the change alter ask for a re-snapshot while a
	// transaction holds an xid, and returns the pid of the copy's
	// walsender, waiting for it to end.
	blockedCopy := func(alter string) int {
		t.Helper()
		query(blocker, "BEGIN", "SELECT txid_current()")
		pt.exec(t, alter, "UPDATE t SET v = v || 'x' WHERE id % 10 = 0")
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var pid int
			err := pt.conn.QueryRow(t.Context(), "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'walsender' AND query LIKE 'CREATE_REPLICATION_SLOT%' AND wait_event IS NOT NULL").Scan(&pid)
			if err == nil {
				return pid
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
		}
		t.Fatal("no re-snapshot copy waits to create its slot")
		return 0
	}
	done := func(n int) func(string) bool {
		return func(log string) bool { return strings.Count(log, `msg="re-snapshot done"`) >= n }
	}
	pid := blockedCopy("ALTER TABLE t ADD COLUMN w int")
	pt.exec(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
	query(blocker, "COMMIT")
	r.wait(t, pt, done(1))
	blockedCopy("ALTER TABLE t ADD COLUMN x int")
	r.stop(t)
	query(blocker, "COMMIT")
	r = pt.start(PGConfig{})
	r.wait(t, pt, done(1))
}

// TestPGResnapshotStagingFails: a re-snapshot whose copy cannot be
// staged (the store's copies directory is a file) fails the ingest with
// the cause, and records nothing: the collection has no definite error,
// and once the directory can be written the restarted ingest copies again
// and the collection ends exact.
func TestPGResnapshotStagingFails(t *testing.T) {
	pt := newPGTable(t, "rtr_resnap_disk", "ALTER TABLE t REPLICA IDENTITY FULL", "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")
	r := pt.start(PGConfig{})
	t.Cleanup(func() { r.stop(t) })
	r.wait(t, pt, func(string) bool { return true })
	// A change streamed: the copies directory was swept at the start.
	pt.exec(t, "UPDATE t SET v = v || 's' WHERE id = 1")
	r.wait(t, pt, func(string) bool { return true })
	copies := filepath.Join(pt.st.Dir(), "staged", "pg", "copies")
	if err := os.RemoveAll(copies); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(copies), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copies, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pt.exec(t, "ALTER TABLE t ADD COLUMN w int", "UPDATE t SET v = v || 'x' WHERE id % 10 = 0")
	select {
	case err := <-r.done:
		r.cancel = nil
		if err == nil || !strings.Contains(err.Error(), "stage the copy") {
			t.Fatalf("ingest with an unwritable copies directory: %v, want a staging error\nlog:\n%s", err, r.logs.String())
		}
		t.Logf("the ingest failed: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the ingest did not fail\nlog:\n%s", r.logs.String())
	}
	if strings.Contains(r.logs.String(), "definite error") {
		t.Errorf("a definite error was recorded:\n%s", r.logs.String())
	}
	if err := os.Remove(copies); err != nil {
		t.Fatal(err)
	}
	r = pt.start(PGConfig{})
	r.wait(t, pt, func(log string) bool { return strings.Contains(log, `msg="re-snapshot done"`) })
}

// TestPGResnapshotKeyedStateOnDisk: the re-snapshot of a REPLICA
// IDENTITY DEFAULT table after ADD COLUMN reads the table's new key state
// from the staged copy straight into the state on disk: the state has
// every key and its overlay in memory is empty (in memory it would take
// some 60 bytes a key); the collection is exact after it and after
// changes through that state (updates, a key change, deletes).
func TestPGResnapshotKeyedStateOnDisk(t *testing.T) {
	const rows = 50_000
	pt := newPGTable(t, "rtr_resnap_keyed", fmt.Sprintf("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, %d) g", rows))
	r := pt.start(PGConfig{})
	t.Cleanup(func() { r.stop(t) })
	r.wait(t, pt, func(string) bool { return true })
	pt.exec(t, "ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7", "UPDATE t SET v = 'after' WHERE id <= 10")
	done := regexp.MustCompile(`msg="re-snapshot done".* keys=(\d+) bytes=(\d+) `)
	r.wait(t, pt, done.MatchString)
	m := done.FindStringSubmatch(r.logs.String())
	keys, _ := strconv.Atoi(m[1])
	bytes, _ := strconv.Atoi(m[2])
	if keys != rows || bytes >= keys {
		t.Errorf("the re-snapshot's key state: %d keys (want %d), %d bytes in memory (want less than a byte a key: on disk)", keys, rows, bytes)
	}
	pt.exec(t, "UPDATE t SET v = 'later', c = 8 WHERE id % 100 = 0", "UPDATE t SET id = id + 1000000 WHERE id = 77", "DELETE FROM t WHERE id % 1000 = 1")
	r.wait(t, pt, func(string) bool { return true })
	if !regexp.MustCompile(`msg="key state (created|reused|caught up|rebuilt)`).MatchString(r.logs.String()) {
		t.Errorf("the state was not on disk to begin with:\n%s", r.logs.String())
	}
}

// TestMySQLResnapshotStagedInRuns is TestPGResnapshotStagedInRuns for
// MariaDB: the copy's staged runs are bound in the GTID domain of the
// re-snapshot's transaction (a partitioned time domain).
func TestMySQLResnapshotStagedInRuns(t *testing.T) {
	const rows = 3*snapshot.DefaultBatchRows + 1000
	m, db, c := myDatabase(t)
	myQuery(t, c, "CREATE TABLE t (id int PRIMARY KEY, v varchar(20))", fmt.Sprintf("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_%d", rows))
	coll := db + ".t"
	st := openStore(t)
	totals := func() pgTotals {
		t.Helper()
		r, err := c.Execute("SELECT count(*), coalesce(sum(id), 0), coalesce(sum(length(v)), 0) FROM t")
		if err != nil {
			t.Fatal(err)
		}
		var w pgTotals
		w.rows, _ = r.GetInt(0, 0)
		w.ids, _ = r.GetInt(0, 1)
		w.lens, _ = r.GetInt(0, 2)
		return w
	}
	run := func(cfg MySQLConfig, during func(), until func(string) bool) string {
		t.Helper()
		var logs testenv.LogBuffer
		cfg.Upstream, cfg.Tables, cfg.Logger = upstream.MustParseMySQL(m.URL()), []string{coll}, slog.New(slog.NewTextHandler(&logs, nil))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, NewMySQL(cfg), st, Options{Interval: 20 * time.Millisecond, CompactEvery: -1, Logger: cfg.Logger})
		}()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ingest: %v\nlog:\n%s", err, logs.String())
			}
		}
		defer stop()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if during != nil && strings.Contains(logs.String(), "msg=resume") {
				during()
				during = nil
			}
			got, ok := storeTotals(t, st, coll)
			if want := totals(); during == nil && ok && got == want && until(logs.String()) {
				return logs.String()
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 90s the store has %+v (ok %v), upstream %+v; log:\n%s", got, ok, totals(), logs.String())
			}
		}
	}
	run(MySQLConfig{}, nil, func(string) bool { return true })
	// The re-snapshot starts at the stream's next transaction.
	done := regexp.MustCompile(`msg="re-snapshot done".* rows=(\d+) .*runs=(\d+) rows_held_peak=(\d+)`)
	log := run(MySQLConfig{Resnapshot: []string{coll}, CopyMemory: 64 << 10}, func() {
		myQuery(t, c, "UPDATE t SET v = 'changed' WHERE id % 1000 = 0", "DELETE FROM t WHERE id % 999 = 0")
	}, done.MatchString)
	mm := done.FindStringSubmatch(log)
	copied, _ := strconv.Atoi(mm[1])
	runs, _ := strconv.Atoi(mm[2])
	peak, _ := strconv.Atoi(mm[3])
	if runs < 2 || peak > snapshot.DefaultBatchRows || peak >= copied {
		t.Errorf("the copy of %d rows: %d runs (want more than one), at most %d rows held (want at most %d)", copied, runs, peak, snapshot.DefaultBatchRows)
	}
	t.Logf("%d rows copied in %d runs, at most %d held", copied, runs, peak)
}
