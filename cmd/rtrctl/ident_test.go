package main

// The identifier matrix (docs/naming.md): tables with quoted, mixed-case,
// dotted, quoting, spaced, unicode and maximum-length names, one name in
// three schemas or databases, and pairs whose naive schema.table names
// collide, ingested from PostgreSQL and MariaDB: every table lands exactly
// (snapshot and replicated changes), under its documented collection
// name, each name distinct.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// identTable is a table of the matrix: schema (database) and name as the
// catalog has them, and the collection name docs/naming.md gives it.
type identTable struct{ schema, name, coll string }

// identRows are the rows a table starts with: distinct per table, so that
// one table's rows under another's name show.
func identRows(i int) map[string]int64 {
	out := map[string]int64{}
	for id := 1; id <= 5; id++ {
		out[fmt.Sprintf("%d|t%d-init-%d", id, i, id)] = 1
	}
	return out
}

// identIngest is an in-process ingest of the matrix.
type identIngest struct {
	dir    string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
}

// runIdentIngest runs src into a new store in dir until stop is called
// (or the test ends).
func runIdentIngest(t *testing.T, src ingest.Source, dir string) *identIngest {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ing := &identIngest{dir: dir, cancel: cancel, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		defer close(ing.done)
		ing.err = ingest.Run(ctx, src, st, ingest.Options{Interval: 20 * time.Millisecond, CompactEvery: -1, Logger: log})
	}()
	t.Cleanup(func() { ing.stop(t) })
	return ing
}

// stop ends the ingest; an error other than the cancellation fails t.
func (ing *identIngest) stop(t *testing.T) {
	t.Helper()
	ing.once.Do(func() {
		ing.cancel()
		<-ing.done
		if ing.err != nil && !errors.Is(ing.err, context.Canceled) {
			t.Errorf("ingest into %s: %v", ing.dir, ing.err)
		}
	})
}

// waitSnapshot waits until every collection of tables is durable past the
// first binding of source: the snapshot is in.
func (ing *identIngest) waitSnapshot(t *testing.T, source string, tables []identTable) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-ing.done:
			t.Fatalf("ingest into %s ended before its snapshot was in: %v", ing.dir, ing.err)
		default:
		}
		if st, err := store.Open(ctxT(t), ing.dir, store.Options{MustExist: true}); err == nil {
			if bs, _, err := st.Bindings(ctxT(t), source); err == nil && len(bs) > 0 {
				ok := true
				for _, tb := range tables {
					sh, err := st.Shard(ctxT(t), tb.coll)
					if err != nil || sh.Refresh(ctxT(t)) != nil || sh.Upper() <= bs[0].Time {
						ok = false
						break
					}
				}
				if ok {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot of %s did not become durable within 90 s", ing.dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkIdentStore checks the store in dir: its collections are exactly the
// documented names, each holds its table's initial rows at the first
// binding (the snapshot) and the upstream's current rows at the end.
func checkIdentStore(t *testing.T, dir, source string, tables []identTable, upstreamRows func(identTable) map[string]int64) {
	t.Helper()
	ctx := ctxT(t)
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Collections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tb := range tables {
		want = append(want, tb.coll)
	}
	slices.Sort(want)
	if len(slices.Compact(slices.Clone(want))) != len(want) {
		t.Fatalf("the documented collection names are not distinct: %q", want)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("collections\n  %q\nwant\n  %q", got, want)
	}
	bs, _, err := st.Bindings(ctx, source)
	if err != nil || len(bs) == 0 {
		t.Fatalf("bindings of %s: %v, %v", source, bs, err)
	}
	for i, tb := range tables {
		rows, err := identRead(ctx, st, tb.coll, bs[0].Time)
		if err != nil {
			t.Fatalf("read %s as of the first binding: %v", tb.coll, err)
		}
		if !maps.Equal(rows, identRows(i)) {
			t.Errorf("%s at the first binding (the snapshot) is %v, the table's rows %v", tb.coll, rows, identRows(i))
		}
	}
	last, err := identLatest(ctx, st, tables)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if want := upstreamRows(tb); !maps.Equal(last[tb.coll], want) {
			t.Errorf("%s at the end is %v, SELECT gives %v", tb.coll, last[tb.coll], want)
		}
	}
}

// identRead reads collection as of t: "id|v" -> multiplicity.
func identRead(ctx context.Context, st *store.Store, collection string, t uint64) (map[string]int64, error) {
	sh, err := st.Shard(ctx, collection)
	if err != nil {
		return nil, err
	}
	if err := sh.Refresh(ctx); err != nil {
		return nil, err
	}
	return ingesttest.ReadRows(ctx, sh, t)
}

// identLatest reads every table's collection as of the last time all of
// them are durable.
func identLatest(ctx context.Context, st *store.Store, tables []identTable) (map[string]map[string]int64, error) {
	var colls []string
	for _, tb := range tables {
		colls = append(colls, tb.coll)
	}
	upper, err := st.LeastUpper(ctx, colls)
	if err != nil || upper == 0 {
		return nil, fmt.Errorf("least upper of the matrix: %d, %w", upper, err)
	}
	out := map[string]map[string]int64{}
	for _, c := range colls {
		if out[c], err = identRead(ctx, st, c, upper-1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// identWait waits until every table's collection equals its upstream
// rows.
func identWait(t *testing.T, dir string, tables []identTable, upstreamRows func(identTable) map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
		if err == nil {
			var last map[string]map[string]int64
			if last, err = identLatest(ctxT(t), st, tables); err == nil {
				same := true
				for _, tb := range tables {
					same = same && maps.Equal(last[tb.coll], upstreamRows(tb))
				}
				if same {
					return
				}
				err = errors.New("not equal yet")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store in %s did not reach the tables' rows within 60 s: %v", dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// identChanges are the changes made to table i after the snapshot, as
// statements on the table named by sql: inserts, an update and a delete.
func identChanges(i int, sql string) []string {
	return []string{
		fmt.Sprintf("INSERT INTO %s (id, v) VALUES (6, 't%d-new-6'), (7, 't%d-new-7')", sql, i, i),
		fmt.Sprintf("UPDATE %s SET v = 't%d-upd-1' WHERE id = 1", sql, i),
		fmt.Sprintf("DELETE FROM %s WHERE id = 2", sql),
		fmt.Sprintf("UPDATE %s SET v = 't%d-upd-7' WHERE id = 7", sql, i),
	}
}

// TestIngestIdentifiersPostgres ingests the matrix from PostgreSQL twice:
// every table of the publication, and the tables named on --tables by
// their collection names (through the flag's parser).
func TestIngestIdentifiersPostgres(t *testing.T) {
	upperCyr := "Т" + strings.Repeat("ж", 30) + "X" // 63 bytes
	lowerCyr := strings.Repeat("ж", 31) + "_"       // 63 bytes
	quotes := strings.Repeat(`"`, 63)               // 63 bytes, 128 quoted
	tables := []identTable{
		{"public", "plain", "public.plain"},
		{"public", "RelMix", `public."RelMix"`},
		{"public", "relmix", "public.relmix"},
		{"a.b", "c", `"a.b".c`},
		{"a", "b.c", `a."b.c"`},
		{"public", "space table", `public."space table"`},
		{"MixedCase", "MixedTable", `"MixedCase"."MixedTable"`},
		{"public", `q"uote`, `public."q""uote"`},
		{"public", "a,b", `public."a,b"`},
		{"public", "user", "public.user"},
		{"public", "таблица", "public.таблица"},
		{"public", upperCyr, `public."` + upperCyr + `"`},
		{"public", strings.Repeat("x", 63), "public." + strings.Repeat("x", 63)},
		{lowerCyr, quotes, lowerCyr + `."` + strings.Repeat(`""`, 63) + `"`},
		{"public", "🙂", `public."🙂"`},
		{"public", "dup", "public.dup"},
		{"s1", "dup", "s1.dup"},
		{"S 2", "dup", `"S 2".dup`},
	}
	sqlName := func(tb identTable) string { return pgx.Identifier{tb.schema, tb.name}.Sanitize() }
	var ddl, pub []string
	schemas := map[string]bool{"public": true}
	for i, tb := range tables {
		if !schemas[tb.schema] {
			schemas[tb.schema] = true
			ddl = append(ddl, "CREATE SCHEMA "+pgx.Identifier{tb.schema}.Sanitize())
		}
		q := sqlName(tb)
		ddl = append(ddl, "CREATE TABLE "+q+" (id int PRIMARY KEY, v text NOT NULL)", "ALTER TABLE "+q+" REPLICA IDENTITY FULL",
			fmt.Sprintf("INSERT INTO %s SELECT g, 't%d-init-' || g FROM generate_series(1, 5) g", q, i))
		pub = append(pub, q)
	}
	ddl = append(ddl, "CREATE PUBLICATION rtr FOR TABLE "+strings.Join(pub, ", "))
	db := newPGDB(t, ddl...)
	pgRows := func(tb identTable) map[string]int64 { return db.selectRows(t, sqlName(tb), "id", "v") }

	var colls []string
	for _, tb := range tables {
		colls = append(colls, tb.coll)
	}
	flagTables, err := pgTables(strings.Join(colls, ","))
	if err != nil || !slices.Equal(flagTables, colls) {
		t.Fatalf("--tables of the collection names = %q, %v; want them back", flagTables, err)
	}
	runs := []struct {
		name   string
		tables []string
	}{{"publication", nil}, {"tables", flagTables}}
	ings := make([]*identIngest, len(runs))
	for i, r := range runs {
		src := ingest.NewPG(ingest.PGConfig{Upstream: upstream.MustParsePostgres(db.dsn), Publication: "rtr", Slot: db.newSlotName(t),
			Tables: r.tables, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ings[i] = runIdentIngest(t, src, t.TempDir()+"/store")
	}
	for _, ing := range ings {
		ing.waitSnapshot(t, "pg", tables)
	}
	// After the snapshots: one transaction over every table, then one per
	// table.
	var all []string
	for i, tb := range tables {
		all = append(all, identChanges(i, sqlName(tb))[:2]...)
	}
	execAll(t, db.conn, "BEGIN; "+strings.Join(all, "; ")+"; COMMIT")
	for i, tb := range tables {
		execAll(t, db.conn, "BEGIN; "+strings.Join(identChanges(i, sqlName(tb))[2:], "; ")+"; COMMIT")
	}
	for i, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			identWait(t, ings[i].dir, tables, pgRows)
			ings[i].stop(t)
			checkIdentStore(t, ings[i].dir, "pg", tables, pgRows)
		})
	}
}

// TestIngestIdentifiersMariaDB ingests the matrix from MariaDB: databases
// and tables with dots, backticks, quotes, spaces, mixed case, Cyrillic
// and 64 characters.
func TestIngestIdentifiersMariaDB(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	base := d.name
	dbDot, dbA, dbMixed, dbSpace := base+"_a.b", base+"_a", base+"_Mixed", base+" sp"
	dbLong := base + "_" + strings.Repeat("y", myarrow.MaxIdentLen-len(base)-1)
	bt := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	upperCyr := "Ж" + strings.Repeat("ж", 63) // 64 characters
	tables := []identTable{
		{base, "plain", base + ".plain"},
		{base, "RelMix", base + ".RelMix"},
		{base, "relmix", base + ".relmix"},
		{dbDot, "c", bt(dbDot) + ".c"},
		{dbA, "b.c", dbA + ".`b.c`"},
		{base, "space table", base + ".`space table`"},
		{dbMixed, "MixedTable", dbMixed + ".MixedTable"},
		{base, `q"uote`, base + ".`q\"uote`"},
		{base, "back`tick", base + ".`back``tick`"},
		{base, "a,b", base + ".`a,b`"},
		{base, "таблица", base + ".таблица"},
		{base, upperCyr, base + "." + upperCyr},
		{base, strings.Repeat("x", 64), base + "." + strings.Repeat("x", 64)},
		{dbLong, "t", dbLong + ".t"},
		{dbSpace, "order", bt(dbSpace) + ".order"},
		{base, "dup", base + ".dup"},
		{dbDot, "dup", bt(dbDot) + ".dup"},
		{dbMixed, "dup", dbMixed + ".dup"},
	}
	for _, x := range []string{dbDot, dbA, dbMixed, dbSpace, dbLong} {
		d.exec(t, "CREATE DATABASE "+bt(x))
		t.Cleanup(func() {
			c, err := m.Connect(context.Background(), "")
			if err == nil {
				c.Execute("DROP DATABASE IF EXISTS " + bt(x))
				c.Close()
			}
		})
	}
	sqlName := func(tb identTable) string { return bt(tb.schema) + "." + bt(tb.name) }
	var names []string
	for i, tb := range tables {
		q := sqlName(tb)
		d.exec(t, "CREATE TABLE "+q+" (id int PRIMARY KEY, v varchar(40) NOT NULL)")
		var vals []string
		for id := 1; id <= 5; id++ {
			vals = append(vals, fmt.Sprintf("(%d, 't%d-init-%d')", id, i, id))
		}
		d.exec(t, "INSERT INTO "+q+" VALUES "+strings.Join(vals, ", "))
		names = append(names, tb.coll)
	}
	flagTables, err := myTables(strings.Join(names, ","))
	if err != nil || !slices.Equal(flagTables, names) {
		t.Fatalf("--tables of the collection names = %q, %v; want them back", flagTables, err)
	}
	dir := t.TempDir() + "/store"
	ing := runIdentIngest(t, ingest.NewMySQL(ingest.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: flagTables,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), dir)
	ing.waitSnapshot(t, "mysql", tables)
	var all []string
	for i, tb := range tables {
		all = append(all, identChanges(i, sqlName(tb))[:2]...)
	}
	d.exec(t, "BEGIN")
	d.exec(t, all...)
	d.exec(t, "COMMIT")
	for i, tb := range tables {
		d.exec(t, identChanges(i, sqlName(tb))[2:]...)
	}
	myRows := func(tb identTable) map[string]int64 {
		r, err := d.conn.Execute("SELECT CONCAT(id, '|', v) FROM " + sqlName(tb))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for i := range r.Values {
			v, _ := r.GetString(i, 0)
			out[v]++
		}
		return out
	}
	identWait(t, dir, tables, myRows)
	ing.stop(t)
	checkIdentStore(t, dir, "mysql", tables, myRows)
}

// TestTablesFlag: --tables splits at commas outside quotes and checks
// every name, a bad one being a usage error with a hint.
func TestTablesFlag(t *testing.T) {
	got, err := pgTables(`public.orders, public."a,b" ,"x""y".z`, `"a.b".c`)
	if want := []string{"public.orders", `public."a,b"`, `"x""y".z`, `"a.b".c`}; err != nil || !slices.Equal(got, want) {
		t.Errorf("pgTables = %q, %v; want %q", got, err, want)
	}
	got, err = myTables("shop.orders,shop.`a,b`, `x``y`.z")
	if want := []string{"shop.orders", "shop.`a,b`", "`x``y`.z"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("myTables = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{`public."RelMix`, "public.space table", "a.b.c"} {
		_, err := pgTables(bad)
		var ue *usageError
		if !errors.As(err, &ue) || ue.hint == "" || !strings.Contains(ue.msg, "bad --tables") {
			t.Errorf("pgTables(%q) = %v, want a usage error with a hint", bad, err)
		}
	}
	for _, bad := range []string{"orders", "shop.`a", "shop.a b"} {
		_, err := myTables(bad)
		var ue *usageError
		if !errors.As(err, &ue) || ue.hint == "" {
			t.Errorf("myTables(%q) = %v, want a usage error with a hint", bad, err)
		}
	}
	_, stderr, code := runCLI(t, "", "snapshot", "--source", "pg", "--dsn", "postgres://127.0.0.1:1/x", "--publication", "p", "--slot", "s", "--tables", `public."RelMix`)
	if code != exitUsage || !strings.Contains(stderr, "unterminated quoted name") || !strings.Contains(stderr, "hint: ") {
		t.Errorf("snapshot with a bad --tables: exit %d, stderr %q; want a usage error with a hint", code, stderr)
	}
}
