package render

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestCSVFieldsAsEncodingCSV: fields of random bytes drawn from the
// characters that matter to CSV quoting are written as encoding/csv writes
// them.
func TestCSVFieldsAsEncodingCSV(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", ",", `"`, "\n", "\r", " ", "\t", `\`, ".", "é", "\u00a0", "\u2028", "x"}
	for range 5000 {
		row := make([]string, 1+rng.IntN(4))
		for j := range row {
			var b strings.Builder
			for range rng.IntN(5) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			row[j] = b.String()
		}
		if rng.IntN(20) == 0 {
			row[0] = `\.`
		}
		var want bytes.Buffer
		cw := csv.NewWriter(&want)
		if err := cw.Write(row); err != nil {
			t.Fatal(err)
		}
		cw.Flush()
		var got bytes.Buffer
		w := &csvWriter{bw: bufio.NewWriter(&got)}
		if err := w.header(row); err != nil {
			t.Fatal(err)
		}
		w.bw.Flush()
		if got.String() != want.String() {
			t.Fatalf("row %q: wrote %q, encoding/csv %q", row, got.String(), want.String())
		}
	}
}

// TestAppendValueIsValue: AppendValue appends what Value returns, for
// random values of every type it writes in place, edges included.
func TestAppendValueIsValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := memory.NewGoAllocator()
	floats := []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-5, 1e-4, 123456789012345, 1e15, 1e300, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1), 0.1 + 0.2}
	ts := []int64{math.MaxInt64, math.MinInt64, 0, -1, 1, -62135596800000000 - 1, 253402300799999999, 1732900000123456}
	dates := []int32{math.MaxInt32, math.MinInt32, 0, -1, -719528, -800000, 2932896}
	types := []arrow.DataType{
		arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int8,
		arrow.PrimitiveTypes.Uint64, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint8,
		arrow.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Float32, arrow.FixedWidthTypes.Boolean, arrow.BinaryTypes.String,
		&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, &arrow.TimestampType{Unit: arrow.Microsecond},
		&arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/St_Johns"}, &arrow.TimestampType{Unit: arrow.Nanosecond},
		arrow.FixedWidthTypes.Date32, arrow.BinaryTypes.Binary, arrow.FixedWidthTypes.Time64us,
	}
	for _, typ := range types {
		b := array.NewBuilder(mem, typ)
		for k := range 400 {
			if k%17 == 0 {
				b.AppendNull()
				continue
			}
			switch b := b.(type) {
			case *array.Int64Builder:
				b.Append(int64(rng.Uint64()) >> rng.IntN(64))
			case *array.Int32Builder:
				b.Append(int32(rng.Uint32()))
			case *array.Int16Builder:
				b.Append(int16(rng.Uint32()))
			case *array.Int8Builder:
				b.Append(int8(rng.Uint32()))
			case *array.Uint64Builder:
				b.Append(rng.Uint64() >> rng.IntN(64))
			case *array.Uint32Builder:
				b.Append(rng.Uint32())
			case *array.Uint16Builder:
				b.Append(uint16(rng.Uint32()))
			case *array.Uint8Builder:
				b.Append(uint8(rng.Uint32()))
			case *array.Float64Builder:
				if k < len(floats) {
					b.Append(floats[k])
				} else {
					b.Append(math.Float64frombits(rng.Uint64()))
				}
			case *array.Float32Builder:
				if k < len(floats) {
					b.Append(float32(floats[k]))
				} else {
					b.Append(math.Float32frombits(rng.Uint32()))
				}
			case *array.BooleanBuilder:
				b.Append(rng.IntN(2) == 0)
			case *array.StringBuilder:
				b.Append(strings.Repeat("é,\"", rng.IntN(3)))
			case *array.TimestampBuilder:
				if k < len(ts) {
					b.Append(arrow.Timestamp(ts[k]))
				} else {
					b.Append(arrow.Timestamp(int64(rng.Uint64()) >> (rng.IntN(8) + 4)))
				}
			case *array.Date32Builder:
				if k < len(dates) {
					b.Append(arrow.Date32(dates[k]))
				} else {
					b.Append(arrow.Date32(int32(rng.Uint32()) >> rng.IntN(12)))
				}
			case *array.BinaryBuilder:
				b.Append([]byte{byte(k), 0, 255})
			case *array.Time64Builder:
				b.Append(arrow.Time64(rng.Int64N(86400e6 + 1)))
			}
		}
		arr := b.NewArray()
		for i := range arr.Len() {
			if got, want := string(AppendValue([]byte("prefix"), arr, i)), "prefix"+Value(arr, i); got != want {
				t.Errorf("%s row %d: AppendValue %q, Value %q", typ, i, got, want)
			}
		}
		arr.Release()
		b.Release()
	}
}

// TestAppendFloatAsStrconvFixed: appendFloat's fixed notation, built from
// the 'e' digits, is strconv's 'f' with precision -1 (what it formatted a
// second time before), and its exponent notation is strconv's 'e'.
func TestAppendFloatAsStrconvFixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	want := func(f float64, bits int) string {
		switch {
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "Infinity"
		case math.IsInf(f, -1):
			return "-Infinity"
		}
		e := strconv.FormatFloat(f, 'e', -1, bits)
		exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		fixedBelow := 15
		if bits == 32 {
			fixedBelow = 6
		}
		if f == 0 || (exp >= -4 && exp < fixedBelow) {
			return strconv.FormatFloat(f, 'f', -1, bits)
		}
		return e
	}
	edges := []float64{0, math.Copysign(0, -1), 1, -1, 10, 100, 1e14, 1e15, 99999999999999.9, 999999999999999, 1e-4, 1e-5, 0.00012345, 123456.5, 1e5, 1e6, 999999, 0.1, -0.25, 12.5, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)}
	for k := range 200000 {
		var f float64
		switch {
		case k < len(edges):
			f = edges[k]
		case k%3 == 0:
			f = math.Float64frombits(rng.Uint64())
		case k%3 == 1:
			f = float64(rng.Int64N(1<<53)) * math.Pow(10, float64(rng.IntN(40)-20))
		default:
			f = float64(rng.Int64N(1e9)) * 0.25
		}
		if got, w := string(appendFloat([]byte("x"), f, 64)), "x"+want(f, 64); got != w {
			t.Fatalf("float64 %v (%x): %q, want %q", f, math.Float64bits(f), got, w)
		}
		f32 := float64(float32(f))
		if k%3 == 0 {
			f32 = float64(math.Float32frombits(rng.Uint32()))
		}
		if got, w := string(appendFloat(nil, f32, 32)), want(f32, 32); got != w {
			t.Fatalf("float32 %v: %q, want %q", f32, got, w)
		}
	}
}

// TestCSVColumnsAsEncodingCSV: records of every type the column renderer
// special-cases (and some it does not), with nulls, awkward strings and
// multiplicities 0 to 3, whole or sliced, are written as encoding/csv
// writes the rows of Value strings, each as many times as its
// multiplicity, also when consecutive records reuse the writer's buffers.
func TestCSVColumnsAsEncodingCSV(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	mem := memory.NewGoAllocator()
	fields := []arrow.Field{
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "tsz", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/St_Johns"}, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	}
	schema := arrow.NewSchema(fields, nil)
	alphabet := []string{"a", ",", `"`, "\n", "\r", " ", "\t", `\`, ".", "é", "\u00a0", "\u2028", "x", "\x85"}
	var got bytes.Buffer
	w := &csvWriter{bw: bufio.NewWriter(&got)}
	var want bytes.Buffer
	cw := csv.NewWriter(&want)
	for range 40 {
		b := array.NewRecordBuilder(mem, schema)
		n := rng.IntN(300)
		for range n {
			for j, fb := range b.Fields() {
				if rng.IntN(7) == 0 {
					fb.AppendNull()
					continue
				}
				switch fb := fb.(type) {
				case *array.Int64Builder:
					fb.Append(int64(rng.Uint64()) >> rng.IntN(64))
				case *array.Int32Builder:
					fb.Append(int32(rng.Uint32()))
				case *array.Float64Builder:
					fb.Append(math.Float64frombits(rng.Uint64()))
				case *array.BooleanBuilder:
					fb.Append(rng.IntN(2) == 0)
				case *array.TimestampBuilder:
					v := int64(rng.Uint64()) >> (rng.IntN(8) + 4)
					if rng.IntN(20) == 0 {
						v = []int64{math.MaxInt64, math.MinInt64}[rng.IntN(2)]
					}
					if j == 5 {
						v /= 1000
					}
					fb.Append(arrow.Timestamp(v))
				case *array.StringBuilder:
					var sb strings.Builder
					for range rng.IntN(5) {
						sb.WriteString(alphabet[rng.IntN(len(alphabet))])
					}
					if rng.IntN(20) == 0 {
						sb.Reset()
						sb.WriteString(`\.`)
					}
					fb.Append(sb.String())
				case *array.Date32Builder:
					fb.Append(arrow.Date32(int32(rng.Uint32()) >> rng.IntN(12)))
				case *array.Uint8Builder:
					fb.Append(uint8(rng.Uint32()))
				}
			}
		}
		rec := b.NewRecord()
		b.Release()
		if n > 2 && rng.IntN(3) == 0 {
			// A slice: values and validity at an offset.
			lo := int64(1 + rng.IntN(n/2))
			sl := rec.NewSlice(lo, int64(n))
			rec.Release()
			rec, n = sl, n-int(lo)
		}
		reps := make([]int64, n)
		for i := range reps {
			reps[i] = int64(rng.IntN(4))
		}
		if err := w.rows(rec, func(i int) int64 { return reps[i] }); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			row := make([]string, len(fields))
			for j := range row {
				row[j] = Value(rec.Column(j), i)
			}
			for range reps[i] {
				if err := cw.Write(row); err != nil {
					t.Fatal(err)
				}
			}
		}
		rec.Release()
	}
	w.bw.Flush()
	cw.Flush()
	if got.String() != want.String() {
		g, wl := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
		for i := range min(len(g), len(wl)) {
			if g[i] != wl[i] {
				t.Fatalf("line %d: wrote %q, encoding/csv %q", i, g[i], wl[i])
			}
		}
		t.Fatalf("wrote %d lines, encoding/csv %d", len(g), len(wl))
	}
}

// BenchmarkCSVRows renders a record of strings (some needing quotes) and
// binary values (the generic path) as CSV rows.
func BenchmarkCSVRows(b *testing.B) {
	const n = 64 << 10
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	bb := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	for i := range n {
		if i%4 == 0 {
			sb.Append(fmt.Sprintf("name %d, é", i)) // quoted
		} else {
			sb.Append(fmt.Sprintf("name %d é", i))
		}
		bb.Append([]byte(fmt.Sprintf("\u00a0v%d", i)))
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String}, {Name: "b", Type: arrow.BinaryTypes.Binary}}, nil)
	rec := array.NewRecord(schema, []arrow.Array{sb.NewArray(), bb.NewArray()}, n)
	defer rec.Release()
	w := &csvWriter{bw: bufio.NewWriter(io.Discard)}
	b.SetBytes(n * 24)
	for b.Loop() {
		if err := w.rows(rec, func(int) int64 { return 1 }); err != nil {
			b.Fatal(err)
		}
	}
}
