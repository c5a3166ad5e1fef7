package main

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// itemsCSV reads public.items as `rtrctl read --format csv` prints it,
// lines sorted, header first.
func itemsCSV(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT id || ',' || name || ',' || price::text || ',' ||
		to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00' FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return "id,name,price,at\n" + strings.Join(lines, "\n") + "\n"
}

// sortedCSV sorts the lines of CSV output after its header.
func sortedCSV(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	sort.Strings(lines[1:])
	return strings.Join(lines, "\n") + "\n"
}

// TestReadPipe pipes a snapshot and a replication stream (and both
// concatenated) into `rtrctl read -`: the consolidated contents are the
// table at the slot's start, at the replication's stop and at any LSN
// between.
func TestReadPipe(t *testing.T) {
	dsn, conn, slot := snapshotDB(t, 300)
	ctx := ctxT(t)
	execAll(t, conn, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
	want0 := itemsCSV(t, conn)
	execAll(t, conn,
		"UPDATE items SET name = 'changed' WHERE id <= 10",
		"DELETE FROM items WHERE id > 290",
		"INSERT INTO items VALUES (1000, 'late', 2, '2024-02-01 00:00:00+00')",
	)
	l1 := pgLSN(t, ctx, conn, "pg_current_wal_insert_lsn")
	want1 := itemsCSV(t, conn)
	execAll(t, conn, "UPDATE items SET price = price + 1 WHERE id BETWEEN 20 AND 29")
	l2 := pgLSN(t, ctx, conn, "pg_current_wal_insert_lsn")
	want2 := itemsCSV(t, conn)

	snap := mustRun(t, "", "snapshot", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--parallel", "2")
	repl := mustRun(t, "", "replicate", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--stop-at", l2.String())
	both := snap + repl

	contents := []struct {
		name, in string
		args     []string
		want     string
	}{
		{"snapshot", snap, nil, want0},
		{"snapshot and replication", both, nil, want2},
		{"as of time 0", both, []string{"--as-of", "0"}, want0},
		{"as of an LSN", both, []string{"--as-of", (l1 - 1).String()}, want1},
		{"as of a number", both, []string{"--as-of", fmt.Sprint(uint64(l2 - 1))}, want2},
	}
	for _, tc := range contents {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"read", "-", "public.items", "--format", "csv"}, tc.args...)
			got := sortedCSV(mustRun(t, tc.in, args...))
			if got != tc.want {
				t.Errorf("rtrctl %v:\n%s\nwant:\n%s", args, got, tc.want)
			}
		})
	}

	t.Run("parquet", func(t *testing.T) {
		if got := sortedCSV(parquetCSV(t, []byte(mustRun(t, both, "read", "-", "public.items", "--format", "parquet")))); got != want2 {
			t.Errorf("read - --format parquet:\n%s\nwant:\n%s", got, want2)
		}
		csv := sortedCSV(mustRun(t, repl, "read", "-", "public.items", "--changes", "--format", "csv"))
		if got := sortedCSV(parquetCSV(t, []byte(mustRun(t, repl, "read", "-", "public.items", "--changes", "--format", "parquet")))); got != csv {
			t.Errorf("read - --changes --format parquet:\n%s\nwant:\n%s", got, csv)
		}
	})

	t.Run("changes", func(t *testing.T) {
		out := mustRun(t, repl, "read", "-", "public.items", "--changes", "--format", "csv")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if lines[0] != "id,name,price,at,_time,_diff" {
			t.Fatalf("header %q", lines[0])
		}
		// 10 updates (-1, +1), 10 deletes, 1 insert, then 10 updates.
		if len(lines)-1 != 51 {
			t.Errorf("%d changes, want 51:\n%s", len(lines)-1, out)
		}
		for _, l := range lines[1:] {
			f := strings.Split(l, ",")
			var at uint64
			fmt.Sscan(f[4], &at)
			if at == 0 || frontier.LSN(at) >= l2 || (f[5] != "1" && f[5] != "-1") {
				t.Errorf("change %q: want a time in (0, %s) and a diff of ±1", l, l2)
			}
		}
		first := mustRun(t, both, "read", "-", "public.items", "--changes", "--from", "0", "--to", (l1 - 1).String(), "--format", "csv")
		if n := strings.Count(first, "\n") - 1; n != 31 {
			t.Errorf("changes in (0, %s]: %d, want 31:\n%s", l1-1, n, first)
		}
		// The snapshot's rewound changes cancel against their copies at
		// time 0: what is left is one +1 per row.
		zero := mustRun(t, snap, "read", "-", "public.items", "--changes", "--format", "csv")
		if n, plus := strings.Count(zero, "\n")-1, strings.Count(zero, ",0,1\n"); n != 300 || plus != 300 {
			t.Errorf("snapshot changes: %d rows, %d of them at time 0 with diff 1; want 300", n, plus)
		}
	})

	t.Run("arrow round trip", func(t *testing.T) {
		arrowOut := mustRun(t, both, "read", "-", "public.items", "--format", "arrow")
		got := sortedCSV(mustRun(t, arrowOut, "read", "-", "public.items", "--format", "csv"))
		if got != want2 {
			t.Errorf("contents through --format arrow:\n%s\nwant:\n%s", got, want2)
		}
		changes := mustRun(t, both, "read", "-", "public.items", "--changes", "--format", "arrow")
		got = sortedCSV(mustRun(t, changes, "read", "-", "public.items", "--format", "csv"))
		if got != want2 {
			t.Errorf("contents of --changes --format arrow:\n%s\nwant:\n%s", got, want2)
		}
	})

	t.Run("json and table", func(t *testing.T) {
		js := mustRun(t, both, "read", "-", "public.items", "--format", "json")
		if n := strings.Count(want2, "\n") - 1; strings.Count(js, "\n") != n || !strings.Contains(js, `"name":"late"`) {
			t.Errorf("json output (%d lines, want %d):\n%s", strings.Count(js, "\n"), n, js)
		}
		tbl := mustRun(t, snap, "read", "-", "public.items")
		if !strings.HasPrefix(tbl, "id ") || !strings.Contains(tbl, "item 300") {
			t.Errorf("table output:\n%s", tbl)
		}
	})

	t.Run("replication alone", func(t *testing.T) {
		// Deletes of rows the pipe never inserted: shown with _diff.
		stdout, stderr, code := runCLI(t, repl, "read", "-", "public.items", "--format", "csv")
		if code != exitOK || !strings.Contains(stderr, "negative multiplicity") || !strings.HasPrefix(stdout, "id,name,price,at,_diff\n") {
			t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
	})
}

// handPipe writes a pipe of collection s.t (id int64, v utf8) in domain d:
// rows given as (id, v, time, diff, partition); no data stream when rows
// is empty.
func handPipe(t *testing.T, d frontier.Domain, rows [][]any, extra func(*pipe.Writer)) string {
	t.Helper()
	var buf bytes.Buffer
	pw := pipe.NewWriter(&buf, memory.DefaultAllocator)
	h := pipe.Header{Kind: pipe.KindData, Collection: "s.t", Source: "x", Domain: d}
	schema := pipe.DataSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, d, h.Metadata())
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(int64(r[0].(int)))
		if r[1] == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r[1].(string))
		}
		b.Field(2).(*array.Uint64Builder).Append(uint64(r[2].(int)))
		b.Field(3).(*array.Int64Builder).Append(int64(r[3].(int)))
		if d.Partitioned() {
			b.Field(4).(*array.StringBuilder).Append(r[4].(string))
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	if len(rows) > 0 {
		if err := pw.WriteRecord(h, rec); err != nil {
			t.Fatal(err)
		}
	}
	if extra != nil {
		extra(pw)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestReadPipeCases reads hand-made pipes: times, partitions, errors and
// multiplicities.
func TestReadPipeCases(t *testing.T) {
	lsn := handPipe(t, frontier.DomainLSN, [][]any{
		{1, "a", 0, 1}, {2, "b", 0, 1}, {2, "b", 0, 1}, // row 2 twice
		{1, "a", 10, -1}, {1, "A", 10, 1},
		{3, nil, 20, 1}, {2, "b", 20, -1},
		{4, "x", 30, 1}, {4, "x", 30, -1}, // cancels within its time
	}, func(pw *pipe.Writer) {
		if err := pw.WriteProgress("", "x", frontier.Single(frontier.DomainLSN, 31)); err != nil {
			t.Fatal(err)
		}
	})
	kafka := handPipe(t, frontier.DomainKafka, [][]any{
		{1, "a", 0, 1, "0"}, {2, "b", 0, 1, "1"}, {1, "a", 5, -1, "0"}, {1, "c", 5, 1, "0"}, {2, "b", 0, 1, "1"},
	}, nil)
	failed := handPipe(t, frontier.DomainLSN, [][]any{{1, "a", 0, 1}, {2, "b", 7, 1}}, func(pw *pipe.Writer) {
		if err := pw.WriteError("s.t", frontier.DomainLSN, 9, "s.t was truncated at 0/9; the collection stops here: re-snapshot it"); err != nil {
			t.Fatal(err)
		}
	})
	// A TRUNCATE at 5 after row 2 of the same time, then rows 3 and 4.
	more := handPipe(t, frontier.DomainLSN, [][]any{{3, "c", 5, 1}, {4, "d", 8, 1}}, nil)
	reset := handPipe(t, frontier.DomainLSN, [][]any{{1, "a", 0, 1}, {2, "b", 5, 1}}, func(pw *pipe.Writer) {
		if err := pw.WriteReset("s.t", frontier.DomainLSN, 5, nil); err != nil {
			t.Fatal(err)
		}
	}) + more
	tests := []struct {
		name, in string
		args     []string
		code     int
		stdout   string
		stderr   string
	}{
		{"contents", lsn, nil, exitOK, "id,v\n1,A\n2,b\n3,\n", ""},
		{"after a reset", reset, nil, exitOK, "id,v\n3,c\n4,d\n", ""},
		{"before a reset", reset, []string{"--as-of", "4"}, exitOK, "id,v\n1,a\n", ""},
		{"at a reset", reset, []string{"--as-of", "5"}, exitOK, "id,v\n3,c\n", ""},
		{"changes across a reset", reset, []string{"--changes"}, exitError, "", "resets the collection (a TRUNCATE or re-snapshot) at time 5"},
		{"changes from a reset", reset, []string{"--changes", "--from", "4"}, exitOK, "id,v,_time,_diff\n3,c,5,1\n4,d,8,1\n", ""},
		{"as of 0", lsn, []string{"--as-of", "0"}, exitOK, "id,v\n1,a\n2,b\n2,b\n", ""},
		{"as of 10", lsn, []string{"--as-of", "10"}, exitOK, "id,v\n1,A\n2,b\n2,b\n", ""},
		{"as of an LSN", lsn, []string{"--as-of", "0/14"}, exitOK, "id,v\n1,A\n2,b\n3,\n", ""},
		{"changes", lsn, []string{"--changes"}, exitOK, "id,v,_time,_diff\n1,a,0,1\n2,b,0,2\n1,A,10,1\n1,a,10,-1\n2,b,20,-1\n3,,20,1\n", ""},
		{"changes between", lsn, []string{"--changes", "--from", "0", "--to", "10"}, exitOK, "id,v,_time,_diff\n1,A,10,1\n1,a,10,-1\n", ""},
		{"kafka contents", kafka, nil, exitOK, "id,v\n1,c\n2,b\n2,b\n", ""},
		{"kafka changes", kafka, []string{"--changes"}, exitOK, "id,v,_time,_diff,_partition\n1,a,0,1,0\n2,b,0,2,1\n1,a,5,-1,0\n1,c,5,1,0\n", ""},
		{"kafka as of", kafka, []string{"--as-of", "3"}, exitUsage, "", "partitioned"},
		{"kafka contents as arrow", kafka, []string{"--format", "arrow"}, exitUsage, "", "use --changes --format arrow"},
		{"definite error", failed, nil, exitError, "", "definite error from time 9 on: s.t was truncated"},
		{"before the error", failed, []string{"--as-of", "8"}, exitOK, "id,v\n1,a\n2,b\n", ""},
		{"changes from 10", lsn, []string{"--changes", "--from", "10"}, exitOK, "id,v,_time,_diff\n2,b,20,-1\n3,,20,1\n", ""},
		{"negative contents", handPipe(t, frontier.DomainLSN, [][]any{{1, "a", 5, -1}, {2, "b", 5, 1}}, nil), nil, exitOK, "id,v,_diff\n1,a,-1\n2,b,1\n", "negative multiplicity"},
		{"no rows of it, replication progress", handPipe(t, frontier.DomainLSN, nil, func(pw *pipe.Writer) {
			pw.WriteProgress("", "x", frontier.Single(frontier.DomainLSN, 5))
		}), nil, exitOK, "", "no rows of it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"read", "-", "s.t", "--format", "csv"}, tc.args...)
			stdout, stderr, code := runCLI(t, tc.in, args...)
			if code != tc.code || stdout != tc.stdout || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("rtrctl %v: exit %d (want %d)\nstdout:\n%s\nwant:\n%s\nstderr: %s (want it to contain %q)", args, code, tc.code, stdout, tc.stdout, stderr, tc.stderr)
			}
		})
	}
}

// TestReadPipeArrowPartitioned: --changes --format arrow of a partitioned
// collection is a pipe with _partition that reads back the same.
func TestReadPipeArrowPartitioned(t *testing.T) {
	kafka := handPipe(t, frontier.DomainKafka, [][]any{
		{1, "a", 0, 1, "0"}, {2, "b", 3, 1, "1"}, {1, "a", 5, -1, "0"}, {1, "c", 5, 1, "0"},
	}, nil)
	out := mustRun(t, kafka, "read", "-", "s.t", "--changes", "--format", "arrow")
	for _, args := range [][]string{{"--changes"}, nil} {
		want := mustRun(t, kafka, append([]string{"read", "-", "s.t", "--format", "csv"}, args...)...)
		if got := mustRun(t, out, append([]string{"read", "-", "s.t", "--format", "csv"}, args...)...); got != want {
			t.Errorf("read %v of the arrow output:\n%s\nwant:\n%s", args, got, want)
		}
	}
}

// TestReadPipeBadInput: what is not a pipe, a cut pipe, a pipe without the
// collection and bad flags fail with a message saying so.
func TestReadPipeBadInput(t *testing.T) {
	good := handPipe(t, frontier.DomainLSN, [][]any{{1, "a", 0, 1}}, nil)
	other := strings.Replace(good, "s.t", "s.u", 1)
	tests := []struct {
		name, in string
		args     []string
		code     int
		stderr   string
	}{
		{"not a pipe", "id,v\n1,a\n", nil, exitError, "pipe: "},
		{"truncated", good[:len(good)-20], nil, exitError, "truncated"},
		{"garbage after a stream", good + "garbage!", nil, exitError, "pipe: stream 1"},
		{"empty", "", nil, exitError, "carries nothing of s.t\nhint: the pipe on stdin carries no collections"},
		{"other collection", other, nil, exitError, "hint: collections in the pipe: s.u"},
		{"bad as-of", good, []string{"--as-of", "yesterday"}, exitUsage, `bad --as-of "yesterday"`},
		{"bad LSN", good, []string{"--as-of", "0/xyz"}, exitUsage, "an LSN such as 0/16B3748"},
		{"as-of with changes", good, []string{"--as-of", "1", "--changes"}, exitUsage, "exclude each other"},
		{"from after to", good, []string{"--changes", "--from", "5", "--to", "4"}, exitUsage, "--from 5 is after --to 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"read", "-", "s.t"}, tc.args...)
			stdout, stderr, code := runCLI(t, tc.in, args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) || stdout != "" {
				t.Errorf("rtrctl %v: exit %d (want %d)\nstdout: %s\nstderr: %s (want it to contain %q)", args, code, tc.code, stdout, stderr, tc.stderr)
			}
		})
	}
}
