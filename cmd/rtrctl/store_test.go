package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/interop"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// update is one row of the test collection (id, name, price) at a time.
type update struct {
	id    int64
	name  string
	price float64
	time  uint64
	diff  int64
}

var orderFields = []arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}

// pipeBuilder writes test pipes.
type pipeBuilder struct {
	t   *testing.T
	buf bytes.Buffer
	w   *pipe.Writer
}

func newPipe(t *testing.T) *pipeBuilder {
	p := &pipeBuilder{t: t}
	p.w = pipe.NewWriter(&p.buf, memory.DefaultAllocator)
	return p
}

func (p *pipeBuilder) data(collection string, d frontier.Domain, ups ...update) *pipeBuilder {
	h := pipe.Header{Kind: pipe.KindData, Collection: collection, Source: "pg", Domain: d}
	schema := pipe.DataSchema(orderFields, d, h.Metadata())
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, u := range ups {
		b.Field(0).(*array.Int64Builder).Append(u.id)
		b.Field(1).(*array.StringBuilder).Append(u.name)
		b.Field(2).(*array.Float64Builder).Append(u.price)
		b.Field(3).(*array.Uint64Builder).Append(u.time)
		b.Field(4).(*array.Int64Builder).Append(u.diff)
		if d.Partitioned() {
			b.Field(5).(*array.StringBuilder).Append("0")
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	if err := p.w.WriteRecord(h, rec); err != nil {
		p.t.Fatal(err)
	}
	return p
}

func (p *pipeBuilder) progress(collection string, upper uint64) *pipeBuilder {
	if err := p.w.WriteProgress(collection, "pg", frontier.Single(frontier.DomainSystem, upper)); err != nil {
		p.t.Fatal(err)
	}
	return p
}

func (p *pipeBuilder) bindings(bs ...frontier.Binding) *pipeBuilder {
	if err := p.w.WriteBindings("pg", bs); err != nil {
		p.t.Fatal(err)
	}
	return p
}

func (p *pipeBuilder) bytes() []byte {
	if err := p.w.Close(); err != nil {
		p.t.Fatal(err)
	}
	return p.buf.Bytes()
}

// mustRun runs rtrctl and fails the test unless it exits 0.
func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	stdout, stderr, code := runCLI(t, stdin, args...)
	if code != exitOK {
		t.Fatalf("rtrctl %v: exit %d\n%s", args, code, stderr)
	}
	return stdout
}

// treeHash hashes every file name and content under dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	for _, n := range names {
		h.Write([]byte(n + "\n"))
		if b, err := os.ReadFile(n); err == nil {
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func lsnLike(u uint64) frontier.Frontier { return frontier.Single(frontier.DomainLSN, u) }

// seedStore commits two intervals of public.orders and one binding.
func seedStore(t *testing.T, dir string) {
	in := newPipe(t).
		bindings(frontier.Binding{Time: 100, Frontier: lsnLike(1)}).
		data("public.orders", frontier.DomainSystem,
			update{1, "apple", 1.5, 100, 1}, update{2, "pear", 2.25, 101, 1}, update{3, "plum", 0.5, 101, 1}).
		progress("public.orders", 102).
		bindings(frontier.Binding{Time: 150, Frontier: lsnLike(500)}).
		data("public.orders", frontier.DomainSystem,
			update{2, "pear", 2.25, 150, -1}, update{2, "pear", 2.5, 150, 1}, update{3, "plum", 0.5, 160, -1}).
		progress("public.orders", 200).bytes()
	mustRun(t, string(in), "store", "append", dir)
}

func TestStoreAppendAndRead(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"csv as of first interval", []string{"read", dir, "public.orders", "--as-of", "101", "--format", "csv"},
			"id,name,price\n1,apple,1.5\n2,pear,2.25\n3,plum,0.5\n"},
		{"csv latest by default", []string{"read", dir, "public.orders", "--format", "csv"},
			"id,name,price\n1,apple,1.5\n2,pear,2.5\n"},
		{"between commits", []string{"read", dir, "public.orders", "--as-of", "155", "-f", "csv"},
			"id,name,price\n1,apple,1.5\n2,pear,2.5\n3,plum,0.5\n"},
		{"as of RFC 3339", []string{"read", dir, "public.orders", "--as-of", "1970-01-01T00:00:00.101Z", "--format", "csv"},
			"id,name,price\n1,apple,1.5\n2,pear,2.25\n3,plum,0.5\n"},
		{"as of RFC 3339 with an offset", []string{"read", dir, "public.orders", "--as-of", "1970-01-01T01:00:00.155+01:00", "-f", "csv"},
			"id,name,price\n1,apple,1.5\n2,pear,2.5\n3,plum,0.5\n"},
		{"json", []string{"read", dir, "public.orders", "--format", "json"},
			`{"id":1,"name":"apple","price":1.5}` + "\n" + `{"id":2,"name":"pear","price":2.5}` + "\n"},
		{"table", []string{"read", dir, "public.orders", "--as-of", "100"},
			"id  name   price\n1   apple  1.5\n"},
		{"changes", []string{"read", dir, "public.orders", "--changes", "--from", "101", "--to", "199", "--format", "csv"},
			"id,name,price,_time,_diff\n2,pear,2.25,150,-1\n2,pear,2.5,150,1\n3,plum,0.5,160,-1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustRun(t, "", tc.args...); got != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}

	t.Run("inspect", func(t *testing.T) {
		out := mustRun(t, "", "store", "inspect", dir, "--output", "json")
		var shards []inspectJSON
		if err := json.Unmarshal([]byte(out), &shards); err != nil {
			t.Fatal(err)
		}
		byName := map[string]inspectJSON{}
		for _, s := range shards {
			byName[s.Kind+":"+s.Name] = s
		}
		if o := byName["data:public.orders"]; o.Upper != 200 || o.Batches != 2 || o.Rows != 6 {
			t.Fatalf("public.orders: %+v", o)
		}
		if r := byName["remap:pg"]; r.Upper != 151 || r.Domain != "lsn" {
			t.Fatalf("remap pg: %+v", r)
		}
		text := mustRun(t, "", "store", "inspect", dir, "public.orders")
		for _, w := range []string{"public.orders", "schema:", "id int64", "batches:", "[0, 102)", "[102, 200)"} {
			if !strings.Contains(text, w) {
				t.Errorf("inspect output lacks %q:\n%s", w, text)
			}
		}
	})

	t.Run("arrow output pipes into another store", func(t *testing.T) {
		arrowOut := mustRun(t, "", "read", dir, "public.orders", "--format", "arrow")
		copyDir := t.TempDir() + "/copy"
		in := string(arrowOut) + string(newPipe(t).progress("public.orders", 300).bytes())
		mustRun(t, in, "store", "append", copyDir)
		got := mustRun(t, "", "read", copyDir, "public.orders", "--format", "csv")
		if want := "id,name,price\n1,apple,1.5\n2,pear,2.5\n"; got != want {
			t.Fatalf("copy reads %q, want %q", got, want)
		}
	})

	t.Run("replay is skipped, not duplicated", func(t *testing.T) {
		before := treeHash(t, dir)
		seedStore(t, dir)
		if after := treeHash(t, dir); after != before {
			t.Fatal("replaying the same pipe changed the store")
		}
	})

	t.Run("compact keeps reads", func(t *testing.T) {
		mustRun(t, "", "store", "compact", dir, "--retain", "1000h")
		if got := mustRun(t, "", "read", dir, "public.orders", "--as-of", "101", "-f", "csv"); got != "id,name,price\n1,apple,1.5\n2,pear,2.25\n3,plum,0.5\n" {
			t.Fatalf("after compaction: %q", got)
		}
	})
}

func TestStoreAppendBadInputLeavesStoreAsItWas(t *testing.T) {
	valid := newPipe(t).data("public.orders", frontier.DomainSystem, update{9, "fig", 3, 300, 1}).progress("public.orders", 301).bytes()
	otherSchema := func() []byte {
		var buf bytes.Buffer
		w := pipe.NewWriter(&buf, memory.DefaultAllocator)
		h := pipe.Header{Kind: pipe.KindData, Collection: "public.orders", Domain: frontier.DomainSystem}
		schema := pipe.DataSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, frontier.DomainSystem, h.Metadata())
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		b.Field(0).(*array.StringBuilder).Append("x")
		b.Field(1).(*array.Uint64Builder).Append(300)
		b.Field(2).(*array.Int64Builder).Append(1)
		rec := b.NewRecord()
		if err := w.WriteRecord(h, rec); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteProgress("public.orders", "", frontier.Single(frontier.DomainSystem, 301)); err != nil {
			t.Fatal(err)
		}
		w.Close()
		return buf.Bytes()
	}()
	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		{"garbage", []byte("this is not arrow at all, just text\n"), "pipe: stream 0"},
		{"truncated", valid[:len(valid)-40], "truncated"},
		{"valid then garbage", append(append([]byte{}, valid[:len(valid)/2]...), []byte("garbage!garbage!")...), "pipe:"},
		{"wrong schema", otherSchema, "schema mismatch"},
		{"source times", newPipe(t).data("public.orders", frontier.DomainLSN, update{9, "fig", 3, 300, 1}).progress("public.orders", 301).bytes(), "rtrctl reclock"},
		{"times going backwards", newPipe(t).
			data("public.orders", frontier.DomainSystem, update{9, "fig", 3, 300, 1}).
			data("public.orders", frontier.DomainSystem, update{10, "kiwi", 3, 250, 1}).
			progress("public.orders", 301).progress("public.orders", 302).
			data("public.orders", frontier.DomainSystem, update{11, "lime", 3, 301, 1}).bytes(), "times went backwards"},
		{"row beyond its progress", newPipe(t).data("public.orders", frontier.DomainSystem, update{9, "fig", 3, 400, 1}).progress("public.orders", 301).bytes(), "at or beyond its progress"},
		{"different replay", newPipe(t).data("public.orders", frontier.DomainSystem, update{1, "apple", 9.99, 100, 1}).progress("public.orders", 102).bytes(), "not a replay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir() + "/data"
			seedStore(t, dir)
			before := treeHash(t, dir)
			_, stderr, code := runCLI(t, string(tc.input), "store", "append", dir)
			if code != exitError {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			if after := treeHash(t, dir); after != before {
				t.Fatal("bad input changed the store")
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	missing := t.TempDir() + "/nothing-here"
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"at upper", []string{"read", dir, "public.orders", "--as-of", "200"}, exitError, []string{"not readable", "[0, 200)"}},
		{"changes beyond upper", []string{"read", dir, "public.orders", "--changes", "--from", "0", "--to", "250"}, exitError, []string{"[0, 200)"}},
		{"unknown collection", []string{"read", dir, "public.nope"}, exitError, []string{`collection "public.nope" is not in store`, "hint: collections in this store: public.orders"}},
		{"no store", []string{"read", missing, "public.orders"}, exitError, []string{"no rtrctl store here"}},
		{"bad time", []string{"read", dir, "public.orders", "--as-of", "yesterday"}, exitUsage, []string{"bad --as-of", "milliseconds since the Unix epoch"}},
		{"bad format", []string{"read", dir, "public.orders", "--format", "xml"}, exitUsage, []string{"bad --format"}},
		{"from without changes", []string{"read", dir, "public.orders", "--from", "1"}, exitUsage, []string{"--from/--to need --changes"}},
		{"missing args", []string{"read", dir}, exitUsage, []string{"want DIR COLLECTION"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("reading a missing store created %s", missing)
	}
	t.Run("before since after compaction", func(t *testing.T) {
		mustRun(t, "", "store", "compact", dir, "--retain", "10ms")
		_, stderr, code := runCLI(t, "", "read", dir, "public.orders", "--as-of", "101")
		if code != exitError || !strings.Contains(stderr, "[190, 200)") {
			t.Fatalf("exit %d, stderr %q: want the readable range [190, 200)", code, stderr)
		}
		if got := mustRun(t, "", "read", dir, "public.orders", "-f", "csv"); got != "id,name,price\n1,apple,1.5\n2,pear,2.5\n" {
			t.Fatalf("latest read after compaction: %q", got)
		}
	})
}

// TestStoreBatchNodeInterop reads a store batch file with an independent
// Arrow implementation (apache-arrow under Node.js).
func TestStoreBatchNodeInterop(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	out := mustRun(t, "", "store", "inspect", dir, "public.orders", "--output", "json")
	var info inspectJSON
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Files) != 2 {
		t.Fatalf("want 2 batch files, got %+v", info.Files)
	}
	tab := interop.ReadFile(t, info.Files[0].Path)
	if tab.Rows != 3 {
		t.Fatalf("node read %d rows, want 3", tab.Rows)
	}
	// Batches are sorted by row: ids 1, 2, 3 at times 100, 101, 101.
	want := map[string][]any{
		"id":    {"1", "2", "3"},
		"name":  {"apple", "pear", "plum"},
		"price": {1.5, 2.25, 0.5},
		"_time": {"100", "101", "101"},
		"_diff": {"1", "1", "1"},
	}
	for col, vals := range want {
		got := tab.Columns[col]
		if len(got) != len(vals) {
			t.Fatalf("column %s: %v, want %v", col, got, vals)
		}
		for i := range vals {
			if fmt.Sprint(got[i]) != fmt.Sprint(vals[i]) {
				t.Errorf("column %s row %d: %v (%T), want %v", col, i, got[i], got[i], vals[i])
			}
		}
	}
}

// TestStoreInspectGenerations: inspect of a collection with a new
// generation (here a TRUNCATE-like one at 200) lists the generations and
// each batch's.
func TestStoreInspectGenerations(t *testing.T) {
	dir := t.TempDir() + "/data"
	seedStore(t, dir)
	st, err := store.Open(t.Context(), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(t.Context(), "public.orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sh.NewGeneration(t.Context(), 200, sh.Schema()); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "", "store", "inspect", dir, "public.orders", "--output", "json")
	var info inspectJSON
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Generations) != 2 || info.Generations[1].Start != 200 || info.Generations[1].Schema[0] != "id int64" {
		t.Fatalf("generations %+v", info.Generations)
	}
	text := mustRun(t, "", "store", "inspect", dir, "public.orders")
	for _, w := range []string{"generations:", "from 0: id int64", "from 200: id int64", "generation=0"} {
		if !strings.Contains(text, w) {
			t.Errorf("inspect output lacks %q:\n%s", w, text)
		}
	}
}
