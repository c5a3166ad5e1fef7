package render

import (
	"bufio"
	"math"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// csvWriter writes CSV rows as encoding/csv's Writer does (comma, LF,
// fields quoted when they hold a comma, a quote, CR or LF, start with
// white space or are `\.`), from values appended in place (AppendValue)
// rather than built as strings, so that a row costs no allocation.
//
// A record is rendered a column at a time (csvColumn: one type switch per
// column, not per cell, and no quoting scan for types whose text never
// needs quotes), then the columns' fields are interleaved into rows: the
// per-cell type switch and quoting scan were a third of a streaming
// read's CPU time.
type csvWriter struct {
	bw   *bufio.Writer
	line []byte // the row being built
	cell []byte // scratch: one value
	cols []csvColumn
	out  []byte // rows not yet handed to bw
}

// csvColumn holds one column of a record as CSV fields: field i is
// buf[ends[i-1]:ends[i]] (ends[-1] being 0), quoted as needed.
type csvColumn struct {
	buf  []byte
	ends []int
}

// csvOutChunk is how many bytes of rows are gathered before they are
// written: one Write per chunk rather than per row.
const csvOutChunk = 64 << 10

// header writes the header row.
func (w *csvWriter) header(names []string) error {
	w.line = w.line[:0]
	for j, n := range names {
		if j > 0 {
			w.line = append(w.line, ',')
		}
		w.line = appendCSVField(w.line, []byte(n))
	}
	w.line = append(w.line, '\n')
	_, err := w.bw.Write(w.line)
	return err
}

// rows writes the rows of rec, each repeat(i) times.
func (w *csvWriter) rows(rec arrow.Record, repeat func(int) int64) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	cols := rec.Columns()
	for len(w.cols) < len(cols) {
		w.cols = append(w.cols, csvColumn{})
	}
	for j, c := range cols {
		w.cell = w.cols[j].render(c, w.cell)
	}
	out := w.out[:0]
	for i := range n {
		k := times(repeat, i)
		if k <= 0 {
			continue
		}
		start := len(out)
		for j := range cols {
			c := &w.cols[j]
			lo := 0
			if i > 0 {
				lo = c.ends[i-1]
			}
			if j > 0 {
				out = append(out, ',')
			}
			out = append(out, c.buf[lo:c.ends[i]]...)
		}
		out = append(out, '\n')
		for k--; k > 0; k-- {
			// A multiplicity above one: the same row again (out may
			// move as it grows, so copy by index).
			end := len(out)
			out = append(out, out[start:end]...)
			start = end
		}
		if len(out) >= csvOutChunk {
			if _, err := w.bw.Write(out); err != nil {
				w.out = out[:0]
				return err
			}
			out = out[:0]
		}
	}
	w.out = out[:0]
	if len(out) > 0 {
		if _, err := w.bw.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// render sets c to the CSV fields of col; scratch is a reusable buffer
// for one value, returned for reuse.
func (c *csvColumn) render(col arrow.Array, scratch []byte) []byte {
	n := col.Len()
	buf, ends := c.buf[:0], c.ends[:0]
	nulls := col.NullN() > 0
	// Values whose text never needs quoting (digits, signs, '.', 'e',
	// ':', '-', letters of NaN/Infinity/true/false/BC, an inner space):
	// appended as they are; a null is an empty field.
	switch a := col.(type) {
	case *array.Int64:
		for i, v := range a.Int64Values() {
			if !nulls || a.IsValid(i) {
				buf = strconv.AppendInt(buf, v, 10)
			}
			ends = append(ends, len(buf))
		}
	case *array.Int32:
		for i, v := range a.Int32Values() {
			if !nulls || a.IsValid(i) {
				buf = strconv.AppendInt(buf, int64(v), 10)
			}
			ends = append(ends, len(buf))
		}
	case *array.Float64:
		for i, v := range a.Float64Values() {
			if !nulls || a.IsValid(i) {
				buf = appendFloat(buf, v, 64)
			}
			ends = append(ends, len(buf))
		}
	case *array.Boolean:
		for i := range n {
			if !nulls || a.IsValid(i) {
				buf = strconv.AppendBool(buf, a.Value(i))
			}
			ends = append(ends, len(buf))
		}
	case *array.Timestamp:
		tf := newTimestampFormat(a.DataType().(*arrow.TimestampType))
		for i, v := range a.TimestampValues() {
			if !nulls || a.IsValid(i) {
				buf = tf.append(buf, int64(v))
			}
			ends = append(ends, len(buf))
		}
	case *array.String:
		for i := range n {
			if !nulls || a.IsValid(i) {
				buf = appendCSVString(buf, a.Value(i))
			}
			ends = append(ends, len(buf))
		}
	default:
		for i := range n {
			if !col.IsNull(i) {
				scratch = AppendValue(scratch[:0], col, i)
				buf = appendCSVField(buf, scratch)
			}
			ends = append(ends, len(buf))
		}
	}
	c.buf, c.ends = buf, ends
	return scratch
}

// appendCSVString is appendCSVField of a string, without converting it.
func appendCSVString(dst []byte, f string) []byte {
	if !csvNeedsQuotes(f) {
		return append(dst, f...)
	}
	return appendCSVField(dst, []byte(f))
}

// appendCSVField appends f as one CSV field, quoted when encoding/csv
// would quote it.
func appendCSVField(dst, f []byte) []byte {
	if !csvNeedsQuotes(f) {
		return append(dst, f...)
	}
	dst = append(dst, '"')
	for _, c := range f {
		if c == '"' {
			dst = append(dst, '"')
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// csvNeedsQuotes is encoding/csv's fieldNeedsQuotes for a comma.
func csvNeedsQuotes[T string | []byte](f T) bool {
	if len(f) == 0 {
		return false
	}
	if len(f) == 2 && f[0] == '\\' && f[1] == '.' {
		return true
	}
	for i := 0; i < len(f); i++ {
		if csvSpecial[f[i]] {
			return true
		}
	}
	return startsWithSpace(f)
}

// csvSpecial marks the bytes that make a field quoted wherever they are.
var csvSpecial = [256]bool{'\n': true, '\r': true, '"': true, ',': true}

// startsWithSpace says whether f starts with a Unicode white space
// character (encoding/csv quotes such a field); ASCII without decoding.
func startsWithSpace[T string | []byte](f T) bool {
	if f[0] < utf8.RuneSelf {
		return asciiSpace(f[0])
	}
	var head [utf8.UTFMax]byte
	r, _ := utf8.DecodeRune(head[:copy(head[:], f)])
	return unicode.IsSpace(r)
}

// asciiSpace is unicode.IsSpace of an ASCII byte.
func asciiSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r'
}

// AppendValue appends Value(col, i) to dst; numbers, text, booleans and
// UTC timestamps without building a string.
func AppendValue(dst []byte, col arrow.Array, i int) []byte {
	if col.IsNull(i) {
		return dst
	}
	switch c := col.(type) {
	case *array.String:
		return append(dst, c.Value(i)...)
	case *array.LargeString:
		return append(dst, c.Value(i)...)
	case *array.Int64:
		return strconv.AppendInt(dst, c.Value(i), 10)
	case *array.Int32:
		return strconv.AppendInt(dst, int64(c.Value(i)), 10)
	case *array.Int16:
		return strconv.AppendInt(dst, int64(c.Value(i)), 10)
	case *array.Int8:
		return strconv.AppendInt(dst, int64(c.Value(i)), 10)
	case *array.Uint64:
		return strconv.AppendUint(dst, c.Value(i), 10)
	case *array.Uint32:
		return strconv.AppendUint(dst, uint64(c.Value(i)), 10)
	case *array.Uint16:
		return strconv.AppendUint(dst, uint64(c.Value(i)), 10)
	case *array.Uint8:
		return strconv.AppendUint(dst, uint64(c.Value(i)), 10)
	case *array.Boolean:
		return strconv.AppendBool(dst, c.Value(i))
	case *array.Float64:
		return appendFloat(dst, c.Value(i), 64)
	case *array.Float32:
		return appendFloat(dst, float64(c.Value(i)), 32)
	case *array.Timestamp:
		return appendTimestamp(dst, int64(c.Value(i)), c.DataType().(*arrow.TimestampType))
	case *array.Date32:
		return appendDate32(dst, int32(c.Value(i)))
	}
	return append(dst, Value(col, i)...)
}

// appendFloat appends formatFloat(f, bits).
func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if f == 0 {
		return strconv.AppendFloat(dst, f, 'f', -1, bits)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'e', -1, bits)
	e := dst[start:]
	k := len(e) - 1
	for e[k] != 'e' {
		k--
	}
	// The exponent: a sign and at least two digits.
	exp := 0
	for _, c := range e[k+2:] {
		exp = exp*10 + int(c-'0')
	}
	if e[k+1] == '-' {
		exp = -exp
	}
	fixedBelow := 15
	if bits == 32 {
		fixedBelow = 6
	}
	if exp < -4 || exp >= fixedBelow {
		return dst
	}
	// Fixed notation from the same shortest digits ('f' with precision -1
	// picks the same ones) rather than formatting the float a second time:
	// e is [-]d[.ddd]e±XX.
	var digs [24]byte
	neg := e[0] == '-'
	nd := 0
	for _, c := range e[:k] {
		if c >= '0' && c <= '9' {
			digs[nd] = c
			nd++
		}
	}
	dst = dst[:start]
	if neg {
		dst = append(dst, '-')
	}
	if exp < 0 {
		dst = append(dst, '0', '.')
		for range -exp - 1 {
			dst = append(dst, '0')
		}
		return append(dst, digs[:nd]...)
	}
	if nd <= exp+1 {
		dst = append(dst, digs[:nd]...)
		for range exp + 1 - nd {
			dst = append(dst, '0')
		}
		return dst
	}
	dst = append(dst, digs[:exp+1]...)
	dst = append(dst, '.')
	return append(dst, digs[exp+1:nd]...)
}
