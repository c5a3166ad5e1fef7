package pipe

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// col is a column of a raw test stream: a field and its values per batch
// (nil = null).
type col struct {
	f    arrow.Field
	vals [][]any
}

// raw writes one Arrow IPC stream with plain ipc.Writer, bypassing every
// check of Writer, so that tests can produce invalid pipes.
func raw(t testing.TB, md map[string]string, cols []col, opts ...ipc.Option) []byte {
	t.Helper()
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = c.f
	}
	m := arrow.MetadataFrom(md)
	s := arrow.NewSchema(fields, &m)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, append([]ipc.Option{ipc.WithSchema(s)}, opts...)...)
	nb := 0
	if len(cols) > 0 {
		nb = len(cols[0].vals)
	}
	for bi := 0; bi < nb; bi++ {
		b := array.NewRecordBuilder(memory.DefaultAllocator, s)
		for ci, c := range cols {
			for _, v := range c.vals[bi] {
				fb := b.Field(ci)
				if v == nil {
					fb.AppendNull()
					continue
				}
				switch fb := fb.(type) {
				case *array.Uint64Builder:
					fb.Append(uint64(v.(int)))
				case *array.Int64Builder:
					fb.Append(int64(v.(int)))
				case *array.StringBuilder:
					fb.Append(v.(string))
				case *array.BinaryDictionaryBuilder:
					if err := fb.AppendString(v.(string)); err != nil {
						t.Fatal(err)
					}
				default:
					t.Fatalf("raw: unsupported builder %T", fb)
				}
			}
		}
		rec := b.NewRecord()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func meta(kind, domain string, kv ...string) map[string]string {
	m := map[string]string{"rtr.version": "1", "rtr.kind": kind, "rtr.time": domain}
	if kind == "data" || kind == "error" {
		m["rtr.collection"] = "c"
	}
	if kind == "bindings" {
		m["rtr.source"] = "s"
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

var (
	u64  = arrow.PrimitiveTypes.Uint64
	i64  = arrow.PrimitiveTypes.Int64
	utf8 = arrow.BinaryTypes.String
)

func fld(name string, t arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: true}
}

func b1(vs ...any) [][]any { return [][]any{vs} }

// validData is a valid one-row lsn data stream.
func validData(t testing.TB) []byte {
	return raw(t, meta("data", "lsn"), []col{
		{fld("id", i64), b1(1)},
		{fld("_time", u64), b1(5)},
		{fld("_diff", i64), b1(1)},
	})
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func TestMalformedInput(t *testing.T) {
	valid := validData(t)
	truncated := cat(valid, valid[:len(valid)/2])
	noEOS := valid[:len(valid)-8]

	// A string column whose offsets point beyond its data: patch the
	// offsets buffer [0, 3] of "abc" to [0, 100].
	str := raw(t, meta("data", "lsn"), []col{
		{fld("s", utf8), b1("abc")},
		{fld("_time", u64), b1(5)},
		{fld("_diff", i64), b1(1)},
	})
	pat := []byte("\x00\x00\x00\x00\x03\x00\x00\x00abc")
	at := bytes.Index(str, pat)
	if at < 0 {
		t.Fatal("offsets pattern not found in the test stream")
	}
	badOffsets := bytes.Clone(str)
	badOffsets[at+4] = 100

	cases := []struct {
		name    string
		in      []byte
		read    string // "records" (default), "progress", "bindings", "error"
		stream  int
		batch   int
		column  string
		wantMsg string
		// arrowLeaks marks input on which Arrow panics while decoding and
		// leaves its allocations unaccounted (the Go allocator's memory is
		// still garbage collected), so the checked allocator is not used.
		arrowLeaks bool
	}{
		{name: "plain arrow stream without rtr metadata", in: raw(t, nil, []col{{fld("a", i64), b1(1)}}),
			stream: 0, batch: -1, wantMsg: "no rtr.version"},
		{name: "unknown time domain in stream 1", in: cat(valid, raw(t, meta("progress", "gtid"), []col{{fld("_partition", utf8), nil}, {fld("_upper", u64), nil}})),
			stream: 1, batch: -1, wantMsg: `unknown time domain "gtid"`},
		{name: "unknown kind", in: raw(t, meta("rows", "lsn"), []col{{fld("a", i64), nil}}),
			stream: 0, batch: -1, wantMsg: `unknown stream kind "rows"`},
		{name: "_diff missing", in: raw(t, meta("data", "lsn"), []col{{fld("id", i64), nil}, {fld("_time", u64), nil}}),
			stream: 0, batch: -1, column: "_diff", wantMsg: "missing"},
		{name: "_time of the wrong type", in: raw(t, meta("data", "lsn"), []col{{fld("_time", i64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, column: "_time", wantMsg: "has type int64, want uint64"},
		{name: "_partition in an unpartitioned domain", in: raw(t, meta("data", "lsn"), []col{{fld("_time", u64), nil}, {fld("_diff", i64), nil}, {fld("_partition", utf8), nil}}),
			stream: 0, batch: -1, column: "_partition", wantMsg: "not partitioned"},
		{name: "_partition missing in a partitioned domain", in: raw(t, meta("data", "kafka"), []col{{fld("_time", u64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, column: "_partition", wantMsg: "partitioned"},
		{name: "user column starting with _", in: raw(t, meta("data", "lsn"), []col{{fld("_x", i64), nil}, {fld("_time", u64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, column: "_x", wantMsg: "must not start with '_'"},
		{name: "reserved column before a user column", in: raw(t, meta("data", "lsn"), []col{{fld("_time", u64), nil}, {fld("id", i64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, column: "_time", wantMsg: "out of place"},
		{name: "duplicate user column", in: raw(t, meta("data", "lsn"), []col{{fld("a", i64), nil}, {fld("a", i64), nil}, {fld("_time", u64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, column: "a", wantMsg: "appears twice"},
		{name: "key names a missing column", in: raw(t, meta("data", "lsn", "rtr.key", "id,x"), []col{{fld("id", i64), nil}, {fld("_time", u64), nil}, {fld("_diff", i64), nil}}),
			stream: 0, batch: -1, wantMsg: `rtr.key names column "x"`},
		{name: "null _diff in batch 1", in: raw(t, meta("data", "lsn"), []col{
			{fld("id", i64), [][]any{{1}, {2, 3}}},
			{fld("_time", u64), [][]any{{1}, {2, 3}}},
			{fld("_diff", i64), [][]any{{1}, {1, nil}}},
		}), stream: 0, batch: 1, column: "_diff", wantMsg: "1 nulls"},
		{name: "invalid mysql partition value", in: raw(t, meta("data", "mysql"), []col{
			{fld("_time", u64), b1(1)}, {fld("_diff", i64), b1(1)}, {fld("_partition", utf8), b1("0")},
		}), stream: 0, batch: 0, column: "_partition", wantMsg: "row 0"},
		{name: "string offsets beyond the data", in: badOffsets,
			stream: 0, batch: 0, wantMsg: "offsets out of bounds", arrowLeaks: true},
		{name: "bindings not ascending", read: "bindings", in: raw(t, meta("bindings", "lsn"), []col{
			{fld("_time", u64), b1(10, 9)}, {fld("_partition", utf8), b1("", "")}, {fld("_upper", u64), b1(1, 2)},
		}), stream: 0, batch: 0, column: "_time", wantMsg: "ascend strictly"},
		{name: "bindings group reappears", read: "bindings", in: raw(t, meta("bindings", "kafka"), []col{
			{fld("_time", u64), b1(10, 11, 10)}, {fld("_partition", utf8), b1("0", "0", "1")}, {fld("_upper", u64), b1(1, 2, 3)},
		}), stream: 0, batch: 0, column: "_time", wantMsg: "ascend strictly"},
		{name: "bindings shrinking", read: "bindings", in: raw(t, meta("bindings", "lsn"), []col{
			{fld("_time", u64), b1(10, 11)}, {fld("_partition", utf8), b1("", "")}, {fld("_upper", u64), b1(5, 4)},
		}), stream: 0, batch: 0, column: "_upper", wantMsg: "only grow"},
		{name: "bindings empty marker mixed with partitions", read: "bindings", in: raw(t, meta("bindings", "kafka"), []col{
			{fld("_time", u64), b1(10, 10)}, {fld("_partition", utf8), b1("", "0")}, {fld("_upper", u64), b1(0, 4)},
		}), stream: 0, batch: 0, column: "_upper", wantMsg: "mixes the empty-frontier row"},
		{name: "bindings stream without rows", read: "bindings", in: raw(t, meta("bindings", "kafka"), []col{
			{fld("_time", u64), nil}, {fld("_partition", utf8), nil}, {fld("_upper", u64), nil},
		}), stream: 0, batch: -1, wantMsg: "at least one binding"},
		{name: "progress partition twice", read: "progress", in: raw(t, meta("progress", "kafka"), []col{
			{fld("_partition", utf8), [][]any{{"0"}, {"1", "0"}}}, {fld("_upper", u64), [][]any{{1}, {2, 3}}},
		}), stream: 0, batch: 1, column: "_partition", wantMsg: `partition "0" appears twice`},
		{name: "progress partition invalid for the domain", read: "progress", in: raw(t, meta("progress", "kafka"), []col{
			{fld("_partition", utf8), b1("")}, {fld("_upper", u64), b1(3)},
		}), stream: 0, batch: 0, column: "_partition", wantMsg: "needs a partition name"},
		{name: "progress partition in lsn", read: "progress", in: raw(t, meta("progress", "lsn"), []col{
			{fld("_partition", utf8), b1("0")}, {fld("_upper", u64), b1(3)},
		}), stream: 0, batch: 0, column: "_partition", wantMsg: "has no partitions"},
		{name: "progress upper 0", read: "progress", in: raw(t, meta("progress", "lsn"), []col{
			{fld("_partition", utf8), b1("")}, {fld("_upper", u64), b1(0)},
		}), stream: 0, batch: 0, column: "_upper", wantMsg: "upper 0"},
		{name: "progress with an extra column", in: raw(t, meta("progress", "lsn"), []col{
			{fld("x", utf8), nil}, {fld("_partition", utf8), nil}, {fld("_upper", u64), nil},
		}), stream: 0, batch: -1, wantMsg: "exactly the columns _partition, _upper"},
		{name: "error stream with two rows", read: "error", in: raw(t, meta("error", "lsn"), []col{
			{fld("_time", u64), b1(1, 2)}, {fld("_message", utf8), b1("a", "b")},
		}), stream: 0, batch: 0, wantMsg: "more than one row"},
		{name: "truncated in stream 1", in: truncated, stream: 1, batch: -1, wantMsg: "truncated"},
		{name: "truncated inside the end-of-stream marker", in: valid[:len(valid)-3], stream: 0, batch: 1, wantMsg: "truncated"},
		{name: "truncated after the schema", in: valid[:len(valid)-8-1], stream: 0, batch: 0, wantMsg: "truncated"},
		{name: "partial marker of a next stream", in: cat(valid, []byte{0xFF, 0xFF}), stream: 1, batch: -1, wantMsg: "truncated"},
		{name: "garbage after a valid pipe", in: cat(valid, []byte("hello, world")), stream: 1, batch: -1, wantMsg: "garbage"},
		{name: "garbage at the start", in: []byte("PAR1 this is not arrow"), stream: 0, batch: -1, wantMsg: "garbage"},
		{name: "end-of-stream marker without a schema", in: []byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0}, stream: 0, batch: -1, wantMsg: "no schema"},
		{name: "huge metadata length", in: []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, stream: 0, batch: -1, wantMsg: "out of range"},
		{name: "second schema without end-of-stream marker", in: cat(noEOS, valid), stream: 0, batch: 1, wantMsg: "only one schema message"},
		{name: "dictionary column", in: raw(t, meta("data", "lsn"), []col{
			{fld("d", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: utf8}), b1("x")},
			{fld("_time", u64), b1(1)}, {fld("_diff", i64), b1(1)},
		}), stream: 0, batch: -1, wantMsg: "dictionary"},
		{name: "compressed batch", in: raw(t, meta("data", "lsn"), []col{
			{fld("_time", u64), b1(1)}, {fld("_diff", i64), b1(1)},
		}, ipc.WithLZ4()), stream: 0, batch: 0, wantMsg: "compression is not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte"} {
				var src io.Reader = bytes.NewReader(c.in)
				if mode == "one byte" {
					src = iotest.OneByteReader(src)
				}
				var mem memory.Allocator = memory.NewGoAllocator()
				if !c.arrowLeaks {
					mem = checked(t)
				}
				err := readAll(NewReader(src, mem), c.read)
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("%s: error = %v (%T), want a *FormatError", mode, err, err)
				}
				if fe.Stream != c.stream || fe.Batch != c.batch || fe.Column != c.column || !strings.Contains(fe.Error(), c.wantMsg) {
					t.Errorf("%s: error = %q\n(stream %d, batch %d, column %q), want stream %d, batch %d, column %q, containing %q",
						mode, fe, fe.Stream, fe.Batch, fe.Column, c.stream, c.batch, c.column, c.wantMsg)
				}
				if !strings.HasPrefix(fe.Error(), "pipe: stream ") {
					t.Errorf("message %q does not say where", fe)
				}
			}
		})
	}
}

// readAll reads every stream; how says how to read progress, bindings and
// error streams ("" reads records). It returns the first error, or nil.
func readAll(r *Reader, how string) error {
	for {
		s, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case how == "progress" && s.Header.Kind == KindProgress:
			_, err = s.ReadProgress()
		case how == "bindings" && s.Header.Kind == KindBindings:
			_, err = s.ReadBindings()
		case how == "error" && s.Header.Kind == KindError:
			_, _, err = s.ReadError()
		default:
			for err == nil {
				var rec arrow.Record
				rec, err = s.NextRecord()
				if rec != nil {
					rec.Release()
				}
			}
			if err == io.EOF {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// TestErrorIsSticky checks that after a format error the Reader keeps
// returning it.
func TestReaderErrorIsSticky(t *testing.T) {
	valid := validData(t)
	r := NewReader(bytes.NewReader(cat(valid, []byte("junkjunk"), valid)), checked(t))
	if err := readAll(r, ""); err == nil {
		t.Fatal("no error")
	}
	_, err1 := r.Next()
	_, err2 := r.Next()
	var fe *FormatError
	if !errors.As(err1, &fe) || err1 != err2 {
		t.Errorf("errors after the first: %v, %v", err1, err2)
	}
}
