package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// COPY's binary format (COPY ... TO STDOUT (FORMAT binary)) is cheaper to
// produce on the server than text (no output functions for timestamps and
// floats) and to decode here. It is used for a table when every column
// has a binary decoder below that yields exactly the Arrow value
// pgarrow's text parser yields (the rewind's pgoutput changes go through
// that parser, and the two must consolidate); other tables use text.

// binDecoder appends one non-NULL binary value to a builder.
type binDecoder func(b array.Builder, v []byte) error

// Offsets between PostgreSQL's epoch (2000-01-01) and Unix's.
const (
	pgEpochDays   = 10957
	pgEpochMicros = pgEpochDays * 86_400 * 1_000_000
)

var errBinary = errors.New("malformed COPY binary data")

func wantLen(v []byte, n int) error {
	if len(v) != n {
		return fmt.Errorf("%w: value of %d bytes, want %d", errBinary, len(v), n)
	}
	return nil
}

// binaryDecoders returns a decoder per column of t, or false when some
// column has none.
func binaryDecoders(t *pgarrow.Table) ([]binDecoder, bool) {
	fields := t.Fields()
	decs := make([]binDecoder, len(t.Columns))
	for i, c := range t.Columns {
		if c.ElemOID != 0 || c.IsEnum {
			return nil, false
		}
		oid := c.TypeOID
		if c.BaseOID != 0 {
			oid = c.BaseOID
		}
		d, typ := binaryDecoder(oid)
		if d == nil || !arrow.TypeEqual(typ, fields[i].Type) {
			return nil, false
		}
		decs[i] = d
	}
	return decs, true
}

// binaryDecoder returns the decoder of base type oid and the Arrow type it
// builds, or nil.
func binaryDecoder(oid uint32) (binDecoder, arrow.DataType) {
	be := binary.BigEndian
	switch oid {
	case pgarrow.OIDBool:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 1); err != nil {
				return err
			}
			b.(*array.BooleanBuilder).Append(v[0] != 0)
			return nil
		}, arrow.FixedWidthTypes.Boolean
	case pgarrow.OIDInt2:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 2); err != nil {
				return err
			}
			b.(*array.Int16Builder).Append(int16(be.Uint16(v)))
			return nil
		}, arrow.PrimitiveTypes.Int16
	case pgarrow.OIDInt4:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 4); err != nil {
				return err
			}
			b.(*array.Int32Builder).Append(int32(be.Uint32(v)))
			return nil
		}, arrow.PrimitiveTypes.Int32
	case pgarrow.OIDInt8:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 8); err != nil {
				return err
			}
			b.(*array.Int64Builder).Append(int64(be.Uint64(v)))
			return nil
		}, arrow.PrimitiveTypes.Int64
	case pgarrow.OIDOid:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 4); err != nil {
				return err
			}
			b.(*array.Uint32Builder).Append(be.Uint32(v))
			return nil
		}, arrow.PrimitiveTypes.Uint32
	case pgarrow.OIDFloat4:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 4); err != nil {
				return err
			}
			f := math.Float32frombits(be.Uint32(v))
			if f != f {
				f = float32(math.NaN()) // the NaN the text parser gives
			}
			b.(*array.Float32Builder).Append(f)
			return nil
		}, arrow.PrimitiveTypes.Float32
	case pgarrow.OIDFloat8:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 8); err != nil {
				return err
			}
			f := math.Float64frombits(be.Uint64(v))
			if f != f {
				f = math.NaN()
			}
			b.(*array.Float64Builder).Append(f)
			return nil
		}, arrow.PrimitiveTypes.Float64
	case pgarrow.OIDText, pgarrow.OIDVarchar, pgarrow.OIDBPChar, pgarrow.OIDName, pgarrow.OIDJSON:
		// The binary form of these is their text, in the client encoding.
		// (Not xml: its binary form may rewrite the encoding declaration.)
		return func(b array.Builder, v []byte) error {
			b.(*array.StringBuilder).BinaryBuilder.Append(v)
			return nil
		}, arrow.BinaryTypes.String
	case pgarrow.OIDBytea:
		return func(b array.Builder, v []byte) error {
			b.(*array.BinaryBuilder).Append(v)
			return nil
		}, arrow.BinaryTypes.Binary
	case pgarrow.OIDDate:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 4); err != nil {
				return err
			}
			d := int32(be.Uint32(v))
			if d != pgarrow.DateInfinity && d != pgarrow.DateNegInfinity {
				d += pgEpochDays // PostgreSQL's dates stay far from overflowing
			}
			b.(*array.Date32Builder).Append(arrow.Date32(d))
			return nil
		}, arrow.FixedWidthTypes.Date32
	case pgarrow.OIDTime:
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 8); err != nil {
				return err
			}
			b.(*array.Time64Builder).Append(arrow.Time64(be.Uint64(v)))
			return nil
		}, arrow.FixedWidthTypes.Time64us
	case pgarrow.OIDTimestamp, pgarrow.OIDTimestamptz:
		typ := &arrow.TimestampType{Unit: arrow.Microsecond}
		if oid == pgarrow.OIDTimestamptz {
			typ.TimeZone = "UTC"
		}
		return func(b array.Builder, v []byte) error {
			if err := wantLen(v, 8); err != nil {
				return err
			}
			us := int64(be.Uint64(v))
			if us != pgarrow.TimestampInfinity && us != pgarrow.TimestampNegInfinity {
				// int64 max is the infinity sentinel, not a finite value.
				if us >= math.MaxInt64-pgEpochMicros {
					return fmt.Errorf("timestamp %d microseconds after 2000-01-01: %w", us, pgarrow.ErrTimestampRange)
				}
				us += pgEpochMicros
			}
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(us))
			return nil
		}, typ
	}
	return nil, nil
}

// binaryHeader begins every COPY binary stream: the signature, flags
// (int32) and header extension length (int32).
var binarySignature = []byte("PGCOPY\n\xff\r\n\x00")

// binCopier decodes the COPY binary output of one task into records. It is
// the io.Writer that pgconn.CopyTo writes the CopyData messages to.
type binCopier struct {
	base  *copier // flush, limits and the output channel
	decs  []binDecoder
	bld   []array.Builder
	rows  int
	bytes int

	buf     []byte // bytes not yet decoded
	header  bool   // the file header has been read
	trailer bool   // the trailer (-1 field count) has been read
	// bad is the first value that failed to convert (out of the Arrow
	// type's range); the rest of the output is then ignored.
	bad error
}

// discard drops the rows decoded so far (the last one maybe partly).
func (c *binCopier) discard() {
	for _, b := range c.bld {
		b.NewArray().Release()
	}
	c.rows, c.bytes = 0, 0
}

func newBinCopier(base *copier, mem memory.Allocator, decs []binDecoder) *binCopier {
	fields := base.tb.t.Fields()
	c := &binCopier{base: base, decs: decs, bld: make([]array.Builder, len(decs))}
	for i := range decs {
		c.bld[i] = array.NewBuilder(mem, fields[i].Type)
	}
	return c
}

func (c *binCopier) release() {
	for _, b := range c.bld {
		b.Release()
	}
}

// Write decodes every complete tuple in what has arrived so far.
func (c *binCopier) Write(p []byte) (int, error) {
	if c.bad != nil || c.base.tb.failed.Load() {
		return len(p), nil
	}
	data := p
	if len(c.buf) > 0 {
		c.buf = append(c.buf, p...)
		data = c.buf
	}
	used, err := c.decode(data)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", c.base.tb.name, err)
	}
	rest := data[used:]
	if len(c.buf) > 0 {
		c.buf = append(c.buf[:0], rest...)
	} else {
		c.buf = append(c.buf, rest...)
	}
	return len(p), nil
}

// decode decodes complete tuples at the start of data and returns how many
// bytes it used.
func (c *binCopier) decode(data []byte) (int, error) {
	be := binary.BigEndian
	pos := 0
	if !c.header {
		if len(data) < len(binarySignature)+8 {
			return 0, nil
		}
		if !bytes.Equal(data[:len(binarySignature)], binarySignature) {
			return 0, fmt.Errorf("%w: no PGCOPY signature", errBinary)
		}
		ext := int(be.Uint32(data[len(binarySignature)+4:]))
		if len(data) < len(binarySignature)+8+ext {
			return 0, nil
		}
		pos = len(binarySignature) + 8 + ext
		c.header = true
	}
	ncols := len(c.decs)
	for pos+2 <= len(data) {
		if c.trailer {
			return 0, fmt.Errorf("%w: data after the trailer", errBinary)
		}
		n := int(int16(be.Uint16(data[pos:])))
		if n == -1 {
			c.trailer = true
			pos += 2
			continue
		}
		if n != ncols {
			return 0, fmt.Errorf("%w: tuple of %d fields, want %d", errBinary, n, ncols)
		}
		// Find the end of the tuple before appending anything.
		end := pos + 2
		for range n {
			if end+4 > len(data) {
				return pos, nil
			}
			l := int(int32(be.Uint32(data[end:])))
			end += 4
			if l > 0 {
				end += l
			}
		}
		if end > len(data) {
			return pos, nil
		}
		q := pos + 2
		for i := range n {
			l := int(int32(be.Uint32(data[q:])))
			q += 4
			if l < 0 {
				c.bld[i].AppendNull()
				continue
			}
			if err := c.decs[i](c.bld[i], data[q:q+l]); err != nil {
				if errors.Is(err, pgarrow.ErrTimestampRange) {
					c.bad = fmt.Errorf("row %d, column %s: %w", c.base.lineNo+1, c.base.tb.t.Columns[i].Name, err)
					c.base.tb.failed.Store(true)
					return len(data), nil
				}
				return 0, fmt.Errorf("row %d, column %s: %w", c.base.lineNo+1, c.base.tb.t.Columns[i].Name, err)
			}
			q += l
		}
		c.base.lineNo++
		c.rows++
		c.bytes += end - pos
		pos = end
		if c.rows >= c.base.maxRows || c.bytes >= c.base.maxBytes {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return pos, nil
}

// flush sends the rows decoded so far as one record.
func (c *binCopier) flush() error {
	if c.rows == 0 {
		return nil
	}
	cols := make([]arrow.Array, len(c.bld))
	for i, b := range c.bld {
		cols[i] = b.NewArray()
	}
	n := c.rows
	c.rows, c.bytes = 0, 0
	return c.base.send(cols, n)
}

// finish checks that the stream ended cleanly and sends the last rows.
func (c *binCopier) finish() error {
	if c.bad != nil || c.base.tb.failed.Load() {
		c.discard()
		return nil
	}
	if !c.trailer || len(c.buf) > 0 {
		return fmt.Errorf("copy %s: %w: the output ends inside a tuple or without its trailer", c.base.tb.name, errBinary)
	}
	return c.flush()
}
