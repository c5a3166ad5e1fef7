package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/mymatrix"
	"github.com/rtrctl/rtrctl/internal/testenv"
)

// myExportExpr is a MariaDB matrix type's value as comparable text: in
// pgDuckExpr, pg holds the MariaDB SQL of column v (on a utf8mb4, UTC
// session). It also returns the DuckDB type the column must read as
// (docs/format.md, Parquet).
func myExportExpr(ty mymatrix.Type) (pgDuckExpr, string) {
	name, text, duck := ty.Name, "CAST(v AS CHAR)", "v::VARCHAR"
	// Zero dates are NULL in the store.
	zeroNull := func(s string) string { return "IF(MONTH(v) = 0 OR DAYOFMONTH(v) = 0, NULL, " + s + ")" }
	base, unsigned := strings.CutSuffix(name, "_unsigned")
	switch {
	case name == "float":
		return pgDuckExpr{"CAST(CAST(v AS DOUBLE) AS CHAR)", duck, scalarExpr("float4", "").norm}, "FLOAT"
	case name == "double":
		return pgDuckExpr{"CAST(v AS CHAR)", duck, scalarExpr("float8", "").norm}, "DOUBLE"
	case strings.HasPrefix(name, "decimal_"):
		duckType := strings.ToUpper(ty.DDL)
		if strings.HasPrefix(name, "decimal_65") {
			duckType = "VARCHAR" // beyond decimal128: text in the store
		}
		return pgDuckExpr{text, duck, scalarExpr("numeric(", "").norm}, duckType
	case strings.HasPrefix(name, "bit_") || name == "year":
		return pgDuckExpr{"CAST(v + 0 AS CHAR)", duck, nil}, map[bool]string{true: "UBIGINT", false: "USMALLINT"}[name != "year"]
	case strings.HasPrefix(name, "date") && !strings.HasPrefix(name, "datetime"):
		return pgDuckExpr{zeroNull("CAST(DATEDIFF(v, '1970-01-01') AS CHAR)"), "(v - DATE '1970-01-01')::VARCHAR", nil}, "DATE"
	case strings.HasPrefix(name, "datetime") || strings.HasPrefix(name, "timestamp"):
		duckType := map[bool]string{true: "TIMESTAMP", false: "TIMESTAMP WITH TIME ZONE"}[strings.HasPrefix(name, "datetime")]
		return pgDuckExpr{zeroNull("CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v) AS CHAR)"), "epoch_us(v)::VARCHAR", nil}, duckType
	case strings.HasPrefix(name, "time"):
		// A duration: int64 microseconds.
		return pgDuckExpr{"CAST(CAST(TIME_TO_SEC(v) * 1000000 AS SIGNED) AS CHAR)", duck, nil}, "BIGINT"
	case strings.HasPrefix(name, "binary") || strings.HasPrefix(name, "varbinary") || strings.HasSuffix(name, "blob"):
		return pgDuckExpr{"HEX(v)", "upper(hex(v))", nil}, "BLOB"
	case strings.HasSuffix(base, "int"):
		duckType := map[string]string{"tinyint": "TINYINT", "smallint": "SMALLINT", "mediumint": "INTEGER", "int": "INTEGER", "bigint": "BIGINT"}[base]
		if unsigned {
			duckType = "U" + duckType
		}
		return pgDuckExpr{text, duck, nil}, duckType
	}
	// json, enum, set, text.
	return pgDuckExpr{"CAST(v AS CHAR CHARACTER SET utf8mb4)", duck, nil}, "VARCHAR"
}

// myExprRows is table's id -> expr (MariaDB SQL of its column v), NULL
// as nullMark.
func myExprRows(t *testing.T, d *myDB, table, expr string) map[string]string {
	t.Helper()
	r, err := d.conn.Execute(fmt.Sprintf("SELECT CAST(id AS CHAR), IFNULL(%s, '%s') FROM %s", expr, nullMark, table))
	if err != nil {
		t.Fatalf("%s: %v", table, err)
	}
	out := map[string]string{}
	for i := range r.RowNumber() {
		id, _ := r.GetString(i, 0)
		v, _ := r.GetString(i, 1)
		out[id] = v
	}
	return out
}

// TestExportParquetTypesMySQL: every type and boundary value of the
// MariaDB matrix (internal/mymatrix) flows MariaDB -> ingest (snapshot
// and binlog) -> store -> rtrctl export (and read --format parquet
// --changes) -> DuckDB, which reads each value as MariaDB holds it, and
// the columns as the native types docs/format.md promises.
func TestExportParquetTypesMySQL(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "SET NAMES utf8mb4", "SET time_zone = '+00:00'")
	var colls []string
	var seq uint64
	for i, ty := range mymatrix.Types {
		tb := fmt.Sprintf("t%d_%s", i, ty.Name)
		colls = append(colls, d.name+"."+tb)
		d.exec(t, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v %s)", tb, ty.DDL))
		if ty.SQLMode != "" {
			d.exec(t, "SET sql_mode = '"+ty.SQLMode+"'")
		}
		var qs []string
		for j, c := range ty.Cases {
			qs = append(qs, fmt.Sprintf("INSERT INTO %s VALUES (%d, %s)", tb, j+1, c.Expr))
		}
		seq = imageTxn(t, d.conn, "FULL", qs...)
		d.exec(t, "SET sql_mode = DEFAULT")
	}
	dir := t.TempDir() + "/store"
	p := runBin(t, nil, "ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", strings.Join(colls, ","),
		"--store", dir, "--source-id", "mysql", "--interval", "30ms")
	// Rows of the snapshot, then binlog ones: the changes hold both.
	waitIngestReady(t, dir)
	waitMyCaughtUp(t, dir, seq, p)
	d.exec(t, "SET sql_mode = 'NO_ENGINE_SUBSTITUTION'") // zero dates copy
	for _, coll := range colls {
		seq = imageTxn(t, d.conn, "FULL", fmt.Sprintf("INSERT INTO %s SELECT id + 1000, v FROM %[1]s", coll))
	}
	d.exec(t, "SET sql_mode = DEFAULT")
	waitMyCaughtUp(t, dir, seq, p)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest stop: exit %d\nstderr:\n%s", code, p.Stderr())
	}

	out := t.TempDir()
	var queries []string
	values := 0
	for i, ty := range mymatrix.Types {
		target := filepath.Join(out, ty.Name)
		changes := exportAndReadChanges(t, dir, colls[i], target, 2*len(ty.Cases))
		e, _ := myExportExpr(ty)
		for _, q := range duckExportQueries(e.duck, target, changes) {
			queries = append(queries, q[0])
		}
		queries = append(queries, fmt.Sprintf("SELECT * FROM read_parquet('%s/*.parquet') LIMIT 0", target))
		values += len(ty.Cases)
	}
	res := duckQuery(t, queries)
	for i, ty := range mymatrix.Types {
		t.Run(ty.Name, func(t *testing.T) {
			e, duckType := myExportExpr(ty)
			if r := res[3*i+2]; len(r.Types) != 2 || r.Types[1] != duckType {
				t.Errorf("DuckDB reads the column as %v, want %s", r.Types, duckType)
			}
			want := myExprRows(t, d, colls[i], e.pg)
			for k, diff := range []bool{false, true} {
				checkDuckRows(t, res[3*i+k], diff, want, e.norm, 2*len(ty.Cases), "mariadb")
			}
		})
	}
	t.Logf("%d types, %d values (each snapshot and binlog), compared in the export and the changes", len(mymatrix.Types), values)
}
