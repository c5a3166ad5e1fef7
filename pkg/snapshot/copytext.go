package snapshot

import (
	"bytes"
	"errors"
	"fmt"
)

// copyRow splits one line of COPY ... TO STDOUT text format (without its
// trailing newline) into the text output form of each column, undoing
// COPY's backslash escapes. It is a pure function of its input so that it
// can be fuzzed without a server.
//
// Fields are separated by tab; \N alone is SQL NULL; a backslash followed
// by b, f, n, r, t or v stands for that control character, by 1-3 octal
// digits or by x and 1-2 hex digits for that byte, and by any other
// character for that character itself (so \\ is a backslash).
//
// The returned values point into line where a field has no escapes and
// into scratch (grown as needed and returned for reuse) where it has.
// vals and nulls are reused: they are truncated and appended to.
type copyRow struct {
	vals    [][]byte
	nulls   []bool
	scratch []byte
}

// errCopyFormat is returned for lines that are not COPY text format.
var errCopyFormat = errors.New("malformed COPY text row")

// split parses line into r.vals and r.nulls, expecting ncols columns.
func (r *copyRow) split(line []byte, ncols int) error {
	r.vals, r.nulls, r.scratch = r.vals[:0], r.nulls[:0], r.scratch[:0]
	if ncols == 0 {
		// COPY writes an empty line for a row of a table without columns.
		if len(line) != 0 {
			return fmt.Errorf("%w: %d bytes for a row without columns", errCopyFormat, len(line))
		}
		return nil
	}
	for start := 0; ; {
		// Fast path: the field ends at the next tab and has no escapes.
		end := len(line)
		if i := bytes.IndexByte(line[start:], '\t'); i >= 0 {
			end = start + i
		}
		f := line[start:end]
		switch {
		case len(f) == 2 && f[0] == '\\' && f[1] == 'N':
			r.vals, r.nulls = append(r.vals, nil), append(r.nulls, true)
		case bytes.IndexByte(f, '\\') >= 0:
			// An escaped field; "\<tab>" (never written by COPY TO, but
			// valid) is a tab inside the field, not a separator.
			var err error
			if end, err = r.escapedField(line, start); err != nil {
				return fmt.Errorf("column %d: %w", len(r.vals)+1, err)
			}
		default:
			r.vals, r.nulls = append(r.vals, f), append(r.nulls, false)
		}
		if end == len(line) {
			break
		}
		start = end + 1
	}
	if len(r.vals) != ncols {
		return fmt.Errorf("%w: %d columns, want %d", errCopyFormat, len(r.vals), ncols)
	}
	return nil
}

// escapedField appends the field of line that begins at start and holds
// escapes, and returns where it ends (at a tab or the end of line).
func (r *copyRow) escapedField(line []byte, start int) (int, error) {
	end := start
	for end < len(line) && line[end] != '\t' {
		if line[end] == '\\' {
			if end+1 == len(line) {
				return 0, fmt.Errorf("%w: backslash at the end of the line", errCopyFormat)
			}
			end++ // the escaped character cannot be a separator
		}
		end++
	}
	f := line[start:end]
	if len(f) == 2 && f[1] == 'N' {
		r.vals, r.nulls = append(r.vals, nil), append(r.nulls, true)
		return end, nil
	}
	v, err := r.unescape(f)
	if err != nil {
		return 0, err
	}
	r.vals, r.nulls = append(r.vals, v), append(r.nulls, false)
	return end, nil
}

// unescape decodes the backslash escapes of f onto the end of r.scratch and
// returns the decoded bytes.
func (r *copyRow) unescape(f []byte) ([]byte, error) {
	begin := len(r.scratch)
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '\\' {
			r.scratch = append(r.scratch, c)
			continue
		}
		i++
		if i == len(f) {
			return nil, fmt.Errorf("%w: backslash at the end of a field", errCopyFormat)
		}
		switch c = f[i]; c {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'v':
			c = '\v'
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(f) && f[i+1] >= '0' && f[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(f[i]-'0')
			}
			c = byte(v)
		case 'x':
			if i+1 < len(f) && isHex(f[i+1]) {
				v := 0
				for k := 0; k < 2 && i+1 < len(f) && isHex(f[i+1]); k++ {
					i++
					v = v*16 + hexVal(f[i])
				}
				c = byte(v)
			}
		}
		r.scratch = append(r.scratch, c)
	}
	return r.scratch[begin:len(r.scratch):len(r.scratch)], nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	default:
		return int(c-'A') + 10
	}
}
