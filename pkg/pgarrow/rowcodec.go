package pgarrow

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/internal/rowenc"
)

// RowCodec encodes the column values of a table's rows as bytes, from
// their text form (as pgoutput sends them) or from the Arrow arrays they
// were converted to (as a store holds them), with one encoding for both:
// equal Arrow values encode to equal bytes, so the encoding of a row's key
// columns is a map key. A RowBuilder appends encoded rows
// (AppendEncoded). pkg/replicate keeps the current row per key of tables
// whose replica identity is not FULL in this form.
//
// A column is 0 for NULL, or 1 followed by its value: bool 1 byte; int16
// 2; int32, uint32 and date32 4; int64, time64 and timestamp 8 bytes
// little-endian; float32 and float64 their IEEE bits (4 and 8 bytes);
// decimal128 16 bytes (low then high 64 bits); month_day_nano_interval
// months and days (4 bytes each) then nanoseconds (8); utf8 and binary a
// uvarint length then the bytes; a list a uvarint element count then each
// element as a column. A row is its columns in order.
//
// A RowCodec is not safe for concurrent use.
type RowCodec struct {
	table *Table
	cols  []column
	vals  []value
}

// NewRowCodec returns the codec of t's columns (typed as t.Fields says).
func NewRowCodec(t *Table) *RowCodec {
	c := &RowCodec{table: t, cols: make([]column, len(t.Columns)), vals: make([]value, len(t.Columns))}
	for i, col := range t.Columns {
		c.cols[i] = columnConv(col)
	}
	return c
}

// Table returns the table the codec was made for.
func (c *RowCodec) Table() *Table { return c.table }

// CheckTypes fails unless types are the codec's column types, in order.
func (c *RowCodec) CheckTypes(types []arrow.DataType) error {
	if len(types) != len(c.cols) {
		return fmt.Errorf("%d columns, %s has %d", len(types), c.table.QualifiedName(), len(c.cols))
	}
	for i, t := range types {
		if !arrow.TypeEqual(t, c.cols[i].typ) {
			return fmt.Errorf("column %s is %s, %s has %s", c.table.Columns[i].Name, t, c.table.QualifiedName(), c.cols[i].typ)
		}
	}
	return nil
}

// AppendText appends the encoding of column i's value s in text output
// form (NULL when null) to dst.
func (c *RowCodec) AppendText(dst []byte, i int, s []byte, null bool) ([]byte, error) {
	col := c.cols[i]
	if null {
		if c.table.Columns[i].NotNull {
			return dst, fmt.Errorf("NULL in NOT NULL column %s", c.table.Columns[i].Name)
		}
		return append(dst, 0), nil
	}
	v := &c.vals[i]
	if !col.list {
		if err := col.elem.parse(s, v); err != nil {
			return dst, fmt.Errorf("column %s: %w", c.table.Columns[i].Name, err)
		}
		return appendValue(append(dst, 1), col.elem.typ.ID(), v), nil
	}
	elems, _, err := ParseArray(s, ',')
	if err != nil {
		return dst, fmt.Errorf("column %s: %w", c.table.Columns[i].Name, err)
	}
	dst = binary.AppendUvarint(append(dst, 1), uint64(len(elems)))
	for j, e := range elems {
		if e.Null {
			dst = append(dst, 0)
			continue
		}
		if err := col.elem.parse(e.Value, v); err != nil {
			return dst, fmt.Errorf("column %s: array element %d: %w", c.table.Columns[i].Name, j+1, err)
		}
		dst = appendValue(append(dst, 1), col.elem.typ.ID(), v)
	}
	return dst, nil
}

// appendValue appends the encoding of a parsed scalar of type id.
func appendValue(dst []byte, id arrow.Type, v *value) []byte {
	switch id {
	case arrow.BOOL:
		if v.i != 0 {
			return append(dst, 1)
		}
		return append(dst, 0)
	case arrow.INT16:
		return binary.LittleEndian.AppendUint16(dst, uint16(v.i))
	case arrow.INT32, arrow.UINT32, arrow.DATE32:
		return binary.LittleEndian.AppendUint32(dst, uint32(v.i))
	case arrow.INT64, arrow.TIME64, arrow.TIMESTAMP:
		return binary.LittleEndian.AppendUint64(dst, uint64(v.i))
	case arrow.FLOAT32:
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(v.f)))
	case arrow.FLOAT64:
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.f))
	case arrow.DECIMAL128:
		return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(dst, v.d.LowBits()), uint64(v.d.HighBits()))
	case arrow.INTERVAL_MONTH_DAY_NANO:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v.iv.Months))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v.iv.Days))
		return binary.LittleEndian.AppendUint64(dst, uint64(v.iv.Nanoseconds))
	}
	// utf8, binary
	return append(binary.AppendUvarint(dst, uint64(len(v.b))), v.b...)
}

// AppendArrow appends the encoding of element j of arr, an array of
// column i's type (CheckTypes), to dst.
func (c *RowCodec) AppendArrow(dst []byte, i int, arr arrow.Array, j int) ([]byte, error) {
	if !arrow.TypeEqual(arr.DataType(), c.cols[i].typ) {
		return dst, fmt.Errorf("column %s: array of %s, want %s", c.table.Columns[i].Name, arr.DataType(), c.cols[i].typ)
	}
	return rowenc.AppendArrow(dst, arr, j)
}

var errEncoded = rowenc.ErrEncoded

// Len returns the length of the encoding of column i at the start of b.
func (c *RowCodec) Len(b []byte, i int) (int, error) {
	return encodedLen(b, c.cols[i])
}

func encodedLen(b []byte, col column) (int, error) {
	if len(b) == 0 {
		return 0, errEncoded
	}
	if b[0] == 0 {
		return 1, nil
	}
	if !col.list {
		n, err := scalarLen(b[1:], col.elem.typ.ID())
		return 1 + n, err
	}
	count, k := binary.Uvarint(b[1:])
	if k <= 0 {
		return 0, errEncoded
	}
	off := 1 + k
	for range count {
		if off >= len(b) {
			return 0, errEncoded
		}
		if b[off] == 0 {
			off++
			continue
		}
		n, err := scalarLen(b[off+1:], col.elem.typ.ID())
		if err != nil {
			return 0, err
		}
		off += 1 + n
	}
	return off, nil
}

func scalarLen(b []byte, id arrow.Type) (int, error) { return rowenc.ScalarLen(b, id) }

// AppendEncoded appends one row encoded by a RowCodec of the builder's
// table. Either the whole row is appended or, on an error, nothing is.
func (b *RowBuilder) AppendEncoded(row []byte) error {
	// Check the whole row first, so that a bad one appends nothing.
	off := 0
	for i, col := range b.cols {
		n, err := encodedLen(row[off:], col)
		if err != nil {
			return fmt.Errorf("append encoded row to %s: column %s: %w", b.table.QualifiedName(), b.table.Columns[i].Name, err)
		}
		if row[off] == 0 && b.table.Columns[i].NotNull {
			return fmt.Errorf("append encoded row to %s: NULL in NOT NULL column %s", b.table.QualifiedName(), b.table.Columns[i].Name)
		}
		off += n
	}
	if off != len(row) {
		return fmt.Errorf("append encoded row to %s: %d bytes left over: %w", b.table.QualifiedName(), len(row)-off, errEncoded)
	}
	off = 0
	for i, col := range b.cols {
		bl := b.bld[i]
		if row[off] == 0 {
			bl.AppendNull()
			off++
			continue
		}
		off++
		if !col.list {
			off += appendScalar(bl, col.elem.typ.ID(), row[off:])
			continue
		}
		lb := bl.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder()
		count, k := binary.Uvarint(row[off:])
		off += k
		for range count {
			if row[off] == 0 {
				vb.AppendNull()
				off++
				continue
			}
			off++
			off += appendScalar(vb, col.elem.typ.ID(), row[off:])
		}
	}
	b.rows++
	b.bytes += len(row)
	return nil
}

// appendScalar appends the encoded scalar of type id at the start of s
// (checked by encodedLen) to bl and returns its length.
func appendScalar(bl array.Builder, id arrow.Type, s []byte) int {
	return rowenc.AppendScalar(bl, id, s)
}
