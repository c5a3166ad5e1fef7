package pgarrow

import (
	"bytes"
	"math"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/render"
)

// The fuzz targets of the text-form parsers. Each must never panic, and a
// value it accepts must come back the same through `rtrctl read`'s
// rendering (internal/render, PostgreSQL's output forms) and the parser
// again. The seeds are the edges of each type (docs/types-postgres.md);
// they run under plain go test.

// rendered is render.Value of v as the only element of an array of typ.
func rendered(t *testing.T, typ arrow.DataType, add func(b array.Builder)) []byte {
	b := array.NewBuilder(memory.DefaultAllocator, typ)
	defer b.Release()
	add(b)
	a := b.NewArray()
	defer a.Release()
	return []byte(render.Value(a, 0))
}

func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
}

func fuzzTimestamp(f *testing.F, tz bool) {
	typ := &arrow.TimestampType{Unit: arrow.Microsecond}
	parse := ParseTimestamp
	if tz {
		typ.TimeZone = "UTC"
		parse = ParseTimestamptz
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := parse(in)
		if err != nil {
			return
		}
		if (v == TimestampInfinity || v == TimestampNegInfinity) && !bytes.HasSuffix(in, []byte("infinity")) {
			t.Fatalf("finite %q parsed as an infinity sentinel", in)
		}
		out := rendered(t, typ, func(b array.Builder) { b.(*array.TimestampBuilder).Append(arrow.Timestamp(v)) })
		if again, err := parse(out); err != nil || again != v {
			t.Fatalf("%q = %d renders as %q, which parses as %d, %v", in, v, out, again, err)
		}
	})
}

func FuzzParseTimestamp(f *testing.F) {
	addSeeds(f, "1970-01-01 00:00:00", "infinity", "-infinity", "4714-11-24 00:00:00 BC", "0001-01-01 00:00:00 BC",
		"294247-01-10 04:00:54.775806", "294247-01-10 04:00:54.775807", "294276-12-31 23:59:59.999999",
		"2024-02-29 12:34:56.1234565", "2024-03-05T06:07:08", "1999-12-31 23:59:60")
	fuzzTimestamp(f, false)
}

func FuzzParseTimestamptz(f *testing.F) {
	addSeeds(f, "1970-01-01 00:00:00+00", "infinity", "4714-11-24 00:00:00+00 BC", "294247-01-10 04:00:54.775806+00",
		"294247-01-10 05:00:54.775806+01", "294247-01-10 00:00:54.775807-04", "294276-12-31 23:59:59.999999+00",
		"1900-01-01 00:00:00+00:09:21", "2024-03-05 06:07:08.25+05:30")
	fuzzTimestamp(f, true)
}

func FuzzParseDate(f *testing.F) {
	addSeeds(f, "1970-01-01", "infinity", "-infinity", "4714-11-24 BC", "5874897-12-31", "0001-01-01 BC", "2024-02-30", "10000-01-01")
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := ParseDate(in)
		if err != nil {
			return
		}
		out := rendered(t, arrow.FixedWidthTypes.Date32, func(b array.Builder) { b.(*array.Date32Builder).Append(arrow.Date32(d)) })
		if again, err := ParseDate(out); err != nil || again != d {
			t.Fatalf("%q = %d renders as %q, which parses as %d, %v", in, d, out, again, err)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	addSeeds(f, "00:00:00", "24:00:00", "23:59:59.999999", "23:59:59.9999995", "12:34", "24:00:00.000001")
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseTime(in)
		if err != nil {
			return
		}
		if v < 0 || v > usPerDay {
			t.Fatalf("%q = %d: outside [00:00:00, 24:00:00]", in, v)
		}
		out := rendered(t, arrow.FixedWidthTypes.Time64us, func(b array.Builder) { b.(*array.Time64Builder).Append(arrow.Time64(v)) })
		if again, err := ParseTime(out); err != nil || again != v {
			t.Fatalf("%q = %d renders as %q, which parses as %d, %v", in, v, out, again, err)
		}
	})
}

func FuzzParseInterval(f *testing.F) {
	addSeeds(f, "00:00:00", "1 year 2 mons 3 days 04:05:06.789", "-1 years -2 mons +3 days -04:05:06",
		"-178956970 years -8 mons -2147483648 days -2562047:47:16.854775", "178956970 years 7 mons 2147483647 days 2562047:47:16.854775",
		"2562047:47:16.854776", "-2562047788:00:54.775808", "1 day -00:00:00.000001", "-1 mons")
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseInterval(in)
		if err != nil {
			return
		}
		out := rendered(t, arrow.FixedWidthTypes.MonthDayNanoInterval, func(b array.Builder) { b.(*array.MonthDayNanoIntervalBuilder).Append(v) })
		if again, err := ParseInterval(out); err != nil || again != v {
			t.Fatalf("%q = %+v renders as %q, which parses as %+v, %v", in, v, out, again, err)
		}
	})
}

func FuzzParseDecimal(f *testing.F) {
	addSeeds(f, "0", "11.00", "-0.05", "NaN", "Infinity", "-Infinity", "99999999999999999999999999999999999999",
		"-9999999999999999999999999999.9999999999", "1e5", "+1", ".5", "5.", "")
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, ps := range [][2]int32{{38, 10}, {10, 2}, {5, 0}, {38, 38}} {
			typ := &arrow.Decimal128Type{Precision: ps[0], Scale: ps[1]}
			d, err := ParseDecimal(in, ps[0], ps[1])
			if err != nil {
				continue
			}
			if !d.FitsInPrecision(ps[0]) {
				t.Fatalf("%q as decimal128(%d,%d) = %v does not fit", in, ps[0], ps[1], d)
			}
			out := rendered(t, typ, func(b array.Builder) { b.(*array.Decimal128Builder).Append(d) })
			if again, err := ParseDecimal(out, ps[0], ps[1]); err != nil || again != d {
				t.Fatalf("%q as decimal128(%d,%d) renders as %q, which parses as %v, %v", in, ps[0], ps[1], out, again, err)
			}
		}
	})
}

func FuzzParseFloat(f *testing.F) {
	addSeeds(f, "0", "-0", "NaN", "Infinity", "-Infinity", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e+308",
		"1e-45", "1.1754942e-38", "3.4028235e+38", "1e400", "0.1", "123456789012345678")
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, bits := range []int{32, 64} {
			v, err := ParseFloat(in, bits)
			if err != nil {
				continue
			}
			var out []byte
			if bits == 32 {
				out = rendered(t, arrow.PrimitiveTypes.Float32, func(b array.Builder) { b.(*array.Float32Builder).Append(float32(v)) })
			} else {
				out = rendered(t, arrow.PrimitiveTypes.Float64, func(b array.Builder) { b.(*array.Float64Builder).Append(v) })
			}
			again, err := ParseFloat(out, bits)
			same := math.Float64bits(again) == math.Float64bits(v) || math.IsNaN(again) && math.IsNaN(v)
			if err != nil || !same {
				t.Fatalf("%q as float%d = %v renders as %q, which parses as %v, %v", in, bits/8, v, out, again, err)
			}
		}
	})
}

func FuzzParseBytea(f *testing.F) {
	addSeeds(f, `\x`, `\x00ff5c22`, `\x0`, `\xzz`, `abc\\def\001`, `\400`, `\\`, `\`)
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseBytea(in)
		if err != nil {
			return
		}
		out := rendered(t, arrow.BinaryTypes.Binary, func(b array.Builder) { b.(*array.BinaryBuilder).Append(v) })
		if again, err := ParseBytea(out); err != nil || !bytes.Equal(again, v) {
			t.Fatalf("%q = %x renders as %q, which parses as %x, %v", in, v, out, again, err)
		}
	})
}
