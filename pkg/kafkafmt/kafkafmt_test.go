package kafkafmt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/pkg/pipe"
)

func rec(p int32, off int64, key, value []byte, hs ...kgo.RecordHeader) *kgo.Record {
	return &kgo.Record{Topic: "t", Partition: p, Offset: off, Key: key, Value: value, Headers: hs, Timestamp: time.UnixMilli(1700000000000 + off)}
}

// loadState rebuilds d's state from one record.
func loadState(d Decoder, recs ...arrow.Record) error {
	s := must[Stateful](d)
	s.ResetState()
	for _, r := range recs {
		if err := s.AddState(r); err != nil {
			return err
		}
	}
	return s.EndState()
}

func newDec(t *testing.T, env, kf, vf string) Decoder {
	t.Helper()
	k, err := ParseFormat(kf)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseFormat(vf)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(Config{Envelope: env, Key: k, Value: v, Collection: "t", Source: "kafka.t"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// rows renders a data record as sorted lines "cols... @partition:time diff".
func rows(t *testing.T, r arrow.Record) []string {
	t.Helper()
	if r == nil {
		return nil
	}
	cols, times, diffs, parts := pipe.SplitData(r)
	if times == nil || parts == nil {
		t.Fatalf("not a kafka data record: %v", r.Schema())
	}
	var out []string
	for i := 0; i < int(r.NumRows()); i++ {
		var f []string
		for _, c := range cols {
			if c.IsNull(i) {
				f = append(f, "null")
			} else if bin, ok := c.(*array.Binary); ok {
				f = append(f, string(bin.Value(i)))
			} else {
				f = append(f, c.ValueStr(i))
			}
		}
		out = append(out, fmt.Sprintf("%s @%s:%d %+d", strings.Join(f, " "), parts.Value(i), times.Value(i), diffs.Value(i)))
	}
	return out
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		format string
		in     []byte
		ok     bool
	}{
		{"bytes", []byte{0xff, 0}, true},
		{"text", []byte("héllo"), true},
		{"text", []byte{0xff}, false},
		{"json", []byte(`{"a":[1,2]}`), true},
		{"json", []byte(` 7 `), true},
		{"json", []byte(`{"a":`), false},
		{"json", []byte(`{} {}`), false},
	} {
		f, err := ParseFormat(tc.format)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(tc.in); (err == nil) != tc.ok {
			t.Errorf("%s.Check(%q) = %v, want ok=%v", tc.format, tc.in, err, tc.ok)
		}
		if !tc.ok {
			continue
		}
		c := f.NewColumn()
		c.Append(tc.in)
		c.Append(nil)
		a := c.Finish()
		if !arrow.TypeEqual(a.DataType(), f.Type()) || a.Len() != 2 || a.IsNull(0) || !a.IsNull(1) {
			t.Errorf("%s: column %v of %d values (nulls %d), want %s with a value and a null", tc.format, a.DataType(), a.Len(), a.NullN(), f.Type())
		}
		raw, err := f.Raw(a, 0)
		if err != nil || string(raw) != string(tc.in) {
			t.Errorf("%s: Raw = %q, %v; want %q", tc.format, raw, err, tc.in)
		}
		a.Release()
	}
	if _, err := ParseFormat("avro"); err == nil {
		t.Error("ParseFormat(avro) succeeded")
	}
}

func TestNoneEnvelope(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	d := newDec(t, "none", "text", "json")
	defer d.Release()
	if err := d.Add(rec(0, 5, []byte("k1"), []byte(`{"x":1}`), kgo.RecordHeader{Key: "h1", Value: []byte("v1")}, kgo.RecordHeader{Key: "h2"}, kgo.RecordHeader{Key: "", Value: []byte{}})); err != nil {
		t.Fatal(err)
	}
	if err := d.Add(rec(2, 0, nil, nil)); err != nil {
		t.Fatal(err)
	}
	// A malformed value adds nothing.
	err := d.Add(rec(1, 9, []byte("k"), []byte(`{"x":`)))
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 9 || de.Partition != 1 || !strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("malformed JSON: got %v", err)
	}
	if d.Rows() != 2 {
		t.Fatalf("rows = %d, want 2", d.Rows())
	}
	r := d.Flush()
	defer r.Release()
	got := rows(t, r)
	want := []string{
		`0 5 k1 {"x":1} 2023-11-14 22:13:20.005Z ["h1","h2",""] ["djE=",null,""] @0:5 +1`,
		`2 0 null null 2023-11-14 22:13:20Z [] [] @2:0 +1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if k, _ := r.Schema().Metadata().GetValue(pipe.KeyKey); k != "partition,offset" {
		t.Errorf("rtr.key = %q", k)
	}
	if d.Flush() != nil {
		t.Error("second Flush returned rows")
	}
}

func TestUpsertEnvelope(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	d := newDec(t, "upsert", "bytes", "text")
	defer d.Release()
	add := func(off int64, k string, v []byte) {
		t.Helper()
		if err := d.Add(rec(0, off, []byte(k), v)); err != nil {
			t.Fatal(err)
		}
	}
	add(0, "a", []byte("1"))
	add(1, "b", []byte("2"))
	add(2, "a", []byte("3"))
	add(3, "a", []byte("3")) // same value: nothing
	add(4, "b", nil)         // delete
	add(5, "c", nil)         // delete of an absent key: nothing
	if err := d.Add(rec(0, 6, nil, []byte("x"))); err == nil {
		t.Error("a null key was accepted")
	}
	if err := d.Add(rec(0, 7, []byte("d"), []byte{0xff})); err == nil {
		t.Error("invalid UTF-8 was accepted")
	}
	r := d.Flush()
	got := rows(t, r)
	r.Release()
	want := []string{"a 1 @0:0 +1", "b 2 @0:1 +1", "a 1 @0:2 -1", "a 3 @0:2 +1", "b 2 @0:4 -1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := must[Stateful](d).StateSize(); n != 1 {
		t.Errorf("state size %d, want 1", n)
	}

	// Rebuild the state of a fresh decoder from a store-shaped read.
	d2 := newDec(t, "upsert", "bytes", "text")
	defer d2.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.BinaryTypes.Binary}, {Name: "value", Type: arrow.BinaryTypes.String}, {Name: "_diff", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	b.Field(0).(*array.BinaryBuilder).AppendValues([][]byte{[]byte("a"), []byte("z")}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"3", "9"}, nil)
	b.Field(2).(*array.Int64Builder).AppendValues([]int64{1, 1}, nil)
	st := b.NewRecord()
	b.Release()
	if err := loadState(d2, st); err != nil {
		t.Fatal(err)
	}
	st.Release()
	for i, kv := range [][2]string{{"a", "4"}, {"z", ""}} {
		var v []byte
		if kv[1] != "" {
			v = []byte(kv[1])
		}
		if err := d2.Add(rec(1, int64(10+i), []byte(kv[0]), v)); err != nil {
			t.Fatal(err)
		}
	}
	r = d2.Flush()
	got = rows(t, r)
	r.Release()
	sort.Strings(got)
	want = []string{"a 3 @1:10 -1", "a 4 @1:10 +1", "z 9 @1:11 -1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after loading the state:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUpsertValueReuse follows one key through values that fit in the
// state's copy of the last value and values that do not.
func TestUpsertValueReuse(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	d := newDec(t, "upsert", "bytes", "bytes")
	defer d.Release()
	long := strings.Repeat("L", 300)
	var want []string
	steps := []struct {
		v    []byte
		rows []string // besides the offset
	}{
		{[]byte("12345678"), []string{"a 12345678 +1"}},
		{[]byte("1234567890123"), []string{"a 12345678 -1", "a 1234567890123 +1"}}, // longer
		{[]byte("x"), []string{"a 1234567890123 -1", "a x +1"}},                    // shorter, in place
		{[]byte(long), []string{"a x -1", "a " + long + " +1"}},                    // too long for the array
		{[]byte("y"), []string{"a " + long + " -1", "a y +1"}},                     // the long array is dropped
		{nil, []string{"a y -1"}},
		{[]byte("z"), []string{"a z +1"}},
		{[]byte("z"), nil},
		{[]byte{}, []string{"a z -1", "a  +1"}},
		{[]byte("w"), []string{"a  -1", "a w +1"}}, // the empty value, not a null
	}
	for i, s := range steps {
		if err := d.Add(rec(0, int64(i), []byte("a"), s.v)); err != nil {
			t.Fatal(err)
		}
		for _, r := range s.rows {
			f := strings.Fields(r)
			want = append(want, fmt.Sprintf("%s @0:%d %s", strings.TrimSuffix(r, " "+f[len(f)-1]), i, f[len(f)-1]))
		}
		// Flush now and then, so that rows outlive the state's arrays.
		if i%3 == 2 {
			r := d.Flush()
			got := rows(t, r)
			r.Release()
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("after step %d:\n%s\nwant:\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			want = nil
		}
	}
	r := d.Flush()
	got := rows(t, r)
	r.Release()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := must[Stateful](d).StateSize(); n != 1 {
		t.Errorf("state size %d, want 1", n)
	}

	// A loaded empty value is retracted as the empty value too.
	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.BinaryTypes.Binary}, {Name: "value", Type: arrow.BinaryTypes.Binary}, {Name: "_diff", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	b.Field(0).(*array.BinaryBuilder).Append([]byte("e"))
	b.Field(1).(*array.BinaryBuilder).Append([]byte{})
	b.Field(2).(*array.Int64Builder).Append(1)
	st := b.NewRecord()
	b.Release()
	if err := loadState(d, st); err != nil {
		t.Fatal(err)
	}
	st.Release()
	for i, v := range []string{"", "v"} {
		if err := d.Add(rec(1, int64(i), []byte("e"), []byte(v))); err != nil {
			t.Fatal(err)
		}
	}
	r = d.Flush()
	got = rows(t, r)
	r.Release()
	if want := "e  @1:1 -1\ne v @1:1 +1"; strings.Join(got, "\n") != want {
		t.Errorf("after loading the state:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

// TestNoneBatches checks batches smaller and larger than the one before,
// whose sizes the decoder reserves.
func TestNoneBatches(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	d := newDec(t, "none", "bytes", "text")
	defer d.Release()
	off := int64(0)
	for _, n := range []int{3, 100, 7, 1, 300} {
		var want []string
		for i := 0; i < n; i++ {
			v := strings.Repeat("v", int(off%50))
			var hs []kgo.RecordHeader
			hv := "[]"
			if off%4 == 0 {
				hs = []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}
				hv = `["eA=="]`
			}
			if err := d.Add(rec(int32(off%3), off, []byte(fmt.Sprint("k", off)), []byte(v), hs...)); err != nil {
				t.Fatal(err)
			}
			hk := "[]"
			if hs != nil {
				hk = `["h"]`
			}
			ts := time.UnixMilli(1700000000000 + off).UTC().Format("2006-01-02 15:04:05.999Z")
			want = append(want, fmt.Sprintf("%d %d k%d %s %s %s %s @%d:%d +1", off%3, off, off, v, ts, hk, hv, off%3, off))
			off++
		}
		r := d.Flush()
		got := rows(t, r)
		r.Release()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("batch of %d:\n%s\nwant:\n%s", n, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestUpsertNetting decodes random puts, deletes and repeated values over
// a few keys, with random flushes, once record by record and once netted
// from an offset on: every batch consolidates to the same updates, the
// netted batches have no rows that cancel, and the positions of netted
// rows are records of their batch.
func TestUpsertNetting(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		plain := newDec(t, "upsert", "bytes", "bytes")
		netted := newDec(t, "upsert", "bytes", "bytes")
		from := int64(rng.IntN(40))
		must[Netting](netted).NetFrom(map[int32]int64{0: from})
		consolidated := func(r arrow.Record) (map[string]int64, []string) {
			sum := map[string]int64{}
			var lines []string
			if r == nil {
				return sum, nil
			}
			cols, times, diffs, _ := pipe.SplitData(r)
			for i := 0; i < int(r.NumRows()); i++ {
				k := string(cols[0].(*array.Binary).Value(i)) + "=" + string(cols[1].(*array.Binary).Value(i))
				sum[k] += diffs.Value(i)
				lines = append(lines, fmt.Sprintf("%s@%d:%d", k, times.Value(i), diffs.Value(i)))
			}
			for k, v := range sum {
				if v == 0 {
					delete(sum, k)
				}
			}
			return sum, lines
		}
		batchStart := int64(0)
		for off := int64(0); off < 200; off++ {
			key := []byte{'k', byte('0' + rng.IntN(4))}
			var value []byte
			if rng.IntN(5) != 0 {
				value = []byte{'v', byte('0' + rng.IntN(3))}
			}
			for _, d := range []Decoder{plain, netted} {
				if err := d.Add(rec(0, off, key, value)); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(8) != 0 && off != 199 {
				continue
			}
			a, b := plain.Flush(), netted.Flush()
			want, _ := consolidated(a)
			got, lines := consolidated(b)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d batch [%d, %d] from %d: netted %v, record by record %v", seed, batchStart, off, from, got, want)
			}
			if b != nil && off >= from {
				// Only rows at offsets before from may cancel.
				_, times, _, _ := pipe.SplitData(b)
				seen := map[string]bool{}
				for i, l := range lines {
					if times.Value(i) < uint64(from) {
						continue
					}
					if times.Value(i) < uint64(batchStart) || times.Value(i) > uint64(off) {
						t.Fatalf("seed %d: netted row %s outside its batch [%d, %d]", seed, l, batchStart, off)
					}
					kv := l[:strings.Index(l, "@")]
					if seen[kv] {
						t.Fatalf("seed %d: netted rows of %s cancel: %v", seed, kv, lines)
					}
					seen[kv] = true
				}
			}
			for _, r := range []arrow.Record{a, b} {
				if r != nil {
					r.Release()
				}
			}
			if p, n := must[Stateful](plain).StateSize(), must[Stateful](netted).StateSize(); p != n {
				t.Fatalf("seed %d: %d keys record by record, %d netted", seed, p, n)
			}
			if n, held := must[Stateful](netted).StateSize(), netted.(*upsertDecoder).state.len(); n != held {
				t.Fatalf("seed %d: %d keys but %d entries held: deleted keys linger", seed, n, held)
			}
			batchStart = off + 1
		}
		plain.Release()
		netted.Release()
		mem.AssertSize(t, 0)
	}
}

// TestUpsertStateFromHistory rebuilds the state from a decoder's whole
// output (every retraction and insertion, not consolidated) split into
// random batches: it equals the decoder's own state. Sums that are not an
// upsert collection are refused.
func TestUpsertStateFromHistory(t *testing.T) {
	for _, vf := range []string{"bytes", "text"} {
		t.Run(vf, func(t *testing.T) { testUpsertStateFromHistory(t, vf) })
	}
}

func testUpsertStateFromHistory(t *testing.T, vf string) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rng := rand.New(rand.NewPCG(11, 12))
	d := newDec(t, "upsert", "bytes", vf)
	defer d.Release()
	var out []arrow.Record
	for off := int64(0); off < 500; off++ {
		var v []byte
		if rng.IntN(4) != 0 {
			v = []byte(fmt.Sprint("v", rng.IntN(5)))
		}
		if err := d.Add(rec(0, off, []byte(fmt.Sprint("k", rng.IntN(30))), v)); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(40) == 0 {
			if r := d.Flush(); r != nil {
				out = append(out, r)
			}
		}
	}
	if r := d.Flush(); r != nil {
		out = append(out, r)
	}
	// Split the output into random slices, in a shuffled order: only the
	// sum counts.
	var parts []arrow.Record
	for _, r := range out {
		for lo := int64(0); lo < r.NumRows(); {
			hi := min(r.NumRows(), lo+1+int64(rng.IntN(20)))
			parts = append(parts, r.NewSlice(lo, hi))
			lo = hi
		}
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	d2 := newDec(t, "upsert", "bytes", vf)
	defer d2.Release()
	if err := loadState(d2, parts...); err != nil {
		t.Fatal(err)
	}
	want, got := map[string]string{}, map[string]string{}
	for _, c := range []struct {
		d Decoder
		m map[string]string
	}{{d, want}, {d2, got}} {
		st := c.d.(*upsertDecoder).state
		st.each(func(id uint32) {
			if st.live(id) {
				c.m[string(st.key(id))] = string(st.value(id))
			}
		})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || must[Stateful](d2).StateSize() != len(want) {
		t.Fatalf("state from history %v (%d keys), decoder's %v", got, must[Stateful](d2).StateSize(), want)
	}
	for _, r := range append(out, parts...) {
		r.Release()
	}

	schema := arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.BinaryTypes.Binary}, {Name: "value", Type: arrow.BinaryTypes.Binary}, {Name: "_diff", Type: arrow.PrimitiveTypes.Int64}}, nil)
	for _, tc := range []struct {
		name string
		rows [][3]string
		err  string
	}{
		{"two values", [][3]string{{"a", "1", "1"}, {"a", "2", "1"}}, "2 values"},
		{"twice", [][3]string{{"a", "1", "2"}}, "multiplicity 2"},
		{"retracted more than inserted", [][3]string{{"a", "1", "1"}, {"a", "1", "-1"}, {"b", "1", "-1"}}, "multiplicity -1"},
	} {
		b := array.NewRecordBuilder(mem, schema)
		for _, r := range tc.rows {
			b.Field(0).(*array.BinaryBuilder).Append([]byte(r[0]))
			b.Field(1).(*array.BinaryBuilder).Append([]byte(r[1]))
			n, _ := strconv.Atoi(r[2])
			b.Field(2).(*array.Int64Builder).Append(int64(n))
		}
		r := b.NewRecord()
		b.Release()
		d3 := newDec(t, "upsert", "bytes", "bytes")
		err := loadState(d3, r)
		r.Release()
		d3.Release()
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}

// must returns dec as a T (through NewDecoder's wrappers), panicking if
// it is not one.
func must[T any](dec Decoder) T {
	t, ok := As[T](dec)
	if !ok {
		panic(fmt.Sprintf("%T is not a %T", dec, t))
	}
	return t
}
