package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// readRows reads collection as of t (ingesttest.Rows form).
func readRows(ctx context.Context, dir, collection string, t uint64) (map[string]int64, error) {
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if err != nil {
		return nil, err
	}
	sh, err := st.Shard(ctx, collection)
	if err != nil {
		return nil, err
	}
	return ingesttest.ReadRows(ctx, sh, t)
}

// selectAll is readRows of the table upstream, in its columns now.
func selectAll(t *testing.T, db *ingestDB, table string) map[string]int64 {
	t.Helper()
	rows, err := db.conn.Query(ctxT(t), `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return db.selectRows(t, table, cols...)
}

// bindingReads reads both bank collections (colls, by default
// PostgreSQL's) at every binding time of source where both are readable
// (a read failing with a definite error is read as that error).
func bindingReads(t *testing.T, dir, source string, colls ...string) map[uint64]string {
	t.Helper()
	bs := storeBindings(t, dir, source)
	out := map[uint64]string{}
	for _, b := range bs {
		var parts []string
		if len(colls) == 0 {
			colls = []string{"public.acc_a", "public.acc_b"}
		}
		for _, c := range colls {
			rows, err := readRows(ctxT(t), dir, c, b.Time)
			if _, ok := errors.AsType[*store.NotReadableError](err); ok {
				parts = nil
				break
			}
			if err != nil {
				rows = map[string]int64{"error: " + err.Error(): 1}
			}
			parts = append(parts, fmt.Sprintf("%s: %v", c, rows))
		}
		if parts != nil {
			out[b.Time] = strings.Join(parts, "\n")
		}
	}
	return out
}

// storeBindings are source's bindings in the store dir.
func storeBindings(t *testing.T, dir, source string) []frontier.Binding {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctxT(t), source)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// startCaughtUp starts an ingest of fx as source into a new store and
// waits until the store equals the upstream; it returns the store, the
// ingest's arguments (to start it again) and the process.
func startCaughtUp(t *testing.T, fx ingesttest.Fixture, source string) (string, []string, ingesttest.Proc) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	args := append(fx.IngestArgs(dir, source), "--interval", "20ms")
	p := runBin(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, fx.Layout(source), p, 60*time.Second)
	return dir, args, p
}

// waitRecent is the store's wait-recent answer for collection's source.
func waitRecent(t *testing.T, p ingesttest.Proc, dsn, dir, collection string) uint64 {
	t.Helper()
	password := ""
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		password, _ = u.User.Password()
	}
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := recency.Wait(ctxT(t), st, recency.Options{Collection: collection, Timeout: 30 * time.Second, Recorded: recordedProber, Password: password, WaitForIngest: true})
	if err != nil {
		t.Fatalf("wait-recent for %s: %v\nstderr:\n%s", collection, err, p.Stderr())
	}
	return res.Time
}

// TestIngestSchemaChanges: columns added (with a default), dropped and
// retyped upstream, while the ingest runs and while it is stopped, are
// followed: the collection is re-snapshotted at the change's commit, a
// read at the wait-recent answer after it equals SELECT * in the new
// columns, reads before it are unchanged, the other table goes on (also
// in the change's own transaction), and reads at every binding replay
// identically after a SIGKILL. --resnapshot copies a collection again
// where the ingest resumes, exact, without changing earlier reads.
func TestIngestSchemaChanges(t *testing.T) {
	fx, db := newPGBank(t)
	const source = "sc"
	dir, args, p := startCaughtUp(t, fx, source)
	same := func(what string, at uint64) {
		t.Helper()
		for _, c := range []string{"public.acc_a", "public.acc_b"} {
			got, err := readRows(ctxT(t), dir, c, at)
			if err != nil {
				t.Fatalf("%s: read %s as of %d: %v\nstderr:\n%s", what, c, at, err, p.Stderr())
			}
			if want := selectAll(t, db, c); !maps.Equal(got, want) {
				t.Fatalf("%s: %s as of %d:\n%v\nwant (SELECT *):\n%v\nstderr:\n%s", what, c, at, got, want, p.Stderr())
			}
		}
	}
	t0 := waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	before := selectAll(t, db, "public.acc_a")

	// While the ingest runs: a column with a default, then a change of
	// both tables in one transaction.
	execAll(t, db.conn, "ALTER TABLE acc_a ADD COLUMN note text NOT NULL DEFAULT 'n'",
		"BEGIN", "UPDATE acc_a SET balance = balance + 1, note = 'x' WHERE id = 1", "UPDATE acc_b SET balance = balance - 1 WHERE id = 1", "COMMIT")
	t1 := waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	same("after ADD COLUMN", t1)
	if got, err := readRows(ctxT(t), dir, "public.acc_a", t0); err != nil || !maps.Equal(got, before) {
		t.Fatalf("as of %d, before the change: %v, %v; want the old rows in the old columns %v", t0, got, err, before)
	}
	execAll(t, db.conn, "ALTER TABLE acc_a ALTER COLUMN balance TYPE integer", "UPDATE acc_a SET note = 'y' WHERE id = 2")
	same("after a type change", waitRecent(t, p, fx.dsn, dir, "public.acc_a"))

	// While it is stopped.
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	execAll(t, db.conn, "ALTER TABLE acc_a DROP COLUMN note", "INSERT INTO acc_a VALUES (100, 5)", "ALTER TABLE acc_b ADD COLUMN extra int", "UPDATE acc_b SET extra = 7 WHERE id = 3")
	p = runBin(t, nil, args...)
	same("after changes made while stopped", waitRecent(t, p, fx.dsn, dir, "public.acc_a"))

	// SIGKILL: every binding reads the same afterwards.
	readsBefore := bindingReads(t, dir, source)
	p.Kill(t)
	p = runBin(t, nil, args...)
	execAll(t, db.conn, "UPDATE acc_a SET balance = balance + 3 WHERE id = 3")
	same("after a SIGKILL", waitRecent(t, p, fx.dsn, dir, "public.acc_a"))
	readsAfter := bindingReads(t, dir, source)
	n := 0
	for at, want := range readsBefore {
		if got, ok := readsAfter[at]; ok && got != want {
			t.Fatalf("after the SIGKILL, the read at binding %d changed:\n%s\nwas:\n%s", at, got, want)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no binding read before the SIGKILL")
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}

	// --resnapshot: the collection is copied again where the ingest
	// resumes, and stays exact; reads before are unchanged.
	execAll(t, db.conn, "UPDATE acc_b SET balance = balance + 1 WHERE id = 5")
	readsBefore = bindingReads(t, dir, source)
	p = runBin(t, nil, append(args, "--resnapshot", "public.acc_b")...)
	same("after --resnapshot", waitRecent(t, p, fx.dsn, dir, "public.acc_a"))
	if code := p.Stop(t); code != 0 || !strings.Contains(p.Stderr(), "re-snapshot done") {
		t.Fatalf("ingest --resnapshot: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	readsAfter = bindingReads(t, dir, source)
	for at, want := range readsBefore {
		if got, ok := readsAfter[at]; ok && got != want {
			t.Fatalf("after --resnapshot, the read at binding %d changed:\n%s\nwas:\n%s", at, got, want)
		}
	}
}

// TestIngestTablesAddedAndRemoved: a table added to the publication while
// the ingest runs under a write load is snapshotted in the stream, and a
// wait-recent issued right after the ALTER PUBLICATION includes it,
// exactly; a table removed from the publication gets a definite error,
// and added back it is snapshotted again (which clears the error).
func TestIngestTablesAddedAndRemoved(t *testing.T) {
	fx, db := newPGBank(t)
	const source = "add"
	lay := fx.Layout(source)
	dir, _, p := startCaughtUp(t, fx, source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	execAll(t, db.conn, "CREATE TABLE acc_c (id int PRIMARY KEY, v text)", "ALTER TABLE acc_c REPLICA IDENTITY FULL",
		"INSERT INTO acc_c SELECT g, 'v' || g FROM generate_series(1, 50) g")
	began := time.Now()
	execAll(t, db.conn, "ALTER PUBLICATION rtr ADD TABLE acc_c")
	at := waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	took := time.Since(began)
	got, err := readRows(ctxT(t), dir, "public.acc_c", at)
	if err != nil {
		t.Fatalf("read the added table at the wait-recent answer after the ALTER: %v\nstderr:\n%s", err, p.Stderr())
	}
	if want := selectAll(t, db, "public.acc_c"); !maps.Equal(got, want) {
		t.Fatalf("public.acc_c at %d: %v, want %v", at, got, want)
	}
	t.Logf("the added table was readable at a wait-recent answer %s after the ALTER PUBLICATION (under a write load: %d transactions so far)", took.Round(time.Millisecond), log.Len())
	execAll(t, db.conn, "UPDATE acc_c SET v = 'x' WHERE id < 10", "DELETE FROM acc_c WHERE id > 40", "INSERT INTO acc_c VALUES (99, NULL)")
	at = waitRecent(t, p, fx.dsn, dir, "public.acc_c")
	if got, err := readRows(ctxT(t), dir, "public.acc_c", at); err != nil || !maps.Equal(got, selectAll(t, db, "public.acc_c")) {
		t.Fatalf("public.acc_c after changes: %v, %v; want %v", got, err, selectAll(t, db, "public.acc_c"))
	}

	// Removed: a definite error from where the stream was.
	execAll(t, db.conn, "ALTER PUBLICATION rtr DROP TABLE acc_c", "UPDATE acc_c SET v = 'gone' WHERE id = 1")
	at = waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	var de *store.DefiniteError
	if _, err := readRows(ctxT(t), dir, "public.acc_c", at); !errors.As(err, &de) || !strings.Contains(de.Message, "removed from publication") {
		t.Fatalf("read the removed table at %d: %v, want its definite error", at, err)
	}
	// Added back: snapshotted again, the error cleared from then on.
	execAll(t, db.conn, "ALTER PUBLICATION rtr ADD TABLE acc_c")
	at = waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	if got, err := readRows(ctxT(t), dir, "public.acc_c", at); err != nil || !maps.Equal(got, selectAll(t, db, "public.acc_c")) {
		t.Fatalf("public.acc_c added back: %v, %v; want %v\nstderr:\n%s", got, err, selectAll(t, db, "public.acc_c"), p.Stderr())
	}
	w.Halt(t)
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	ingesttest.WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
}

// TestIngestTypeChangesUnderLoad is TestMySQLIngestTypeChangesUnderLoad
// for PostgreSQL: under bank transfers over both tables, a column type
// change made while the ingest runs, one followed at once by a SIGKILL,
// and one made while the ingest is stopped are each a re-snapshot at the
// change: every binding time reads exactly the upstream after the
// transactions it covers (a transaction over both tables is whole across
// each change), and the other table keeps flowing.
func TestIngestTypeChangesUnderLoad(t *testing.T) {
	fx, db := newPGBank(t)
	const source = "pgload"
	lay := fx.Layout(source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	dir, args, p := startCaughtUp(t, fx, source)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	waitLog(log, 20)
	execAll(t, db.conn, "ALTER TABLE acc_a ALTER COLUMN id TYPE bigint")
	ingesttest.WaitStderr(t, p, "re-snapshot done")
	waitLog(log, 20)
	// A SIGKILL right after the next change: its re-snapshot may or may
	// not have started.
	execAll(t, db.conn, "ALTER TABLE acc_b ALTER COLUMN balance TYPE numeric(20,0)")
	waitLog(log, 5)
	p.Kill(t)
	waitLog(log, 20)
	p = runBin(t, nil, args...)
	waitLog(log, 20)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	// While stopped: rows in the old column type before the change, then
	// in the new one.
	waitLog(log, 20)
	execAll(t, db.conn, "ALTER TABLE acc_a ALTER COLUMN id TYPE int")
	waitLog(log, 20)
	p = runBin(t, nil, args...)
	waitLog(log, 20)
	haltExact(t, w, p, dir, source, lay, log)
	if n := strings.Count(p.Stderr(), "re-snapshot done"); n == 0 {
		t.Errorf("no re-snapshot after the change made while stopped:\n%s", p.Stderr())
	}
}
