package main

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// readRows reads collection as of t, every user column as text joined
// by "|" (null as "NULL"), one line per copy of a row, sorted.
func readRows(ctx context.Context, dir, collection string, t uint64) ([]string, error) {
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if err != nil {
		return nil, err
	}
	sh, err := st.Shard(ctx, collection)
	if err != nil {
		return nil, err
	}
	rec, err := sh.ReadAsOf(ctx, t)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	diffs := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
	var out []string
	for i := 0; i < int(rec.NumRows()); i++ {
		var cells []string
		for c := 0; c < int(rec.NumCols())-1; c++ {
			v := rec.Column(c).ValueStr(i)
			if rec.Column(c).IsNull(i) {
				v = "NULL"
			}
			cells = append(cells, v)
		}
		for n := int64(0); n < diffs.Value(i); n++ {
			out = append(out, strings.Join(cells, "|"))
		}
	}
	slices.Sort(out)
	return out, nil
}

// selectRows is readRows of the table upstream: each column as its text.
func selectRows(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(ctxT(t), `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, c := range cols {
		exprs = append(exprs, "coalesce("+pgx.Identifier{c}.Sanitize()+"::text, 'NULL')")
	}
	rows, err = conn.Query(ctxT(t), "SELECT concat_ws('|', "+strings.Join(exprs, ", ")+") FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// bindingReads reads both bank collections at every binding time of
// source where both are readable (a read failing with a definite error
// is read as that error).
func bindingReads(t *testing.T, dir, source string) map[uint64]string {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctxT(t), source)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]string{}
	for _, b := range bs {
		var parts []string
		for _, c := range []string{"public.acc_a", "public.acc_b"} {
			rows, err := readRows(ctxT(t), dir, c, b.Time)
			if _, ok := errors.AsType[*store.NotReadableError](err); ok {
				parts = nil
				break
			}
			if err != nil {
				rows = []string{"error: " + err.Error()}
			}
			parts = append(parts, c+": "+strings.Join(rows, " "))
		}
		if parts != nil {
			out[b.Time] = strings.Join(parts, "\n")
		}
	}
	return out
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
	lay := fx.Layout(source)
	dir := filepath.Join(t.TempDir(), "store")
	args := append(fx.IngestArgs(dir, source), "--interval", "20ms")
	p := runBin(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	same := func(what string, at uint64) {
		t.Helper()
		for _, c := range []string{"public.acc_a", "public.acc_b"} {
			got, err := readRows(ctxT(t), dir, c, at)
			if err != nil {
				t.Fatalf("%s: read %s as of %d: %v\nstderr:\n%s", what, c, at, err, p.Stderr())
			}
			if want := selectRows(t, db.conn, c); !slices.Equal(got, want) {
				t.Fatalf("%s: %s as of %d:\n%q\nwant (SELECT *):\n%q\nstderr:\n%s", what, c, at, got, want, p.Stderr())
			}
		}
	}
	t0 := waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	before := selectRows(t, db.conn, "public.acc_a")

	// While the ingest runs: a column with a default, then a change of
	// both tables in one transaction.
	execAll(t, db.conn, "ALTER TABLE acc_a ADD COLUMN note text NOT NULL DEFAULT 'n'",
		"BEGIN", "UPDATE acc_a SET balance = balance + 1, note = 'x' WHERE id = 1", "UPDATE acc_b SET balance = balance - 1 WHERE id = 1", "COMMIT")
	t1 := waitRecent(t, p, fx.dsn, dir, "public.acc_a")
	same("after ADD COLUMN", t1)
	if got, err := readRows(ctxT(t), dir, "public.acc_a", t0); err != nil || !slices.Equal(got, before) {
		t.Fatalf("as of %d, before the change: %q, %v; want the old rows in the old columns %q", t0, got, err, before)
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
