package pgarrow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow/pgarrowtest"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgarrow.ConfigureSession(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Values must print the same; fmt prints NaN as NaN, so NaN equals NaN.
func sameValue(a, b any) bool { return fmt.Sprintf("%T %#v", a, a) == fmt.Sprintf("%T %#v", b, b) }

func TestEveryType(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := connect(t, pg.CreateDatabase(t))
	ctx := t.Context()
	if _, err := conn.Exec(ctx, pgarrowtest.Setup); err != nil {
		t.Fatal(err)
	}
	for _, q := range pgarrowtest.Inserts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tbl, err := pgarrow.LoadTable(ctx, conn, "public.every")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.QualifiedName() != "public.every" || tbl.ReplicaIdentity != "default" || tbl.OID == 0 {
		t.Errorf("table = %s, identity %s, oid %d", tbl.QualifiedName(), tbl.ReplicaIdentity, tbl.OID)
	}
	var names []string
	for _, c := range tbl.Columns {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != strings.Join(pgarrowtest.Columns, ",") {
		t.Fatalf("columns = %v", names)
	}

	// Field types and metadata.
	fields := tbl.Fields()
	wantTypes := map[string]string{
		"id": "int32", "i2": "int16", "i8": "int64", "o": "uint32", "f4": "float32", "f8": "float64",
		"n": "decimal(10, 2)", "nb": "utf8", "n38": "decimal(38, 5)", "bp": "utf8", "b": "bool", "by": "binary",
		"d": "date32", "tm": "time64[us]", "ttz": "utf8", "ts": "timestamp[us]", "tstz": "timestamp[us, tz=UTC]",
		"iv": "month_day_nano_interval", "u": "utf8", "jb": "utf8", "e": "utf8", "dom": "int32",
		"ai": "list<item: int32, nullable>", "an": "list<item: decimal(5, 1), nullable>", "ae": "list<item: utf8, nullable>",
		"am": "list<item: int32, nullable>", "pt": "utf8", "pta": "utf8",
	}
	wantPG := map[string]string{"id": "integer", "n": "numeric(10,2)", "jb": "jsonb", "e": "mood", "dom": "posint", "ai": "integer[]", "ae": "mood[]", "vc": "character varying(10)"}
	for _, f := range fields {
		if w, ok := wantTypes[f.Name]; ok && f.Type.String() != w {
			t.Errorf("field %s: type %s, want %s", f.Name, f.Type, w)
		}
		if w, ok := wantPG[f.Name]; ok {
			if got, _ := f.Metadata.GetValue(pgarrow.MetaType); got != w {
				t.Errorf("field %s: pg.type %q, want %q", f.Name, got, w)
			}
		}
		if f.Nullable != (f.Name != "id") {
			t.Errorf("field %s: nullable %v", f.Name, f.Nullable)
		}
	}

	// Rows in the text output form. The simple protocol returns every
	// column in its output function's text form, as COPY and pgoutput do.
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(pgarrowtest.Columns, ", ")+" FROM every ORDER BY id", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([][]byte, len(raw))
		nulls := make([]bool, len(raw))
		for i, r := range raw {
			vals[i], nulls[i] = r, r == nil
		}
		if err := b.AppendText(vals, nulls); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if b.Len() != len(pgarrowtest.Expected) {
		t.Fatalf("Len = %d", b.Len())
	}
	arrs := b.NewArrays()
	for i, a := range arrs {
		if !arrow.TypeEqual(a.DataType(), fields[i].Type) {
			t.Errorf("column %s: array type %s, field type %s", fields[i].Name, a.DataType(), fields[i].Type)
		}
		for r, want := range pgarrowtest.Expected {
			if got := pgarrow.GoValue(a, r); !sameValue(got, want[i]) {
				t.Errorf("row %d column %s = %#v, want %#v", r+1, fields[i].Name, got, want[i])
			}
		}
		a.Release()
	}
	if b.Len() != 0 {
		t.Errorf("Len after NewArrays = %d", b.Len())
	}
}

func TestAppendTextAtomic(t *testing.T) {
	tbl := &pgarrow.Table{Schema: "public", Name: "t", Columns: []pgarrow.Column{
		{Name: "a", TypeOID: pgarrow.OIDInt4, TypeMod: -1, NotNull: true},
		{Name: "b", TypeOID: pgarrow.OIDDate, TypeMod: -1},
		{Name: "c", TypeOID: pgarrow.OIDInt4, TypeMod: -1, ElemOID: pgarrow.OIDInt4},
	}}
	b, err := pgarrow.NewRowBuilder(nil, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, tc := range []struct {
		vals  []string
		nulls []bool
		err   string
	}{
		{[]string{"1", "2024-01-01", "{1}"}, nil, ""},
		{[]string{"2", "2024-13-01", "{1}"}, nil, "column b"},
		{[]string{"3", "2024-01-01", "{1,x}"}, nil, "array element 2"},
		{[]string{"", "2024-01-01", "{1}"}, []bool{true, false, false}, "NULL in NOT NULL column a"},
		{[]string{"4", "", "{{1},{2}}"}, []bool{false, true, false}, ""},
		{[]string{"5"}, nil, "1 values for 3 columns"},
	} {
		vals := make([][]byte, len(tc.vals))
		for i, v := range tc.vals {
			vals[i] = []byte(v)
		}
		err := b.AppendText(vals, tc.nulls)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("AppendText(%q) = %v, want %q", tc.vals, err, tc.err)
		}
	}
	if b.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (failed rows must leave nothing behind)", b.Len())
	}
	arrs := b.NewArrays()
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for i, a := range arrs {
		if a.Len() != 2 {
			t.Errorf("column %d has %d rows", i, a.Len())
		}
	}
	if got := fmt.Sprint(pgarrow.GoValue(arrs[0], 1), pgarrow.GoValue(arrs[1], 1), pgarrow.GoValue(arrs[2], 1)); got != "4 <nil> [1 2]" {
		t.Errorf("row 2 = %s", got)
	}
}

func TestLoadTableErrors(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := connect(t, pg.CreateDatabase(t))
	ctx := t.Context()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA "My Schema"; CREATE TABLE "My Schema"."Mixed" (x int); CREATE VIEW v AS SELECT 1 AS x;
		CREATE TABLE gen (a int, b int GENERATED ALWAYS AS (a * 2) STORED, c text); ALTER TABLE gen DROP COLUMN c; ALTER TABLE gen REPLICA IDENTITY FULL`); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgarrow.LoadTable(ctx, conn, `"My Schema"."Mixed"`)
	if err != nil || tbl.QualifiedName() != `"My Schema"."Mixed"` || tbl.QuotedName() != `"My Schema"."Mixed"` || (&pgarrow.Table{Schema: "public", Name: "user"}).QuotedName() != `public."user"` {
		t.Errorf(`LoadTable("My Schema"."Mixed") = %v, %v`, tbl, err)
	}
	// Unquoted names fold to lower case; the hint names the table that
	// differs in case only.
	_, err = pgarrow.LoadTable(ctx, conn, `"My Schema".Mixed`)
	if !errors.Is(err, pgarrow.ErrTableNotFound) || !strings.Contains(hint.Of(err), `did you mean "My Schema"."Mixed"?`) {
		t.Errorf(`LoadTable("My Schema".Mixed) = %v (hint %q), want not found with a hint naming "My Schema"."Mixed"`, err, hint.Of(err))
	}
	for _, name := range []string{"My Schema.Mixed", "a.b.c.d"} {
		if _, err := pgarrow.LoadTable(ctx, conn, name); !errors.Is(err, pgarrow.ErrBadTableName) || hint.Of(err) == "" {
			t.Errorf("LoadTable(%q) = %v, want ErrBadTableName with a hint", name, err)
		}
	}
	if tbl, err := pgarrow.LoadTable(ctx, conn, "gen"); err != nil || len(tbl.Columns) != 1 || tbl.ReplicaIdentity != "full" {
		t.Errorf("LoadTable(gen) = %+v, %v; want one column (generated and dropped ones left out), identity full", tbl, err)
	}
	for _, name := range []string{"public.nope", "nope", "public.v"} {
		_, err := pgarrow.LoadTable(ctx, conn, name)
		if !errors.Is(err, pgarrow.ErrTableNotFound) {
			t.Errorf("LoadTable(%q) = %v, want ErrTableNotFound", name, err)
		}
	}
	_, err = pgarrow.LoadTable(ctx, conn, "public.nope")
	if err == nil || !strings.Contains(err.Error(), `no table public.nope`) {
		t.Errorf("error %v does not name the table", err)
	}
}
