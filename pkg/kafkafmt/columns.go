package kafkafmt

import (
	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/bitutil"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// The decoders write their columns into plain Go slices and hand them to
// Arrow at Flush without a copy: Arrow's builders check capacity, set a
// validity bit and go through an interface for every value, which cost
// more than decoding a record. Every batch starts with the capacity of
// the last one (ingest flushes at partition chunks of similar sizes), so
// the slices rarely grow.

// Column accumulates one column of a batch: the values a Format decodes.
type Column interface {
	// Append decodes data, which the format's Check accepted; nil is a
	// null.
	Append(data []byte)
	// Finish returns the values appended since the last Finish as an
	// array (the caller releases it) and starts an empty batch.
	Finish() arrow.Array
}

// decodedColumn is the column of a format that decodes each value (Avro,
// Protobuf, JSON Schema) and appends it with Arrow's builders. A value
// was accepted by the format's Check (or is a Normal or Raw result), so
// it decodes; if it somehow does not, the row is null.
type decodedColumn[T any] struct {
	b      array.Builder
	decode func([]byte) (T, error)
	append func(array.Builder, T)
}

func newDecodedColumn[T any](typ arrow.DataType, decode func([]byte) (T, error), append func(array.Builder, T)) Column {
	return &decodedColumn[T]{b: array.NewBuilder(memory.DefaultAllocator, typ), decode: decode, append: append}
}

// Append implements Column.
func (c *decodedColumn[T]) Append(data []byte) {
	if data == nil {
		c.b.AppendNull()
		return
	}
	v, err := c.decode(data)
	if err != nil {
		c.b.AppendNull()
		return
	}
	c.append(c.b, v)
}

// Finish implements Column.
func (c *decodedColumn[T]) Finish() arrow.Array { return c.b.NewArray() }

// bytesColumn is a binary or utf8 column of values kept as they are.
// Offsets are 32-bit: a batch is at most one fetched partition chunk,
// which kgo bounds well below 2 GiB.
type bytesColumn struct {
	typ   arrow.DataType // arrow.BinaryTypes.Binary or .String
	offs  []int32
	data  []byte
	valid []byte // validity bitmap, nil until the first null
	nulls int
	// The sizes of the last batch, which the next one reserves.
	lastRows, lastData int
}

func newBytesColumn(typ arrow.DataType) *bytesColumn { return &bytesColumn{typ: typ} }

func (c *bytesColumn) start() {
	c.offs = make([]int32, 1, c.lastRows+1)
	c.data = make([]byte, 0, c.lastData+c.lastData/8)
}

// Append implements Column.
func (c *bytesColumn) Append(v []byte) {
	if c.offs == nil {
		c.start()
	}
	n := len(c.offs) - 1
	switch {
	case v == nil:
		if c.valid == nil {
			c.valid = make([]byte, bitutil.BytesForBits(int64(max(cap(c.offs), n+1))))
			bitutil.SetBitsTo(c.valid, 0, int64(n), true)
		}
		c.valid = growBits(c.valid, n)
		bitutil.ClearBit(c.valid, n)
		c.nulls++
	case c.valid != nil:
		c.valid = growBits(c.valid, n)
		bitutil.SetBit(c.valid, n)
	}
	c.data = append(c.data, v...)
	c.offs = append(c.offs, int32(len(c.data)))
}

// growBits makes room for bit i in b.
func growBits(b []byte, i int) []byte {
	if i/8 < len(b) {
		return b
	}
	return append(b, make([]byte, len(b)+1)...)
}

func (c *bytesColumn) len() int { return max(len(c.offs)-1, 0) }

// Finish implements Column.
func (c *bytesColumn) Finish() arrow.Array {
	if c.offs == nil {
		c.start()
	}
	n := len(c.offs) - 1
	var valid *memory.Buffer
	if c.nulls > 0 {
		valid = memory.NewBufferBytes(c.valid[:bitutil.BytesForBits(int64(n))])
	}
	data := array.NewData(c.typ, n, []*memory.Buffer{valid, memory.NewBufferBytes(arrow.GetBytes(c.offs)), memory.NewBufferBytes(c.data)}, nil, c.nulls, 0)
	defer data.Release()
	c.lastRows, c.lastData = n, len(c.data)
	c.offs, c.data, c.valid, c.nulls = nil, nil, nil, 0
	return array.MakeFromData(data)
}

// fixedArray returns v as an array of typ (a fixed-width type of T's
// size) without nulls.
func fixedArray[T arrow.FixedWidthType](typ arrow.DataType, v []T) arrow.Array {
	data := array.NewData(typ, len(v), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(v))}, nil, 0, 0)
	defer data.Release()
	return array.MakeFromData(data)
}

// fixed is a batch's values of a fixed-width column without nulls.
type fixed[T arrow.FixedWidthType] struct {
	v    []T
	last int
}

func (f *fixed[T]) append(x T) {
	if f.v == nil {
		f.v = make([]T, 0, f.last)
	}
	f.v = append(f.v, x)
}

func (f *fixed[T]) finish(typ arrow.DataType) arrow.Array {
	a := fixedArray(typ, f.v)
	f.last, f.v = len(f.v), nil
	return a
}

// listColumn is a list column (never null) of a bytesColumn's values.
type listColumn struct {
	typ   *arrow.ListType
	offs  fixed[int32]
	elems *bytesColumn
}

func newListColumn(elem arrow.DataType) *listColumn {
	return &listColumn{typ: arrow.ListOf(elem), elems: newBytesColumn(elem)}
}

// next ends the list of the current row, whose elements were appended
// to elems before.
func (l *listColumn) next() {
	if l.offs.v == nil {
		l.offs.append(0)
	}
	l.offs.append(int32(l.elems.len()))
}

func (l *listColumn) finish() arrow.Array {
	if l.offs.v == nil {
		l.offs.append(0)
	}
	elems := l.elems.Finish()
	defer elems.Release()
	n := len(l.offs.v) - 1
	data := array.NewData(l.typ, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(l.offs.v))}, []arrow.ArrayData{elems.Data()}, 0, 0)
	defer data.Release()
	l.offs.last, l.offs.v = len(l.offs.v), nil
	return array.MakeFromData(data)
}
