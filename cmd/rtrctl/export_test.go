package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/interop"
)

// duckResult is what interop/query-duckdb.mjs prints for one query.
type duckResult struct {
	Names []string `json:"names"`
	Types []string `json:"types"`
	Rows  [][]any  `json:"rows"`
}

// duckQuery runs queries with DuckDB (the independent reader).
func duckQuery(t *testing.T, queries []string) []duckResult {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "queries.json")
	b, _ := json.Marshal(queries)
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out []duckResult
	interop.MustRunJSON(t, &out, "query-duckdb.mjs", spec)
	if len(out) != len(queries) {
		t.Fatalf("query-duckdb: %d results for %d queries", len(out), len(queries))
	}
	return out
}

// The markers of per-element text of lists: the element separator and
// a NULL element.
const (
	listSep  = "\x1f"
	listNull = "\x1e"
)

// pgDuckExpr is a case's value as comparable text on both sides: the
// PostgreSQL SQL of it (of column x) and the DuckDB SQL of the exported
// value, and a normalizer applied to both texts (nil: exact).
type pgDuckExpr struct {
	pg, duck string
	norm     func(string) string
}

// scalarExpr is pgDuckExpr of a scalar type (c.typ without []).
func scalarExpr(typ, expect string) pgDuckExpr {
	floatNorm := func(bits int) func(string) string {
		return func(s string) string {
			f, err := strconv.ParseFloat(s, bits)
			if err != nil {
				return "unparsed " + s
			}
			if math.IsNaN(f) {
				return "NaN"
			}
			return strconv.FormatUint(math.Float64bits(f), 16)
		}
	}
	switch {
	case typ == "float4":
		return pgDuckExpr{"{x}::text", "{x}::VARCHAR", floatNorm(32)}
	case typ == "float8":
		return pgDuckExpr{"{x}::text", "{x}::VARCHAR", floatNorm(64)}
	case typ == "bytea":
		return pgDuckExpr{"{x}::text", `'\x' || lower(hex({x}))`, nil}
	case typ == "date":
		return pgDuckExpr{"CASE WHEN isfinite({x}) THEN ({x} - DATE '1970-01-01')::text ELSE {x}::text END",
			"CASE WHEN isinf({x}) THEN {x}::VARCHAR ELSE ({x} - DATE '1970-01-01')::VARCHAR END", nil}
	case typ == "time":
		// Microseconds since midnight: 24:00:00 is 86400000000.
		return pgDuckExpr{"(extract(epoch FROM {x}) * 1000000)::bigint::text",
			"(hour({x})::BIGINT * 3600000000 + minute({x})::BIGINT * 60000000 + microsecond({x}))::VARCHAR", nil}
	case typ == "timestamp" || typ == "timestamptz":
		return pgDuckExpr{"CASE WHEN isfinite({x}) THEN (extract(epoch FROM {x}) * 1000000)::bigint::text ELSE {x}::text END",
			"CASE WHEN isinf({x}) THEN {x}::VARCHAR ELSE epoch_us({x})::VARCHAR END", nil}
	case typ == "interval":
		return pgDuckExpr{"(extract(year FROM {x}) * 12 + extract(month FROM {x}))::text || ',' || extract(day FROM {x})::text || ',' || " +
			"(((extract(hour FROM {x}) * 3600 + extract(minute FROM {x}) * 60) * 1000000 + extract(microseconds FROM {x})) * 1000)::bigint::text",
			"{x}.months::VARCHAR || ',' || {x}.days::VARCHAR || ',' || {x}.nanoseconds::VARCHAR", nil}
	}
	if strings.HasPrefix(typ, "numeric(") {
		// DuckDB prints 0.5 as .5.
		return pgDuckExpr{"{x}::text", "{x}::VARCHAR", func(s string) string {
			if r, ok := strings.CutPrefix(s, "-."); ok {
				return "-0." + r
			}
			if r, ok := strings.CutPrefix(s, "."); ok {
				return "0." + r
			}
			return s
		}}
	}
	pg := "{x}::text"
	if expect != "" {
		pg = strings.ReplaceAll(expect, "v", "{x}")
	}
	return pgDuckExpr{pg, "{x}::VARCHAR", nil}
}

// exportExpr is pgDuckExpr of a case: a list compares element by element.
func exportExpr(c pgTypeCase) pgDuckExpr {
	elem, isList := strings.CutSuffix(c.typ, "[]")
	if !isList {
		e := scalarExpr(c.typ, c.expect)
		e.pg, e.duck = strings.ReplaceAll(e.pg, "{x}", "v"), strings.ReplaceAll(e.duck, "{x}", "v")
		return e
	}
	e := scalarExpr(elem, "")
	e.pg, e.duck = strings.ReplaceAll(e.pg, "{x}", "x"), strings.ReplaceAll(e.duck, "{x}", "x")
	ex := pgDuckExpr{
		pg:   fmt.Sprintf("CASE WHEN v IS NULL THEN NULL ELSE coalesce((SELECT string_agg(coalesce(%s, chr(30)), chr(31) ORDER BY o) FROM unnest(v) WITH ORDINALITY u(x, o)), '') END", e.pg),
		duck: fmt.Sprintf("CASE WHEN v IS NULL THEN NULL ELSE array_to_string(list_transform(v, lambda x: coalesce(%s, chr(30))), chr(31)) END", e.duck),
	}
	if e.norm != nil {
		ex.norm = func(s string) string {
			parts := strings.Split(s, listSep)
			for i, p := range parts {
				if p != listNull && p != "" {
					parts[i] = e.norm(p)
				}
			}
			return strings.Join(parts, listSep)
		}
	}
	return ex
}

// nullMark stands for a NULL value in the maps compared.
const nullMark = "\u2400null"

// pgExprRows is table's id -> expr (SQL of its column v), NULL as null.
func pgExprRows(t *testing.T, db *ingestDB, table, expr, null string) map[string]string {
	t.Helper()
	rows, err := db.conn.Query(ctxT(t), fmt.Sprintf("SELECT id::text, coalesce(%s, '%s') FROM %s", expr, null, table))
	if err != nil {
		t.Fatalf("%s: %v", table, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// duckTypes are the DuckDB types the export's columns must read as:
// DuckDB's own types, not text, wherever Parquet has one.
var duckTypes = map[string]string{
	"int2": "SMALLINT", "int8": "BIGINT", "oid": "UINTEGER", "float4": "FLOAT", "float8": "DOUBLE",
	"numeric10_2": "DECIMAL(10,2)", "numeric38_38": "DECIMAL(38,38)", "numeric": "VARCHAR", "bool": "BOOLEAN", "bytea": "BLOB",
	"date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMP WITH TIME ZONE",
	"interval": `STRUCT("months" INTEGER, "days" INTEGER, "nanoseconds" BIGINT)`,
	// pqarrow writes every Arrow time as TIME(isAdjustedToUTC=true); the
	// store holds uuid, json and timetz as text (docs/format.md).
	"time": "TIME WITH TIME ZONE", "uuid": "VARCHAR", "jsonb": "VARCHAR", "timetz": "VARCHAR",
	"int4_array": "INTEGER[]", "timestamptz_array": "TIMESTAMP WITH TIME ZONE[]", "numeric_array": "DECIMAL(5,1)[]",
}

// exportAndReadChanges runs rtrctl export of collection coll of the
// store in dir to target, which must say it exported n rows, and writes
// rtrctl read --changes --format parquet of it to target-changes.parquet,
// which it returns.
func exportAndReadChanges(t *testing.T, dir, coll, target string, n int) string {
	t.Helper()
	if got := mustRun(t, "", "export", dir, coll, "--to", target); !strings.Contains(got, fmt.Sprintf("exported %d rows", n)) {
		t.Errorf("export %s: %q, want %d rows", coll, got, n)
	}
	changes := target + "-changes.parquet"
	if err := os.WriteFile(changes, []byte(mustRun(t, "", "read", dir, coll, "--changes", "--format", "parquet")), 0o644); err != nil {
		t.Fatal(err)
	}
	return changes
}

// duckExportQueries are the DuckDB queries of the value duck (SQL of
// column v) by id in the export in dir target and in the changes file
// (with _diff and _time), each with the file it reads.
func duckExportQueries(duck, target, changes string) [2][2]string {
	return [2][2]string{
		{fmt.Sprintf("SELECT id::VARCHAR, %s FROM read_parquet('%s/*.parquet')", duck, target), target + "/*.parquet"},
		{fmt.Sprintf("SELECT id::VARCHAR, %s, _diff::VARCHAR, _time::VARCHAR FROM read_parquet('%s')", duck, changes), changes},
	}
}

// checkDuckRows compares the rows DuckDB read (id, value, and with diff
// _diff and _time) with want, the source's text by id (NULL as
// nullMark), after norm (nil: exact): n rows, each once, equal.
func checkDuckRows(t *testing.T, r duckResult, diff bool, want map[string]string, norm func(string) string, n int, source string) {
	t.Helper()
	nm := func(s string) string {
		if norm == nil || s == nullMark {
			return s
		}
		return norm(s)
	}
	got := map[string]string{}
	for _, row := range r.Rows {
		id, _ := row[0].(string)
		v, ok := row[1].(string)
		if !ok {
			v = nullMark
		}
		if diff && (row[2] != "1" || row[3] == nil) {
			t.Errorf("changes row %v: want _diff 1 and a _time", row)
		}
		if _, dup := got[id]; dup {
			t.Errorf("id %s read twice", id)
		}
		got[id] = v
	}
	if len(got) != len(want) || len(want) != n {
		t.Errorf("DuckDB read %d rows (changes %v), the table has %d, want %d", len(got), diff, len(want), n)
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || nm(g) != nm(w) {
			t.Errorf("row %s (changes %v): DuckDB %q (present %v), %s %q", id, diff, g, ok, source, w)
		}
	}
}

// TestExportParquetTypesPostgres: every type and edge of the PostgreSQL
// matrix flows PostgreSQL -> ingest -> store -> rtrctl export (and read
// --format parquet --changes) -> DuckDB, an independent Parquet reader,
// which reads each value as PostgreSQL holds it, and the columns as
// DuckDB's native types.
func TestExportParquetTypesPostgres(t *testing.T) {
	db, all := newPGTypesDB(t)
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, keyedArgs(db, db.newSlotName(t), dir, "--interval", "30ms")...)
	// Rows of the snapshot, then replicated ones: the changes hold both.
	keyedCaughtUp(t, db, dir, p)
	for _, tb := range all {
		execAll(t, db.conn, fmt.Sprintf("INSERT INTO %s SELECT id + 1000, v FROM %[1]s", tb))
	}
	keyedCaughtUp(t, db, dir, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}

	out := t.TempDir()
	type check struct {
		c     pgTypeCase
		table string
		file  string // a glob
		diff  bool   // the changes, with _diff
	}
	var checks []check
	var queries []string
	for _, c := range pgTypeCases {
		for _, tb := range c.tables() {
			target := filepath.Join(out, tb)
			changes := exportAndReadChanges(t, dir, "public."+tb, target, 2*(len(c.values)+1))
			e := exportExpr(c)
			for i, q := range duckExportQueries(e.duck, target, changes) {
				checks, queries = append(checks, check{c, tb, q[1], i == 1}), append(queries, q[0])
			}
			checks, queries = append(checks, check{c: c, table: tb}), append(queries, fmt.Sprintf("SELECT * FROM read_parquet('%s/*.parquet') LIMIT 0", target))
		}
	}
	res := duckQuery(t, queries)
	for i, ck := range checks {
		r := res[i]
		t.Run(ck.table, func(t *testing.T) {
			if ck.file == "" {
				if want, ok := duckTypes[ck.c.name]; ok && (len(r.Types) != 2 || r.Types[1] != want) {
					t.Errorf("DuckDB reads the column as %v, want %s", r.Types, want)
				}
				return
			}
			e := exportExpr(ck.c)
			want := pgExprRows(t, db, ck.table, e.pg, nullMark)
			checkDuckRows(t, r, ck.diff, want, e.norm, 2*(len(ck.c.values)+1), "postgres")
		})
	}
}
