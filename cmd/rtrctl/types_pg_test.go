package main

// The PostgreSQL type matrix: every type docs/types-postgres.md lists, at
// its edges, through the snapshot (COPY binary or text), the replicated
// insert (pgoutput text), an update (whose old image must cancel the row
// exactly) and a delete, each read back with `rtrctl read --format csv`
// and compared with the database's own output of the value.

import (
	"encoding/csv"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
)

// pgTypeCase is a column type and its edge values.
type pgTypeCase struct {
	name string // table t_<name>
	typ  string
	// expect is the SQL of v's text as read prints it; "" is v::text.
	expect string
	// keyed adds a twin table k_<name> with REPLICA IDENTITY DEFAULT.
	keyed  bool
	values [][2]string // case name, SQL literal
}

// arrayExpect is an array's text as read prints it: flattened, without
// its bounds (docs/types-postgres.md).
const arrayExpect = "CASE WHEN v IS NULL THEN NULL ELSE coalesce((SELECT array_agg(e) FROM unnest(v) e)::text, '{}') END"

var pgTypeCases = []pgTypeCase{
	{name: "int2", typ: "int2", values: [][2]string{{"min", "-32768"}, {"max", "32767"}, {"zero", "0"}}},
	{name: "int4", typ: "int4", values: [][2]string{{"min", "-2147483648"}, {"max", "2147483647"}}},
	{name: "int8", typ: "int8", values: [][2]string{{"min", "-9223372036854775808"}, {"max", "9223372036854775807"}}},
	{name: "oid", typ: "oid", values: [][2]string{{"zero", "0"}, {"max", "4294967295"}}},
	{name: "float4", typ: "float4", values: [][2]string{{"nan", "'NaN'"}, {"inf", "'Infinity'"}, {"neg inf", "'-Infinity'"},
		{"neg zero", "'-0'"}, {"smallest subnormal", "'1e-45'"}, {"largest subnormal", "'1.1754942e-38'"}, {"max", "'3.4028235e+38'"},
		{"tenth", "0.1"}, {"exponent form", "1234567"}, {"fixed form", "123456"}}},
	{name: "float8", typ: "float8", keyed: true, values: [][2]string{{"nan", "'NaN'"}, {"inf", "'Infinity'"}, {"neg inf", "'-Infinity'"},
		{"neg zero", "'-0'"}, {"smallest subnormal", "'5e-324'"}, {"smallest normal", "'2.2250738585072014e-308'"},
		{"max", "'1.7976931348623157e+308'"}, {"tenth", "0.1"}, {"exponent form", "1e15"}, {"fixed form", "123456789012345"}}},
	{name: "numeric", typ: "numeric", values: [][2]string{{"nan", "'NaN'"}, {"inf", "'Infinity'"}, {"neg inf", "'-Infinity'"},
		{"1000 digits", "repeat('9', 1000)::numeric"}, {"1000 fraction digits", "('0.' || repeat('0', 999) || '1')::numeric"},
		{"negative zero scale", "-0.000"}, {"trailing zeros", "11.00"}}},
	{name: "numeric10_2", typ: "numeric(10,2)", keyed: true, values: [][2]string{{"scale kept", "11.00"}, {"min", "-99999999.99"},
		{"zero", "0"}, {"cent", "0.01"}}},
	{name: "numeric38", typ: "numeric(38,0)", values: [][2]string{{"max", "99999999999999999999999999999999999999"},
		{"min", "-99999999999999999999999999999999999999"}}},
	{name: "numeric38_38", typ: "numeric(38,38)", values: [][2]string{{"max", "0.99999999999999999999999999999999999999"},
		{"smallest", "0.00000000000000000000000000000000000001"}}},
	{name: "text", typ: "text", values: [][2]string{{"empty", "''"}, {"tab and newline", "E'a\\tb\\nc\\r'"},
		{"quotes and backslash", `E'say "hi", \\ ok'`}, {"unicode", "'☃ ünï'"}, {"the string NULL", "'NULL'"}}},
	{name: "bpchar", typ: "char(3)", expect: "rpad(v::text, 3)", values: [][2]string{{"padded", "'ab'"}, {"full", "'abc'"}}},
	{name: "bool", typ: "bool", expect: "CASE WHEN v THEN 'true' WHEN NOT v THEN 'false' END", values: [][2]string{{"true", "true"}, {"false", "false"}}},
	{name: "bytea", typ: "bytea", values: [][2]string{{"empty", `'\x'`}, {"bytes", `'\x00ff5c22'`}}},
	{name: "date", typ: "date", values: [][2]string{{"min", "'4714-11-24 BC'"}, {"max", "'5874897-12-31'"}, {"inf", "'infinity'"},
		{"neg inf", "'-infinity'"}, {"1 BC", "'0001-01-01 BC'"}, {"leap day", "'2024-02-29'"}, {"year 10000", "'10000-01-01'"}}},
	{name: "time", typ: "time", values: [][2]string{{"midnight", "'00:00:00'"}, {"24:00", "'24:00:00'"}, {"last", "'23:59:59.999999'"}}},
	{name: "timetz", typ: "timetz", values: [][2]string{{"min", "'00:00:00+1559'"}, {"max", "'24:00:00-1559'"}, {"offset", "'12:34:56.789+05:30'"}}},
	{name: "timestamp", typ: "timestamp", values: [][2]string{{"min", "'4714-11-24 00:00:00 BC'"},
		{"last representable", "'294247-01-10 04:00:54.775806'"}, {"inf", "'infinity'"}, {"neg inf", "'-infinity'"},
		{"micros", "'2024-02-29 12:34:56.123456'"}, {"1 BC", "'0001-01-01 00:00:00 BC'"}, {"year 9999", "'9999-12-31 23:59:59.999999'"},
		{"year 10000", "'10000-01-01 00:00:00'"}}},
	{name: "timestamptz", typ: "timestamptz", keyed: true, values: [][2]string{{"min", "'4714-11-24 00:00:00+00 BC'"},
		{"last representable", "'294247-01-10 04:00:54.775806+00'"}, {"inf", "'infinity'"}, {"neg inf", "'-infinity'"},
		{"offset", "'2024-02-29 12:34:56.5+05:30'"}}},
	{name: "interval", typ: "interval", values: [][2]string{{"zero", "'00:00:00'"},
		{"max", "'178956970 years 7 mons 2147483647 days 2562047:47:16.854775'"},
		{"min", "'-178956970 years -8 mons -2147483648 days -2562047:47:16.854775'"},
		{"mixed signs", "'1 day -00:00:00.000001'"}, {"minus month plus day", "'-1 mons +1 day'"}}},
	{name: "uuid", typ: "uuid", values: [][2]string{{"uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"}}},
	{name: "json", typ: "json", values: [][2]string{{"as written", `'{"b": 1,  "a": [1, 2]}'`}}},
	{name: "jsonb", typ: "jsonb", values: [][2]string{{"normalized", `'{"b": 1,  "a": [1, 2]}'`}}},
	{name: "enum", typ: "mood", values: [][2]string{{"label", "'happy'"}}},
	{name: "money", typ: "money", values: [][2]string{{"as text", "'12.34'"}}},
	{name: "int4_array", typ: "int4[]", expect: arrayExpect, values: [][2]string{{"empty", "'{}'"}, {"nulls", "'{1,NULL,3}'"},
		{"bounds", "'[0:2]={1,2,3}'"}, {"two dimensions", "'{{1,2},{3,4}}'"}, {"only null", "'{NULL}'"}}},
	{name: "text_array", typ: "text[]", expect: arrayExpect, values: [][2]string{{"quoting", `E'{"",NULL,"NULL","a b","q\\"\\\\"}'`}}},
	{name: "float8_array", typ: "float8[]", expect: arrayExpect, values: [][2]string{{"edges", "'{NaN,Infinity,-Infinity,-0,5e-324}'"}}},
	{name: "numeric_array", typ: "numeric(5,1)[]", expect: arrayExpect, values: [][2]string{{"scale", "'{1.0,-9999.9,NULL}'"}}},
	{name: "date_array", typ: "date[]", expect: arrayExpect, values: [][2]string{{"edges", "'{infinity,-infinity,4714-11-24 BC}'"}}},
	{name: "timestamptz_array", typ: "timestamptz[]", expect: arrayExpect, values: [][2]string{{"edges", "'{infinity,294247-01-10 04:00:54.775806+00}'"}}},
	{name: "interval_array", typ: "interval[]", expect: arrayExpect, values: [][2]string{{"edges", `'{"1 day","-00:00:00.000001"}'`}}},
	{name: "bytea_array", typ: "bytea[]", expect: arrayExpect, values: [][2]string{{"edges", `'{"\\\\x00ff",NULL}'`}}},
	{name: "time_array", typ: "time[]", expect: arrayExpect, values: [][2]string{{"24:00", "'{24:00:00,00:00:00}'"}}},
}

// tables are the case's tables: t_<name> (FULL) and, when keyed, k_<name>.
func (c pgTypeCase) tables() []string {
	if c.keyed {
		return []string{"t_" + c.name, "k_" + c.name}
	}
	return []string{"t_" + c.name}
}

// newPGTypesDB makes the matrix's tables, each holding its case's values
// (ids 1..n) and a NULL (id n+1), published as rtr; the connection's
// session prints values in the forms read prints. It returns the tables.
func newPGTypesDB(t *testing.T) (*ingestDB, []string) {
	ddl := []string{"CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')"}
	var all []string
	for _, c := range pgTypeCases {
		for _, tb := range c.tables() {
			ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v %s)", tb, c.typ))
			if tb[0] == 't' {
				ddl = append(ddl, "ALTER TABLE "+tb+" REPLICA IDENTITY FULL")
			}
			for i, v := range c.values {
				ddl = append(ddl, fmt.Sprintf("INSERT INTO %s VALUES (%d, %s)", tb, i+1, v[1]))
			}
			ddl = append(ddl, fmt.Sprintf("INSERT INTO %s VALUES (%d, NULL)", tb, len(c.values)+1))
			all = append(all, tb)
		}
	}
	ddl = append(ddl, "CREATE PUBLICATION rtr FOR TABLE "+strings.Join(all, ", "),
		// The database's own output, in the forms read prints.
		"SET TimeZone = 'UTC'", "SET extra_float_digits = 3", "SET IntervalStyle = postgres", "SET DateStyle = 'ISO, MDY'")
	return newPGDB(t, ddl...), all
}

func TestTypesPostgres(t *testing.T) {
	db, all := newPGTypesDB(t)
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, keyedArgs(db, db.newSlotName(t), dir, "--interval", "30ms")...)

	phases := []struct {
		name string
		sql  []string // run on every table before the check
		ids  func(i int) []int
	}{
		{"snapshot", nil, func(i int) []int { return []int{i} }},
		{"insert", []string{"INSERT INTO %s SELECT id + 1000, v FROM %[1]s"}, func(i int) []int { return []int{i, i + 1000} }},
		// The old images of both the copied and the replicated rows must
		// cancel them exactly.
		{"update", []string{"UPDATE %s SET id = id + 100000"}, func(i int) []int { return []int{i + 100000, i + 101000} }},
		{"delete", []string{"DELETE FROM %s WHERE id > 101000"}, func(i int) []int { return []int{i + 100000} }},
	}
	for _, ph := range phases {
		for _, tb := range all {
			for _, s := range ph.sql {
				execAll(t, db.conn, fmt.Sprintf(s, tb))
			}
		}
		keyedCaughtUp(t, db, dir, p)
		t.Run(ph.name, func(t *testing.T) {
			for _, c := range pgTypeCases {
				for _, tb := range c.tables() {
					t.Run(tb, func(t *testing.T) {
						got := readCSVRows(t, dir, "public."+tb)
						want := pgTextRows(t, db, tb, c.expect)
						if len(got) != len(want) {
							t.Errorf("read has %d rows, the table %d:\n read %q\n  pg %q", len(got), len(want), got, want)
						}
						for i, v := range append(c.values, [2]string{"null", "NULL"}) {
							t.Run(v[0], func(t *testing.T) {
								for _, id := range ph.ids(i + 1) {
									k := fmt.Sprint(id)
									if g, ok := got[k]; !ok || g != want[k] {
										t.Errorf("row %s (%s): read %q (present %v), postgres %q", k, v[1], g, ok, want[k])
									}
								}
							})
						}
					})
				}
			}
		})
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
}

// readCSVRows is `rtrctl read DIR collection --format csv` as id -> v.
// A row printed twice (multiplicity 2) or a read that fails (a negative
// multiplicity) fails the test.
func readCSVRows(t *testing.T, dir, collection string) map[string]string {
	t.Helper()
	out := mustRun(t, "", "read", dir, collection, "--format", "csv")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("read %s: csv %v:\n%s", collection, err, out)
	}
	rows := map[string]string{}
	for _, r := range recs[1:] {
		if len(r) != 2 {
			t.Fatalf("read %s: row %q", collection, r)
		}
		if _, dup := rows[r[0]]; dup {
			t.Errorf("read %s: row id %s printed twice", collection, r[0])
		}
		rows[r[0]] = r[1]
	}
	return rows
}

// pgTextRows is table's id -> expect (v::text when ""), NULL as "".
func pgTextRows(t *testing.T, db *ingestDB, table, expect string) map[string]string {
	t.Helper()
	if expect == "" {
		expect = "v::text"
	}
	return pgExprRows(t, db, table, expect, "")
}

// TestIngestBadValuesPostgres: values Arrow's types cannot hold fail only
// their collection, with a definite error naming the table, the column,
// the row and the value: in the snapshot (the other tables commit and
// replicate on) and in replication (the collection stops at the change).
func TestIngestBadValuesPostgres(t *testing.T) {
	db := newPGDB(t,
		"SET TimeZone = 'UTC'",
		"CREATE TABLE good (id int PRIMARY KEY, v timestamptz)",
		"CREATE TABLE bad_ts (id int PRIMARY KEY, ts timestamp)",
		"CREATE TABLE bad_num (id int PRIMARY KEY, n numeric(10,2))",
		"CREATE TABLE later (id int PRIMARY KEY, ts timestamptz)",
		"CREATE TABLE later_full (id int, ts timestamptz)", "ALTER TABLE later_full REPLICA IDENTITY FULL",
		"ALTER TABLE good REPLICA IDENTITY FULL", "ALTER TABLE bad_ts REPLICA IDENTITY FULL", "ALTER TABLE bad_num REPLICA IDENTITY FULL",
		"INSERT INTO good SELECT g, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(1, 50) g",
		"INSERT INTO bad_ts SELECT g, '2024-01-01'::timestamp + g * interval '1 day' FROM generate_series(1, 50) g",
		"INSERT INTO bad_ts VALUES (77, '294276-12-31 23:59:59.999999')",
		"INSERT INTO bad_num VALUES (1, 1.5), (2, 'NaN')",
		"INSERT INTO later VALUES (1, '2024-01-01 00:00:00+00')",
		"CREATE PUBLICATION rtr FOR TABLE good, bad_ts, bad_num, later, later_full")
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, keyedArgs(db, db.newSlotName(t), dir, "--interval", "30ms")...)
	keyedCaughtUp(t, db, dir, p)
	// A value the snapshot copied fine, then one that does not convert in
	// the replication stream (the finite value the infinity sentinel
	// would collide with), and more changes to a good table.
	execAll(t, db.conn, "INSERT INTO later VALUES (5, '294247-01-10 04:00:54.775807+00')", "INSERT INTO later VALUES (6, now())",
		"INSERT INTO later_full VALUES (8, '294276-12-31 23:59:59.999999+00')",
		"INSERT INTO good VALUES (51, '294247-01-10 04:00:54.775806+00')", "UPDATE good SET v = v + interval '1 year' WHERE id <= 10")
	keyedCaughtUp(t, db, dir, p)

	for coll, parts := range map[string][]string{
		"public.bad_ts":  {"snapshot", "column ts", `"294276-12-31 23:59:59.999999"`, "out of range of timestamp[us]", "key (id)=(77)"},
		"public.bad_num": {"snapshot", "column n", `"NaN"`, "not representable as decimal128(10,2)", "key (id)=(2)"},
		"public.later":   {"column ts", `"294247-01-10 04:00:54.775807+00"`, "out of range of timestamp[us]", "key (id)=(5)"},
		// FULL: the row has no key but its values.
		"public.later_full": {"column ts", `"294276-12-31 23:59:59.999999+00"`, "out of range of timestamp[us]", "row (id, ts)=(8, 294276-12-31 23:59:59.999999+00)"},
	} {
		msg, err := ingesttest.CollectionError(ctxT(t), dir, coll)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range append(parts, coll) {
			if !strings.Contains(msg, part) {
				t.Errorf("%s: error %q does not name %q", coll, msg, part)
			}
		}
		if _, stderr, code := runCLI(t, "", "read", dir, coll); code == exitOK || !strings.Contains(stderr, parts[1]) {
			t.Errorf("read %s: exit %d, stderr %q; want its error", coll, code, stderr)
		}
	}
	got, want := readCSVRows(t, dir, "public.good"), pgTextRows(t, db, "good", "")
	if len(want) != 51 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("public.good: read %v\nthe table %v", got, want)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
}
