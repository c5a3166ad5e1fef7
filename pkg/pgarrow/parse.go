package pgarrow

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
)

// The parsers in this file are pure functions of PostgreSQL's text output
// form (as produced with SessionParams in effect). They never panic.

// Sentinels for PostgreSQL's infinite dates and timestamps. They are the
// values PostgreSQL itself uses internally (INT32_MIN/MAX days,
// INT64_MIN/MAX microseconds), so they sort before and after every finite
// value.
const (
	DateInfinity         = math.MaxInt32
	DateNegInfinity      = math.MinInt32
	TimestampInfinity    = math.MaxInt64
	TimestampNegInfinity = math.MinInt64
)

const (
	usPerSec = 1_000_000
	usPerDay = 86_400 * usPerSec
)

var errSyntax = errors.New("invalid syntax")

func syntaxErr(kind string, s []byte) error {
	const max = 64
	q := s
	if len(q) > max {
		q = append(q[:max:max], "..."...)
	}
	return fmt.Errorf("parse %s %q: %w", kind, q, errSyntax)
}

// ParseBool parses PostgreSQL's boolean output: "t" or "f" (and the input
// spellings true/false/yes/no/on/off/1/0, case-insensitively).
func ParseBool(s []byte) (bool, error) {
	switch string(bytes.ToLower(bytes.TrimSpace(s))) {
	case "t", "true", "yes", "y", "on", "1":
		return true, nil
	case "f", "false", "no", "n", "off", "0":
		return false, nil
	}
	return false, syntaxErr("bool", s)
}

// ParseInt parses a decimal integer that must fit in bits bits.
func ParseInt(s []byte, bits int) (int64, error) {
	v, err := strconv.ParseInt(string(s), 10, bits)
	if err != nil {
		return 0, syntaxErr(fmt.Sprintf("int%d", bits/8), s)
	}
	return v, nil
}

// ParseUint32 parses an oid.
func ParseUint32(s []byte) (uint32, error) {
	v, err := strconv.ParseUint(string(s), 10, 32)
	if err != nil {
		return 0, syntaxErr("oid", s)
	}
	return uint32(v), nil
}

// ParseFloat parses float4/float8 output, including NaN, Infinity and
// -Infinity.
func ParseFloat(s []byte, bits int) (float64, error) {
	v, err := strconv.ParseFloat(string(s), bits)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return v, nil // PostgreSQL never prints these, but be lenient: ±Inf or 0
		}
		return 0, syntaxErr(fmt.Sprintf("float%d", bits/8), s)
	}
	return v, nil
}

// ParseDecimal parses numeric output into a decimal128 with the given
// precision and scale. The value must have at most scale fractional digits
// (numeric(p,s) output has exactly s) and fit in precision digits. NaN and
// infinities are refused: they have no decimal128 form.
func ParseDecimal(s []byte, precision, scale int32) (decimal128.Num, error) {
	var n decimal128.Num
	in := s
	if len(s) == 0 {
		return n, syntaxErr("numeric", in)
	}
	neg := false
	switch s[0] {
	case '-':
		neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	var ten = decimal128.FromU64(10)
	digits, frac := 0, int32(-1)
	seen := false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			seen = true
			if frac >= 0 {
				frac++
				if frac > scale {
					return n, fmt.Errorf("parse numeric %q: more than %d fractional digits", in, scale)
				}
			}
			if digits > 0 || c != '0' {
				digits++
				if digits > 38 {
					return n, fmt.Errorf("parse numeric %q: more than 38 digits", in)
				}
			}
			n = n.Mul(ten).Add(decimal128.FromU64(uint64(c - '0')))
		case c == '.' && frac < 0:
			frac = 0
		default:
			if bytes.EqualFold(s, []byte("NaN")) || bytes.EqualFold(s, []byte("Infinity")) {
				return n, fmt.Errorf("parse numeric %q: not representable as decimal128(%d,%d)", in, precision, scale)
			}
			return n, syntaxErr("numeric", in)
		}
	}
	if !seen {
		return n, syntaxErr("numeric", in)
	}
	if frac < 0 {
		frac = 0
	}
	for ; frac < scale; frac++ {
		digits++
		n = n.Mul(ten)
	}
	if !n.FitsInPrecision(precision) {
		return n, fmt.Errorf("parse numeric %q: does not fit decimal128(%d,%d)", in, precision, scale)
	}
	if neg {
		n = n.Negate()
	}
	return n, nil
}

// ParseBytea parses bytea output in the hex format (\x0a1b...) or the
// escape format (backslash-octal escapes, \\ for a backslash).
func ParseBytea(s []byte) ([]byte, error) {
	if len(s) >= 2 && s[0] == '\\' && s[1] == 'x' {
		h := s[2:]
		out := make([]byte, 0, len(h)/2)
		for i := 0; i < len(h); {
			if isSpace(h[i]) {
				i++
				continue
			}
			if i+1 >= len(h) {
				return nil, syntaxErr("bytea", s)
			}
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return nil, syntaxErr("bytea", s)
			}
			out = append(out, hi<<4|lo)
			i += 2
		}
		return out, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '\\' {
			out = append(out, '\\')
			i++
			continue
		}
		if i+3 < len(s) && isOct(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) && s[i+1] <= '3' {
			out = append(out, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
			continue
		}
		return nil, syntaxErr("bytea", s)
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isOct(c byte) bool   { return c >= '0' && c <= '7' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// digits reads an unsigned decimal number of at least min and at most max
// digits from s at i.
func digits(s []byte, i, min, max int) (v int64, next int, ok bool) {
	j := i
	for j < len(s) && j-i < max && isDigit(s[j]) {
		v = v*10 + int64(s[j]-'0')
		j++
	}
	return v, j, j-i >= min
}

// daysFromCivil returns the days since 1970-01-01 of the proleptic
// Gregorian date y-m-d (y astronomical: 1 BC is 0).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	var era int64
	if y >= 0 {
		era = y / 400
	} else {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

var monthDays = [13]int64{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// parseDatePart reads YYYY-MM-DD (year of 4 or more digits) at the start of
// s and returns the day number (before any BC adjustment is known) parts.
func parseDatePart(s []byte) (y, m, d int64, next int, ok bool) {
	y, i, ok := digits(s, 0, 4, 9)
	if !ok || i >= len(s) || s[i] != '-' {
		return 0, 0, 0, 0, false
	}
	m, i, ok = digits(s, i+1, 2, 2)
	if !ok || i >= len(s) || s[i] != '-' {
		return 0, 0, 0, 0, false
	}
	d, i, ok = digits(s, i+1, 2, 2)
	if !ok || m < 1 || m > 12 || d < 1 || d > monthDays[m] {
		return 0, 0, 0, 0, false
	}
	return y, m, d, i, true
}

// hasBC strips a trailing " BC" from s.
func hasBC(s []byte) ([]byte, bool) {
	if bytes.HasSuffix(s, []byte(" BC")) {
		return s[:len(s)-3], true
	}
	return s, false
}

// ParseDate parses date output in the ISO DateStyle (YYYY-MM-DD, with a
// " BC" suffix for years before 1 AD) into days since 1970-01-01. infinity
// and -infinity become DateInfinity and DateNegInfinity.
func ParseDate(s []byte) (int32, error) {
	switch string(s) {
	case "infinity":
		return DateInfinity, nil
	case "-infinity":
		return DateNegInfinity, nil
	}
	body, bc := hasBC(s)
	y, m, d, i, ok := parseDatePart(body)
	if !ok || i != len(body) || y == 0 {
		return 0, syntaxErr("date", s)
	}
	if bc {
		y = 1 - y
	}
	days := daysFromCivil(y, m, d)
	if days <= DateNegInfinity || days >= DateInfinity {
		return 0, fmt.Errorf("parse date %q: out of range", s)
	}
	return int32(days), nil
}

// parseClock reads HH:MM:SS[.ffffff] at s[i:] and returns microseconds.
// Hours may have more than two digits when long is set (intervals).
func parseClock(s []byte, i int, maxHourDigits int) (us int64, next int, ok bool) {
	h, i, ok := digits(s, i, 1, maxHourDigits)
	if !ok || i >= len(s) || s[i] != ':' {
		return 0, 0, false
	}
	mi, i, ok := digits(s, i+1, 2, 2)
	if !ok || mi > 59 {
		return 0, 0, false
	}
	var sec int64
	if i < len(s) && s[i] == ':' {
		sec, i, ok = digits(s, i+1, 2, 2)
		if !ok || sec > 60 {
			return 0, 0, false
		}
	}
	var frac int64
	if i < len(s) && s[i] == '.' {
		j := i + 1
		n := 0
		for j < len(s) && isDigit(s[j]) {
			if n < 6 {
				frac = frac*10 + int64(s[j]-'0')
			} else if n == 6 && s[j] >= '5' {
				frac++ // round half up, as PostgreSQL rounds input
			}
			n++
			j++
		}
		if n == 0 {
			return 0, 0, false
		}
		for k := n; k < 6; k++ {
			frac *= 10
		}
		i = j
	}
	if h > maxClockHours {
		// Beyond what any mapped type holds (interval: maxClockHours);
		// the caller tells it from a syntax error by errClockRange.
		return -1, i, false
	}
	return ((h*60+mi)*60+sec)*usPerSec + frac, i, true
}

// maxClockHours is the most hours parseClock returns: an interval's time
// part beyond it does not fit int64 nanoseconds.
const maxClockHours = math.MaxInt64 / 1000 / 3_600_000_000

// ParseTime parses time (without time zone) output, HH:MM:SS[.ffffff],
// into microseconds since midnight (24:00:00 is 86400000000).
func ParseTime(s []byte) (int64, error) {
	us, i, ok := parseClock(s, 0, 2)
	if !ok || i != len(s) || us > usPerDay {
		return 0, syntaxErr("time", s)
	}
	return us, nil
}

// ParseTimestamp parses timestamp (without time zone) output in the ISO
// DateStyle, YYYY-MM-DD HH:MM:SS[.ffffff][ BC], into microseconds since
// 1970-01-01 00:00:00. infinity and -infinity become TimestampInfinity and
// TimestampNegInfinity.
func ParseTimestamp(s []byte) (int64, error) { return parseTimestamp(s, false) }

// ParseTimestamptz parses timestamp with time zone output in the ISO
// DateStyle, YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM[:SS]][ BC] (any session
// time zone), into microseconds since the Unix epoch (UTC).
func ParseTimestamptz(s []byte) (int64, error) { return parseTimestamp(s, true) }

func parseTimestamp(s []byte, tz bool) (int64, error) {
	kind := "timestamp"
	if tz {
		kind = "timestamptz"
	}
	switch string(s) {
	case "infinity":
		return TimestampInfinity, nil
	case "-infinity":
		return TimestampNegInfinity, nil
	}
	body, bc := hasBC(s)
	y, m, d, i, ok := parseDatePart(body)
	if !ok || y == 0 || i >= len(body) || (body[i] != ' ' && body[i] != 'T') {
		return 0, syntaxErr(kind, s)
	}
	clock, i, ok := parseClock(body, i+1, 2)
	if !ok || clock >= usPerDay {
		return 0, syntaxErr(kind, s)
	}
	var off int64 // seconds east of UTC
	if tz {
		if i >= len(body) || (body[i] != '+' && body[i] != '-') {
			return 0, syntaxErr(kind, s)
		}
		sign := int64(1)
		if body[i] == '-' {
			sign = -1
		}
		oh, j, ok := digits(body, i+1, 2, 2)
		if !ok {
			return 0, syntaxErr(kind, s)
		}
		var om, os int64
		if j < len(body) && body[j] == ':' {
			if om, j, ok = digits(body, j+1, 2, 2); !ok {
				return 0, syntaxErr(kind, s)
			}
			if j < len(body) && body[j] == ':' {
				if os, j, ok = digits(body, j+1, 2, 2); !ok {
					return 0, syntaxErr(kind, s)
				}
			}
		}
		off = sign * (oh*3600 + om*60 + os)
		i = j
	}
	if i != len(body) {
		return 0, syntaxErr(kind, s)
	}
	if bc {
		y = 1 - y
	}
	us, ok := timestampMicros(daysFromCivil(y, m, d), clock, off)
	if !ok {
		return 0, fmt.Errorf("parse %s %q: %w", kind, s, ErrTimestampRange)
	}
	return us, nil
}

// ErrTimestampRange is wrapped by the timestamp parsers for a finite value
// that Arrow's timestamp[us] cannot hold: one after 294247-01-10
// 04:00:54.775806 UTC (int64 microseconds, whose maximum is
// TimestampInfinity). PostgreSQL's own range goes on to 294276 AD.
var ErrTimestampRange = errors.New("out of range of timestamp[us] (the latest finite value it holds is 294247-01-10 04:00:54.775806 UTC)")

// timestampMicros is days*usPerDay + clock - off seconds, when that is a
// finite value strictly between the sentinels.
func timestampMicros(days, clock, off int64) (int64, bool) {
	const maxDays = math.MaxInt64 / usPerDay
	if days > maxDays || days < -maxDays {
		return 0, false
	}
	us := days * usPerDay
	r := clock - off*usPerSec // |r| < 2 days
	if (r > 0 && us > math.MaxInt64-r) || (r < 0 && us < math.MinInt64-r) {
		return 0, false
	}
	us += r
	if us == TimestampInfinity || us == TimestampNegInfinity {
		return 0, false
	}
	return us, true
}

// ParseInterval parses interval output in the postgres IntervalStyle
// ("1 year 2 mons -3 days +04:05:06.789", "00:00:00", "-1 days") into
// months, days and nanoseconds.
func ParseInterval(s []byte) (arrow.MonthDayNanoInterval, error) {
	var out arrow.MonthDayNanoInterval
	var months, days, us int64
	i := 0
	any := false
	for i < len(s) {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) {
			break
		}
		any = true
		sign := int64(1)
		j := i
		if s[j] == '+' || s[j] == '-' {
			if s[j] == '-' {
				sign = -1
			}
			j++
		}
		n, k, ok := digits(s, j, 1, 18)
		if !ok {
			return out, syntaxErr("interval", s)
		}
		if k < len(s) && s[k] == ':' {
			c, e, ok := parseClock(s, j, 18)
			if !ok && c == -1 {
				return out, fmt.Errorf("parse interval %q: %w", clip(s), ErrIntervalRange)
			}
			if !ok {
				return out, syntaxErr("interval", s)
			}
			us += sign * c
			i = e
			continue
		}
		if k >= len(s) || s[k] != ' ' {
			return out, syntaxErr("interval", s)
		}
		k++
		e := k
		for e < len(s) && s[e] >= 'a' && s[e] <= 'z' {
			e++
		}
		n *= sign
		switch string(s[k:e]) {
		case "year", "years":
			months += n * 12
		case "mon", "mons":
			months += n
		case "day", "days":
			days += n
		default:
			return out, fmt.Errorf("parse interval %q: unknown unit %q (is IntervalStyle postgres?): %w", s, s[k:e], errSyntax)
		}
		i = e
	}
	if !any {
		return out, syntaxErr("interval", s)
	}
	if months > math.MaxInt32 || months < math.MinInt32 || days > math.MaxInt32 || days < math.MinInt32 ||
		us > math.MaxInt64/1000 || us < math.MinInt64/1000 {
		return out, fmt.Errorf("parse interval %q: %w", clip(s), ErrIntervalRange)
	}
	return arrow.MonthDayNanoInterval{Months: int32(months), Days: int32(days), Nanoseconds: us * 1000}, nil
}

// ErrIntervalRange is wrapped by ParseInterval for an interval whose time
// part does not fit month_day_nano_interval's int64 nanoseconds (beyond
// ±2562047:47:16.854775, about 292 years; PostgreSQL keeps microseconds
// and goes on to ±2562047788 hours).
var ErrIntervalRange = errors.New("out of range of month_day_nano_interval (the time part holds at most ±2562047:47:16.854775)")

// ArrayElem is one element of a parsed array literal.
type ArrayElem struct {
	Value []byte // the element's text, unquoted and unescaped
	Null  bool   // an unquoted NULL
}

// ParseArray parses a PostgreSQL array literal ({1,2,NULL}, {"a b","c\"d"},
// [0:1]={x,y}, {{1,2},{3,4}}) with element delimiter delim (',' for every
// type but box). Multi-dimensional arrays are flattened in row-major order;
// ndims says how many dimensions there were (0 for {}). Sub-arrays of one
// level must all have the same length, as PostgreSQL requires. Element
// values may alias s when they needed no unescaping.
func ParseArray(s []byte, delim byte) (elems []ArrayElem, ndims int, err error) {
	p := arrayParser{s: s, delim: delim}
	return p.parse()
}

type arrayParser struct {
	s     []byte
	i     int
	delim byte
	out   []ArrayElem
	dims  []int // length of each dimension, once known
}

func (p *arrayParser) fail(why string) error {
	return fmt.Errorf("parse array %q at byte %d: %s: %w", clip(p.s), p.i, why, errSyntax)
}

func clip(s []byte) []byte {
	if len(s) > 64 {
		return append(s[:64:64], "..."...)
	}
	return s
}

func (p *arrayParser) skipSpace() {
	for p.i < len(p.s) && isSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *arrayParser) parse() ([]ArrayElem, int, error) {
	p.skipSpace()
	explicitDims := 0
	if p.i < len(p.s) && p.s[p.i] == '[' {
		// Dimension decoration: [lb:ub][lb:ub]...=
		for p.i < len(p.s) && p.s[p.i] == '[' {
			end := bytes.IndexByte(p.s[p.i:], ']')
			if end < 0 {
				return nil, 0, p.fail("unterminated dimension")
			}
			dim := p.s[p.i+1 : p.i+end]
			colon := bytes.IndexByte(dim, ':')
			if colon < 0 {
				return nil, 0, p.fail("dimension without ':'")
			}
			lb, err1 := strconv.ParseInt(string(dim[:colon]), 10, 32)
			ub, err2 := strconv.ParseInt(string(dim[colon+1:]), 10, 32)
			if err1 != nil || err2 != nil || ub < lb-1 {
				return nil, 0, p.fail("bad dimension")
			}
			explicitDims++
			p.i += end + 1
		}
		if p.i >= len(p.s) || p.s[p.i] != '=' {
			return nil, 0, p.fail("expected '=' after dimensions")
		}
		p.i++
		p.skipSpace()
	}
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, 0, p.fail("expected '{'")
	}
	if err := p.parseLevel(0); err != nil {
		return nil, 0, err
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, 0, p.fail("junk after closing '}'")
	}
	nd := len(p.dims)
	if len(p.out) == 0 && nd == 1 && p.dims[0] == 0 {
		nd = 0
	}
	if explicitDims > 0 && explicitDims != nd {
		return nil, 0, p.fail("dimension decoration does not match the array")
	}
	return p.out, nd, nil
}

// parseLevel parses one {...} at depth d; p.i is at '{'.
func (p *arrayParser) parseLevel(d int) error {
	if d >= 6 {
		return p.fail("more than 6 dimensions")
	}
	p.i++ // '{'
	if len(p.dims) <= d {
		p.dims = append(p.dims, -1)
	}
	n := 0
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		if d != 0 || len(p.dims) != 1 {
			return p.fail("empty sub-array")
		}
		p.dims[0] = 0
		return nil
	}
	sub := false // whether this level holds sub-arrays
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return p.fail("unterminated array")
		}
		if p.s[p.i] == '{' {
			if n > 0 && !sub {
				return p.fail("mixed elements and sub-arrays")
			}
			sub = true
			if err := p.parseLevel(d + 1); err != nil {
				return err
			}
		} else {
			if sub || len(p.dims) > d+1 {
				return p.fail("mixed elements and sub-arrays")
			}
			if err := p.parseElem(); err != nil {
				return err
			}
		}
		n++
		p.skipSpace()
		if p.i >= len(p.s) {
			return p.fail("unterminated array")
		}
		c := p.s[p.i]
		p.i++
		if c == '}' {
			break
		}
		if c != p.delim {
			return p.fail(fmt.Sprintf("expected %q or '}'", p.delim))
		}
	}
	if p.dims[d] == -1 {
		p.dims[d] = n
	} else if p.dims[d] != n {
		return p.fail("sub-arrays of different lengths")
	}
	if !sub && len(p.dims) != d+1 {
		return p.fail("mixed elements and sub-arrays")
	}
	return nil
}

// parseElem parses one element at p.i (not '{').
func (p *arrayParser) parseElem() error {
	s := p.s
	if s[p.i] == '"' {
		p.i++
		start := p.i
		var buf []byte
		for {
			if p.i >= len(s) {
				return p.fail("unterminated quoted element")
			}
			c := s[p.i]
			if c == '"' {
				break
			}
			if c == '\\' {
				if buf == nil {
					buf = append(make([]byte, 0, p.i-start+16), s[start:p.i]...)
				}
				p.i++
				if p.i >= len(s) {
					return p.fail("unterminated quoted element")
				}
				buf = append(buf, s[p.i])
			} else if buf != nil {
				buf = append(buf, c)
			}
			p.i++
		}
		v := s[start:p.i:p.i]
		if buf != nil {
			v = buf
		}
		p.i++ // closing quote
		p.out = append(p.out, ArrayElem{Value: v})
		return nil
	}
	start := p.i
	var buf []byte
	escaped := false
	lastEsc := 0 // length of buf up to and including the last escaped byte
	for p.i < len(s) {
		c := s[p.i]
		if c == p.delim || c == '}' {
			break
		}
		if c == '{' || c == '"' {
			return p.fail(fmt.Sprintf("unexpected %q in unquoted element", c))
		}
		if c == '\\' {
			if buf == nil {
				buf = append(make([]byte, 0, p.i-start+16), s[start:p.i]...)
			}
			p.i++
			if p.i >= len(s) {
				return p.fail("unterminated escape")
			}
			buf = append(buf, s[p.i])
			escaped = true
			lastEsc = len(buf)
			p.i++
			continue
		}
		if buf != nil {
			buf = append(buf, c)
		}
		p.i++
	}
	v := s[start:p.i:p.i]
	if buf != nil {
		v = buf
	}
	// Trailing white space is not part of an unquoted element, unless escaped.
	end := len(v)
	for end > lastEsc && isSpace(v[end-1]) {
		end--
	}
	v = v[:end:end]
	if len(v) == 0 {
		return p.fail("empty unquoted element")
	}
	if !escaped && len(v) == 4 && bytes.EqualFold(v, []byte("NULL")) {
		p.out = append(p.out, ArrayElem{Null: true})
		return nil
	}
	p.out = append(p.out, ArrayElem{Value: v})
	return nil
}
