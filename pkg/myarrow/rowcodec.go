package myarrow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/decimal128"

	"github.com/rtrctl/rtrctl/internal/rowenc"
)

// RowCodec encodes the column values of a table's rows as bytes, from
// the values of a binlog row event (as AppendBinlog converts them) or
// from the Arrow arrays they were converted to (as a store holds them),
// with one encoding for both: equal Arrow values encode to equal bytes,
// so the encoding of a row's primary key columns is a map key. A
// RowBuilder appends encoded rows (AppendEncoded). pkg/replicate keeps
// the current row per key of a table whose binlog row images are not
// FULL in this form.
//
// A column is 0 for NULL, or 1 followed by its value: int8 and uint8 1
// byte; int16 and uint16 2; int32, uint32, float32 and date32 4; int64,
// uint64, float64, timestamp and duration 8 bytes little-endian (floats
// their IEEE bits); decimal128 16 bytes (low then high 64 bits); utf8
// and binary a uvarint length then the bytes. A row is its columns in
// order.
//
// A RowCodec is not safe for concurrent use.
type RowCodec struct {
	table *Table
	ids   []arrow.Type
}

// NewRowCodec returns the codec of t's columns.
func NewRowCodec(t *Table) *RowCodec {
	c := &RowCodec{table: t, ids: make([]arrow.Type, len(t.Columns))}
	for i, col := range t.Columns {
		c.ids[i] = col.Type.ID()
	}
	return c
}

// Table returns the table the codec was made for.
func (c *RowCodec) Table() *Table { return c.table }

// CheckTypes fails unless types are the codec's column types, in order.
func (c *RowCodec) CheckTypes(types []arrow.DataType) error {
	if len(types) != len(c.ids) {
		return fmt.Errorf("%d columns, %s has %d", len(types), c.table.QualifiedName(), len(c.ids))
	}
	for i, t := range types {
		if !arrow.TypeEqual(t, c.table.Columns[i].Type) {
			return fmt.Errorf("column %s is %s, %s has %s", c.table.Columns[i].Name, t, c.table.QualifiedName(), c.table.Columns[i].Type)
		}
	}
	return nil
}

// AppendBinlog appends the encoding of column i's value v, as a binlog
// row event holds it (see RowBuilder.AppendBinlog), to dst.
func (c *RowCodec) AppendBinlog(dst []byte, i int, v any) ([]byte, error) {
	col := &c.table.Columns[i]
	conv, err := Convert(col, BinlogValue(col, v))
	if err != nil {
		return dst, &ConvertError{Table: c.table.QualifiedName(), Column: col.Name, Value: v, Err: err}
	}
	return c.AppendValue(dst, i, conv)
}

// ErrNoDefault is wrapped by Column.DefaultValue for a column whose
// default is not a constant rtrctl can read (an expression, or none).
var ErrNoDefault = errors.New("no constant default")

// AppendValue appends the encoding of column i's value v, in Convert's
// canonical form (Column.DefaultValue's too), to dst.
func (c *RowCodec) AppendValue(dst []byte, i int, v any) ([]byte, error) {
	if v == nil {
		if !c.table.Columns[i].Nullable {
			return dst, fmt.Errorf("NULL in NOT NULL column %s", c.table.Columns[i].Name)
		}
		return append(dst, 0), nil
	}
	dst = append(dst, 1)
	le := binary.LittleEndian
	switch c.ids[i] {
	case arrow.INT8, arrow.UINT8:
		return append(dst, byte(intBits(v))), nil
	case arrow.INT16, arrow.UINT16:
		return le.AppendUint16(dst, uint16(intBits(v))), nil
	case arrow.INT32, arrow.UINT32, arrow.DATE32:
		return le.AppendUint32(dst, uint32(intBits(v))), nil
	case arrow.INT64, arrow.UINT64, arrow.TIMESTAMP, arrow.DURATION:
		return le.AppendUint64(dst, intBits(v)), nil
	case arrow.FLOAT32:
		return le.AppendUint32(dst, math.Float32bits(v.(float32))), nil
	case arrow.FLOAT64:
		return le.AppendUint64(dst, math.Float64bits(v.(float64))), nil
	case arrow.DECIMAL128:
		d := v.(decimal128.Num)
		return le.AppendUint64(le.AppendUint64(dst, d.LowBits()), uint64(d.HighBits())), nil
	case arrow.STRING:
		s := v.(string)
		return append(binary.AppendUvarint(dst, uint64(len(s))), s...), nil
	case arrow.BINARY:
		b := v.([]byte)
		return append(binary.AppendUvarint(dst, uint64(len(b))), b...), nil
	}
	return dst, fmt.Errorf("encode row: column %s of unexpected type %s", c.table.Columns[i].Name, c.table.Columns[i].Type)
}

// intBits is an int64 or uint64 of Convert as its bits.
func intBits(v any) uint64 {
	if u, ok := v.(uint64); ok {
		return u
	}
	return uint64(v.(int64))
}

// AppendArrow appends the encoding of element j of arr, an array of
// column i's type (CheckTypes), to dst.
func (c *RowCodec) AppendArrow(dst []byte, i int, arr arrow.Array, j int) ([]byte, error) {
	if !arrow.TypeEqual(arr.DataType(), c.table.Columns[i].Type) {
		return dst, fmt.Errorf("column %s: array of %s, want %s", c.table.Columns[i].Name, arr.DataType(), c.table.Columns[i].Type)
	}
	return rowenc.AppendArrow(dst, arr, j)
}

// Len returns the length of the encoding of column i at the start of b.
func (c *RowCodec) Len(b []byte, i int) (int, error) {
	if len(b) == 0 {
		return 0, rowenc.ErrEncoded
	}
	if b[0] == 0 {
		return 1, nil
	}
	n, err := rowenc.ScalarLen(b[1:], c.ids[i])
	return 1 + n, err
}

// AppendEncoded adds one row encoded by a RowCodec of the builder's
// table, at time t with diff in partition. Either the whole row is
// appended or, on an error, nothing is.
func (rb *RowBuilder) AppendEncoded(row []byte, t uint64, diff int64, partition string) error {
	c := RowCodec{table: rb.t, ids: make([]arrow.Type, len(rb.t.Columns))}
	for i, col := range rb.t.Columns {
		c.ids[i] = col.Type.ID()
	}
	off := 0
	for i := range rb.t.Columns {
		n, err := c.Len(row[off:], i)
		if err != nil {
			return fmt.Errorf("append encoded row to %s: column %s: %w", rb.t.QualifiedName(), rb.t.Columns[i].Name, err)
		}
		off += n
	}
	if off != len(row) {
		return fmt.Errorf("append encoded row to %s: %d bytes left over: %w", rb.t.QualifiedName(), len(row)-off, rowenc.ErrEncoded)
	}
	off = 0
	for i, id := range c.ids {
		fb := rb.b.Field(i)
		if row[off] == 0 {
			fb.AppendNull()
			off++
			continue
		}
		off++
		n := rowenc.AppendScalar(fb, id, row[off:])
		if id == arrow.STRING || id == arrow.BINARY {
			rb.bytes += n
		}
		off += n
	}
	rb.appendTime(t, diff, partition)
	return nil
}

// DefaultValue is the column's default in Convert's canonical form: what
// an INSERT that leaves the column out stores, when that is a constant
// (information_schema's COLUMN_DEFAULT; LoadTable reads it). It wraps
// ErrNoDefault for an expression (CURRENT_TIMESTAMP, ...), a column
// without a default, and a TIMESTAMP (its literal is in the session's
// time zone).
func (c *Column) DefaultValue() (any, error) {
	if !c.HasDefault {
		return nil, fmt.Errorf("column %s: %w (it has none)", c.Name, ErrNoDefault)
	}
	if c.DefaultNull {
		return nil, nil
	}
	if c.DefaultExpr || c.Kind == KindTimestamp {
		return nil, fmt.Errorf("column %s: %w (DEFAULT %s)", c.Name, ErrNoDefault, c.Default)
	}
	lit := c.Default
	var v any = lit
	switch c.Kind {
	case KindEnum:
		if lit == "" {
			v = int64(0)
			break
		}
		i := indexOf(c.Values, lit)
		if i < 0 {
			return nil, fmt.Errorf("column %s: default %q is not one of its values", c.Name, lit)
		}
		v = int64(i + 1)
	case KindSet:
		var m uint64
		if lit != "" {
			for _, name := range strings.Split(lit, ",") {
				i := indexOf(c.Values, name)
				if i < 0 {
					return nil, fmt.Errorf("column %s: default %q is not a set of its values", c.Name, lit)
				}
				m |= 1 << uint(i)
			}
		}
		v = m
	case KindBit:
		if b, ok := strings.CutPrefix(lit, "b'"); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(b, "'"), 2, 64)
			if err != nil {
				return nil, fmt.Errorf("column %s: default %s: %w", c.Name, lit, err)
			}
			v = n
		}
	case KindString:
		if strings.EqualFold(c.DataType, "char") {
			v = strings.TrimRight(lit, " ")
		}
	}
	conv, err := Convert(c, v)
	if err != nil {
		return nil, fmt.Errorf("column %s: default %s: %w", c.Name, lit, err)
	}
	return conv, nil
}

func indexOf(vs []string, s string) int {
	for i, v := range vs {
		if v == s {
			return i
		}
	}
	return -1
}

// readDefault sets the default fields of c from information_schema's
// COLUMN_DEFAULT (def, null when it is NULL) and EXTRA. MariaDB quotes a
// string literal ('x'), prints NULL for DEFAULT NULL and an expression
// as written (current_timestamp()); MySQL prints the literal as it is,
// NULL for both DEFAULT NULL and none, and marks an expression
// DEFAULT_GENERATED in EXTRA.
func (c *Column) readDefault(def string, null bool, extra string) {
	switch {
	case null:
		// MySQL: DEFAULT NULL when nullable, none otherwise; MariaDB: none.
		c.HasDefault, c.DefaultNull = c.Nullable, c.Nullable
	case def == "NULL":
		c.HasDefault, c.DefaultNull = true, true
	case strings.Contains(strings.ToUpper(extra), "DEFAULT_GENERATED"):
		c.HasDefault, c.DefaultExpr, c.Default = true, true, def
	case len(def) >= 2 && def[0] == '\'' && def[len(def)-1] == '\'':
		c.HasDefault, c.Default = true, unquoteLiteral(def[1:len(def)-1])
	case numericRE(def) || strings.HasPrefix(def, "b'"):
		c.HasDefault, c.Default = true, def
	case strings.ContainsAny(def, "()") || strings.EqualFold(def, "CURRENT_TIMESTAMP"):
		c.HasDefault, c.DefaultExpr, c.Default = true, true, def
	default:
		c.HasDefault, c.Default = true, def // MySQL: a literal as it is
	}
}

// numericRE matches a number literal.
func numericRE(s string) bool {
	if s == "" {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// unquoteLiteral undoes the quoting of a string literal MariaDB prints
// in COLUMN_DEFAULT: ” and backslash escapes.
func unquoteLiteral(s string) string {
	if !strings.ContainsAny(s, `'\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case ch == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				ch = '\n'
			case 't':
				ch = '\t'
			case 'r':
				ch = '\r'
			case '0':
				ch = 0
			case 'Z':
				ch = 26
			default:
				ch = s[i]
			}
		}
		b.WriteByte(ch)
	}
	return b.String()
}
