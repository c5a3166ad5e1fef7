// Package rowenc is the byte encoding of Arrow values that pgarrow's and
// myarrow's RowCodecs share: equal values encode to equal bytes, so the
// encoding of a row's key columns is a map key (pkg/replicate's key
// states).
//
// A value is 0 for NULL, or 1 followed by its scalar: bool, int8 and
// uint8 1 byte; int16 and uint16 2; int32, uint32, float32 and date32 4;
// int64, uint64, float64, time64, timestamp and duration 8 bytes
// little-endian (floats their IEEE bits); decimal128 16 bytes (low then
// high 64 bits); month_day_nano_interval months and days (4 bytes each)
// then nanoseconds (8); utf8 and binary a uvarint length then the bytes;
// a list a uvarint element count then each element as a value.
package rowenc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
)

// ErrEncoded is wrapped for bytes that are not an encoding.
var ErrEncoded = errors.New("malformed encoded row")

// AppendArrow appends the encoding of element j of arr to dst.
func AppendArrow(dst []byte, arr arrow.Array, j int) ([]byte, error) {
	if arr.IsNull(j) {
		return append(dst, 0), nil
	}
	dst = append(dst, 1)
	le := binary.LittleEndian
	switch a := arr.(type) {
	case *array.Boolean:
		if a.Value(j) {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case *array.Int8:
		return append(dst, byte(a.Value(j))), nil
	case *array.Uint8:
		return append(dst, a.Value(j)), nil
	case *array.Int16:
		return le.AppendUint16(dst, uint16(a.Value(j))), nil
	case *array.Uint16:
		return le.AppendUint16(dst, a.Value(j)), nil
	case *array.Int32:
		return le.AppendUint32(dst, uint32(a.Value(j))), nil
	case *array.Uint32:
		return le.AppendUint32(dst, a.Value(j)), nil
	case *array.Date32:
		return le.AppendUint32(dst, uint32(a.Value(j))), nil
	case *array.Int64:
		return le.AppendUint64(dst, uint64(a.Value(j))), nil
	case *array.Uint64:
		return le.AppendUint64(dst, a.Value(j)), nil
	case *array.Time64:
		return le.AppendUint64(dst, uint64(a.Value(j))), nil
	case *array.Timestamp:
		return le.AppendUint64(dst, uint64(a.Value(j))), nil
	case *array.Duration:
		return le.AppendUint64(dst, uint64(a.Value(j))), nil
	case *array.Float32:
		return le.AppendUint32(dst, math.Float32bits(a.Value(j))), nil
	case *array.Float64:
		return le.AppendUint64(dst, math.Float64bits(a.Value(j))), nil
	case *array.Decimal128:
		d := a.Value(j)
		return le.AppendUint64(le.AppendUint64(dst, d.LowBits()), uint64(d.HighBits())), nil
	case *array.MonthDayNanoInterval:
		iv := a.Value(j)
		dst = le.AppendUint32(le.AppendUint32(dst, uint32(iv.Months)), uint32(iv.Days))
		return le.AppendUint64(dst, uint64(iv.Nanoseconds)), nil
	case *array.String:
		s := a.Value(j)
		return append(binary.AppendUvarint(dst, uint64(len(s))), s...), nil
	case *array.Binary:
		b := a.Value(j)
		return append(binary.AppendUvarint(dst, uint64(len(b))), b...), nil
	case *array.List:
		lo, hi := a.ValueOffsets(j)
		dst = binary.AppendUvarint(dst, uint64(hi-lo))
		var err error
		for k := lo; k < hi; k++ {
			if dst, err = AppendArrow(dst, a.ListValues(), int(k)); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("encode row: unexpected array type %s", arr.DataType())
}

// ScalarLen returns the length of the encoded scalar of type id (after
// its 1) at the start of b.
func ScalarLen(b []byte, id arrow.Type) (int, error) {
	n := 0
	switch id {
	case arrow.BOOL, arrow.INT8, arrow.UINT8:
		n = 1
	case arrow.INT16, arrow.UINT16:
		n = 2
	case arrow.INT32, arrow.UINT32, arrow.DATE32, arrow.FLOAT32:
		n = 4
	case arrow.INT64, arrow.UINT64, arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION, arrow.FLOAT64:
		n = 8
	case arrow.DECIMAL128, arrow.INTERVAL_MONTH_DAY_NANO:
		n = 16
	default:
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return 0, ErrEncoded
		}
		n = k + int(l)
	}
	if n > len(b) {
		return 0, ErrEncoded
	}
	return n, nil
}

// AppendScalar appends the encoded scalar of type id at the start of s
// (checked by ScalarLen) to bl and returns its length.
func AppendScalar(bl array.Builder, id arrow.Type, s []byte) int {
	le := binary.LittleEndian
	switch id {
	case arrow.BOOL:
		bl.(*array.BooleanBuilder).Append(s[0] != 0)
		return 1
	case arrow.INT8:
		bl.(*array.Int8Builder).Append(int8(s[0]))
		return 1
	case arrow.UINT8:
		bl.(*array.Uint8Builder).Append(s[0])
		return 1
	case arrow.INT16:
		bl.(*array.Int16Builder).Append(int16(le.Uint16(s)))
		return 2
	case arrow.UINT16:
		bl.(*array.Uint16Builder).Append(le.Uint16(s))
		return 2
	case arrow.INT32:
		bl.(*array.Int32Builder).Append(int32(le.Uint32(s)))
		return 4
	case arrow.UINT32:
		bl.(*array.Uint32Builder).Append(le.Uint32(s))
		return 4
	case arrow.DATE32:
		bl.(*array.Date32Builder).Append(arrow.Date32(le.Uint32(s)))
		return 4
	case arrow.FLOAT32:
		bl.(*array.Float32Builder).Append(math.Float32frombits(le.Uint32(s)))
		return 4
	case arrow.INT64:
		bl.(*array.Int64Builder).Append(int64(le.Uint64(s)))
		return 8
	case arrow.UINT64:
		bl.(*array.Uint64Builder).Append(le.Uint64(s))
		return 8
	case arrow.TIME64:
		bl.(*array.Time64Builder).Append(arrow.Time64(le.Uint64(s)))
		return 8
	case arrow.TIMESTAMP:
		bl.(*array.TimestampBuilder).Append(arrow.Timestamp(le.Uint64(s)))
		return 8
	case arrow.DURATION:
		bl.(*array.DurationBuilder).Append(arrow.Duration(le.Uint64(s)))
		return 8
	case arrow.FLOAT64:
		bl.(*array.Float64Builder).Append(math.Float64frombits(le.Uint64(s)))
		return 8
	case arrow.DECIMAL128:
		bl.(*array.Decimal128Builder).Append(decimal128.New(int64(le.Uint64(s[8:])), le.Uint64(s)))
		return 16
	case arrow.INTERVAL_MONTH_DAY_NANO:
		bl.(*array.MonthDayNanoIntervalBuilder).Append(arrow.MonthDayNanoInterval{
			Months: int32(le.Uint32(s)), Days: int32(le.Uint32(s[4:])), Nanoseconds: int64(le.Uint64(s[8:]))})
		return 16
	}
	l, k := binary.Uvarint(s)
	v := s[k : k+int(l)]
	switch bb := bl.(type) {
	case *array.StringBuilder:
		bb.BinaryBuilder.Append(v)
	case *array.BinaryBuilder:
		bb.Append(v)
	}
	return k + int(l)
}
