package store

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// ent is one update during sorting and consolidation: a reference to row
// `row` of run `run` of a runSet, with its time, its diff and the prefix of
// its row key.
type ent struct {
	pre  uint64
	time uint64
	diff int64
	run  uint32
	row  uint32
}

// runSet holds record batches ("runs") of one user schema, each with
// `_time` and `_diff` columns, and compares and gathers their rows.
type runSet struct {
	user []arrow.Field
	cols []column
	// exact is the number of leading columns that equal prefixes prove
	// equal (packPrefixes); comparisons of updates with equal prefixes
	// start after them.
	exact int
	recs  []arrow.Record
	times [][]uint64
	diffs [][]int64
}

// newRunSet prepares a runSet for the user fields.
func newRunSet(user []arrow.Field) (*runSet, error) {
	rs := &runSet{user: user}
	for _, f := range user {
		c, err := newColumn(f.Type)
		if err != nil {
			return nil, err
		}
		rs.cols = append(rs.cols, c)
	}
	return rs, nil
}

// add adds a run: rec's first len(user) columns are the user columns, then
// _time (uint64) and _diff (int64). The caller checked the schema. The
// runSet retains rec until release.
func (rs *runSet) add(rec arrow.Record) int {
	rec.Retain()
	rs.recs = append(rs.recs, rec)
	n := len(rs.user)
	for i, c := range rs.cols {
		c.add(rec.Column(i))
	}
	rs.times = append(rs.times, fixedValues[uint64](rec.Column(n)))
	rs.diffs = append(rs.diffs, fixedValues[int64](rec.Column(n+1)))
	return len(rs.recs) - 1
}

func fixedValues[T arrow.FixedWidthType](a arrow.Array) []T {
	v := arrow.GetValues[T](a.Data(), 1)
	if v == nil && a.Len() > 0 {
		v = make([]T, a.Len())
	}
	return v
}

func (rs *runSet) release() {
	for _, r := range rs.recs {
		r.Release()
	}
	rs.recs = nil
}

// ents returns the updates of run r with lo <= time < hi, in row order.
func (rs *runSet) ents(r int, lo, hi uint64) []ent {
	return rs.appendEnts(make([]ent, 0, len(rs.times[r])), r, lo, hi)
}

// appendEnts appends the updates of run r with lo <= time < hi to out, in
// row order.
func (rs *runSet) appendEnts(out []ent, r int, lo, hi uint64) []ent {
	times, diffs := rs.times[r], rs.diffs[r]
	var pc column
	if len(rs.cols) > 0 {
		pc = rs.cols[0]
	}
	for i, t := range times {
		if t < lo || t >= hi {
			continue
		}
		e := ent{time: t, diff: diffs[i], run: uint32(r), row: uint32(i)}
		if pc != nil {
			e.pre = pc.prefix(r, i)
		}
		out = append(out, e)
	}
	return out
}

// cmpRow compares the rows of two updates.
func (rs *runSet) cmpRow(a, b *ent) int {
	if a.pre != b.pre {
		if a.pre < b.pre {
			return -1
		}
		return 1
	}
	return rs.cmpCols(a, b, rs.exact)
}

// cmpCols compares the rows of two updates from column `from` on.
func (rs *runSet) cmpCols(a, b *ent, from int) int {
	for _, c := range rs.cols[from:] {
		if r := c.cmp(int(a.run), int(a.row), int(b.run), int(b.row)); r != 0 {
			return r
		}
	}
	return 0
}

// cmpRowTime orders by row, then time.
func (rs *runSet) cmpRowTime(a, b *ent) int {
	if r := rs.cmpRow(a, b); r != 0 {
		return r
	}
	return cmp.Compare(a.time, b.time)
}

// inOrder returns the runs in an order in which their updates, one run
// after the other, are in strictly increasing (row, time) order with no
// zero diff (sorted and consolidated already), or nil when there is none:
// each run must be so itself, and they must not overlap, as the
// per-partition chunks of a Kafka fetch keyed by (partition, offset) do
// not. It stops at the first update out of order, so unsorted runs cost
// next to nothing.
func (rs *runSet) inOrder() []int {
	for r, times := range rs.times {
		if len(times) == 0 {
			return nil
		}
		for i, d := range rs.diffs[r] {
			if d == 0 || i > 0 && rs.cmpUpdates(r, i-1, r, i) >= 0 {
				return nil
			}
		}
	}
	order := make([]int, len(rs.recs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return rs.cmpUpdates(a, 0, b, 0) })
	for k := 1; k < len(order); k++ {
		a, b := order[k-1], order[k]
		if rs.cmpUpdates(a, len(rs.times[a])-1, b, 0) >= 0 {
			return nil
		}
	}
	return order
}

// cmpUpdates orders update i of run a and update j of run b by row, then
// time.
func (rs *runSet) cmpUpdates(a, i, b, j int) int {
	x := ent{time: rs.times[a][i], run: uint32(a), row: uint32(i)}
	y := ent{time: rs.times[b][j], run: uint32(b), row: uint32(j)}
	if c := rs.cmpCols(&x, &y, 0); c != 0 {
		return c
	}
	return cmp.Compare(x.time, y.time)
}

// cmpTimeRow orders by time, then row.
func (rs *runSet) cmpTimeRow(a, b *ent) int {
	if c := cmp.Compare(a.time, b.time); c != 0 {
		return c
	}
	return rs.cmpRow(a, b)
}

// sortRowTime sorts updates by row then time. It returns quickly when they
// are sorted already. Otherwise it radix-sorts them by prefix (integer
// work, no comparisons) and then sorts each group of equal prefixes with
// the full comparison: prefixes order rows (pre(a) < pre(b) implies a <
// b), so only updates with equal prefixes can still be out of order.
func (rs *runSet) sortRowTime(es []ent) {
	sorted := true
	for i := 1; i < len(es); i++ {
		if rs.cmpRowTime(&es[i-1], &es[i]) > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return
	}
	byRowTime := func(a, b ent) int { return rs.cmpRowTime(&a, &b) }
	if len(es) < 256 {
		slices.SortFunc(es, byRowTime)
		return
	}
	radixSortPre(es)
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].pre == es[i].pre {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(es[i:j], byRowTime)
		}
		i = j
	}
}

// radixSortPre sorts es by pre, stably: a least-significant-digit radix
// sort over the bytes in which the prefixes differ.
func radixSortPre(es []ent) {
	if len(es) < 2 {
		return
	}
	var differ uint64
	p0 := es[0].pre
	for i := range es {
		differ |= es[i].pre ^ p0
	}
	if differ == 0 {
		return
	}
	src, dst := es, make([]ent, len(es))
	for shift := uint(0); shift < 64; shift += 8 {
		if (differ>>shift)&0xff == 0 {
			continue
		}
		var at [256]int
		for i := range src {
			at[(src[i].pre>>shift)&0xff]++
		}
		sum := 0
		for b, n := range at {
			at[b] = sum
			sum += n
		}
		for i := range src {
			b := (src[i].pre >> shift) & 0xff
			dst[at[b]] = src[i]
			at[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// packPrefixes recomputes the prefixes of es, which must be every row of
// run r in row order with no other run in the runSet, so that they decide
// as many comparisons as possible. Leading columns with exact keys
// (integers, dates, times, floats, and strings at most 7 bytes past what
// all of them share: equal keys mean equal values) are packed into the 64
// bits one after the other, each rebased to the range it spans in this
// run; the first column without exact keys, or whose key no longer fits,
// fills the remaining bits with its top bits. (partition, offset) of a
// Kafka batch becomes a unique prefix, and (key, value) of an upsert
// batch with short keys orders by key and the value's first bits: sorting
// then needs few column comparisons, and those skip the columns the
// prefix holds exactly (rs.exact).
func (rs *runSet) packPrefixes(r int, es []ent) {
	rs.exact = 0
	used := uint(0)
	put := func(keys []uint64, need, shift uint) {
		for k := range es {
			v := keys[es[k].row] >> shift
			if used == 0 {
				es[k].pre = v
			} else {
				es[k].pre = es[k].pre<<need | v
			}
		}
		used += need
	}
	for ci, c := range rs.cols {
		if used == 64 {
			return
		}
		if ek, ok := c.(interface {
			exactKeys(r int) ([]uint64, uint64, bool)
		}); ok {
			if keys, most, ok := ek.exactKeys(r); ok {
				need := uint(bits.Len64(most))
				if used+need <= 64 {
					put(keys, need, 0)
					rs.exact = ci + 1
					continue
				}
				put(keys, 64-used, used+need-64)
				return
			}
		}
		// The last component: order-preserving top bits, rebased.
		var keys []uint64
		if tk, ok := c.(interface{ tailKeys(r int) []uint64 }); ok {
			keys = tk.tailKeys(r)
		} else {
			keys = make([]uint64, len(es))
			for k := range es {
				keys[es[k].row] = c.prefix(r, int(es[k].row))
			}
		}
		lo, hi := keys[0], keys[0]
		for _, v := range keys {
			lo, hi = min(lo, v), max(hi, v)
		}
		for i := range keys {
			keys[i] -= lo
		}
		need := uint(bits.Len64(hi - lo))
		shift := uint(0)
		if used+need > 64 {
			shift = used + need - 64
			need = 64 - used
		}
		put(keys, need, shift)
		return
	}
}

func (rs *runSet) sortTimeRow(es []ent) {
	slices.SortFunc(es, func(a, b ent) int { return rs.cmpTimeRow(&a, &b) })
}

// consolidate sums the diffs of adjacent updates that are equal under eq
// and drops zero sums, in place.
//
// The sum is kept in a local and eq sees &es[i], not the address of a
// copy: a copy passed to a func value escapes, and that was one heap
// allocation per update (a third of a streaming read's allocations).
// es[i] is still intact when eq reads it: out is at most at index i.
func consolidate(es []ent, eq func(a, b *ent) bool) []ent {
	out := es[:0]
	for i := 0; i < len(es); {
		d := es[i].diff
		j := i + 1
		for j < len(es) && eq(&es[i], &es[j]) {
			d += es[j].diff
			j++
		}
		if d != 0 {
			e := es[i]
			e.diff = d
			out = append(out, e)
		}
		i = j
	}
	return out
}

// consolidateRowTime consolidates updates sorted by (row, time) or by
// (time, row): equal row and time.
func (rs *runSet) consolidateRowTime(es []ent) []ent {
	return consolidate(es, func(a, b *ent) bool { return a.time == b.time && rs.cmpRow(a, b) == 0 })
}

// consolidateRow consolidates updates sorted by row, ignoring time (the
// time of the first update of each row is kept).
func (rs *runSet) consolidateRow(es []ent) []ent {
	return consolidate(es, func(a, b *ent) bool { return rs.cmpRow(a, b) == 0 })
}

// mergeRows merges lists each sorted by row and consolidated by row into
// one, summing equal rows and dropping zeros.
func (rs *runSet) mergeRows(lists [][]ent) []ent {
	return rs.mergeBy(lists, rs.cmpRow)
}

// mergeBy merges lists each sorted and consolidated under cmp into one,
// summing the diffs of updates cmp calls equal and dropping zeros.
func (rs *runSet) mergeBy(lists [][]ent, cmp func(a, b *ent) int) []ent {
	return mergeInto(lists, cmp, nil)
}

// mergeInto is mergeBy writing the k-th pairwise merge into (*bufs)[k]
// (grown as needed; nil: fresh slices), so that a caller merging window
// after window reuses the same memory. The result may be one of lists or
// of *bufs.
func mergeInto(lists [][]ent, cmp func(a, b *ent) int, bufs *[][]ent) []ent {
	if len(lists) == 0 {
		return nil
	}
	k := 0
	for len(lists) > 1 {
		var next [][]ent
		for i := 0; i+1 < len(lists); i += 2 {
			var out []ent
			if bufs != nil {
				if k == len(*bufs) {
					*bufs = append(*bufs, nil)
				}
				out = (*bufs)[k][:0]
			}
			out = merge2(out, lists[i], lists[i+1], cmp)
			if bufs != nil {
				(*bufs)[k] = out
			}
			k++
			next = append(next, out)
		}
		if len(lists)%2 == 1 {
			next = append(next, lists[len(lists)-1])
		}
		lists = next
	}
	return lists[0]
}

// merge2 appends the merge of a and b to out (which must not overlap
// them).
func merge2(out, a, b []ent, cmp func(a, b *ent) int) []ent {
	out = slices.Grow(out, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		c := cmp(&a[i], &b[j])
		switch {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			e := a[i]
			e.diff += b[j].diff
			if e.diff != 0 {
				out = append(out, e)
			}
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// build gathers updates into a record of the user columns, then `_time`
// (when withTime) and `_diff`.
func (rs *runSet) build(schema *arrow.Schema, es []ent, withTime bool) arrow.Record {
	cols := make([]arrow.Array, 0, len(rs.cols)+2)
	for _, c := range rs.cols {
		cols = append(cols, c.gather(es))
	}
	if withTime {
		ts := make([]uint64, len(es))
		for i, e := range es {
			ts[i] = e.time
		}
		cols = append(cols, fixedArray(arrow.PrimitiveTypes.Uint64, ts))
	}
	ds := make([]int64, len(es))
	for i, e := range es {
		ds[i] = e.diff
	}
	cols = append(cols, fixedArray(arrow.PrimitiveTypes.Int64, ds))
	rec := array.NewRecord(schema, cols, int64(len(es)))
	for _, c := range cols {
		c.Release()
	}
	return rec
}

func fixedArray[T arrow.FixedWidthType](dt arrow.DataType, v []T) arrow.Array {
	d := array.NewData(dt, len(v), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.GetBytes(v))}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
