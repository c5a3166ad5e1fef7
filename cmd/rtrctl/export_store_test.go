package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/rtrctl/rtrctl/internal/render"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// parquetCSV reads Parquet files with pqarrow's reader and renders their
// rows, file after file, as CSV with a header.
func parquetCSV(t *testing.T, files ...[]byte) string {
	t.Helper()
	var out bytes.Buffer
	var text *render.Stream
	for _, b := range files {
		tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(b), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		if text == nil {
			if text, err = render.NewStream(&out, "csv", tbl.Schema().Fields()); err != nil {
				t.Fatal(err)
			}
		}
		tr := array.NewTableReader(tbl, 0)
		for tr.Next() {
			if err := text.Write(tr.Record(), nil); err != nil {
				t.Fatal(err)
			}
		}
		tr.Release()
		tbl.Release()
	}
	if err := text.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// readParts reads an export's part files in name order.
func readParts(t *testing.T, dir string) (names []string, files [][]byte) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		names = append(names, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	return names, files
}

// TestExportParquet: export and read --format parquet write what read
// prints as CSV, a row once per copy (multiplicity 2 is two rows), cut
// into files of --file-rows; the changes carry _time and _diff.
func TestExportParquet(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	in := newPipe(t).
		bindings(frontier.Binding{Time: 250, Frontier: lsnLike(900)}).
		data("public.orders", frontier.DomainSystem, update{4, "fig", 3, 250, 2}).
		progress("public.orders", 300).bytes()
	mustRun(t, string(in), "store", "append", dir)
	want := mustRun(t, "", "read", dir, "public.orders", "--format", "csv")
	if !strings.Contains(want, "4,fig,3\n4,fig,3\n") {
		t.Fatalf("the seed lacks a row of multiplicity 2: %q", want)
	}

	to := t.TempDir() + "/out"
	got := mustRun(t, "", "export", dir, "public.orders", "--to", to, "--file-rows", "2")
	if got != fmt.Sprintf("exported 4 rows of public.orders as of 299 to %s in 2 files\n", to) {
		t.Errorf("export printed %q", got)
	}
	names, files := readParts(t, to)
	if fmt.Sprint(names) != "[part-00000.parquet part-00001.parquet]" {
		t.Errorf("export wrote %v", names)
	}
	if got := parquetCSV(t, files...); got != want {
		t.Errorf("export reads back as\n%s\nwant\n%s", got, want)
	}
	if got := parquetCSV(t, []byte(mustRun(t, "", "read", dir, "public.orders", "--format", "parquet"))); got != want {
		t.Errorf("read --format parquet reads back as\n%s\nwant\n%s", got, want)
	}
	asOf := mustRun(t, "", "read", dir, "public.orders", "--as-of", "155", "--format", "csv")
	to155 := t.TempDir() + "/155"
	mustRun(t, "", "export", dir, "public.orders", "--to", to155, "--as-of", "155")
	if _, files := readParts(t, to155); parquetCSV(t, files...) != asOf {
		t.Errorf("export --as-of 155 reads back as\n%s\nwant\n%s", parquetCSV(t, files...), asOf)
	}
	changes := mustRun(t, "", "read", dir, "public.orders", "--changes", "--from", "101", "--format", "csv")
	if got := parquetCSV(t, []byte(mustRun(t, "", "read", dir, "public.orders", "--changes", "--from", "101", "--format", "parquet"))); got != changes {
		t.Errorf("read --changes --format parquet reads back as\n%s\nwant\n%s", got, changes)
	}
}

// TestExportErrors: bad input is a clear error with a hint, and leaves
// nothing in the target.
func TestExportErrors(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := t.TempDir() + "/done"
	mustRun(t, "", "export", dir, "public.orders", "--to", done)
	mustRun(t, "", "store", "compact", dir, "--retain", "10ms")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown collection", []string{"public.nope"}, exitError, []string{`collection "public.nope" is not in store`, "hint: collections in this store: public.orders"}},
		{"before since", []string{"public.orders", "--as-of", "101"}, exitError, []string{"export public.orders as of 101: not readable; readable times are [190, 200)", "hint: pick --as-of between 190", "and 199"}},
		{"no target", []string{"public.orders", "--to", ""}, exitUsage, []string{"no --to given", "hint: add --to DIR"}},
		{"bad file size", []string{"public.orders", "--file-size", "1kB"}, exitUsage, []string{`bad --file-size "1kB"`}},
		{"unwritable target", []string{"public.orders", "--to", notDir + "/sub"}, exitError, []string{"export: create " + notDir + "/sub", "not a directory", "hint: check that the directory"}},
		{"target holds an export", []string{"public.orders", "--to", done}, exitError, []string{"already holds part-00000.parquet", "hint: export into a new or empty --to"}},
		{"bad s3 url", []string{"public.orders", "--to", "s3:///x"}, exitError, []string{"no bucket", "hint: write --to s3://BUCKET/PREFIX"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := t.TempDir() + "/out"
			args := append([]string{"export", dir}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--to") {
				args = append(args, "--to", to)
			}
			_, stderr, code := runCLI(t, "", args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if _, err := os.Stat(to); !os.IsNotExist(err) {
				t.Errorf("a failed export left %s", to)
			}
		})
	}
	if names, _ := readParts(t, done); fmt.Sprint(names) != "[part-00000.parquet]" {
		t.Errorf("the refused export touched the earlier one: %v", names)
	}
}

// TestReadBinaryToTerminal: the binary formats are refused when stdout is
// a terminal, with a hint; text formats are not.
func TestReadBinaryToTerminal(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	_, pts := openPTY(t)
	defer pts.Close()
	for _, format := range []string{"parquet", "arrow", "csv"} {
		var errOut bytes.Buffer
		code := run([]string{"rtrctl", "read", dir, "public.orders", "--format", format}, strings.NewReader(""), pts, &errOut)
		if format == "csv" {
			if code != exitOK {
				t.Errorf("csv to a terminal: exit %d, %s", code, errOut.String())
			}
			continue
		}
		if code != exitUsage || !strings.Contains(errOut.String(), "--format "+format+" is binary and stdout is a terminal") ||
			!strings.Contains(errOut.String(), "hint: redirect it") {
			t.Errorf("%s to a terminal: exit %d, stderr %q; want it refused with a hint", format, code, errOut.String())
		}
	}
}

// TestExportS3: an export to s3://bucket/prefix (versitygw) uploads whole
// part files through the store's S3 client and nothing else.
func TestExportS3(t *testing.T) {
	s3 := testenv.StartVersityGW(t, "lake")
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	got := mustRun(t, "", "export", dir, "public.orders", "--to", "s3://lake/exports/orders", "--file-rows", "1")
	if !strings.Contains(got, "exported 2 rows") || !strings.Contains(got, "in 2 files") {
		t.Errorf("export printed %q", got)
	}
	client, err := store.NewS3Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fsys := store.NewS3FS(client, "lake")
	ents, err := fsys.ReadDir("exports/orders")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var files [][]byte
	for _, e := range ents {
		names = append(names, e.Name())
		b, err := fsys.ReadFile("exports/orders/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[part-00000.parquet part-00001.parquet]" {
		t.Errorf("the bucket holds %v", names)
	}
	if got, want := parquetCSV(t, files...), mustRun(t, "", "read", dir, "public.orders", "--format", "csv"); got != want {
		t.Errorf("the S3 export reads back as\n%s\nwant\n%s", got, want)
	}
	_, stderr, code := runCLI(t, "", "export", dir, "public.orders", "--to", "s3://lake/exports/orders")
	if code != exitError || !strings.Contains(stderr, "already holds part-00000.parquet") {
		t.Errorf("a second export to the prefix: exit %d, %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "", "export", dir, "public.orders", "--to", "s3://nobucket/x")
	if code != exitError || !strings.Contains(stderr, "hint: check that the directory (or bucket and credentials)") {
		t.Errorf("an export to a missing bucket: exit %d, %q", code, stderr)
	}
}
