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
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// checked returns an allocator that fails the test if anything leaks.
func checked(t testing.TB) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// update is one row of the simple test data schema (id int64, name utf8).
type update struct {
	id   int64
	name string
	time uint64
	diff int64
	part string
}

func dataHeader(coll string, d frontier.Domain) Header {
	return Header{Kind: KindData, Collection: coll, Source: "src", Domain: d, Key: []string{"id"}}
}

// dataRecord builds a record of the simple data schema.
func dataRecord(t testing.TB, mem memory.Allocator, d frontier.Domain, ups []update) arrow.Record {
	t.Helper()
	user := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}}
	s := DataSchema(user, d, arrow.Metadata{})
	b := array.NewRecordBuilder(mem, s)
	defer b.Release()
	for _, u := range ups {
		b.Field(0).(*array.Int64Builder).Append(u.id)
		b.Field(1).(*array.StringBuilder).Append(u.name)
		b.Field(2).(*array.Uint64Builder).Append(u.time)
		b.Field(3).(*array.Int64Builder).Append(u.diff)
		if d.Partitioned() {
			b.Field(4).(*array.StringBuilder).Append(u.part)
		}
	}
	return b.NewRecord()
}

// readUpdates decodes a data record of the simple schema.
func readUpdates(t testing.TB, rec arrow.Record) []update {
	t.Helper()
	cols, times, diffs, parts := SplitData(rec)
	if len(cols) != 2 || times == nil || diffs == nil {
		t.Fatalf("SplitData: %d user columns, times %v, diffs %v", len(cols), times != nil, diffs != nil)
	}
	var out []update
	for i := 0; i < int(rec.NumRows()); i++ {
		u := update{
			id:   cols[0].(*array.Int64).Value(i),
			name: cols[1].(*array.String).Value(i),
			time: times.Value(i),
			diff: diffs.Value(i),
		}
		if parts != nil {
			u.part = parts.Value(i)
		}
		out = append(out, u)
	}
	return out
}

func mustFrontier(t testing.TB, d frontier.Domain, m map[string]uint64) frontier.Frontier {
	t.Helper()
	f, err := frontier.New(d, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// samplePipe writes a pipe with one stream of every kind and returns it.
func samplePipe(t testing.TB) []byte {
	t.Helper()
	mem := checked(t)
	var buf bytes.Buffer
	w := NewWriter(&buf, mem)
	for _, batch := range [][]update{
		{{1, "one", 0, 1, ""}, {2, "two", 0, 1, ""}},
		{{1, "one", 0x16B3748, -1, ""}, {1, "uno", 0x16B3748, 1, ""}},
	} {
		rec := dataRecord(t, mem, frontier.DomainLSN, batch)
		if err := w.WriteRecord(dataHeader("public.orders", frontier.DomainLSN), rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	rec := dataRecord(t, mem, frontier.DomainKafka, []update{{7, "seven", 15, 1, "0"}, {8, "", 3, 1, "2"}})
	if err := w.WriteRecord(dataHeader("topic", frontier.DomainKafka), rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.WriteProgress("public.orders", "pg", frontier.Single(frontier.DomainLSN, 0x16B3749)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteBindings("kafka1", []frontier.Binding{
		{Time: 1000, Frontier: frontier.Empty(frontier.DomainKafka)},
		{Time: 1100, Frontier: mustFrontier(t, frontier.DomainKafka, map[string]uint64{"0": 3})},
		{Time: 1200, Frontier: mustFrontier(t, frontier.DomainKafka, map[string]uint64{"0": 16, "2": 4})},
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteError("public.orders", frontier.DomainSystem, 1250, "table was dropped upstream"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

func TestRoundTripEveryKind(t *testing.T) {
	data := samplePipe(t)
	readers := []struct {
		name string
		r    func() io.Reader
	}{
		{"bytes", func() io.Reader { return bytes.NewReader(data) }},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }},
		{"7 bytes at a time", func() io.Reader { return chunkReader{bytes.NewReader(data), 7} }},
		{"half reads", func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) }},
		{"io.Pipe", func() io.Reader {
			pr, pw := io.Pipe()
			go func() {
				// Write in uneven pieces, as a Unix pipe may deliver them.
				for i := 0; i < len(data); i += 333 {
					if _, err := pw.Write(data[i:min(i+333, len(data))]); err != nil {
						return
					}
				}
				pw.Close()
			}()
			return pr
		}},
	}
	for _, rc := range readers {
		t.Run(rc.name, func(t *testing.T) {
			mem := checked(t)
			r := NewReader(rc.r(), mem)

			s := nextStream(t, r, 0, dataHeader("public.orders", frontier.DomainLSN))
			var got []update
			for {
				rec, err := s.NextRecord()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, readUpdates(t, rec)...)
				rec.Release()
			}
			want := []update{{1, "one", 0, 1, ""}, {2, "two", 0, 1, ""}, {1, "one", 0x16B3748, -1, ""}, {1, "uno", 0x16B3748, 1, ""}}
			if !equalUpdates(got, want) {
				t.Errorf("stream 0 updates = %v, want %v", got, want)
			}

			s = nextStream(t, r, 1, dataHeader("topic", frontier.DomainKafka))
			rec, err := s.NextRecord()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := readUpdates(t, rec), []update{{7, "seven", 15, 1, "0"}, {8, "", 3, 1, "2"}}; !equalUpdates(got, want) {
				t.Errorf("stream 1 updates = %v, want %v", got, want)
			}
			rec.Release()

			s = nextStream(t, r, 2, Header{Kind: KindProgress, Collection: "public.orders", Source: "pg", Domain: frontier.DomainLSN})
			f, err := s.ReadProgress()
			if err != nil {
				t.Fatal(err)
			}
			if !f.Equal(frontier.Single(frontier.DomainLSN, 0x16B3749)) {
				t.Errorf("progress = %s, want 0/16B3749", f)
			}

			s = nextStream(t, r, 3, Header{Kind: KindBindings, Source: "kafka1", Domain: frontier.DomainKafka})
			bs, err := s.ReadBindings()
			if err != nil {
				t.Fatal(err)
			}
			if len(bs) != 3 || bs[0].Time != 1000 || !bs[0].Frontier.IsEmpty() || bs[0].Frontier.Domain() != frontier.DomainKafka ||
				bs[1].Time != 1100 || bs[1].Frontier.String() != "0:3" ||
				bs[2].Time != 1200 || bs[2].Frontier.String() != "0:16,2:4" {
				t.Errorf("bindings = %v", bs)
			}

			s = nextStream(t, r, 4, Header{Kind: KindError, Collection: "public.orders", Domain: frontier.DomainSystem})
			tm, msg, err := s.ReadError()
			if err != nil {
				t.Fatal(err)
			}
			if tm != 1250 || msg != "table was dropped upstream" {
				t.Errorf("error stream = %d %q", tm, msg)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("Next at the end = %v, want io.EOF", err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("Next after the end = %v, want io.EOF again", err)
			}
		})
	}
}

func nextStream(t testing.TB, r *Reader, idx int, want Header) *Stream {
	t.Helper()
	s, err := r.Next()
	if err != nil {
		t.Fatalf("stream %d: %v", idx, err)
	}
	if s.Index != idx {
		t.Errorf("Index = %d, want %d", s.Index, idx)
	}
	if !s.Header.Equal(want) {
		t.Errorf("stream %d header = %+v, want %+v", idx, s.Header, want)
	}
	return s
}

func equalUpdates(a, b []update) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestProgressRoundTrip(t *testing.T) {
	uuid := "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		name string
		f    frontier.Frontier
	}{
		{"lsn", frontier.Single(frontier.DomainLSN, 0x16B3748)},
		{"lsn empty", frontier.Empty(frontier.DomainLSN)},
		{"system_ms", frontier.Single(frontier.DomainSystem, 1732900000000)},
		{"kafka", mustFrontier(t, frontier.DomainKafka, map[string]uint64{"0": 15, "1": 7, "10": 1})},
		{"kafka empty", frontier.Empty(frontier.DomainKafka)},
		{"mysql", mustFrontier(t, frontier.DomainMySQL, map[string]uint64{uuid: 6})},
		{"mariadb", mustFrontier(t, frontier.DomainMariaDB, map[string]uint64{"0": 43, "1": 8})},
		{"max position", frontier.Single(frontier.DomainLSN, ^uint64(0))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := checked(t)
			var buf bytes.Buffer
			w := NewWriter(&buf, mem)
			if err := w.WriteProgress("", "src", c.f); err != nil {
				t.Fatal(err)
			}
			r := NewReader(iotest.OneByteReader(&buf), mem)
			s, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if s.Header.Collection != "" || s.Header.Source != "src" || s.Header.Domain != c.f.Domain() {
				t.Errorf("header = %+v", s.Header)
			}
			got, err := s.ReadProgress()
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(c.f) {
				t.Errorf("frontier = %q, want %q", got, c.f)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("Next = %v, want io.EOF", err)
			}
		})
	}
}

func TestWriterAppendsOrBeginsStreams(t *testing.T) {
	mem := checked(t)
	var buf bytes.Buffer
	w := NewWriter(&buf, mem)
	hA, hB := dataHeader("a", frontier.DomainLSN), dataHeader("b", frontier.DomainLSN)
	hA2 := hA
	hA2.Key = nil
	for _, h := range []Header{hA, hA, hB, hA, hA2, hA2} {
		rec := dataRecord(t, mem, frontier.DomainLSN, []update{{1, "x", 1, 1, ""}})
		if err := w.WriteRecord(h, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Streams() != 4 {
		t.Errorf("Streams = %d, want 4", w.Streams())
	}
	r := NewReader(&buf, mem)
	var batches []int
	var colls []string
	for {
		s, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			rec, err := s.NextRecord()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rec.Release()
			n++
		}
		batches = append(batches, n)
		colls = append(colls, s.Header.Collection+"/"+strings.Join(s.Header.Key, ","))
	}
	if got := strings.Join(colls, " "); got != "a/id b/id a/id a/" {
		t.Errorf("streams = %q", got)
	}
	if len(batches) != 4 || batches[0] != 2 || batches[1] != 1 || batches[2] != 1 || batches[3] != 2 {
		t.Errorf("batches per stream = %v, want [2 1 1 2]", batches)
	}
}

func TestNextSkipsUnreadRecords(t *testing.T) {
	mem := checked(t)
	r := NewReader(bytes.NewReader(samplePipe(t)), mem)
	var kinds []string
	for {
		s, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, string(s.Header.Kind))
		if s.Index == 0 {
			// Read one record of two, then move on.
			rec, err := s.NextRecord()
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release() // stays valid after Next
			defer func() {
				if got := readUpdates(t, rec); got[0].name != "one" {
					t.Errorf("record of a drained stream changed: %v", got)
				}
			}()
		}
	}
	if got := strings.Join(kinds, ","); got != "data,data,progress,bindings,error" {
		t.Errorf("kinds = %s", got)
	}
}

// TestReaderStopsAtEndOfStream checks that the Reader consumes exactly the
// bytes of a stream: what follows its end-of-stream marker is still in the
// underlying reader.
func TestReaderStopsAtEndOfStream(t *testing.T) {
	mem := checked(t)
	var buf bytes.Buffer
	w := NewWriter(&buf, mem)
	if err := w.WriteProgress("c", "", frontier.Single(frontier.DomainLSN, 5)); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("TRAILER")
	src := iotest.OneByteReader(&buf)
	r := NewReader(src, mem)
	s, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadProgress(); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(src)
	if string(rest) != "TRAILER" {
		t.Errorf("bytes left after the stream = %q, want TRAILER", rest)
	}
}

// TestReaderOnLivePipe checks that a stream's records and its end are
// delivered while the writer is still blocked before writing the next
// stream: the Reader never waits for bytes beyond the stream it is in.
func TestReaderOnLivePipe(t *testing.T) {
	mem := checked(t)
	pr, pw := io.Pipe()
	step := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		w := NewWriter(pw, mem)
		err := func() error {
			for i := 0; i < 3; i++ {
				rec := dataRecord(t, mem, frontier.DomainLSN, []update{{int64(i), "x", uint64(i), 1, ""}})
				err := w.WriteRecord(dataHeader("c", frontier.DomainLSN), rec)
				rec.Release()
				if err != nil {
					return err
				}
				if err := w.Flush(); err != nil {
					return err
				}
				<-step // wait until the reader has seen this whole stream
			}
			return w.Close()
		}()
		pw.CloseWithError(err)
		werr <- err
	}()
	r := NewReader(pr, mem)
	for i := 0; i < 3; i++ {
		s, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.NextRecord()
		if err != nil {
			t.Fatal(err)
		}
		if got := readUpdates(t, rec); got[0].id != int64(i) {
			t.Errorf("stream %d: id %d", i, got[0].id)
		}
		rec.Release()
		if _, err := s.NextRecord(); err != io.EOF {
			t.Fatalf("stream %d end: %v", i, err)
		}
		step <- struct{}{}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at end = %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

func TestEmptyInputIsEmptyPipe(t *testing.T) {
	r := NewReader(bytes.NewReader(nil), checked(t))
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next on empty input = %v, want io.EOF", err)
	}
}

// TestReadProgressOfWrongKind checks the decoders refuse other kinds.
func TestReadHelpersCheckKind(t *testing.T) {
	mem := checked(t)
	r := NewReader(bytes.NewReader(samplePipe(t)), mem)
	s, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadProgress(); err == nil || !strings.Contains(err.Error(), "is a data stream, not a progress stream") {
		t.Errorf("ReadProgress on data = %v", err)
	}
	if _, err := s.ReadBindings(); err == nil {
		t.Error("ReadBindings on data succeeded")
	}
	if _, _, err := s.ReadError(); err == nil {
		t.Error("ReadError on data succeeded")
	}
}

func TestHeaderMetadataRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		h    Header
	}{
		{"data with key", Header{Kind: KindData, Collection: "public.orders", Source: "pg", Domain: frontier.DomainLSN, Key: []string{"id", "region"}}},
		{"data no source", Header{Kind: KindData, Collection: "db.t", Domain: frontier.DomainMariaDB}},
		{"progress of a source", Header{Kind: KindProgress, Source: "k", Domain: frontier.DomainKafka}},
		{"bindings", Header{Kind: KindBindings, Source: "my", Domain: frontier.DomainMySQL}},
		{"error", Header{Kind: KindError, Collection: "t", Domain: frontier.DomainSystem}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseHeader(c.h.Metadata())
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(c.h) {
				t.Errorf("got %+v, want %+v", got, c.h)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	md := func(kv ...string) arrow.Metadata {
		var ks, vs []string
		for i := 0; i < len(kv); i += 2 {
			ks, vs = append(ks, kv[i]), append(vs, kv[i+1])
		}
		return arrow.NewMetadata(ks, vs)
	}
	cases := []struct {
		name string
		md   arrow.Metadata
		want string
	}{
		{"no metadata", md(), "no rtr.version"},
		{"version 2", md("rtr.version", "2", "rtr.kind", "data", "rtr.time", "lsn", "rtr.collection", "c"), `rtr.version is "2"`},
		{"no kind", md("rtr.version", "1", "rtr.time", "lsn"), "no rtr.kind"},
		{"unknown kind", md("rtr.version", "1", "rtr.kind", "rows", "rtr.time", "lsn"), `unknown stream kind "rows"`},
		{"no time", md("rtr.version", "1", "rtr.kind", "progress"), "no rtr.time"},
		{"unknown time", md("rtr.version", "1", "rtr.kind", "progress", "rtr.time", "gtid"), `unknown time domain "gtid"`},
		{"data without collection", md("rtr.version", "1", "rtr.kind", "data", "rtr.time", "lsn"), "needs rtr.collection"},
		{"error without collection", md("rtr.version", "1", "rtr.kind", "error", "rtr.time", "lsn"), "needs rtr.collection"},
		{"bindings without source", md("rtr.version", "1", "rtr.kind", "bindings", "rtr.time", "lsn"), "needs rtr.source"},
		{"bindings with collection", md("rtr.version", "1", "rtr.kind", "bindings", "rtr.time", "lsn", "rtr.source", "s", "rtr.collection", "c"), "drop rtr.collection"},
		{"key on progress", md("rtr.version", "1", "rtr.kind", "progress", "rtr.time", "lsn", "rtr.key", "id"), "only allowed on data"},
		{"empty key name", md("rtr.version", "1", "rtr.kind", "data", "rtr.time", "lsn", "rtr.collection", "c", "rtr.key", "id,"), "empty column name"},
		{"duplicate key", md("rtr.version", "1", "rtr.version", "1", "rtr.kind", "progress", "rtr.time", "lsn"), "appears 2 times"},
		{"empty collection", md("rtr.version", "1", "rtr.kind", "progress", "rtr.time", "lsn", "rtr.collection", ""), "present but empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseHeader(c.md)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseHeader = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestWriterRefusesInvalidInput(t *testing.T) {
	mem := checked(t)
	uuid := "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		name  string
		write func(w *Writer) error
		want  string
	}{
		{"header without collection", func(w *Writer) error {
			rec := dataRecord(t, mem, frontier.DomainLSN, nil)
			defer rec.Release()
			return w.WriteRecord(Header{Kind: KindData, Domain: frontier.DomainLSN}, rec)
		}, "needs rtr.collection"},
		{"partitioned header, unpartitioned record", func(w *Writer) error {
			rec := dataRecord(t, mem, frontier.DomainLSN, nil)
			defer rec.Release()
			return w.WriteRecord(dataHeader("c", frontier.DomainKafka), rec)
		}, "column _partition: invalid schema: column is missing"},
		{"bad partition value", func(w *Writer) error {
			rec := dataRecord(t, mem, frontier.DomainMySQL, []update{{1, "a", 1, 1, "not-a-uuid"}})
			defer rec.Release()
			return w.WriteRecord(dataHeader("c", frontier.DomainMySQL), rec)
		}, "column _partition: invalid values: row 0"},
		{"key names missing column", func(w *Writer) error {
			rec := dataRecord(t, mem, frontier.DomainLSN, nil)
			defer rec.Release()
			h := dataHeader("c", frontier.DomainLSN)
			h.Key = []string{"nope"}
			return w.WriteRecord(h, rec)
		}, `rtr.key names column "nope"`},
		{"key with comma", func(w *Writer) error {
			rec := dataRecord(t, mem, frontier.DomainLSN, nil)
			defer rec.Release()
			h := dataHeader("c", frontier.DomainLSN)
			h.Key = []string{"a,b"}
			return w.WriteRecord(h, rec)
		}, "contains a comma"},
		{"bindings not ascending", func(w *Writer) error {
			return w.WriteBindings("s", []frontier.Binding{{Time: 5, Frontier: frontier.Single(frontier.DomainLSN, 1)}, {Time: 5, Frontier: frontier.Single(frontier.DomainLSN, 2)}})
		}, "must ascend strictly"},
		{"bindings shrinking", func(w *Writer) error {
			return w.WriteBindings("s", []frontier.Binding{{Time: 5, Frontier: frontier.Single(frontier.DomainLSN, 3)}, {Time: 6, Frontier: frontier.Single(frontier.DomainLSN, 2)}})
		}, "only grow"},
		{"bindings mixed domains", func(w *Writer) error {
			return w.WriteBindings("s", []frontier.Binding{{Time: 5, Frontier: frontier.Single(frontier.DomainLSN, 3)}, {Time: 6, Frontier: mustFrontier(t, frontier.DomainMySQL, map[string]uint64{uuid: 2})}})
		}, "different time domains"},
		{"no bindings", func(w *Writer) error { return w.WriteBindings("s", nil) }, "no bindings"},
		{"progress without domain", func(w *Writer) error { return w.WriteProgress("c", "", frontier.Frontier{}) }, "no time domain"},
		{"error without collection", func(w *Writer) error { return w.WriteError("", frontier.DomainLSN, 1, "x") }, "needs rtr.collection"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, mem)
			err := c.write(w)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want one containing %q", err, c.want)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Nothing invalid reached the output.
			if _, err := NewReader(&buf, mem).Next(); err != io.EOF {
				t.Errorf("output after a refused write: Next = %v, want io.EOF", err)
			}
		})
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestWriterErrorIsSticky checks that a failed write poisons the Writer.
func TestWriterErrorIsSticky(t *testing.T) {
	mem := checked(t)
	w := NewWriter(failWriter{}, mem)
	rec := dataRecord(t, mem, frontier.DomainLSN, []update{{1, "a", 1, 1, ""}})
	defer rec.Release()
	err := w.WriteRecord(dataHeader("c", frontier.DomainLSN), rec)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("WriteRecord = %v, want disk full", err)
	}
	if err2 := w.WriteProgress("c", "", frontier.Single(frontier.DomainLSN, 1)); !errors.Is(err2, err) {
		t.Errorf("next write = %v, want the first error again", err2)
	}
	if err2 := w.Close(); err2 != err {
		t.Errorf("Close = %v, want the first error again", err2)
	}
}

// TestResetRoundTrip: a reset stream carries its time and, when the
// schema changes there, the new schema exactly (names, types,
// nullability, metadata); a reset with more than one row is bad input.
func TestResetRoundTrip(t *testing.T) {
	mem := checked(t)
	md := arrow.NewMetadata([]string{"pg.type"}, []string{"text"})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "color", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: md},
	}, nil)
	var buf bytes.Buffer
	w := NewWriter(&buf, mem)
	if err := w.WriteReset("public.t", frontier.DomainLSN, 77, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteReset("public.t", frontier.DomainLSN, 78, schema); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteReset("", frontier.DomainLSN, 1, nil); err == nil || !strings.Contains(err.Error(), "needs rtr.collection") {
		t.Errorf("reset without a collection: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&buf, mem)
	defer r.Close()
	for i, want := range []struct {
		at     uint64
		schema *arrow.Schema
	}{{77, nil}, {78, schema}} {
		s, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if s.Header.Kind != KindReset || s.Header.Collection != "public.t" {
			t.Fatalf("stream %d: header %+v", i, s.Header)
		}
		at, got, err := s.ReadReset()
		if err != nil {
			t.Fatal(err)
		}
		if at != want.at || (got == nil) != (want.schema == nil) || got != nil && !got.Equal(want.schema) ||
			got != nil && !got.Field(1).Metadata.Equal(md) {
			t.Errorf("stream %d: reset at %d schema %v, want %d %v", i, at, got, want.at, want.schema)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the resets: %v", err)
	}

	// Two rows: bad input.
	buf.Reset()
	w = NewWriter(&buf, mem)
	h := Header{Kind: KindReset, Collection: "public.t", Domain: frontier.DomainLSN}
	rec := w.buildRecord(reservedLayout(h), 2, func(b *array.RecordBuilder) {
		b.Field(0).(*array.Uint64Builder).AppendValues([]uint64{1, 2}, nil)
	})
	if err := w.writeWhole(h, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	w.Close()
	r = NewReader(&buf, mem)
	defer r.Close()
	s, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if _, _, err := s.ReadReset(); !errors.As(err, &fe) || !strings.Contains(err.Error(), "more than one row") {
		t.Errorf("two-row reset: %v, want a format error", err)
	}
}
