package pgarrow

import (
	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
)

// Built-in type OIDs (pg_type.oid, stable across PostgreSQL versions).
const (
	OIDBool        = 16
	OIDBytea       = 17
	OIDChar        = 18
	OIDName        = 19
	OIDInt8        = 20
	OIDInt2        = 21
	OIDInt2Vector  = 22
	OIDInt4        = 23
	OIDText        = 25
	OIDOid         = 26
	OIDOidVector   = 30
	OIDJSON        = 114
	OIDXML         = 142
	OIDFloat4      = 700
	OIDFloat8      = 701
	OIDBPChar      = 1042
	OIDVarchar     = 1043
	OIDDate        = 1082
	OIDTime        = 1083
	OIDTimestamp   = 1114
	OIDTimestamptz = 1184
	OIDInterval    = 1186
	OIDTimetz      = 1266
	OIDNumeric     = 1700
	OIDUUID        = 2950
	OIDJSONB       = 3802
)

// value is one parsed column value, before it is appended.
type value struct {
	i   int64
	f   float64
	d   decimal128.Num
	iv  arrow.MonthDayNanoInterval
	b   []byte // strings and binary; may alias the input
	el  []value
	nul []bool
}

// scalar converts one PostgreSQL type's text form to one Arrow type.
type scalar struct {
	typ    arrow.DataType
	parse  func(s []byte, v *value) error
	append func(b array.Builder, v *value)
}

func appendString(b array.Builder, v *value) { b.(*array.StringBuilder).BinaryBuilder.Append(v.b) }
func parseBytes(s []byte, v *value) error    { v.b = s; return nil }

var textScalar = scalar{typ: arrow.BinaryTypes.String, parse: parseBytes, append: appendString}

// scalarFor returns the conversion of base type oid with type modifier
// typmod, and whether the type has a dedicated mapping (false: it maps to
// its text form in utf8).
func scalarFor(oid uint32, typmod int32) (scalar, bool) {
	switch oid {
	case OIDBool:
		return scalar{arrow.FixedWidthTypes.Boolean,
			func(s []byte, v *value) error {
				t, err := ParseBool(s)
				v.i = 0
				if t {
					v.i = 1
				}
				return err
			},
			func(b array.Builder, v *value) { b.(*array.BooleanBuilder).Append(v.i != 0) }}, true
	case OIDInt2:
		return scalar{arrow.PrimitiveTypes.Int16,
			func(s []byte, v *value) (err error) { v.i, err = ParseInt(s, 16); return },
			func(b array.Builder, v *value) { b.(*array.Int16Builder).Append(int16(v.i)) }}, true
	case OIDInt4:
		return scalar{arrow.PrimitiveTypes.Int32,
			func(s []byte, v *value) (err error) { v.i, err = ParseInt(s, 32); return },
			func(b array.Builder, v *value) { b.(*array.Int32Builder).Append(int32(v.i)) }}, true
	case OIDInt8:
		return scalar{arrow.PrimitiveTypes.Int64,
			func(s []byte, v *value) (err error) { v.i, err = ParseInt(s, 64); return },
			func(b array.Builder, v *value) { b.(*array.Int64Builder).Append(v.i) }}, true
	case OIDOid:
		return scalar{arrow.PrimitiveTypes.Uint32,
			func(s []byte, v *value) error { u, err := ParseUint32(s); v.i = int64(u); return err },
			func(b array.Builder, v *value) { b.(*array.Uint32Builder).Append(uint32(v.i)) }}, true
	case OIDFloat4:
		return scalar{arrow.PrimitiveTypes.Float32,
			func(s []byte, v *value) (err error) { v.f, err = ParseFloat(s, 32); return },
			func(b array.Builder, v *value) { b.(*array.Float32Builder).Append(float32(v.f)) }}, true
	case OIDFloat8:
		return scalar{arrow.PrimitiveTypes.Float64,
			func(s []byte, v *value) (err error) { v.f, err = ParseFloat(s, 64); return },
			func(b array.Builder, v *value) { b.(*array.Float64Builder).Append(v.f) }}, true
	case OIDNumeric:
		p, sc, ok := numericTypmod(typmod)
		if !ok {
			return textScalar, true
		}
		return scalar{&arrow.Decimal128Type{Precision: p, Scale: sc},
			func(s []byte, v *value) (err error) { v.d, err = ParseDecimal(s, p, sc); return },
			func(b array.Builder, v *value) { b.(*array.Decimal128Builder).Append(v.d) }}, true
	case OIDText, OIDVarchar, OIDBPChar, OIDName, OIDChar, OIDJSON, OIDJSONB, OIDXML, OIDUUID, OIDTimetz:
		return textScalar, true
	case OIDBytea:
		return scalar{arrow.BinaryTypes.Binary,
			func(s []byte, v *value) (err error) { v.b, err = ParseBytea(s); return },
			func(b array.Builder, v *value) { b.(*array.BinaryBuilder).Append(v.b) }}, true
	case OIDDate:
		return scalar{arrow.FixedWidthTypes.Date32,
			func(s []byte, v *value) error { d, err := ParseDate(s); v.i = int64(d); return err },
			func(b array.Builder, v *value) { b.(*array.Date32Builder).Append(arrow.Date32(v.i)) }}, true
	case OIDTime:
		return scalar{arrow.FixedWidthTypes.Time64us,
			func(s []byte, v *value) (err error) { v.i, err = ParseTime(s); return },
			func(b array.Builder, v *value) { b.(*array.Time64Builder).Append(arrow.Time64(v.i)) }}, true
	case OIDTimestamp:
		return scalar{&arrow.TimestampType{Unit: arrow.Microsecond},
			func(s []byte, v *value) (err error) { v.i, err = ParseTimestamp(s); return },
			func(b array.Builder, v *value) { b.(*array.TimestampBuilder).Append(arrow.Timestamp(v.i)) }}, true
	case OIDTimestamptz:
		return scalar{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
			func(s []byte, v *value) (err error) { v.i, err = ParseTimestamptz(s); return },
			func(b array.Builder, v *value) { b.(*array.TimestampBuilder).Append(arrow.Timestamp(v.i)) }}, true
	case OIDInterval:
		return scalar{arrow.FixedWidthTypes.MonthDayNanoInterval,
			func(s []byte, v *value) (err error) { v.iv, err = ParseInterval(s); return },
			func(b array.Builder, v *value) { b.(*array.MonthDayNanoIntervalBuilder).Append(v.iv) }}, true
	}
	return textScalar, false
}

// numericTypmod decodes numeric's type modifier ((p<<16 | s&0xffff) + 4):
// ok when the precision is at most 38 and 0 <= scale <= precision.
func numericTypmod(typmod int32) (precision, scale int32, ok bool) {
	if typmod < 4 {
		return 0, 0, false
	}
	t := typmod - 4
	precision = (t >> 16) & 0xffff
	scale = int32(int16(t & 0xffff)) // PostgreSQL 15 allows negative scales
	if precision < 1 || precision > 38 || scale < 0 || scale > precision {
		return 0, 0, false
	}
	return precision, scale, true
}

// column is the conversion of one table column: a scalar, or a list of a
// scalar when list is set.
type column struct {
	list bool
	elem scalar
	typ  arrow.DataType
}

// columnConv decides how c is converted.
func columnConv(c Column) column {
	oid, typmod := c.TypeOID, c.TypeMod
	if c.BaseOID != 0 {
		oid = c.BaseOID
		if typmod < 0 {
			typmod = c.BaseTypeMod
		}
	}
	if c.ElemOID != 0 && oid != OIDInt2Vector && oid != OIDOidVector {
		el, known := scalarFor(c.ElemOID, typmod)
		if known || c.IsEnum {
			return column{list: true, elem: el, typ: arrow.ListOf(el.typ)}
		}
		return column{elem: textScalar, typ: textScalar.typ}
	}
	sc, _ := scalarFor(oid, typmod)
	return column{elem: sc, typ: sc.typ}
}
