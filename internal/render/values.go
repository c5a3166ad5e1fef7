package render

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// The text forms below are PostgreSQL's own output forms (ISO DateStyle,
// postgres IntervalStyle, shortest exact floats) for the Arrow types
// pkg/pgarrow maps PostgreSQL's types to, so that a value reads as
// `SELECT col::text` prints it: docs/types-postgres.md, "Output of
// rtrctl read".

// Sentinels of infinite dates and timestamps (pkg/pgarrow's).
const (
	dateInfinity    = math.MaxInt32
	dateNegInfinity = math.MinInt32
)

// formatFloat prints f as PostgreSQL's float4/float8 output does with
// extra_float_digits > 0: the shortest digits that read back exactly, in
// fixed notation for decimal exponents from -4 up to 14 (float8) or 5
// (float4), else as d.ddde±XX; NaN, Infinity, -Infinity; -0 keeps its sign.
func formatFloat(f float64, bits int) string { return string(appendFloat(nil, f, bits)) }

// fraction prints the fractional part frac (of digits decimal digits) as
// ".ddd" without trailing zeros, or "" for 0.
func fraction(frac int64, digits int) string { return string(appendFraction(nil, frac, digits)) }

func appendFraction(dst []byte, frac int64, digits int) []byte {
	if frac == 0 {
		return dst
	}
	dst = append(dst, '.')
	start := len(dst)
	for k := digits - 1; k >= 0; k-- {
		dst = append(dst, '0')
	}
	for k := len(dst) - 1; k >= start; k-- {
		dst[k] = byte('0' + frac%10)
		frac /= 10
	}
	for len(dst) > start && dst[len(dst)-1] == '0' {
		dst = dst[:len(dst)-1]
	}
	return dst
}

// unitDigits is the number of fractional second digits of unit, and how
// many of it make a second.
func unitDigits(unit arrow.TimeUnit) (int, int64) {
	switch unit {
	case arrow.Second:
		return 0, 1
	case arrow.Millisecond:
		return 3, 1e3
	case arrow.Microsecond:
		return 6, 1e6
	}
	return 9, 1e9
}

// clock prints a time of day (or of an interval) of v units: HH:MM:SS
// with the fraction when not 0; hours may exceed 24 (time's 24:00:00).
func clock(v uint64, unit arrow.TimeUnit) string { return string(appendClock(nil, v, unit)) }

func appendClock(dst []byte, v uint64, unit arrow.TimeUnit) []byte {
	digits, per := unitDigits(unit)
	secs, frac := v/uint64(per), int64(v%uint64(per))
	h, m, s := secs/3600, secs/60%60, secs%60
	dst = appendPad2(dst, h)
	dst = appendPad2(append(dst, ':'), m)
	dst = appendPad2(append(dst, ':'), s)
	return appendFraction(dst, frac, digits)
}

func pad2(v uint64) string { return string(appendPad2(nil, v)) }

func appendPad2(dst []byte, v uint64) []byte {
	if v < 10 {
		return append(dst, '0', byte('0'+v))
	}
	return strconv.AppendUint(dst, v, 10)
}

// civil returns the proleptic Gregorian date of days since 1970-01-01
// (year astronomical: 0 is 1 BC).
func civil(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// date prints days since 1970-01-01 as YYYY-MM-DD, " BC" after a year
// before 1 AD; the int32 sentinels as infinity and -infinity.
func date(days int64) (string, string) {
	d, bc := appendDate(nil, days)
	return string(d), bc
}

// appendDate appends date's YYYY-MM-DD and returns its " BC" apart.
func appendDate(dst []byte, days int64) ([]byte, string) {
	y, m, d := civil(days)
	bc := ""
	if y <= 0 {
		y, bc = 1-y, " BC"
	}
	for p := int64(1000); p > 1 && y < p; p /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, y, 10)
	dst = appendPad2(append(dst, '-'), uint64(m))
	dst = appendPad2(append(dst, '-'), uint64(d))
	return dst, bc
}

// appendDate32 appends a date32's text (Value's).
func appendDate32(dst []byte, v int32) []byte {
	switch v {
	case dateInfinity:
		return append(dst, "infinity"...)
	case dateNegInfinity:
		return append(dst, "-infinity"...)
	}
	dst, bc := appendDate(dst, int64(v))
	return append(dst, bc...)
}

func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// timestamp prints v units since the epoch as YYYY-MM-DD HH:MM:SS[.fff],
// then the zone's offset when the type has one (+00 for UTC), then " BC";
// int64's extremes (pkg/pgarrow's sentinels) are infinity and -infinity.
func timestamp(v int64, typ *arrow.TimestampType) string {
	return string(appendTimestamp(nil, v, typ))
}

func appendTimestamp(dst []byte, v int64, typ *arrow.TimestampType) []byte {
	return newTimestampFormat(typ).append(dst, v)
}

// timestampFormat prints timestamps of one type: the zone is looked up
// once (time.LoadLocation reads the zone database on every call), not
// per value.
type timestampFormat struct {
	unit arrow.TimeUnit
	per  int64
	// zoned: the type has a time zone; loc is it when it is not UTC
	// (nil: +00).
	zoned bool
	loc   *time.Location
}

func newTimestampFormat(typ *arrow.TimestampType) timestampFormat {
	_, per := unitDigits(typ.Unit)
	f := timestampFormat{unit: typ.Unit, per: per, zoned: typ.TimeZone != ""}
	if f.zoned {
		if loc, err := time.LoadLocation(typ.TimeZone); err == nil && loc != time.UTC {
			f.loc = loc
		}
	}
	return f
}

func (f timestampFormat) append(dst []byte, v int64) []byte {
	switch v {
	case math.MaxInt64:
		return append(dst, "infinity"...)
	case math.MinInt64:
		return append(dst, "-infinity"...)
	}
	secs, sub := floorDiv(v, f.per)
	off := ""
	if f.zoned {
		off = "+00"
		if f.loc != nil {
			_, o := time.Unix(secs, 0).In(f.loc).Zone()
			secs += int64(o)
			off = offset(o)
		}
	}
	days, sod := floorDiv(secs, 86400)
	dst, bc := appendDate(dst, days)
	dst = appendClock(append(dst, ' '), uint64(sod)*uint64(f.per)+uint64(sub), f.unit)
	return append(append(dst, off...), bc...)
}

// offset prints a UTC offset in seconds as PostgreSQL does: +05, -03:30.
func offset(o int) string {
	sign := "+"
	if o < 0 {
		sign, o = "-", -o
	}
	s := sign + pad2(uint64(o/3600))
	if m, sec := o/60%60, o%60; m != 0 || sec != 0 {
		s += ":" + pad2(uint64(m))
		if sec != 0 {
			s += ":" + pad2(uint64(sec))
		}
	}
	return s
}

// interval prints months, days and nanoseconds in PostgreSQL's postgres
// IntervalStyle: "1 year 2 mons -3 days +04:05:06.789", "00:00:00".
func interval(months, days int32, nanos int64) string {
	var b strings.Builder
	zero, before := true, false
	part := func(v int64, unit string) {
		if v == 0 {
			return
		}
		if !zero {
			b.WriteByte(' ')
		}
		if before && v > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.FormatInt(v, 10) + " " + unit)
		if v != 1 {
			b.WriteByte('s')
		}
		before, zero = v < 0, false
	}
	part(int64(months/12), "year")
	part(int64(months%12), "mon")
	part(int64(days), "day")
	if zero || nanos != 0 {
		if !zero {
			b.WriteByte(' ')
		}
		abs := uint64(nanos)
		switch {
		case nanos < 0:
			b.WriteByte('-')
			abs = uint64(-nanos) // also right for math.MinInt64
		case before:
			b.WriteByte('+')
		}
		unit := arrow.Nanosecond
		if abs%1000 == 0 {
			abs, unit = abs/1000, arrow.Microsecond
		}
		b.WriteString(clock(abs, unit))
	}
	return b.String()
}

// arrayLiteral prints a list as a PostgreSQL array literal: {1,NULL,"a b"}.
func arrayLiteral(l array.ListLike, i int) string {
	start, end := l.ValueOffsets(i)
	vals := l.ListValues()
	var b strings.Builder
	b.WriteByte('{')
	for j := start; j < end; j++ {
		if j > start {
			b.WriteByte(',')
		}
		if vals.IsNull(int(j)) {
			b.WriteString("NULL")
			continue
		}
		b.WriteString(arrayElem(Value(vals, int(j))))
	}
	b.WriteByte('}')
	return b.String()
}

// arrayElem quotes an array element as array_out does: when it is empty,
// NULL, or holds white space, a delimiter, a brace, a quote or a backslash.
func arrayElem(s string) string {
	if s != "" && !strings.EqualFold(s, "NULL") && !strings.ContainsAny(s, "{},\"\\ \t\n\r\v\f") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// jsonValue is element i of col for a JSON object: numbers as numbers (a
// decimal keeping its scale), NaN and infinities of floats as the strings
// "NaN", "Infinity" and "-Infinity" (as PostgreSQL's to_json prints them),
// times, dates, timestamps and intervals as their text (Value), lists as
// arrays of the same; other types as Arrow marshals them.
func jsonValue(col arrow.Array, i int) any {
	if col.IsNull(i) {
		return nil
	}
	switch c := col.(type) {
	case *array.Float32:
		if f := float64(c.Value(i)); math.IsNaN(f) || math.IsInf(f, 0) {
			return formatFloat(f, 32)
		}
		return c.Value(i)
	case *array.Float64:
		if f := c.Value(i); math.IsNaN(f) || math.IsInf(f, 0) {
			return formatFloat(f, 64)
		}
		return c.Value(i)
	case *array.Decimal128, *array.Decimal256:
		return json.Number(Value(col, i))
	case *array.Time32, *array.Time64, *array.Date32, *array.Timestamp, *array.MonthDayNanoInterval:
		return Value(col, i)
	case *array.List:
		return jsonList(c, i)
	case *array.LargeList:
		return jsonList(c, i)
	}
	return col.GetOneForMarshal(i)
}

func jsonList(l array.ListLike, i int) []any {
	start, end := l.ValueOffsets(i)
	out := make([]any, 0, end-start)
	for j := start; j < end; j++ {
		out = append(out, jsonValue(l.ListValues(), int(j)))
	}
	return out
}

// tableCell escapes the control characters of a value for the aligned
// table, so that a row stays one line: \t, \n, \r and \xNN for the others.
func tableCell(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x` + strconv.FormatUint(uint64(r)>>4, 16) + strconv.FormatUint(uint64(r)&15, 16))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
