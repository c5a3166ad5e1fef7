package myarrow

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// RowBuilder builds pipe data records of one table: the user columns, then
// _time, _diff and _partition (MySQL and MariaDB times are partitioned).
type RowBuilder struct {
	t      *Table
	schema *arrow.Schema
	b      *array.RecordBuilder
	rows   int
	bytes  int
}

// DataSchema is the pipe data schema of t in domain d (mysql or mariadb).
func (t *Table) DataSchema(d frontier.Domain, source string) *arrow.Schema {
	h := pipe.Header{Kind: pipe.KindData, Collection: t.QualifiedName(), Source: source, Domain: d}
	return pipe.DataSchema(t.Fields(), d, h.Metadata())
}

// NewRowBuilder returns a builder of data records of t.
func NewRowBuilder(mem memory.Allocator, t *Table, d frontier.Domain, source string) *RowBuilder {
	s := t.DataSchema(d, source)
	return &RowBuilder{t: t, schema: s, b: array.NewRecordBuilder(mem, s)}
}

// Schema is the records' schema.
func (rb *RowBuilder) Schema() *arrow.Schema { return rb.schema }

// Rows and Bytes say how much is buffered (Bytes counts variable-length
// values only).
func (rb *RowBuilder) Rows() int  { return rb.rows }
func (rb *RowBuilder) Bytes() int { return rb.bytes }

// Release frees the builder.
func (rb *RowBuilder) Release() { rb.b.Release() }

// NewRecord returns the buffered rows as a record and resets the builder.
func (rb *RowBuilder) NewRecord() arrow.Record {
	rb.rows, rb.bytes = 0, 0
	return rb.b.NewRecord()
}

// Append adds one row. vals are Go values as the text protocol
// (TextValue) or go-mysql's binlog decoder gives them: nil, integers,
// float32/float64, string or []byte. On error nothing is appended.
func (rb *RowBuilder) Append(vals []any, t uint64, diff int64, partition string) error {
	return rb.append(vals, t, diff, partition, false)
}

// AppendBinlog adds one row of a binlog row event: like Append, with the
// text columns' bytes decoded from their character set first (BinlogValue).
func (rb *RowBuilder) AppendBinlog(vals []any, t uint64, diff int64, partition string) error {
	return rb.append(vals, t, diff, partition, true)
}

// ConvertError is a value that does not convert: which column, and the
// value as the server gave it.
type ConvertError struct {
	Table, Column string
	// Key is the row's primary key, col=value[,...] ("" without one).
	Key   string
	Value any
	Err   error
}

func (e *ConvertError) Error() string {
	at := ""
	if e.Key != "" {
		at = " in the row " + e.Key
	}
	return fmt.Sprintf("column %s of %s%s: %v", e.Column, e.Table, at, e.Err)
}

// rowKey names a row by its primary key: id=3, or a=1,b=x.
func (t *Table) rowKey(vals []any) string {
	parts := make([]string, 0, len(t.PrimaryKey))
	for _, k := range t.PrimaryKey {
		if k < len(vals) {
			parts = append(parts, fmt.Sprintf("%s=%s", t.Columns[k].Name, str(vals[k])))
		}
	}
	return strings.Join(parts, ",")
}

func (e *ConvertError) Unwrap() error { return e.Err }

func (rb *RowBuilder) append(vals []any, t uint64, diff int64, partition string, binlog bool) error {
	if len(vals) != len(rb.t.Columns) {
		return fmt.Errorf("row of %s has %d values, the table %d columns", rb.t.QualifiedName(), len(vals), len(rb.t.Columns))
	}
	conv := make([]any, len(vals))
	for i, v := range vals {
		col := &rb.t.Columns[i]
		if binlog {
			v = BinlogValue(col, v)
		}
		c, err := Convert(col, v)
		if err != nil {
			return &ConvertError{Table: rb.t.QualifiedName(), Column: col.Name, Key: rb.t.rowKey(vals), Value: v, Err: err}
		}
		conv[i] = c
	}
	for i, v := range conv {
		rb.appendConv(i, v)
	}
	rb.appendTime(t, diff, partition)
	return nil
}

// appendTime ends a row: its _time, _diff and _partition.
func (rb *RowBuilder) appendTime(t uint64, diff int64, partition string) {
	n := len(rb.t.Columns)
	rb.b.Field(n).(*array.Uint64Builder).Append(t)
	rb.b.Field(n + 1).(*array.Int64Builder).Append(diff)
	rb.b.Field(n + 2).(*array.StringBuilder).Append(partition)
	rb.rows++
}

func (rb *RowBuilder) appendConv(i int, v any) {
	fb := rb.b.Field(i)
	if v == nil {
		fb.AppendNull()
		return
	}
	switch b := fb.(type) {
	case *array.Int8Builder:
		b.Append(int8(v.(int64)))
	case *array.Int16Builder:
		b.Append(int16(v.(int64)))
	case *array.Int32Builder:
		b.Append(int32(v.(int64)))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Uint8Builder:
		b.Append(uint8(v.(uint64)))
	case *array.Uint16Builder:
		b.Append(uint16(v.(uint64)))
	case *array.Uint32Builder:
		b.Append(uint32(v.(uint64)))
	case *array.Uint64Builder:
		b.Append(v.(uint64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.Decimal128Builder:
		b.Append(v.(decimal128.Num))
	case *array.Date32Builder:
		b.Append(arrow.Date32(v.(int64)))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v.(int64)))
	case *array.DurationBuilder:
		b.Append(arrow.Duration(v.(int64)))
	case *array.StringBuilder:
		s := v.(string)
		rb.bytes += len(s)
		b.Append(s)
	case *array.BinaryBuilder:
		bs := v.([]byte)
		rb.bytes += len(bs)
		b.Append(bs)
	default:
		panic(fmt.Sprintf("myarrow: unexpected builder %T", fb))
	}
}

// TextValue turns a text-protocol field into the Go value Append takes.
// The bytes are copied.
func TextValue(fv mysql.FieldValue) any {
	switch fv.Type {
	case mysql.FieldValueTypeNull:
		return nil
	case mysql.FieldValueTypeUnsigned:
		return fv.AsUint64()
	case mysql.FieldValueTypeSigned:
		return fv.AsInt64()
	case mysql.FieldValueTypeFloat:
		return fv.AsFloat64()
	}
	return append([]byte(nil), fv.AsString()...)
}

// BinlogValue turns a value of a binlog row event into the form the text
// protocol gives through a utf8mb4 connection: a text column's bytes,
// which the binlog carries in the column's character set, decoded into
// UTF-8, a CHAR's trailing spaces (the pad) removed. Other values are
// returned as they are.
func BinlogValue(c *Column, v any) any {
	if c.Kind != KindString || c.Charset == nil || v == nil {
		return v
	}
	var s string
	switch x := v.(type) {
	case string:
		s = c.Charset.Decode([]byte(x))
	case []byte:
		s = c.Charset.Decode(x)
	default:
		return v
	}
	if strings.EqualFold(c.DataType, "char") {
		s = strings.TrimRight(s, " ")
	}
	return s
}

// Convert turns a value of column c (see Append) into its canonical Go
// form for the column's Arrow type: int64 (signed integers, dates as days,
// datetimes and timestamps as µs since the epoch, times as µs), uint64,
// float32, float64, decimal128.Num, string, []byte; nil for NULL and for
// MySQL's zero dates.
func Convert(c *Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.Kind {
	case KindInt:
		switch x := v.(type) {
		case int8:
			return int64(x), nil
		case int16:
			return int64(x), nil
		case int32:
			return int64(x), nil
		case int64:
			return x, nil
		case int:
			return int64(x), nil
		case uint64:
			return int64(x), nil
		}
		n, err := strconv.ParseInt(str(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("not an integer: %q", str(v))
		}
		return n, nil
	case KindUint, KindBit, KindYear:
		var u uint64
		switch x := v.(type) {
		case int8:
			u = uint64(uint8(x))
		case int16:
			u = uint64(uint16(x))
		case int32:
			u = uint64(uint32(x))
			if c.Kind == KindUint && c.Bits == 24 {
				u &= 0xffffff
			}
		case int64:
			u = uint64(x)
		case int:
			u = uint64(x)
		case uint64:
			u = x
		default:
			n, err := strconv.ParseUint(str(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("not an unsigned integer: %q", str(v))
			}
			u = n
		}
		return u, nil
	case KindFloat32:
		switch x := v.(type) {
		case float32:
			return x, nil
		case float64:
			return float32(x), nil
		}
		f, err := strconv.ParseFloat(str(v), 64)
		if err != nil {
			return nil, fmt.Errorf("not a number: %q", str(v))
		}
		return float32(f), nil
	case KindFloat64:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		}
		f, err := strconv.ParseFloat(str(v), 64)
		if err != nil {
			return nil, fmt.Errorf("not a number: %q", str(v))
		}
		return f, nil
	case KindDecimal:
		return ParseDecimal(str(v), c.Precision, c.Scale)
	case KindDecimalText, KindString, KindJSON:
		return str(v), nil
	case KindBinary:
		var b []byte
		switch x := v.(type) {
		case []byte:
			b = append([]byte(nil), x...)
		case string:
			b = []byte(x)
		default:
			b = []byte(fmt.Sprint(x))
		}
		if c.Length > 0 && len(b) < c.Length {
			b = append(b, make([]byte, c.Length-len(b))...)
		}
		return b, nil
	case KindDate:
		return ParseDate(str(v))
	case KindDatetime, KindTimestamp:
		return ParseDatetime(str(v))
	case KindTime:
		return ParseTime(str(v))
	case KindEnum, KindSet:
		// The binlog's number (int64 / int32), the snapshot's (col + 0).
		var n uint64
		switch x := v.(type) {
		case int64:
			n = uint64(x)
		case int32:
			n = uint64(uint32(x))
		case uint64:
			n = x
		default:
			u, err := strconv.ParseUint(str(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("not an %s number: %q", strings.ToLower(c.DataType), str(v))
			}
			n = u
		}
		if c.Kind == KindEnum {
			return EnumName(c.Values, n)
		}
		return SetNames(c.Values, n)
	}
	return nil, fmt.Errorf("unknown column kind %d", c.Kind)
}

// EnumName is the label of ENUM number i (1-based); 0 is "", the value
// a non-strict sql_mode stores for an invalid label.
func EnumName(values []string, i uint64) (any, error) {
	if i == 0 {
		return "", nil
	}
	if i > uint64(len(values)) {
		return nil, fmt.Errorf("enum index %d out of range (%d values)", i, len(values))
	}
	return values[i-1], nil
}

// SetNames is the comma-separated labels of the SET bit mask m, in
// definition order.
func SetNames(values []string, m uint64) (any, error) {
	if len(values) < 64 && m>>uint(len(values)) != 0 {
		return nil, fmt.Errorf("set value %d has bits beyond its %d values", m, len(values))
	}
	var names []string
	for i, n := range values {
		if m&(1<<uint(i)) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ","), nil
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return fmt.Sprint(v)
}

var pow10 = func() []*big.Int {
	p := make([]*big.Int, 80)
	p[0] = big.NewInt(1)
	for i := 1; i < len(p); i++ {
		p[i] = new(big.Int).Mul(p[i-1], big.NewInt(10))
	}
	return p
}()

// ParseDecimal reads a decimal in MySQL's text form exactly, at the given
// scale.
func ParseDecimal(s string, prec, scale int) (decimal128.Num, error) {
	neg := strings.HasPrefix(s, "-")
	d := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	ip, fp, _ := strings.Cut(d, ".")
	if len(fp) > scale {
		if strings.Trim(fp[scale:], "0") != "" {
			return decimal128.Num{}, fmt.Errorf("decimal %q has more than %d fractional digits", s, scale)
		}
		fp = fp[:scale]
	}
	if ip+fp == "" || strings.Trim(ip+fp, "0123456789") != "" {
		return decimal128.Num{}, fmt.Errorf("not a decimal: %q", s)
	}
	digits := ip + fp + strings.Repeat("0", scale-len(fp))
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok || digits == "" {
		return decimal128.Num{}, fmt.Errorf("not a decimal: %q", s)
	}
	if prec < len(pow10) && n.CmpAbs(pow10[prec]) >= 0 {
		return decimal128.Num{}, fmt.Errorf("decimal %q does not fit decimal(%d,%d)", s, prec, scale)
	}
	if neg {
		n.Neg(n)
	}
	return decimal128.FromBigInt(n), nil
}

// ParseDate reads YYYY-MM-DD as days since 1970-01-01; a zero date (a zero
// month or day) is nil.
func ParseDate(s string) (any, error) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' || strings.Trim(s[:4]+s[5:7]+s[8:], "0123456789") != "" {
		return nil, fmt.Errorf("not a date: %q", s)
	}
	y, e1 := strconv.Atoi(s[:4])
	m, e2 := strconv.Atoi(s[5:7])
	d, e3 := strconv.Atoi(s[8:])
	if e1 != nil || e2 != nil || e3 != nil {
		return nil, fmt.Errorf("not a date: %q", s)
	}
	if m == 0 || d == 0 {
		return nil, nil
	}
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.Year() != y || t.Month() != time.Month(m) || t.Day() != d {
		// MariaDB stores such dates under sql_mode ALLOW_INVALID_DATES.
		return nil, fmt.Errorf("date %q does not exist (stored under sql_mode ALLOW_INVALID_DATES?)", s)
	}
	return t.Unix() / 86400, nil
}

// ParseDatetime reads YYYY-MM-DD HH:MM:SS[.ffffff] as µs since the epoch
// (UTC); a zero date is nil.
func ParseDatetime(s string) (any, error) {
	if len(s) < 19 || s[10] != ' ' {
		return nil, fmt.Errorf("not a datetime: %q", s)
	}
	day, err := ParseDate(s[:10])
	if err != nil || day == nil {
		return day, err
	}
	us, err := clock(s[11:], false)
	if err != nil {
		return nil, fmt.Errorf("not a datetime: %q", s)
	}
	return day.(int64)*86400e6 + us, nil
}

// ParseTime reads [-]H...H:MM:SS[.ffffff] as µs.
func ParseTime(s string) (any, error) {
	us, err := clock(s, true)
	if err != nil {
		return nil, fmt.Errorf("not a time: %q", s)
	}
	return us, nil
}

func clock(s string, signed bool) (int64, error) {
	neg := false
	if signed && strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	hms, frac, _ := strings.Cut(s, ".")
	f := strings.Split(hms, ":")
	if len(f) != 3 || len(frac) > 6 || strings.Trim(f[0]+f[1]+f[2]+frac, "0123456789") != "" {
		return 0, fmt.Errorf("bad clock")
	}
	h, e1 := strconv.ParseInt(f[0], 10, 64)
	m, e2 := strconv.ParseInt(f[1], 10, 64)
	sec, e3 := strconv.ParseInt(f[2], 10, 64)
	var us int64
	var e4 error
	if frac != "" {
		us, e4 = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
		return 0, fmt.Errorf("bad clock")
	}
	v := ((h*60+m)*60+sec)*1e6 + us
	if neg {
		v = -v
	}
	return v, nil
}
