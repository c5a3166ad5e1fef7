package parquetw

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/rtrctl/rtrctl/pkg/store"
)

// sample is a record with every type the store holds, nulls included.
func sample(t *testing.T, mem memory.Allocator) arrow.Record {
	t.Helper()
	ivList := arrow.ListOf(arrow.FixedWidthTypes.MonthDayNanoInterval)
	st := arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "iv", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int32},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "d", Type: &arrow.Decimal128Type{Precision: 38, Scale: 38}, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "iv", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true},
		{Name: "dur", Type: arrow.FixedWidthTypes.Duration_us, Nullable: true},
		{Name: "ivs", Type: ivList, Nullable: true},
		{Name: "s", Type: st, Nullable: true},
		{Name: "txt", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: arrow.NewMetadata([]string{"pg.type"}, []string{"uuid"})},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{1, 2}, nil)
	b.Field(1).(*array.Uint64Builder).AppendValues([]uint64{1<<64 - 1, 0}, []bool{true, false})
	b.Field(2).(*array.Decimal128Builder).AppendValues([]decimal128.Num{decimal128.FromI64(1), {}}, []bool{true, false})
	b.Field(3).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1<<63 - 1, -1}, nil)
	iv := []arrow.MonthDayNanoInterval{{Months: -8, Days: 1, Nanoseconds: -1000}, {}}
	b.Field(4).(*array.MonthDayNanoIntervalBuilder).AppendValues(iv, []bool{true, false})
	b.Field(5).(*array.DurationBuilder).AppendValues([]arrow.Duration{-838*3600e6 - 59*60e6, 0}, []bool{true, false})
	lb := b.Field(6).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.MonthDayNanoIntervalBuilder).AppendValues(iv, []bool{true, false})
	lb.AppendNull()
	sb := b.Field(7).(*array.StructBuilder)
	sb.Append(true)
	sb.FieldBuilder(0).(*array.Int64Builder).Append(7)
	sb.FieldBuilder(1).(*array.MonthDayNanoIntervalBuilder).Append(iv[0])
	sb.AppendNull()
	b.Field(8).(*array.StringBuilder).AppendValues([]string{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", ""}, []bool{true, false})
	return b.NewRecord()
}

// TestRoundTrip: what Writer writes, pqarrow's reader reads back as the
// converted record, value for value, with the mapping's metadata.
func TestRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rec := sample(t, mem)
	defer rec.Release()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, rec.Schema(), Options{Mem: mem, Metadata: map[string]string{"rtrctl.collection": "c"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want, err := Schema(rec.Schema())
	if err != nil {
		t.Fatal(err)
	}
	conv, err := Convert(want, rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer conv.Release()
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(buf.Bytes()), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != 6 {
		t.Fatalf("read %d rows, want 6", tbl.NumRows())
	}
	pr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if v := pr.MetaData().KeyValueMetadata().FindValue("rtrctl.collection"); v == nil || *v != "c" {
		t.Errorf("file metadata %v lacks rtrctl.collection=c", pr.MetaData().KeyValueMetadata())
	}
	for j := 0; j < int(conv.NumCols()); j++ {
		f := tbl.Schema().Field(j)
		if !arrow.TypeEqual(f.Type, want.Field(j).Type) {
			t.Errorf("column %s: read type %s, want %s", f.Name, f.Type, want.Field(j).Type)
			continue
		}
		all, err := array.Concatenate(tbl.Column(j).Data().Chunks(), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 3; k++ {
			got := array.NewSlice(all, int64(2*k), int64(2*k+2))
			if !array.Equal(got, conv.Column(j)) {
				t.Errorf("column %s copy %d: read %v, want %v", f.Name, k, got, conv.Column(j))
			}
			got.Release()
		}
		all.Release()
	}
	if v, ok := want.Field(4).Metadata.GetValue(MetaArrowType); !ok || v != "month_day_nano_interval" {
		t.Errorf("interval column metadata %v, want %s=month_day_nano_interval", want.Field(4).Metadata, MetaArrowType)
	}
	if v, _ := want.Field(8).Metadata.GetValue("pg.type"); v != "uuid" {
		t.Errorf("field metadata pg.type lost: %v", want.Field(8).Metadata)
	}
}

// TestPartsCut: Parts cuts files at MaxRows, names them in order, leaves
// no temporary file, and Abort removes what it wrote.
func TestPartsCut(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := sample(t, mem)
	defer rec.Release()
	dir := t.TempDir()
	if err := CheckTarget(store.OSFS{}, dir); err != nil {
		t.Fatal(err)
	}
	p := &Parts{FS: store.OSFS{}, Dir: dir, Schema: rec.Schema(), MaxRows: 3}
	for i := 0; i < 5; i++ {
		if err := p.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	files, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	// 5 records of 2 rows, 3 rows a file.
	wantRows := []int64{3, 3, 3, 1}
	if len(files) != len(wantRows) {
		t.Fatalf("files %v, want %d", files, len(wantRows))
	}
	for i, f := range files {
		if filepath.Base(f) != PartName(i) {
			t.Errorf("file %d is %s, want %s", i, f, PartName(i))
		}
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644", f, st.Mode(), err)
		}
		r, err := file.OpenParquetFile(f, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.NumRows() != wantRows[i] {
			t.Errorf("%s has %d rows, want %d", f, r.NumRows(), wantRows[i])
		}
		r.Close()
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(files) {
		t.Errorf("dir holds %d entries, want only the %d parts", len(ents), len(files))
	}
	if err := CheckTarget(store.OSFS{}, dir); err == nil || !strings.Contains(err.Error(), "already holds part-00000.parquet") {
		t.Errorf("CheckTarget of a dir with an export: %v, want it refused", err)
	}

	dir2 := t.TempDir()
	p = &Parts{FS: store.OSFS{}, Dir: dir2, Schema: rec.Schema(), MaxRows: 1}
	for i := 0; i < 3; i++ {
		if err := p.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir2); len(ents) != 0 {
		t.Errorf("after Abort the dir holds %v", ents)
	}
}

// TestPGNegInfinity: a PostgreSQL column's -infinity (the lowest int32
// date, the lowest int64 timestamp) is written as DuckDB's (one more), in
// lists too; the same values in a column of no PostgreSQL type are kept.
func TestPGNegInfinity(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	pg := arrow.NewMetadata([]string{"pg.type"}, []string{"date"})
	ts := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true, Metadata: pg},
		{Name: "ts", Type: arrow.ListOf(ts), Nullable: true, Metadata: pg},
		{Name: "other", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	dates := []arrow.Date32{-1 << 31, 1<<31 - 1, 0}
	b.Field(0).(*array.Date32Builder).AppendValues(dates, []bool{true, true, false})
	lb := b.Field(1).(*array.ListBuilder)
	for range dates {
		lb.Append(true)
		lb.ValueBuilder().(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{-1 << 63, 5}, nil)
	}
	b.Field(2).(*array.Date32Builder).AppendValues(dates, nil)
	rec := b.NewRecord()
	defer rec.Release()
	out, err := Schema(schema)
	if err != nil {
		t.Fatal(err)
	}
	conv, err := Convert(out, rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer conv.Release()
	d := conv.Column(0).(*array.Date32)
	if d.Value(0) != -1<<31+1 || d.Value(1) != 1<<31-1 || !d.IsNull(2) {
		t.Errorf("pg dates %v, want -infinity as %d, infinity kept, null kept", d, -1<<31+1)
	}
	l := conv.Column(1).(*array.List).ListValues().(*array.Timestamp)
	if l.Value(0) != -1<<63+1 || l.Value(1) != 5 {
		t.Errorf("pg timestamps %v, want -infinity as %d", l, -1<<63+1)
	}
	if o := conv.Column(2).(*array.Date32); o.Value(0) != -1<<31 {
		t.Errorf("a date of no pg type became %d", o.Value(0))
	}
}

// TestConvertSlice: a converted slice (whose null count is unknown until
// counted) can be sliced again and counted, as pqarrow does at row group
// boundaries, and keeps its values and validity.
func TestConvertSlice(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	pg := arrow.NewMetadata([]string{"pg.type"}, []string{"date"})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "dur", Type: arrow.FixedWidthTypes.Duration_us},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Metadata: pg},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.DurationBuilder).AppendValues([]arrow.Duration{1, 2, 3, 4}, []bool{false, true, true, true})
	b.Field(1).(*array.Date32Builder).AppendValues([]arrow.Date32{1, -1 << 31, 3, 4}, []bool{false, true, true, true})
	lb := b.Field(2).(*array.ListBuilder)
	lb.AppendNull()
	for i := 0; i < 3; i++ {
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).Append(int32(i))
	}
	rec := b.NewRecord()
	defer rec.Release()
	sl := rec.NewSlice(0, 4)
	sl.Release()
	sl = rec.NewSlice(1, 4)
	defer sl.Release()
	out, err := Schema(schema)
	if err != nil {
		t.Fatal(err)
	}
	conv, err := Convert(out, sl, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer conv.Release()
	again := conv.NewSlice(0, 2)
	defer again.Release()
	for i, c := range again.Columns() {
		if c.NullN() != 0 || c.Len() != 2 {
			t.Errorf("column %d: %d nulls of %d", i, c.NullN(), c.Len())
		}
	}
	if v := again.Column(0).(*array.Int64).Value(1); v != 3 {
		t.Errorf("duration %d, want 3", v)
	}
	if v := again.Column(1).(*array.Date32).Value(0); v != -1<<31+1 {
		t.Errorf("date %d, want DuckDB's -infinity", v)
	}
}
