package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/bitutil"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// A column gives typed access to one user column across several runs
// (record batches of one schema), so rows of different runs can be compared
// and gathered without going through strings.
//
// The row order is the store's sort order: column by column, nulls first,
// integers numerically, floats by IEEE-754 total order (so -0 < +0 and NaNs
// are ordered by payload), strings and binaries bytewise, booleans false
// before true, month-day-nano intervals field by field (months, then days,
// then nanoseconds), lists lexicographically by element (so null < [] <
// [x] < [x, y] < [y]). Two rows are the same row exactly when every column
// compares equal.
type column interface {
	// add appends a run: the column's array in that run.
	add(arr arrow.Array)
	// cmp compares row i of run a with row j of run b.
	cmp(a, i, b, j int) int
	// prefix is an order-preserving 64-bit summary of the value: prefix(x)
	// < prefix(y) implies x < y. Equal prefixes say nothing.
	prefix(r, i int) uint64
	// gather builds an array of the rows refs name, in order.
	gather(refs []ent) arrow.Array
}

// supportedTypes is listed in error messages.
const supportedTypes = "bool, int8-64, uint8-64, float32/64, utf8, large_utf8, binary, large_binary, fixed_size_binary, date32/64, time32/64, timestamp, duration, decimal128, month_day_nano_interval, list/large_list of any of these (nested lists too) and struct of any of these"

// newColumn returns the column implementation for a data type.
func newColumn(dt arrow.DataType) (column, error) {
	switch dt.ID() {
	case arrow.BOOL:
		return &boolCol{}, nil
	case arrow.INT8:
		return newSigned[int8](dt), nil
	case arrow.INT16:
		return newSigned[int16](dt), nil
	case arrow.INT32, arrow.DATE32, arrow.TIME32:
		return newSigned[int32](dt), nil
	case arrow.INT64, arrow.DATE64, arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION:
		return newSigned[int64](dt), nil
	case arrow.UINT8:
		return newUnsigned[uint8](dt), nil
	case arrow.UINT16:
		return newUnsigned[uint16](dt), nil
	case arrow.UINT32:
		return newUnsigned[uint32](dt), nil
	case arrow.UINT64:
		return newUnsigned[uint64](dt), nil
	case arrow.FLOAT32:
		return &fixedCol[float32]{dt: dt,
			cmpf: func(a, b float32) int { return cmp.Compare(f32key(a), f32key(b)) },
			pref: func(v float32) uint64 { return uint64(f32key(v)) << 32 }, exact: true}, nil
	case arrow.FLOAT64:
		return &fixedCol[float64]{dt: dt,
			cmpf: func(a, b float64) int { return cmp.Compare(f64key(a), f64key(b)) },
			pref: f64key, exact: true}, nil
	case arrow.DECIMAL128:
		return &fixedCol[decimal128.Num]{dt: dt,
			cmpf: func(a, b decimal128.Num) int {
				if c := cmp.Compare(a.HighBits(), b.HighBits()); c != 0 {
					return c
				}
				return cmp.Compare(a.LowBits(), b.LowBits())
			},
			pref: func(v decimal128.Num) uint64 { return uint64(v.HighBits()) ^ (1 << 63) }}, nil
	case arrow.STRING, arrow.BINARY:
		return &varCol[int32]{dt: dt}, nil
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		return &varCol[int64]{dt: dt}, nil
	case arrow.FIXED_SIZE_BINARY:
		return &fsbCol{dt: dt, width: dt.(*arrow.FixedSizeBinaryType).ByteWidth}, nil
	case arrow.INTERVAL_MONTH_DAY_NANO:
		return &fixedCol[arrow.MonthDayNanoInterval]{dt: dt, cmpf: cmpMonthDayNano, pref: prefMonthDayNano}, nil
	case arrow.LIST:
		return newListCol[int32](dt)
	case arrow.LARGE_LIST:
		return newListCol[int64](dt)
	case arrow.STRUCT:
		return newStructCol(dt.(*arrow.StructType))
	}
	return nil, fmt.Errorf("type %s is not supported by the store (supported: %s): %w", dt, supportedTypes, ErrInvalid)
}

// f64key maps a float64 to a uint64 whose order is IEEE-754 total order.
func f64key(v float64) uint64 {
	b := math.Float64bits(v)
	if b>>63 != 0 {
		return ^b
	}
	return b | 1<<63
}

func f32key(v float32) uint32 {
	b := math.Float32bits(v)
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

// nullMap is a run's validity bitmap; bits == nil means no nulls.
type nullMap struct {
	bits []byte
	off  int
}

func nullMapOf(d arrow.ArrayData) nullMap {
	if d.NullN() == 0 || len(d.Buffers()) == 0 || d.Buffers()[0] == nil {
		return nullMap{}
	}
	return nullMap{bits: d.Buffers()[0].Bytes(), off: d.Offset()}
}

func (m nullMap) valid(i int) bool { return m.bits == nil || bitutil.BitIsSet(m.bits, m.off+i) }

// cmpValid orders a null before a value; ok is false when either is null.
func cmpValid(va, vb bool) (c int, ok bool) {
	switch {
	case va && vb:
		return 0, true
	case va:
		return 1, false
	case vb:
		return -1, false
	}
	return 0, false
}

// gatherNulls builds the validity bitmap of a gather, or nil with no nulls.
func gatherNulls(nulls []nullMap, refs []ent) (*memory.Buffer, int) {
	any := false
	for _, m := range nulls {
		if m.bits != nil {
			any = true
			break
		}
	}
	if !any {
		return nil, 0
	}
	bits := make([]byte, bitutil.BytesForBits(int64(len(refs))))
	n := 0
	for k, e := range refs {
		if nulls[e.run].valid(int(e.row)) {
			bitutil.SetBit(bits, k)
		} else {
			n++
		}
	}
	if n == 0 {
		return nil, 0
	}
	return memory.NewBufferBytes(bits), n
}

// fixedCol is a column of fixed-width values.
type fixedCol[T arrow.FixedWidthType] struct {
	dt    arrow.DataType
	vals  [][]T
	nulls []nullMap
	cmpf  func(a, b T) int
	pref  func(T) uint64
	// exact: pref is injective (equal prefixes mean equal values).
	exact bool
}

func newSigned[T int8 | int16 | int32 | int64](dt arrow.DataType) *fixedCol[T] {
	return &fixedCol[T]{dt: dt, cmpf: cmp.Compare[T], pref: func(v T) uint64 { return uint64(int64(v)) ^ (1 << 63) }, exact: true}
}

func newUnsigned[T uint8 | uint16 | uint32 | uint64](dt arrow.DataType) *fixedCol[T] {
	return &fixedCol[T]{dt: dt, cmpf: cmp.Compare[T], pref: func(v T) uint64 { return uint64(v) }, exact: true}
}

func (c *fixedCol[T]) add(arr arrow.Array) {
	d := arr.Data()
	v := arrow.GetValues[T](d, 1)
	if v == nil && d.Len() > 0 {
		v = make([]T, d.Len())
	}
	c.vals = append(c.vals, v)
	c.nulls = append(c.nulls, nullMapOf(d))
}

func (c *fixedCol[T]) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	return c.cmpf(c.vals[a][i], c.vals[b][j])
}

func (c *fixedCol[T]) prefix(r, i int) uint64 {
	if !c.nulls[r].valid(i) {
		return 0
	}
	return c.pref(c.vals[r][i])
}

// exactKeys returns, for every row of run r, an order-preserving key that
// differs for different values (0 for a null, which sorts first) and the
// largest key; ok is false when the column's prefixes are not exact.
func (c *fixedCol[T]) exactKeys(r int) (keys []uint64, most uint64, ok bool) {
	if !c.exact {
		return nil, 0, false
	}
	vals, nulls := c.vals[r], c.nulls[r]
	keys = make([]uint64, len(vals))
	for i, v := range vals {
		if nulls.valid(i) {
			keys[i] = c.pref(v)
		}
	}
	return rebaseKeys(keys, nulls)
}

// rebaseKeys maps the keys of valid values (from the least, lo, to the
// largest) to their distance from lo, without the low bits every distance shares (bytes
// past the end of short strings), and then plus one when there are nulls
// (whose key is 0): they take as few bits as they need to stay exact and
// in order. ok is false when they do not fit.
func rebaseKeys(keys []uint64, nulls nullMap) ([]uint64, uint64, bool) {
	lo, hi, seen, hasNull := uint64(0), uint64(0), false, false
	for i, k := range keys {
		if !nulls.valid(i) {
			hasNull = true
			continue
		}
		if !seen || k < lo {
			lo = k
		}
		if !seen || k > hi {
			hi = k
		}
		seen = true
	}
	if !seen {
		clear(keys)
		return keys, 0, true
	}
	var or uint64
	for i := range keys {
		if nulls.valid(i) {
			or |= keys[i] - lo
		}
	}
	tz := uint(bits.TrailingZeros64(or)) % 64 // or == 0: one value, no shift
	most := (hi - lo) >> tz
	base := uint64(0)
	if hasNull {
		if most == math.MaxUint64 {
			return nil, 0, false
		}
		base = 1
	}
	for i := range keys {
		if nulls.valid(i) {
			keys[i] = (keys[i]-lo)>>tz + base
		} else {
			keys[i] = 0
		}
	}
	return keys, most + base, true
}

func (c *fixedCol[T]) gather(refs []ent) arrow.Array {
	out := make([]T, len(refs))
	if len(c.vals) == 1 {
		v := c.vals[0]
		for k, e := range refs {
			out[k] = v[e.row]
		}
	} else {
		for k, e := range refs {
			out[k] = c.vals[e.run][e.row]
		}
	}
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(c.dt, len(refs), []*memory.Buffer{nb, memory.NewBufferBytes(arrow.GetBytes(out))}, nil, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// boolCol is a column of booleans (bit-packed).
type boolCol struct {
	bits  [][]byte
	offs  []int
	nulls []nullMap
}

func (c *boolCol) add(arr arrow.Array) {
	d := arr.Data()
	var b []byte
	if buf := d.Buffers()[1]; buf != nil {
		b = buf.Bytes()
	}
	if b == nil && d.Len() > 0 {
		b = make([]byte, bitutil.BytesForBits(int64(d.Len())))
	}
	c.bits = append(c.bits, b)
	c.offs = append(c.offs, d.Offset())
	c.nulls = append(c.nulls, nullMapOf(d))
}

func (c *boolCol) val(r, i int) bool { return bitutil.BitIsSet(c.bits[r], c.offs[r]+i) }

func (c *boolCol) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	x, y := c.val(a, i), c.val(b, j)
	switch {
	case x == y:
		return 0
	case y:
		return -1
	}
	return 1
}

func (c *boolCol) prefix(r, i int) uint64 {
	switch {
	case !c.nulls[r].valid(i):
		return 0
	case c.val(r, i):
		return 2 << 60
	}
	return 1 << 60
}

func (c *boolCol) gather(refs []ent) arrow.Array {
	bits := make([]byte, bitutil.BytesForBits(int64(len(refs))))
	for k, e := range refs {
		if c.val(int(e.run), int(e.row)) {
			bitutil.SetBit(bits, k)
		}
	}
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(arrow.FixedWidthTypes.Boolean, len(refs), []*memory.Buffer{nb, memory.NewBufferBytes(bits)}, nil, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// varCol is a column of variable-width strings or binaries.
type varCol[O int32 | int64] struct {
	dt    arrow.DataType
	offs  [][]O
	data  [][]byte
	nulls []nullMap
}

func (c *varCol[O]) add(arr arrow.Array) {
	d := arr.Data()
	var offs []O
	if d.Buffers()[1] != nil && d.Buffers()[1].Len() > 0 {
		offs = arrow.GetOffsets[O](d, 1)
	} else {
		offs = make([]O, d.Len()+1)
	}
	var data []byte
	if len(d.Buffers()) > 2 && d.Buffers()[2] != nil {
		data = d.Buffers()[2].Bytes()
	}
	c.offs = append(c.offs, offs)
	c.data = append(c.data, data)
	c.nulls = append(c.nulls, nullMapOf(d))
}

func (c *varCol[O]) val(r, i int) []byte {
	o := c.offs[r]
	return c.data[r][o[i]:o[i+1]]
}

func (c *varCol[O]) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	return bytes.Compare(c.val(a, i), c.val(b, j))
}

func (c *varCol[O]) prefix(r, i int) uint64 {
	if !c.nulls[r].valid(i) {
		return 0
	}
	return bytesPrefix(c.val(r, i))
}

// commonPrefix is the length of the longest prefix every valid value of
// run r shares.
func (c *varCol[O]) commonPrefix(r int) int {
	o, data, nulls := c.offs[r], c.data[r], c.nulls[r]
	var ref []byte
	lcp, seen := 0, false
	for i := 0; i+1 < len(o); i++ {
		if !nulls.valid(i) {
			continue
		}
		v := data[o[i]:o[i+1]]
		if !seen {
			ref, lcp, seen = v, len(v), true
			continue
		}
		n := min(lcp, len(v))
		k := 0
		for k < n && ref[k] == v[k] {
			k++
		}
		lcp = k
		if lcp == 0 {
			break
		}
	}
	return lcp
}

// exactKeys implements the packing of runSet.packPrefixes when every
// valid value of run r is at most 7 bytes longer than what they all share
// (keys like "key-012345"): the key of a value is its remaining bytes,
// zero-padded to 7, then its length in the low byte, which orders like
// the bytes and differs for different values. Keys are rebased as in
// fixedCol.exactKeys (nulls 0).
func (c *varCol[O]) exactKeys(r int) (keys []uint64, most uint64, ok bool) {
	o, data, nulls := c.offs[r], c.data[r], c.nulls[r]
	lcp := O(c.commonPrefix(r))
	n := len(o) - 1
	keys = make([]uint64, n)
	for i := 0; i < n; i++ {
		if !nulls.valid(i) {
			continue
		}
		rest := data[o[i]+lcp : o[i+1]]
		if len(rest) > 7 {
			return nil, 0, false
		}
		var b [8]byte
		copy(b[:], rest)
		b[7] = byte(len(rest))
		keys[i] = binary.BigEndian.Uint64(b[:])
	}
	return rebaseKeys(keys, nulls)
}

// tailKeys are order-preserving (not exact) keys of run r for the last
// component runSet.packPrefixes packs: the 8 bytes after what every value
// shares, so that they say something about keys like "key-000012345".
func (c *varCol[O]) tailKeys(r int) []uint64 {
	o, data, nulls := c.offs[r], c.data[r], c.nulls[r]
	lcp := O(c.commonPrefix(r))
	keys := make([]uint64, len(o)-1)
	for i := range keys {
		if nulls.valid(i) {
			keys[i] = bytesPrefix(data[o[i]+lcp : o[i+1]])
		}
	}
	return keys
}

// bytesPrefix is the first 8 bytes, big-endian, zero-padded: shorter
// strings sort before their extensions, so this preserves bytewise order.
func bytesPrefix(v []byte) uint64 {
	if len(v) >= 8 {
		return binary.BigEndian.Uint64(v)
	}
	var b [8]byte
	copy(b[:], v)
	return binary.BigEndian.Uint64(b[:])
}

func (c *varCol[O]) gather(refs []ent) arrow.Array {
	offs := make([]O, len(refs)+1)
	total := 0
	for k, e := range refs {
		o := c.offs[e.run]
		total += int(o[e.row+1] - o[e.row])
		offs[k+1] = O(total)
	}
	data := make([]byte, total)
	for k, e := range refs {
		copy(data[offs[k]:offs[k+1]], c.val(int(e.run), int(e.row)))
	}
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(c.dt, len(refs), []*memory.Buffer{nb, memory.NewBufferBytes(arrow.GetBytes(offs)), memory.NewBufferBytes(data)}, nil, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// fsbCol is a column of fixed-size binaries.
type fsbCol struct {
	dt    arrow.DataType
	width int
	data  [][]byte
	offs  []int
	nulls []nullMap
}

func (c *fsbCol) add(arr arrow.Array) {
	d := arr.Data()
	var data []byte
	if d.Buffers()[1] != nil {
		data = d.Buffers()[1].Bytes()
	}
	if len(data) < (d.Offset()+d.Len())*c.width {
		data = make([]byte, (d.Offset()+d.Len())*c.width)
	}
	c.data = append(c.data, data)
	c.offs = append(c.offs, d.Offset())
	c.nulls = append(c.nulls, nullMapOf(d))
}

func (c *fsbCol) val(r, i int) []byte {
	s := (c.offs[r] + i) * c.width
	return c.data[r][s : s+c.width]
}

func (c *fsbCol) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	return bytes.Compare(c.val(a, i), c.val(b, j))
}

func (c *fsbCol) prefix(r, i int) uint64 {
	if !c.nulls[r].valid(i) {
		return 0
	}
	return bytesPrefix(c.val(r, i))
}

func (c *fsbCol) gather(refs []ent) arrow.Array {
	data := make([]byte, len(refs)*c.width)
	for k, e := range refs {
		copy(data[k*c.width:], c.val(int(e.run), int(e.row)))
	}
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(c.dt, len(refs), []*memory.Buffer{nb, memory.NewBufferBytes(data)}, nil, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// cmpMonthDayNano orders intervals by months, then days, then nanoseconds
// (each signed). This compares the representation, not the duration
// PostgreSQL would see: 1 month and 30 days are different values.
func cmpMonthDayNano(a, b arrow.MonthDayNanoInterval) int {
	if c := cmp.Compare(a.Months, b.Months); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Days, b.Days); c != 0 {
		return c
	}
	return cmp.Compare(a.Nanoseconds, b.Nanoseconds)
}

// prefMonthDayNano packs the sign-flipped months and days, which preserves
// the (months, days) order.
func prefMonthDayNano(v arrow.MonthDayNanoInterval) uint64 {
	return uint64(uint32(v.Months)^1<<31)<<32 | uint64(uint32(v.Days)^1<<31)
}

// listCol is a column of lists (O int32) or large lists (O int64). Its
// elements are a column of their own, whose runs are the child arrays of
// this column's runs, so any element type (lists included) works.
type listCol[O int32 | int64] struct {
	dt    arrow.DataType
	elem  column
	etype arrow.DataType
	offs  [][]O
	nulls []nullMap
}

func newListCol[O int32 | int64](dt arrow.DataType) (column, error) {
	et := dt.(arrow.ListLikeType).Elem()
	elem, err := newColumn(et)
	if err != nil {
		return nil, fmt.Errorf("list element: %w", err)
	}
	return &listCol[O]{dt: dt, elem: elem, etype: et}, nil
}

func (c *listCol[O]) add(arr arrow.Array) {
	d := arr.Data()
	var offs []O
	if len(d.Buffers()) > 1 && d.Buffers()[1] != nil && d.Buffers()[1].Len() > 0 {
		offs = arrow.GetOffsets[O](d, 1)
	} else {
		offs = make([]O, d.Len()+1)
	}
	var child arrow.Array
	if ch := d.Children(); len(ch) > 0 && ch[0] != nil {
		child = array.MakeFromData(ch[0])
	} else {
		child = array.MakeArrayOfNull(memory.DefaultAllocator, c.etype, 0)
	}
	// The elements' buffers stay alive with arr, which the runSet retains.
	c.elem.add(child)
	child.Release()
	c.offs = append(c.offs, offs)
	c.nulls = append(c.nulls, nullMapOf(d))
}

func (c *listCol[O]) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	oa, ob := c.offs[a], c.offs[b]
	sa, sb := int(oa[i]), int(ob[j])
	na, nb := int(oa[i+1])-sa, int(ob[j+1])-sb
	for k := range min(na, nb) {
		if r := c.elem.cmp(a, sa+k, b, sb+k); r != 0 {
			return r
		}
	}
	return cmp.Compare(na, nb)
}

// prefix: 0 for null, 1 for the empty list, else the first element's
// prefix raised to at least 2. Raising is monotone, so a smaller prefix
// still means a smaller first element, hence a smaller list.
func (c *listCol[O]) prefix(r, i int) uint64 {
	if !c.nulls[r].valid(i) {
		return 0
	}
	o := c.offs[r]
	if o[i] == o[i+1] {
		return 1
	}
	return max(c.elem.prefix(r, int(o[i])), 2)
}

func (c *listCol[O]) gather(refs []ent) arrow.Array {
	offs := make([]O, len(refs)+1)
	total := 0
	for k, e := range refs {
		if c.nulls[e.run].valid(int(e.row)) {
			o := c.offs[e.run]
			total += int(o[e.row+1] - o[e.row])
		}
		offs[k+1] = O(total)
	}
	// Element rows fit in uint32 like top-level rows: a run's child array
	// is built in memory.
	erefs := make([]ent, 0, total)
	for k, e := range refs {
		if offs[k] == offs[k+1] {
			continue
		}
		o := c.offs[e.run]
		for x := o[e.row]; x < o[e.row+1]; x++ {
			erefs = append(erefs, ent{run: e.run, row: uint32(x)})
		}
	}
	child := c.elem.gather(erefs)
	defer child.Release()
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(c.dt, len(refs), []*memory.Buffer{nb, memory.NewBufferBytes(arrow.GetBytes(offs))}, []arrow.ArrayData{child.Data()}, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
