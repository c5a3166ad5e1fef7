package pipe

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// TestRoundTripArrowTypes writes a data stream with a column of every
// allowed Arrow type, nulls included, and checks it reads back equal.
func TestRoundTripArrowTypes(t *testing.T) {
	cols := []struct {
		name string
		typ  arrow.DataType
		json string
	}{
		{"null", arrow.Null, `[null, null, null]`},
		{"bool", arrow.FixedWidthTypes.Boolean, `[true, null, false]`},
		{"i8", arrow.PrimitiveTypes.Int8, `[-128, null, 127]`},
		{"i16", arrow.PrimitiveTypes.Int16, `[-32768, 0, null]`},
		{"i32", arrow.PrimitiveTypes.Int32, `[null, -1, 2147483647]`},
		{"i64", arrow.PrimitiveTypes.Int64, `[-9223372036854775808, null, 9223372036854775807]`},
		{"u8", arrow.PrimitiveTypes.Uint8, `[0, 255, null]`},
		{"u16", arrow.PrimitiveTypes.Uint16, `[65535, null, 1]`},
		{"u32", arrow.PrimitiveTypes.Uint32, `[4294967295, 0, null]`},
		{"u64", arrow.PrimitiveTypes.Uint64, `[18446744073709551615, null, 0]`},
		{"f16", arrow.FixedWidthTypes.Float16, `[1.5, null, -2]`},
		{"f32", arrow.PrimitiveTypes.Float32, `[1.25, null, -3.5]`},
		{"f64", arrow.PrimitiveTypes.Float64, `[0.1, 1e300, null]`},
		{"dec128", &arrow.Decimal128Type{Precision: 10, Scale: 2}, `["12345.67", null, "-0.01"]`},
		{"date32", arrow.FixedWidthTypes.Date32, `["2024-02-29", null, "1970-01-01"]`},
		{"date64", arrow.FixedWidthTypes.Date64, `["2024-02-29", null, "1970-01-01"]`},
		{"time32", arrow.FixedWidthTypes.Time32ms, `["12:34:56.789", null, "00:00:00"]`},
		{"time64", arrow.FixedWidthTypes.Time64us, `["12:34:56.789012", null, "23:59:59"]`},
		{"ts", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, `["2024-01-02T03:04:05.123456Z", null, "1970-01-01T00:00:00Z"]`},
		{"ts_local", &arrow.TimestampType{Unit: arrow.Millisecond}, `["2024-01-02T03:04:05.123", null, "1999-12-31T23:59:59"]`},
		{"dur", arrow.FixedWidthTypes.Duration_ns, `[1000000000, null, -5]`},
		{"months", arrow.FixedWidthTypes.MonthInterval, `[{"months": 3}, null, {"months": -1}]`},
		{"daytime", arrow.FixedWidthTypes.DayTimeInterval, `[{"days": 1, "milliseconds": 2}, null, {"days": 0, "milliseconds": 0}]`},
		{"mdn", arrow.FixedWidthTypes.MonthDayNanoInterval, `[{"months": 1, "days": 2, "nanoseconds": 3}, null, {"months": 0, "days": 0, "nanoseconds": 0}]`},
		{"str", arrow.BinaryTypes.String, `["héllo", null, ""]`},
		{"lstr", arrow.BinaryTypes.LargeString, `["a", "", null]`},
		{"bin", arrow.BinaryTypes.Binary, `["AAEC", null, ""]`},
		{"lbin", arrow.BinaryTypes.LargeBinary, `[null, "/w==", ""]`},
		{"fsb", &arrow.FixedSizeBinaryType{ByteWidth: 3}, `["AAEC", null, "/wAB"]`},
		{"list", arrow.ListOf(arrow.PrimitiveTypes.Int32), `[[1, null, 3], null, []]`},
		{"llist", arrow.LargeListOf(arrow.BinaryTypes.String), `[["x"], [], null]`},
		{"fslist", arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float64), `[[1, 2], null, [null, 4]]`},
		{"struct", arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}),
			`[{"a": 1, "b": "x"}, null, {"a": null, "b": "z"}]`},
		{"map", arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), `[[{"key": "k", "value": 1}], null, []]`},
		{"nested", arrow.ListOf(arrow.StructOf(arrow.Field{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint8), Nullable: true})), `[[{"l": [1, 2]}], [], null]`},
	}
	mem := checked(t)
	var fields []arrow.Field
	var arrs []arrow.Array
	for _, c := range cols {
		a, _, err := array.FromJSON(mem, c.typ, strings.NewReader(c.json))
		if err != nil {
			t.Fatalf("column %s: %v", c.name, err)
		}
		defer a.Release()
		fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
		arrs = append(arrs, a)
	}
	for _, j := range []string{`[1, 2, 3]`, `[1, -1, 1]`} {
		typ := arrow.DataType(arrow.PrimitiveTypes.Uint64)
		if j[4] == '-' {
			typ = arrow.PrimitiveTypes.Int64
		}
		a, _, err := array.FromJSON(mem, typ, strings.NewReader(j))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release()
		arrs = append(arrs, a)
	}
	h := Header{Kind: KindData, Collection: "db.every_type", Domain: frontier.DomainLSN}
	s := DataSchema(fields, h.Domain, arrow.NewMetadata([]string{"owner"}, []string{"test"}))
	rec := array.NewRecord(s, arrs, 3)
	defer rec.Release()
	// A sliced record exercises non-zero array offsets on the write side.
	sliced := rec.NewSlice(1, 3)
	defer sliced.Release()

	var buf bytes.Buffer
	w := NewWriter(&buf, mem)
	for _, r := range []arrow.Record{rec, sliced} {
		if err := w.WriteRecord(h, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	r := NewReader(iotest.HalfReader(&buf), mem)
	st, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := st.Schema.Metadata().GetValue("owner"); !ok || v != "test" {
		t.Errorf("non-rtr metadata lost: %v", st.Schema.Metadata())
	}
	for i, want := range []arrow.Record{rec, sliced} {
		got, err := st.NextRecord()
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		for c := 0; c < int(want.NumCols()); c++ {
			if !array.Equal(got.Column(c), want.Column(c)) {
				t.Errorf("batch %d column %s: got %v, want %v", i, want.ColumnName(c), got.Column(c), want.Column(c))
			}
			if !arrow.TypeEqual(got.Schema().Field(c).Type, want.Schema().Field(c).Type) {
				t.Errorf("column %s type %s, want %s", want.ColumnName(c), got.Schema().Field(c).Type, want.Schema().Field(c).Type)
			}
		}
		got.Release()
	}
	if _, err := st.NextRecord(); err != io.EOF {
		t.Errorf("end of stream: %v", err)
	}
}

// TestRefusesDisallowedTypes checks the types pipe version 1 refuses.
func TestRefusesDisallowedTypes(t *testing.T) {
	cases := []struct {
		name string
		typ  arrow.DataType
	}{
		{"dictionary", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}},
		{"string view", arrow.BinaryTypes.StringView},
		{"dense union", arrow.DenseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int8}}, []arrow.UnionTypeCode{0})},
		{"run end encoded", arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String)},
		{"list of view", arrow.ListOf(arrow.BinaryTypes.BinaryView)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := DataSchema([]arrow.Field{{Name: "x", Type: c.typ}}, frontier.DomainLSN, arrow.Metadata{})
			col, err := checkSchema(Header{Kind: KindData, Collection: "c", Domain: frontier.DomainLSN}, s)
			if err == nil || col != "x" || !strings.Contains(err.Error(), "not allowed") {
				t.Errorf("checkSchema = %q, %v; want column x not allowed", col, err)
			}
		})
	}
}
