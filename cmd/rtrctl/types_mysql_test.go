package main

import (
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// pipeErrors returns the messages of the error streams of a pipe, by
// collection.
func pipeErrors(t *testing.T, data string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	eachPipeRecord(t, data, func(h pipe.Header, rec arrow.Record) {
		if h.Kind != pipe.KindError {
			return
		}
		for i, f := range rec.Schema().Fields() {
			if f.Name == pipe.ColMessage {
				col := rec.Column(i).(*array.String)
				for j := 0; j < col.Len(); j++ {
					out[h.Collection] = append(out[h.Collection], col.Value(j))
				}
			}
		}
	})
	return out
}

// TestMySQLSnapshotBadValue: a table holding a value rtrctl cannot
// convert (a date that does not exist, which MariaDB stores under
// ALLOW_INVALID_DATES) fails only its own collection, with a definite
// error naming the table, the column, the row's key and the value; the
// other table is copied and complete.
func TestMySQLSnapshotBadValue(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE good (id int PRIMARY KEY, v varchar(10))", "INSERT INTO good VALUES (1, 'a'), (2, 'b')",
		"CREATE TABLE bad (id int PRIMARY KEY, d date)", "SET sql_mode = 'ALLOW_INVALID_DATES'",
		"INSERT INTO bad VALUES (1, '2024-02-28'), (7, '2024-02-31'), (9, '2024-03-01')", "SET sql_mode = DEFAULT")
	out, stderr, code := runCLI(t, "", "snapshot", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name+".good,"+d.name+".bad")
	if code != exitOK {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	kinds := readKinds(t, out)
	good, bad := d.name+".good", d.name+".bad"
	if kinds["data "+good] != 2 || kinds["progress "+good] != 1 {
		t.Errorf("good table: %v", kinds)
	}
	if kinds["progress "+bad] != 0 {
		t.Errorf("bad table reported complete: %v", kinds)
	}
	errs := pipeErrors(t, out)
	if len(errs[bad]) != 1 || len(errs[good]) != 0 {
		t.Fatalf("errors %v, want one of %s", errs, bad)
	}
	for _, want := range []string{bad, "column d", "id=7", "'2024-02-31'"} {
		if !strings.Contains(errs[bad][0], want) {
			t.Errorf("error %q does not name %s", errs[bad][0], want)
		}
	}
	t.Logf("error: %s", errs[bad][0])
}
