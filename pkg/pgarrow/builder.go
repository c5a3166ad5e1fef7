package pgarrow

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// RowBuilder builds Arrow arrays of a table's columns from rows in
// PostgreSQL's text output form. It is not safe for concurrent use.
type RowBuilder struct {
	table *Table
	cols  []column
	bld   []array.Builder
	vals  []value
	rows  int
	bytes int
}

// NewRowBuilder returns a builder for t's columns. Every type is accepted:
// types without a dedicated mapping become utf8 text.
func NewRowBuilder(mem memory.Allocator, t *Table) (*RowBuilder, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	if t == nil || len(t.Columns) == 0 {
		return nil, fmt.Errorf("new row builder: table has no columns")
	}
	b := &RowBuilder{table: t, cols: make([]column, len(t.Columns)), bld: make([]array.Builder, len(t.Columns)), vals: make([]value, len(t.Columns))}
	for i, c := range t.Columns {
		b.cols[i] = columnConv(c)
		b.bld[i] = array.NewBuilder(mem, b.cols[i].typ)
	}
	return b, nil
}

// Table returns the table the builder was made for.
func (b *RowBuilder) Table() *Table { return b.table }

// AppendText appends one row: values[i] is column i's text output form,
// unless isNull[i] (isNull may be nil: no nulls). Either the whole row is
// appended or, on an error (a value that does not parse, a NULL in a NOT
// NULL column), nothing is. The builder copies what it keeps.
func (b *RowBuilder) AppendText(values [][]byte, isNull []bool) error {
	if len(values) != len(b.cols) || (isNull != nil && len(isNull) != len(b.cols)) {
		return fmt.Errorf("append row to %s: %d values for %d columns", b.table.QualifiedName(), len(values), len(b.cols))
	}
	n := 0
	for i := range b.cols {
		if isNull != nil && isNull[i] {
			if b.table.Columns[i].NotNull {
				return fmt.Errorf("append row to %s: NULL in NOT NULL column %s", b.table.QualifiedName(), b.table.Columns[i].Name)
			}
			continue
		}
		if err := b.parse(i, values[i]); err != nil {
			return fmt.Errorf("append row to %s: column %s: %w", b.table.QualifiedName(), b.table.Columns[i].Name, err)
		}
		n += len(values[i])
	}
	for i, c := range b.cols {
		bl := b.bld[i]
		if isNull != nil && isNull[i] {
			bl.AppendNull()
			continue
		}
		v := &b.vals[i]
		if !c.list {
			c.elem.append(bl, v)
			continue
		}
		lb := bl.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder()
		for j := range v.el {
			if v.nul[j] {
				vb.AppendNull()
			} else {
				c.elem.append(vb, &v.el[j])
			}
		}
	}
	b.rows++
	b.bytes += n
	return nil
}

func (b *RowBuilder) parse(i int, s []byte) error {
	c := b.cols[i]
	v := &b.vals[i]
	if !c.list {
		return c.elem.parse(s, v)
	}
	elems, _, err := ParseArray(s, ',')
	if err != nil {
		return err
	}
	if cap(v.el) < len(elems) {
		v.el = make([]value, len(elems))
		v.nul = make([]bool, len(elems))
	}
	v.el, v.nul = v.el[:len(elems)], v.nul[:len(elems)]
	for j, e := range elems {
		v.nul[j] = e.Null
		if e.Null {
			continue
		}
		if err := c.elem.parse(e.Value, &v.el[j]); err != nil {
			return fmt.Errorf("array element %d: %w", j+1, err)
		}
	}
	return nil
}

// Len returns the number of rows appended since the last NewArrays.
func (b *RowBuilder) Len() int { return b.rows }

// Bytes returns the total length of the text values appended since the
// last NewArrays: a measure of the memory the builder holds.
func (b *RowBuilder) Bytes() int { return b.bytes }

// NewArrays returns the arrays of the rows appended so far, one per column
// (the caller releases them), and resets the builder.
func (b *RowBuilder) NewArrays() []arrow.Array {
	out := make([]arrow.Array, len(b.bld))
	for i, bl := range b.bld {
		out[i] = bl.NewArray()
	}
	b.rows, b.bytes = 0, 0
	return out
}

// Release frees the builder's buffers.
func (b *RowBuilder) Release() {
	for _, bl := range b.bld {
		bl.Release()
	}
}

// GoValue returns element i of arr as a plain Go value, for tests and
// debugging: nil for a null; bool, int16, int32, int64, uint32, float32,
// float64; string for utf8 and for decimals (in their scale); []byte for
// binary; int32 days for date32; int64 microseconds for time64[us] and
// timestamp[us]; arrow.MonthDayNanoInterval; []any for lists.
func GoValue(arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int16:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Uint32:
		return a.Value(i)
	case *array.Uint64:
		return a.Value(i)
	case *array.Float32:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return append([]byte{}, a.Value(i)...)
	case *array.Date32:
		return int32(a.Value(i))
	case *array.Time64:
		return int64(a.Value(i))
	case *array.Timestamp:
		return int64(a.Value(i))
	case *array.MonthDayNanoInterval:
		return a.Value(i)
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			out = append(out, GoValue(a.ListValues(), int(j)))
		}
		return out
	}
	return arr.ValueStr(i)
}

// DescribeRow names a row in an error message the way PostgreSQL's own
// messages do: "key (id)=(5)" by the columns key (indexes into t's
// columns), or "row (a, b)=(1, x)" by every column when key is empty or
// holds them all. values and isNull are the row's text forms, as
// AppendText takes them; each value is cut to 64 bytes.
func DescribeRow(t *Table, key []int, values [][]byte, isNull []bool) string {
	what := "key"
	if len(key) == 0 || len(key) == len(t.Columns) {
		what, key = "row", nil
		for i := range t.Columns {
			key = append(key, i)
		}
	}
	var names, vals []byte
	for j, i := range key {
		if i < 0 || i >= len(t.Columns) || i >= len(values) {
			continue
		}
		if j > 0 {
			names, vals = append(names, ", "...), append(vals, ", "...)
		}
		names = append(names, t.Columns[i].Name...)
		if isNull != nil && isNull[i] {
			vals = append(vals, "null"...)
		} else {
			vals = append(vals, clip(values[i])...)
		}
	}
	return fmt.Sprintf("%s (%s)=(%s)", what, names, vals)
}
