package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestPackedPrefixSort sorts single runs of several schemas with packed
// prefixes and the radix sort, and checks the result against the plain
// column-by-column comparison: the order is right, every row is kept, and
// a smaller prefix always means a smaller row.
func TestPackedPrefixSort(t *testing.T) {
	type gen func(rng *rand.Rand, b array.Builder)
	ints32 := func(rng *rand.Rand, b array.Builder) {
		if rng.IntN(40) == 0 {
			b.AppendNull()
			return
		}
		b.(*array.Int32Builder).Append(int32(rng.IntN(5)) - 2)
	}
	offsets := func(rng *rand.Rand, b array.Builder) {
		switch rng.IntN(60) {
		case 0:
			b.AppendNull()
		case 1:
			b.(*array.Int64Builder).Append(math.MinInt64)
		case 2:
			b.(*array.Int64Builder).Append(math.MaxInt64)
		default:
			b.(*array.Int64Builder).Append(1_000_000 + int64(rng.IntN(3000)))
		}
	}
	smallOffsets := func(rng *rand.Rand, b array.Builder) {
		b.(*array.Int64Builder).Append(int64(rng.IntN(4000)))
	}
	strs := func(rng *rand.Rand, b array.Builder) {
		if rng.IntN(30) == 0 {
			b.AppendNull()
			return
		}
		b.(*array.StringBuilder).Append([]string{"", "a", "ab", "b", "key-0001", "key-0002"}[rng.IntN(6)])
	}
	floats := func(rng *rand.Rand, b array.Builder) {
		v := []float64{math.NaN(), math.Copysign(0, -1), 0, -1.5, 2.25, math.Inf(1), math.Inf(-1)}[rng.IntN(7)]
		b.(*array.Float64Builder).Append(v)
	}
	u8 := func(rng *rand.Rand, b array.Builder) { b.(*array.Uint8Builder).Append(uint8(rng.IntN(256))) }
	constant := func(rng *rand.Rand, b array.Builder) { b.(*array.Int64Builder).Append(7) }
	// Keys sharing "key-0", then 0 to 7 more bytes (zero bytes too):
	// exact keys.
	shortKeys := func(rng *rand.Rand, b array.Builder) {
		if rng.IntN(50) == 0 {
			b.AppendNull()
			return
		}
		rest := make([]byte, rng.IntN(8))
		for i := range rest {
			rest[i] = []byte{0, 1, '0', '9', 0xff}[rng.IntN(5)]
		}
		b.(*array.StringBuilder).Append("key-0" + string(rest))
	}
	// Upsert-like values: long, sharing "value ", differing late.
	values := func(rng *rand.Rand, b array.Builder) {
		b.(*array.BinaryBuilder).Append([]byte(fmt.Sprintf("value %d%090d", rng.IntN(40), rng.IntN(3))))
	}
	cases := []struct {
		name   string
		fields []arrow.Field
		gens   []gen
	}{
		{"partition,offset,key", []arrow.Field{{Name: "p", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "o", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}}, []gen{ints32, offsets, strs}},
		{"partition,small offset", []arrow.Field{{Name: "p", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "o", Type: arrow.PrimitiveTypes.Int64}}, []gen{ints32, smallOffsets}},
		{"float,uint8", []arrow.Field{{Name: "f", Type: arrow.PrimitiveTypes.Float64}, {Name: "u", Type: arrow.PrimitiveTypes.Uint8}}, []gen{floats, u8}},
		{"constant,uint8,string", []arrow.Field{{Name: "c", Type: arrow.PrimitiveTypes.Int64}, {Name: "u", Type: arrow.PrimitiveTypes.Uint8}, {Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}}, []gen{constant, u8, strs}},
		{"string,int64", []arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "o", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []gen{strs, offsets}},
		{"short key,value", []arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "v", Type: arrow.BinaryTypes.Binary}}, []gen{shortKeys, values}},
		{"uint8,short key,int64", []arrow.Field{{Name: "u", Type: arrow.PrimitiveTypes.Uint8}, {Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "o", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []gen{u8, shortKeys, offsets}},
		{"value,short key", []arrow.Field{{Name: "v", Type: arrow.BinaryTypes.Binary}, {Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}}, []gen{values, shortKeys}},
		{"uint8,uint8,...", []arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}, {Name: "b", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "c", Type: arrow.PrimitiveTypes.Uint8}}, []gen{offsets, offsets, u8}},
	}
	exact := map[string]int{}
	for seed := uint64(1); seed <= 4; seed++ {
		for _, tc := range cases {
			rng := rand.New(rand.NewPCG(seed, 99))
			full := arrow.NewSchema(append(append([]arrow.Field{}, tc.fields...),
				arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
			b := array.NewRecordBuilder(memory.DefaultAllocator, full)
			n := 300 + rng.IntN(3000)
			for i := 0; i < n; i++ {
				for c, g := range tc.gens {
					g(rng, b.Field(c))
				}
				b.Field(len(tc.gens)).(*array.Uint64Builder).Append(uint64(rng.IntN(3)))
				b.Field(len(tc.gens) + 1).(*array.Int64Builder).Append(1)
			}
			rec := b.NewRecord()
			b.Release()
			rs, err := newRunSet(tc.fields)
			if err != nil {
				t.Fatal(err)
			}
			run := rs.add(rec)
			rec.Release()
			es := rs.ents(run, 0, math.MaxUint64)
			rs.packPrefixes(run, es)
			naive := func(a, b *ent) int {
				if c := rs.cmpCols(a, b, 0); c != 0 {
					return c
				}
				return cmp.Compare(a.time, b.time)
			}
			for k := 0; k < 5000; k++ {
				a, b := &es[rng.IntN(len(es))], &es[rng.IntN(len(es))]
				if a.pre < b.pre && rs.cmpCols(a, b, 0) >= 0 {
					t.Fatalf("%s seed %d: prefix %x < %x but row %d is not below row %d", tc.name, seed, a.pre, b.pre, a.row, b.row)
				}
				if a.pre == b.pre {
					for c := 0; c < rs.exact; c++ {
						if rs.cols[c].cmp(int(a.run), int(a.row), int(b.run), int(b.row)) != 0 {
							t.Fatalf("%s seed %d: equal prefixes %x but column %d of rows %d and %d differs (exact %d)", tc.name, seed, a.pre, c, a.row, b.row, rs.exact)
						}
					}
				}
			}
			exact[tc.name] = max(exact[tc.name], rs.exact)
			rs.sortRowTime(es)
			seen := make([]bool, n)
			for i, e := range es {
				if seen[e.row] {
					t.Fatalf("%s seed %d: row %d twice", tc.name, seed, e.row)
				}
				seen[e.row] = true
				if i > 0 && naive(&es[i-1], &es[i]) > 0 {
					t.Fatalf("%s seed %d: rows %d and %d out of order at %d", tc.name, seed, es[i-1].row, es[i].row, i)
				}
			}
			if len(es) != n {
				t.Fatalf("%s seed %d: %d rows, want %d", tc.name, seed, len(es), n)
			}
			rs.release()
		}
	}
	// The packing is in use: these leading columns were held exactly.
	for name, want := range map[string]int{"partition,small offset": 2, "partition,offset,key": 1, "short key,value": 1, "uint8,short key,int64": 1, "value,short key": 0} {
		if exact[name] != want {
			t.Errorf("%s: %d leading columns held exactly, want %d", name, exact[name], want)
		}
	}
}

// TestAppendRunsInOrder: sorted, non-overlapping runs are stored as they
// are, in row order; overlapping or unsorted runs are merged into one.
func TestAppendRunsInOrder(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, t.TempDir(), Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	user := []arrow.Field{{Name: "p", Type: arrow.PrimitiveTypes.Int32}, {Name: "o", Type: arrow.PrimitiveTypes.Int64}}
	sh, err := st.CreateShard(ctx, "t.runs", arrow.NewSchema(user, nil))
	if err != nil {
		t.Fatal(err)
	}
	full := arrow.NewSchema(append(append([]arrow.Field{}, user...),
		arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
	upper := uint64(0)
	run := func(p int32, offs ...int64) arrow.Record {
		b := array.NewRecordBuilder(memory.DefaultAllocator, full)
		defer b.Release()
		for _, o := range offs {
			b.Field(0).(*array.Int32Builder).Append(p)
			b.Field(1).(*array.Int64Builder).Append(o)
			b.Field(2).(*array.Uint64Builder).Append(upper)
			b.Field(3).(*array.Int64Builder).Append(1)
		}
		return b.NewRecord()
	}
	for _, tc := range []struct {
		name string
		recs func() []arrow.Record
		want string // first rows of the stored records
	}{
		{"interleaved partitions", func() []arrow.Record { return []arrow.Record{run(1, 10, 11), run(0, 5, 6), run(1, 12), run(0, 7, 9)} }, "[0:5 0:7 1:10 1:12]"},
		{"overlapping", func() []arrow.Record { return []arrow.Record{run(1, 10, 13), run(1, 12, 14)} }, "[1:10]"},
		{"unsorted run", func() []arrow.Record { return []arrow.Record{run(1, 10, 11), run(0, 7, 6)} }, "[0:6]"},
		{"one run", func() []arrow.Record { return []arrow.Record{run(2, 1)} }, "[2:1]"},
	} {
		recs := tc.recs()
		if _, err := sh.Append(ctx, upper, upper+1, recs...); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, r := range recs {
			r.Release()
		}
		upper++
		info, err := sh.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := sh.loadBatch(ctx, info.Batches[len(info.Batches)-1].BatchMeta, withColumns(sh.Schema(), timeField, diffField))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range stored {
			got = append(got, fmt.Sprintf("%d:%d", r.Column(0).(*array.Int32).Value(0), r.Column(1).(*array.Int64).Value(0)))
			r.Release()
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%s: stored records start at %v, want %s", tc.name, got, tc.want)
		}
	}
}

// TestAppendSortedInput: an append whose input is sorted already is
// stored as it is only when it is also consolidated: duplicate updates
// and zero diffs still go through consolidation.
func TestAppendSortedInput(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, t.TempDir(), Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	user := []arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}
	sh, err := st.CreateShard(ctx, "t.sorted", arrow.NewSchema(user, nil))
	if err != nil {
		t.Fatal(err)
	}
	full := arrow.NewSchema(append(append([]arrow.Field{}, user...),
		arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
	rec := func(rows ...[3]int64) arrow.Record {
		b := array.NewRecordBuilder(memory.DefaultAllocator, full)
		defer b.Release()
		for _, r := range rows {
			b.Field(0).(*array.Int64Builder).Append(r[0])
			b.Field(1).(*array.Uint64Builder).Append(uint64(r[1]))
			b.Field(2).(*array.Int64Builder).Append(r[2])
		}
		return b.NewRecord()
	}
	upper := uint64(0)
	for _, tc := range []struct {
		name string
		in   arrow.Record
		rows int64
	}{
		{"strictly sorted", rec([3]int64{1, 0, 1}, [3]int64{1, 1, -1}, [3]int64{2, 0, 1}), 3},
		{"a duplicate update", rec([3]int64{3, 2, 1}, [3]int64{3, 2, 1}, [3]int64{4, 2, 1}), 2},
		{"a zero diff", rec([3]int64{5, 4, 1}, [3]int64{6, 4, 0}, [3]int64{7, 4, 1}), 2},
	} {
		next := upper + 2
		for _, v := range tc.in.Column(1).(*array.Uint64).Uint64Values() {
			next = max(next, v+1)
		}
		res, err := sh.Append(ctx, upper, next, tc.in)
		tc.in.Release()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Rows != tc.rows {
			t.Errorf("%s: %d rows stored, want %d", tc.name, res.Rows, tc.rows)
		}
		upper = next
	}
	// Runs: in order they are stored as they are (several records in one
	// batch file); overlapping they are merged; a replay of runs is
	// verified against what they stored.
	runs := func(first int64, at uint64) []arrow.Record {
		return []arrow.Record{rec([3]int64{first, int64(at), 1}, [3]int64{first + 1, int64(at), 1}), rec([3]int64{first + 2, int64(at), 1}), rec([3]int64{first + 3, int64(at), 1}, [3]int64{first + 4, int64(at), 1})}
	}
	release := func(recs []arrow.Record) {
		for _, r := range recs {
			r.Release()
		}
	}
	in := runs(10, upper)
	res, err := sh.Append(ctx, upper, upper+1, in...)
	if err != nil || res.Rows != 5 {
		t.Fatalf("runs in order: %d rows (%v), want 5", res.Rows, err)
	}
	info, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := info.Batches[len(info.Batches)-1]
	stored, err := sh.loadBatch(ctx, b.BatchMeta, withColumns(sh.Schema(), timeField, diffField))
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 3 || b.Rows != 5 {
		t.Fatalf("last batch has %d records and %d rows, want the 3 runs as they came, 5 rows", len(stored), b.Rows)
	}
	release(stored)
	res, err = sh.Append(ctx, upper, upper+1, in...)
	if err != nil || res.Status != Skipped || !res.Verified {
		t.Fatalf("replayed runs: %+v (%v), want skipped and verified", res, err)
	}
	release(in)
	upper++
	in = []arrow.Record{rec([3]int64{20, int64(upper), 1}, [3]int64{22, int64(upper), 1}), rec([3]int64{21, int64(upper), 1}, [3]int64{22, int64(upper), 1})}
	res, err = sh.Append(ctx, upper, upper+1, in...)
	if err != nil || res.Rows != 3 {
		t.Fatalf("overlapping runs: %d rows (%v), want 3", res.Rows, err)
	}
	release(in)
	upper++
	got, err := sh.ReadAsOf(ctx, upper-1)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	var ks []string
	for i := 0; i < int(got.NumRows()); i++ {
		ks = append(ks, fmt.Sprintf("%d*%d", got.Column(0).(*array.Int64).Value(i), got.Column(1).(*array.Int64).Value(i)))
	}
	if want := "[2*1 3*2 4*1 5*1 7*1 10*1 11*1 12*1 13*1 14*1 20*1 21*1 22*2]"; fmt.Sprint(ks) != want {
		t.Errorf("read %v, want %s", ks, want)
	}
}

// TestScanAsOf: the batches ScanAsOf hands over sum to ReadAsOf at every
// readable time, before and after a compaction that merges batches and
// folds history below since.
func TestScanAsOf(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, dir, Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	user := []arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}
	sh, err := st.CreateShard(ctx, "t.scan", arrow.NewSchema(user, nil))
	if err != nil {
		t.Fatal(err)
	}
	full := arrow.NewSchema(append(append([]arrow.Field{}, user...),
		arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
	rng := rand.New(rand.NewPCG(5, 6))
	live := map[string]int64{}
	upper := uint64(0)
	for step := 0; step < 30; step++ {
		b := array.NewRecordBuilder(memory.DefaultAllocator, full)
		for i := rng.IntN(20); i > 0; i-- {
			k, v := int64(rng.IntN(8)), fmt.Sprint("v", rng.IntN(3))
			key := fmt.Sprintf("%d=%s", k, v)
			d := int64(1)
			if live[key] > 0 && rng.IntN(2) == 0 {
				d = -1
			}
			live[key] += d
			b.Field(0).(*array.Int64Builder).Append(k)
			b.Field(1).(*array.StringBuilder).Append(v)
			b.Field(2).(*array.Uint64Builder).Append(upper + uint64(rng.IntN(3)))
			b.Field(3).(*array.Int64Builder).Append(d)
		}
		rec := b.NewRecord()
		b.Release()
		if _, err := sh.Append(ctx, upper, upper+3, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		upper += 3
	}
	check := func(when string) {
		if err := sh.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for at := sh.Since(); at < upper; at++ {
			sum := map[string]int64{}
			begun := 0
			err := sh.ScanAsOf(ctx, at, func() { begun++; clear(sum) }, func(rec arrow.Record) error {
				for i := 0; i < int(rec.NumRows()); i++ {
					if rec.Column(2).(*array.Uint64).Value(i) > at {
						return fmt.Errorf("row at time %d handed over for a scan as of %d", rec.Column(2).(*array.Uint64).Value(i), at)
					}
					sum[fmt.Sprintf("%d=%s", rec.Column(0).(*array.Int64).Value(i), rec.Column(1).(*array.String).Value(i))] += rec.Column(3).(*array.Int64).Value(i)
				}
				return nil
			})
			if err != nil || begun != 1 {
				t.Fatalf("%s: scan as of %d: %v (begun %d times)", when, at, err, begun)
			}
			got, err := sh.ReadAsOf(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for i := 0; i < int(got.NumRows()); i++ {
				want[fmt.Sprintf("%d=%s", got.Column(0).(*array.Int64).Value(i), got.Column(1).(*array.String).Value(i))] = got.Column(2).(*array.Int64).Value(i)
			}
			got.Release()
			for k, v := range sum {
				if v == 0 {
					delete(sum, k)
				}
			}
			if fmt.Sprint(sum) != fmt.Sprint(want) {
				t.Fatalf("%s: scan as of %d sums to %v, ReadAsOf gives %v", when, at, sum, want)
			}
		}
	}
	check("before compaction")
	cs, err := Open(ctx, dir, Options{Retain: 20 * time.Millisecond, Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	csh, err := cs.Shard(ctx, "t.scan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := csh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	check("after compaction")
	if sh.Since() == 0 {
		t.Fatal("the compaction did not advance since")
	}
}
