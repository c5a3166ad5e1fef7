// Package parquetw writes rtrctl collections as Parquet through Arrow's own
// Parquet writer (pqarrow), with the store's Arrow types mapped so that
// DuckDB, Spark and Polars read them natively (docs/format.md, "Parquet").
//
// Most types pass as they are: integers (unsigned with their INT(n,false)
// annotation), floats, decimal128 as DECIMAL(p,s), utf8 as STRING, binary,
// date32 as DATE, time64 as TIME, timestamps as TIMESTAMP in their unit
// (isAdjustedToUTC exactly when the Arrow type has a zone), lists as LIST
// and structs as groups. Parquet has no type for two of the store's:
// month_day_nano_interval becomes a struct {months int32, days int32,
// nanoseconds int64} (Parquet's INTERVAL holds unsigned milliseconds, which
// loses PostgreSQL's microseconds and negative parts) and duration an
// int64 in the duration's unit. Each converted column says so in its
// field metadata (rtrctl.arrow_type).
//
// Writer writes one Parquet stream (read --format parquet); Parts cuts a
// stream into bounded files under a directory of a store.FS, each written
// to a temporary name and renamed into place (rtrctl export).
package parquetw

import (
	"fmt"
	"io"
	"math"
	"slices"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/bitutil"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/compress"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// MetaArrowType is the field metadata key naming the store's Arrow type of
// a column that Parquet holds as another type (an interval as a struct).
const MetaArrowType = "rtrctl.arrow_type"

// RowGroupRows is the most rows a row group holds: the writer buffers one
// row group's encoded pages, so this bounds its memory.
const RowGroupRows = 64 * 1024

// intervalType is what a month_day_nano_interval becomes.
var intervalType = arrow.StructOf(
	arrow.Field{Name: "months", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "days", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "nanoseconds", Type: arrow.PrimitiveTypes.Int64},
)

// Schema returns the Arrow schema written for a record of schema s: the
// same fields with the types Parquet has no equivalent of replaced
// (package comment). It fails on a type it cannot write.
func Schema(s *arrow.Schema) (*arrow.Schema, error) {
	fields := make([]arrow.Field, s.NumFields())
	for i, f := range s.Fields() {
		dt, err := convType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("parquet schema: column %s: %w", f.Name, err)
		}
		if !arrow.TypeEqual(dt, f.Type) {
			f.Metadata = withMeta(f.Metadata, MetaArrowType, f.Type.String())
		}
		f.Type = dt
		fields[i] = f
	}
	md := s.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

func withMeta(m arrow.Metadata, k, v string) arrow.Metadata {
	keys, vals := append([]string{}, m.Keys()...), append([]string{}, m.Values()...)
	return arrow.NewMetadata(append(keys, k), append(vals, v))
}

func convType(dt arrow.DataType) (arrow.DataType, error) {
	switch t := dt.(type) {
	case *arrow.MonthDayNanoIntervalType:
		return intervalType, nil
	case *arrow.DurationType:
		return arrow.PrimitiveTypes.Int64, nil
	case *arrow.ListType:
		elem, err := convType(t.Elem())
		if err != nil {
			return nil, err
		}
		f := t.ElemField()
		f.Type = elem
		return arrow.ListOfField(f), nil
	case *arrow.StructType:
		fields := make([]arrow.Field, t.NumFields())
		for i, f := range t.Fields() {
			ft, err := convType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			f.Type = ft
			fields[i] = f
		}
		return arrow.StructOf(fields...), nil
	case *arrow.MapType, *arrow.LargeListType, *arrow.DayTimeIntervalType, *arrow.MonthIntervalType,
		*arrow.SparseUnionType, *arrow.DenseUnionType:
		return nil, fmt.Errorf("type %s has no Parquet mapping in rtrctl", dt)
	}
	return dt, nil
}

// Convert returns rec with its columns converted to schema (Schema of
// rec's schema). The caller releases the result.
func Convert(schema *arrow.Schema, rec arrow.Record, mem memory.Allocator) (arrow.Record, error) {
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, c := range rec.Columns() {
		_, pg := schema.Field(i).Metadata.GetValue("pg.type")
		d, err := convData(schema.Field(i).Type, c.Data(), pg, mem)
		if err != nil {
			return nil, fmt.Errorf("parquet: column %s: %w", schema.Field(i).Name, err)
		}
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	return array.NewRecord(schema, cols, rec.NumRows()), nil
}

// convData converts d to type dt (convType of d's type); pg says d is
// (in) a PostgreSQL column, whose -infinity dates and timestamps become
// DuckDB's. The result is retained for the caller.
func convData(dt arrow.DataType, d arrow.ArrayData, pg bool, mem memory.Allocator) (arrow.ArrayData, error) {
	if pg {
		switch d.DataType().ID() {
		case arrow.DATE32:
			return negInf[int32](d, pgNegInfDate, mem), nil
		case arrow.TIMESTAMP:
			return negInf[int64](d, pgNegInfTS, mem), nil
		}
	}
	if arrow.TypeEqual(dt, d.DataType()) && !(pg && d.DataType().ID() == arrow.LIST) {
		d.Retain()
		return d, nil
	}
	switch src := d.DataType().(type) {
	case *arrow.DurationType:
		// The same int64 buffers.
		return array.NewData(dt, d.Len(), d.Buffers(), nil, nullN(d), d.Offset()), nil
	case *arrow.MonthDayNanoIntervalType:
		return intervalData(d, mem), nil
	case *arrow.ListType, *arrow.StructType:
		var children []arrow.ArrayData
		defer func() {
			for _, c := range children {
				c.Release()
			}
		}()
		for k, ch := range d.Children() {
			var want arrow.DataType
			if lt, ok := dt.(*arrow.ListType); ok {
				want = lt.Elem()
			} else {
				want = dt.(*arrow.StructType).Field(k).Type
			}
			c, err := convData(want, ch, pg, mem)
			if err != nil {
				return nil, err
			}
			children = append(children, c)
		}
		return array.NewData(dt, d.Len(), d.Buffers(), children, nullN(d), d.Offset()), nil
	default:
		return nil, fmt.Errorf("cannot convert %s to %s", src, dt)
	}
}

// PostgreSQL's -infinity is the lowest int32 (date) or int64 (timestamp,
// in microseconds), DuckDB's one more; no finite PostgreSQL value is near
// either (its dates and timestamps begin in 4714 BC), so the mapping is
// exact both ways. +infinity is the highest value in both.
const (
	pgNegInfDate = math.MinInt32
	pgNegInfTS   = math.MinInt64
)

// negInf is d (date32 as int32, timestamp as int64) with PostgreSQL's
// -infinity (pgMin) as DuckDB's (pgMin + 1).
func negInf[T int32 | int64](d arrow.ArrayData, pgMin T, mem memory.Allocator) arrow.ArrayData {
	if d.Len() == 0 || d.Buffers()[1] == nil {
		d.Retain()
		return d
	}
	vals := arrow.GetValues[T](d, 1)
	if !slices.Contains(vals, pgMin) {
		d.Retain()
		return d
	}
	buf := memory.NewResizableBuffer(mem)
	var zero T
	buf.Resize(d.Len() * int(unsafe.Sizeof(zero)))
	out := arrow.GetData[T](buf.Bytes())
	for i, v := range vals {
		if v == pgMin {
			v++
		}
		out[i] = v
	}
	return replaceValues(d, buf)
}

// replaceValues is d with its values buffer replaced by buf (of d.Len()
// values from offset 0); the validity bitmap is d's, sliced alike.
func replaceValues(d arrow.ArrayData, buf *memory.Buffer) arrow.ArrayData {
	defer buf.Release()
	var valid *memory.Buffer
	nulls := nullN(d)
	if nulls > 0 {
		bm := memory.NewResizableBuffer(memory.DefaultAllocator)
		defer bm.Release()
		bm.Resize(int(bitutil.BytesForBits(int64(d.Len()))))
		bitutil.CopyBitmap(d.Buffers()[0].Bytes(), d.Offset(), d.Len(), bm.Bytes(), 0)
		valid = bm
	}
	return array.NewData(d.DataType(), d.Len(), []*memory.Buffer{valid, buf}, nil, nulls, 0)
}

// nullN is d's null count; a slice's data does not know it until counted
// (arrow.ArrayData.NullN is then UnknownNullCount).
func nullN(d arrow.ArrayData) int {
	if n := d.NullN(); n >= 0 {
		return n
	}
	if d.Buffers()[0] == nil {
		return 0
	}
	return d.Len() - bitutil.CountSetBits(d.Buffers()[0].Bytes(), d.Offset(), d.Len())
}

// intervalData builds the struct an interval array becomes.
func intervalData(d arrow.ArrayData, mem memory.Allocator) arrow.ArrayData {
	iv := array.NewMonthDayNanoIntervalData(d)
	defer iv.Release()
	b := array.NewStructBuilder(mem, intervalType)
	defer b.Release()
	months, days, nanos := b.FieldBuilder(0).(*array.Int32Builder), b.FieldBuilder(1).(*array.Int32Builder), b.FieldBuilder(2).(*array.Int64Builder)
	b.Reserve(iv.Len())
	for i := 0; i < iv.Len(); i++ {
		if iv.IsNull(i) {
			b.AppendNull()
			continue
		}
		b.Append(true)
		v := iv.Value(i)
		months.Append(v.Months)
		days.Append(v.Days)
		nanos.Append(v.Nanoseconds)
	}
	arr := b.NewArray()
	defer arr.Release()
	out := arr.Data()
	out.Retain()
	return out
}

// Options are the writer's settings.
type Options struct {
	// Metadata is added to the file's key-value metadata.
	Metadata map[string]string
	// Mem allocates (default memory.DefaultAllocator).
	Mem memory.Allocator
}

// Writer writes records of one schema as a Parquet file to an io.Writer
// (which need not seek), a row group of at most RowGroupRows rows at a
// time.
type Writer struct {
	schema *arrow.Schema // as written
	fw     *pqarrow.FileWriter
	cw     *countingWriter
	mem    memory.Allocator
	rows   int64
}

// NewWriter starts a Parquet file of records of schema s on w.
func NewWriter(w io.Writer, s *arrow.Schema, opts Options) (*Writer, error) {
	out, err := Schema(s)
	if err != nil {
		return nil, err
	}
	if opts.Mem == nil {
		opts.Mem = memory.DefaultAllocator
	}
	if len(opts.Metadata) > 0 {
		md := out.Metadata()
		keys, vals := append([]string{}, md.Keys()...), append([]string{}, md.Values()...)
		for k, v := range opts.Metadata {
			keys, vals = append(keys, k), append(vals, v)
		}
		m := arrow.NewMetadata(keys, vals)
		out = arrow.NewSchema(out.Fields(), &m)
	}
	props := parquet.NewWriterProperties(
		parquet.WithAllocator(opts.Mem),
		parquet.WithCompression(compress.Codecs.Snappy),
		parquet.WithMaxRowGroupLength(RowGroupRows),
		parquet.WithCreatedBy("rtrctl"),
	)
	cw := &countingWriter{w: w}
	fw, err := pqarrow.NewFileWriter(out, cw, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(opts.Mem), pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	return &Writer{schema: out, fw: fw, cw: cw, mem: opts.Mem}, nil
}

// Write appends rec (of the schema NewWriter was given).
func (w *Writer) Write(rec arrow.Record) error {
	if rec.NumRows() == 0 {
		return nil
	}
	conv, err := Convert(w.schema, rec, w.mem)
	if err != nil {
		return err
	}
	defer conv.Release()
	if err := w.fw.WriteBuffered(conv); err != nil {
		return fmt.Errorf("parquet: write: %w", err)
	}
	w.rows += rec.NumRows()
	return nil
}

// Size is the bytes written so far plus those of the row group buffered
// (its pages compressed so far).
func (w *Writer) Size() int64 {
	return w.cw.n + max(w.fw.RowGroupTotalBytesWritten(), w.fw.RowGroupTotalCompressedBytes())
}

// Rows is how many rows were written.
func (w *Writer) Rows() int64 { return w.rows }

// Close writes the buffered row group and the footer. It does not close
// the underlying io.Writer.
func (w *Writer) Close() error {
	if err := w.fw.Close(); err != nil {
		return fmt.Errorf("parquet: close: %w", err)
	}
	// pqarrow drops an error of the footer's write: the sink keeps it.
	if w.cw.err != nil {
		return fmt.Errorf("parquet: close: %w", w.cw.err)
	}
	return nil
}

// countingWriter counts the bytes written and keeps the first error.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
