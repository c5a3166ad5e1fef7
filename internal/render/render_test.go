package render

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// one builds a one-column record of typ with the values appended by add.
func one(t *testing.T, typ arrow.DataType, add func(b array.Builder)) arrow.Record {
	t.Helper()
	b := array.NewBuilder(memory.DefaultAllocator, typ)
	defer b.Release()
	add(b)
	col := b.NewArray()
	defer col.Release()
	return array.NewRecord(arrow.NewSchema([]arrow.Field{{Name: "c", Type: typ, Nullable: true}}, nil), []arrow.Array{col}, int64(col.Len()))
}

func render(t *testing.T, format string, rec arrow.Record) string {
	t.Helper()
	var out bytes.Buffer
	if err := Rows(&out, format, rec, nil); err != nil {
		t.Fatalf("render %s: %v", format, err)
	}
	return out.String()
}

// lines renders rec in format and returns its lines after the header
// (csv, table) or all of them (json).
func lines(t *testing.T, format string, rec arrow.Record) []string {
	ls := strings.Split(strings.TrimSuffix(render(t, format, rec), "\n"), "\n")
	if format != "json" {
		ls = ls[1:]
	}
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " ")
	}
	return ls
}

func TestValues(t *testing.T) {
	ts := &arrow.TimestampType{Unit: arrow.Microsecond}
	tstz := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	for _, tc := range []struct {
		name       string
		typ        arrow.DataType
		add        func(b array.Builder)
		csv, table []string // table defaults to csv
		json       []string
	}{
		{"decimal keeps its scale", &arrow.Decimal128Type{Precision: 10, Scale: 2}, func(b array.Builder) {
			b.(*array.Decimal128Builder).Append(decimal128.FromI64(1100))
			b.(*array.Decimal128Builder).Append(decimal128.FromI64(-5))
		}, []string{"11.00", "-0.05"}, nil, []string{`{"c":11.00}`, `{"c":-0.05}`}},
		{"time 24:00:00", arrow.FixedWidthTypes.Time64us, func(b array.Builder) {
			b.(*array.Time64Builder).Append(86400000000)
			b.(*array.Time64Builder).Append(45296789000)
			b.(*array.Time64Builder).Append(0)
		}, []string{"24:00:00", "12:34:56.789", "00:00:00"}, nil, []string{`{"c":"24:00:00"}`, `{"c":"12:34:56.789"}`, `{"c":"00:00:00"}`}},
		{"float8 edges", arrow.PrimitiveTypes.Float64, func(b array.Builder) {
			for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 5e-324, 123456789012345, 1234567890123456, 0.0001, 0.00001, 1.5} {
				b.(*array.Float64Builder).Append(f)
			}
		}, []string{"NaN", "Infinity", "-Infinity", "-0", "5e-324", "123456789012345", "1.234567890123456e+15", "0.0001", "1e-05", "1.5"}, nil,
			[]string{`{"c":"NaN"}`, `{"c":"Infinity"}`, `{"c":"-Infinity"}`, `{"c":-0}`, `{"c":5e-324}`, `{"c":123456789012345}`, `{"c":1234567890123456}`, `{"c":0.0001}`, `{"c":0.00001}`, `{"c":1.5}`}},
		{"float4 edges", arrow.PrimitiveTypes.Float32, func(b array.Builder) {
			for _, f := range []float32{float32(math.NaN()), float32(math.Inf(-1)), math.SmallestNonzeroFloat32, 123456, 1234567, 0.1} {
				b.(*array.Float32Builder).Append(f)
			}
		}, []string{"NaN", "-Infinity", "1e-45", "123456", "1.234567e+06", "0.1"}, nil,
			[]string{`{"c":"NaN"}`, `{"c":"-Infinity"}`, `{"c":1e-45}`, `{"c":123456}`, `{"c":1234567}`, `{"c":0.1}`}},
		{"NaN inside lists", arrow.ListOf(arrow.PrimitiveTypes.Float64), func(b array.Builder) {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			vb := lb.ValueBuilder().(*array.Float64Builder)
			vb.Append(1)
			vb.Append(math.NaN())
			vb.AppendNull()
			vb.Append(math.Inf(-1))
			lb.Append(true)
		}, []string{`"{1,NaN,NULL,-Infinity}"`, "{}"}, []string{"{1,NaN,NULL,-Infinity}", "{}"}, []string{`{"c":[1,"NaN",null,"-Infinity"]}`, `{"c":[]}`}},
		{"timestamps", ts, func(b array.Builder) {
			for _, v := range []int64{0, math.MaxInt64 - 1, math.MaxInt64, math.MinInt64, -210866803200000000, 1709210096123456} {
				b.(*array.TimestampBuilder).Append(arrow.Timestamp(v))
			}
		}, []string{"1970-01-01 00:00:00", "294247-01-10 04:00:54.775806", "infinity", "-infinity", "4714-11-24 00:00:00 BC", "2024-02-29 12:34:56.123456"}, nil,
			[]string{`{"c":"1970-01-01 00:00:00"}`, `{"c":"294247-01-10 04:00:54.775806"}`, `{"c":"infinity"}`, `{"c":"-infinity"}`, `{"c":"4714-11-24 00:00:00 BC"}`, `{"c":"2024-02-29 12:34:56.123456"}`}},
		{"timestamptz", tstz, func(b array.Builder) {
			b.(*array.TimestampBuilder).Append(1709210096500000)
			b.(*array.TimestampBuilder).Append(-62167219200000000) // 0000-01-01
		}, []string{"2024-02-29 12:34:56.5+00", "0001-01-01 00:00:00+00 BC"}, nil, []string{`{"c":"2024-02-29 12:34:56.5+00"}`, `{"c":"0001-01-01 00:00:00+00 BC"}`}},
		{"dates", arrow.FixedWidthTypes.Date32, func(b array.Builder) {
			for _, v := range []int32{0, math.MaxInt32, math.MinInt32, -2440588, 2145042905} {
				b.(*array.Date32Builder).Append(arrow.Date32(v))
			}
		}, []string{"1970-01-01", "infinity", "-infinity", "4714-11-24 BC", "5874897-12-31"}, nil,
			[]string{`{"c":"1970-01-01"}`, `{"c":"infinity"}`, `{"c":"-infinity"}`, `{"c":"4714-11-24 BC"}`, `{"c":"5874897-12-31"}`}},
		{"intervals", arrow.FixedWidthTypes.MonthDayNanoInterval, func(b array.Builder) {
			for _, v := range []arrow.MonthDayNanoInterval{{}, {Months: 14, Days: 3, Nanoseconds: 14706789000000}, {Months: -14, Days: 3, Nanoseconds: -14706000000000},
				{Days: 1, Nanoseconds: -1000}, {Months: -1}, {Nanoseconds: 9223372036854775000}, {Months: math.MinInt32, Days: math.MinInt32, Nanoseconds: -9223372036854775000}} {
				b.(*array.MonthDayNanoIntervalBuilder).Append(v)
			}
		}, []string{"00:00:00", "1 year 2 mons 3 days 04:05:06.789", "-1 years -2 mons +3 days -04:05:06", "1 day -00:00:00.000001", "-1 mons",
			"2562047:47:16.854775", "-178956970 years -8 mons -2147483648 days -2562047:47:16.854775"}, nil, nil},
		{"text with tab and newline", arrow.BinaryTypes.String, func(b array.Builder) {
			b.(*array.StringBuilder).Append("a\tb\nc\r\x01\\n")
			b.(*array.StringBuilder).Append(`say "hi", ok`)
		}, []string{"\"a\tb", "c\r\x01\\n\"", `"say ""hi"", ok"`}, []string{`a\tb\nc\r\x01\n`, `say "hi", ok`},
			[]string{`{"c":"a\tb\nc\r\u0001\\n"}`, `{"c":"say \"hi\", ok"}`}},
		{"text arrays quote like array_out", arrow.ListOf(arrow.BinaryTypes.String), func(b array.Builder) {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			vb := lb.ValueBuilder().(*array.StringBuilder)
			for _, s := range []string{"a", "", "NULL", "b c", `q"\`} {
				vb.Append(s)
			}
			vb.AppendNull()
		}, []string{`"{a,"""",""NULL"",""b c"",""q\""\\"",NULL}"`}, []string{`{a,"","NULL","b c","q\"\\",NULL}`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := one(t, tc.typ, tc.add)
			defer rec.Release()
			table := tc.table
			if table == nil {
				table = tc.csv
			}
			for format, want := range map[string][]string{"csv": tc.csv, "table": table, "json": tc.json} {
				if want == nil {
					continue
				}
				if got := lines(t, format, rec); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s:\n got %q\nwant %q", format, got, want)
				}
			}
		})
	}
}

// A table's rows stay one line each, aligned, whatever their values hold.
func TestTableLayout(t *testing.T) {
	rec := one(t, arrow.BinaryTypes.String, func(b array.Builder) {
		b.(*array.StringBuilder).Append("x\ty")
		b.(*array.StringBuilder).Append("line1\nline2")
	})
	defer rec.Release()
	got := render(t, "table", rec)
	if want := "c\nx\\ty\nline1\\nline2\n"; got != want {
		t.Errorf("table = %q, want %q", got, want)
	}
}
