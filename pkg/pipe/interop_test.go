package pipe

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/interop"
	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// flat turns a decoded JSON value into strings for comparison: numbers as
// printed, null as "null", arrays element by element.
func flat(v any) any {
	switch v := v.(type) {
	case nil:
		return "null"
	case json.Number:
		return v.String()
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = flat(x)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = flat(x)
		}
		return out
	}
	return fmt.Sprint(v)
}

func strs(vs ...any) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = flat(v)
		if s, ok := v.(string); ok {
			out[i] = s
		}
	}
	return out
}

// TestNodeInterop proves the pipe format against Apache Arrow JS, in both
// directions, and checks read-file.mjs on an Arrow IPC file.
func TestNodeInterop(t *testing.T) {
	dir := t.TempDir()
	mem := checked(t)

	t.Run("go writes, node reads", func(t *testing.T) {
		path := filepath.Join(dir, "go.pipe")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := NewWriter(f, mem)
		user := []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
			{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
			{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		}
		// JSON numbers lose precision beyond 2^53, so exact 64-bit
		// columns are built directly.
		ib := array.NewInt64Builder(mem)
		ib.AppendValues([]int64{1, -9007199254740993, 3}, nil)
		ids := ib.NewArray()
		defer ids.Release()
		ib.Release()
		tb := array.NewUint64Builder(mem)
		tb.AppendValues([]uint64{0, 23803720, 18446744073709551615}, nil)
		times := tb.NewArray()
		defer times.Release()
		tb.Release()
		cols := []any{
			ids, `["one", null, "tré"]`, `[1.5, 0.1, null]`, `[true, null, false]`, `[[1, 2], null, []]`, times, `[1, -1, 1]`,
		}
		lsn := Header{Kind: KindData, Collection: "public.orders", Source: "pg", Domain: frontier.DomainLSN, Key: []string{"id"}}
		rec := jsonRecord(t, DataSchema(user, frontier.DomainLSN, arrow.Metadata{}), cols)
		if err := w.WriteRecord(lsn, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		kafka := Header{Kind: KindData, Collection: "events", Domain: frontier.DomainKafka}
		rec = jsonRecord(t, DataSchema(user[:2], frontier.DomainKafka, arrow.Metadata{}), []any{`[7, 8]`, `["a", "b"]`, `[15, 3]`, `[1, 1]`, `["0", "2"]`})
		if err := w.WriteRecord(kafka, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if err := w.WriteProgress("events", "", mustFrontier(t, frontier.DomainKafka, map[string]uint64{"0": 16, "2": 4})); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteProgress("public.orders", "pg", frontier.Empty(frontier.DomainLSN)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}

		streams := interop.ReadPipe(t, path)
		if len(streams) != 4 {
			t.Fatalf("node read %d streams, want 4", len(streams))
		}
		want := []struct {
			md      map[string]string
			fields  []string
			columns map[string][]any
		}{
			{
				md:     map[string]string{"rtr.version": "1", "rtr.kind": "data", "rtr.collection": "public.orders", "rtr.source": "pg", "rtr.time": "lsn", "rtr.key": "id"},
				fields: []string{"id", "name", "price", "ok", "tags", "_time", "_diff"},
				columns: map[string][]any{
					"id":    strs("1", "-9007199254740993", "3"),
					"name":  strs("one", nil, "tré"),
					"price": strs(json.Number("1.5"), json.Number("0.1"), nil),
					"ok":    strs("true", nil, "false"),
					"tags":  {[]any{"1", "2"}, "null", []any{}},
					"_time": strs("0", "23803720", "18446744073709551615"),
					"_diff": strs("1", "-1", "1"),
				},
			},
			{
				md:      map[string]string{"rtr.version": "1", "rtr.kind": "data", "rtr.collection": "events", "rtr.time": "kafka"},
				fields:  []string{"id", "name", "_time", "_diff", "_partition"},
				columns: map[string][]any{"id": strs("7", "8"), "name": strs("a", "b"), "_time": strs("15", "3"), "_diff": strs("1", "1"), "_partition": strs("0", "2")},
			},
			{
				md:      map[string]string{"rtr.version": "1", "rtr.kind": "progress", "rtr.collection": "events", "rtr.time": "kafka"},
				fields:  []string{"_partition", "_upper"},
				columns: map[string][]any{"_partition": strs("0", "2"), "_upper": strs("16", "4")},
			},
			{
				md:      map[string]string{"rtr.version": "1", "rtr.kind": "progress", "rtr.collection": "public.orders", "rtr.source": "pg", "rtr.time": "lsn"},
				fields:  []string{"_partition", "_upper"},
				columns: map[string][]any{"_partition": {}, "_upper": {}},
			},
		}
		for i, w := range want {
			s := streams[i]
			w.md[MetaChecksum] = ChecksumCRC32C // every Go-written stream declares its batch checksums
			if !reflect.DeepEqual(s.Metadata, w.md) {
				t.Errorf("stream %d metadata = %v, want %v", i, s.Metadata, w.md)
			}
			var names []string
			for _, f := range s.Fields {
				names = append(names, f.Name)
			}
			if !reflect.DeepEqual(names, w.fields) {
				t.Errorf("stream %d fields = %v, want %v", i, names, w.fields)
			}
			for name, vals := range w.columns {
				got, _ := flat(s.Columns[name]).([]any)
				if got == nil {
					got = []any{}
				}
				if !reflect.DeepEqual(got, vals) {
					t.Errorf("stream %d column %s = %#v, want %#v", i, name, got, vals)
				}
			}
		}
	})

	t.Run("node writes, go reads", func(t *testing.T) {
		path := filepath.Join(dir, "node.pipe")
		interop.MustRun(t, "write-pipe.mjs", path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r := NewReader(f, mem)
		s := nextStream(t, r, 0, Header{Kind: KindData, Collection: "js.items", Source: "node", Domain: frontier.DomainLSN, Key: []string{"id"}})
		rec, err := s.NextRecord()
		if err != nil {
			t.Fatal(err)
		}
		cols, times, diffs, parts := SplitData(rec)
		if len(cols) != 3 || parts != nil {
			t.Fatalf("user columns %d, partitions %v", len(cols), parts != nil)
		}
		ids, ok1 := cols[0].(*array.Int64)
		names, ok2 := cols[1].(*array.String)
		prices, ok3 := cols[2].(*array.Float64)
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("column types %s %s %s", cols[0].DataType(), cols[1].DataType(), cols[2].DataType())
		}
		if got := fmt.Sprint(ids.Int64Values(), times.Uint64Values(), diffs.Int64Values()); got != "[1 -2 9007199254740993] [0 23803720 18446744073709551615] [1 -1 1]" {
			t.Errorf("ids, times, diffs = %s", got)
		}
		if names.Value(0) != "apple" || !names.IsNull(1) || names.Value(2) != "ünïcode ✓" {
			t.Errorf("names = %v", names)
		}
		if prices.Value(0) != 1.5 || prices.Value(1) != 0.1 || !prices.IsNull(2) {
			t.Errorf("prices = %v", prices)
		}
		rec.Release()
		if _, err := s.NextRecord(); err != io.EOF {
			t.Fatalf("end of data stream: %v", err)
		}
		s = nextStream(t, r, 1, Header{Kind: KindProgress, Collection: "js.items", Domain: frontier.DomainLSN})
		fr, err := s.ReadProgress()
		if err != nil {
			t.Fatal(err)
		}
		if fr.Pos() != 23803721 {
			t.Errorf("progress = %s, want 0/16B3749", fr)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("end of pipe: %v", err)
		}
	})

	t.Run("read-file.mjs reads an Arrow IPC file", func(t *testing.T) {
		path := filepath.Join(dir, "batch.arrow")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		h := Header{Kind: KindData, Collection: "db.t", Domain: frontier.DomainSystem}
		md := mergeMetadata(arrow.NewMetadata([]string{"store.lower"}, []string{"1000"}), h.Metadata())
		s := DataSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String}, {Name: "v", Type: arrow.PrimitiveTypes.Float64, Nullable: true}}, h.Domain, md)
		fw, err := ipc.NewFileWriter(f, ipc.WithSchema(s), ipc.WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		for _, cols := range [][]any{{`["a", "b"]`, `[1.25, null]`, `[1000, 1001]`, `[1, 1]`}, {`["a"]`, `[1.25]`, `[1002]`, `[-1]`}} {
			rec := jsonRecord(t, s, cols)
			if err := fw.Write(rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		tab := interop.ReadFile(t, path)
		if tab.Metadata["store.lower"] != "1000" || tab.Metadata["rtr.collection"] != "db.t" {
			t.Errorf("metadata = %v", tab.Metadata)
		}
		if tab.Batches != 2 || tab.Rows != 3 {
			t.Errorf("batches, rows = %d, %d, want 2, 3", tab.Batches, tab.Rows)
		}
		var names []string
		for _, f := range tab.Fields {
			names = append(names, f.Name+":"+f.Type)
		}
		if got := strings.Join(names, " "); got != "k:Utf8 v:Float64 _time:Uint64 _diff:Int64" {
			t.Errorf("fields = %s", got)
		}
		want := map[string][]any{"k": strs("a", "b", "a"), "v": strs(json.Number("1.25"), nil, json.Number("1.25")), "_time": strs("1000", "1001", "1002"), "_diff": strs("1", "1", "-1")}
		for name, vals := range want {
			if got := flat(tab.Columns[name]); !reflect.DeepEqual(got, vals) {
				t.Errorf("column %s = %#v, want %#v", name, got, vals)
			}
		}
	})
}

// jsonRecord builds a record of schema s from one column each: a JSON
// array (string) or an arrow.Array.
func jsonRecord(t testing.TB, s *arrow.Schema, cols []any) arrow.Record {
	t.Helper()
	if len(cols) != s.NumFields() {
		t.Fatalf("jsonRecord: %d columns for %d fields", len(cols), s.NumFields())
	}
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		if a, ok := c.(arrow.Array); ok {
			arrs[i] = a
			continue
		}
		a, _, err := array.FromJSON(memory.DefaultAllocator, s.Field(i).Type, strings.NewReader(c.(string)))
		if err != nil {
			t.Fatalf("column %s: %v", s.Field(i).Name, err)
		}
		defer a.Release()
		arrs[i] = a
	}
	return array.NewRecord(s, arrs, int64(arrs[0].Len()))
}
