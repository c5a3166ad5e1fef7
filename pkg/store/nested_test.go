package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// listFields: a key, then list and interval columns with null lists and
// null elements.
var listFields = []arrow.Field{
	{Name: "k", Type: arrow.PrimitiveTypes.Int64},
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "s", Type: arrow.LargeListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "m", Type: arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int64)), Nullable: true},
	{Name: "iv", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true},
}

func mdn(m, d int32, ns int64) arrow.MonthDayNanoInterval {
	return arrow.MonthDayNanoInterval{Months: m, Days: d, Nanoseconds: ns}
}

// TestListConsolidatesAcrossBatches inserts a row in one batch and
// retracts a row in a later batch (built differently: the retraction is a
// slice of a larger record, so its list offsets do not start at 0). Equal
// rows cancel, in reads and in compaction; rows that differ only in a
// list's nulls, length or an interval's fields stay apart.
func TestListConsolidatesAcrossBatches(t *testing.T) {
	base := []any{int64(1), []any{int64(1), nil, int64(3)}, []any{"a", nil, ""}, []any{[]any{int64(2)}, nil, []any{}}, mdn(1, 2, 3)}
	with := func(col int, v any) []any {
		r := append([]any(nil), base...)
		r[col] = v
		return r
	}
	tests := []struct {
		name     string
		ins, ret []any
		cancel   bool
	}{
		{"equal lists cancel", base, base, true},
		{"null lists cancel", with(1, nil), with(1, nil), true},
		{"empty lists cancel", with(2, []any{}), with(2, []any{}), true},
		{"other element", base, with(1, []any{int64(1), nil, int64(4)}), false},
		{"null element vs value", base, with(1, []any{int64(1), int64(0), int64(3)}), false},
		{"null list vs empty list", with(1, nil), with(1, []any{}), false},
		{"[null] vs []", with(1, []any{nil}), with(1, []any{}), false},
		{"prefix vs longer", base, with(1, []any{int64(1), nil}), false},
		{"null string vs empty string", base, with(2, []any{"a", "", ""}), false},
		{"inner list differs", base, with(3, []any{[]any{int64(2)}, []any{}, []any{}}), false},
		{"1 month vs 30 days", with(4, mdn(1, 0, 0)), with(4, mdn(0, 30, 0)), false},
		{"equal intervals cancel", with(4, mdn(-1, 0, 5)), with(4, mdn(-1, 0, 5)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := openTest(t, dir, Options{Retain: -1})
			sh := createTest(t, s, "lists.t", listFields)
			m := &model{}

			ins := upd{tc.ins, 0, 1}
			rec := buildRecord(t, listFields, []upd{ins})
			if _, err := sh.Append(ctx, 0, 1, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			m.ups = append(m.ups, ins)

			ret := upd{tc.ret, 5, -1}
			filler := upd{[]any{int64(9), []any{int64(7), int64(7)}, []any{"zzz"}, []any{[]any{int64(1), int64(2)}}, mdn(0, 0, 0)}, 5, 1}
			full := buildRecord(t, listFields, []upd{filler, ret, filler})
			rec = full.NewSlice(1, 2)
			full.Release()
			if _, err := sh.Append(ctx, 1, 10, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			m.ups = append(m.ups, ret)

			for at := uint64(0); at < 10; at++ {
				checkAsOf(t, ctx, sh, m, len(listFields), at)
			}
			checkChanges(t, ctx, sh, m, len(listFields), 0, 9)
			want := 2
			if tc.cancel {
				want = 0
			}
			if got := len(m.asOf(9)); got != want {
				t.Fatalf("model has %d rows as of 9, want %d", got, want)
			}

			// Compaction to since 9 merges both batches: equal rows cancel.
			cs := openTest(t, dir, Options{Retain: time.Millisecond, Grace: time.Nanosecond})
			csh, err := cs.Shard(ctx, "lists.t")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := csh.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			if err := sh.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if sh.Since() != 9 {
				t.Fatalf("since = %d, want 9", sh.Since())
			}
			checkAsOf(t, ctx, sh, m, len(listFields), 9)
			info, err := sh.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.Rows != int64(want) {
				t.Fatalf("%d rows stored after compaction, want %d", info.Rows, want)
			}
		})
	}
}

// TestNestedColumnOrder checks the list and interval columns directly
// against the model: cmp agrees with cmpVals, prefixes preserve the order,
// and gather rebuilds the values, across two runs.
func TestNestedColumnOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	types := []arrow.DataType{
		arrow.FixedWidthTypes.MonthDayNanoInterval,
		arrow.ListOf(arrow.PrimitiveTypes.Int64),
		arrow.ListOfNonNullable(arrow.BinaryTypes.String),
		arrow.LargeListOf(arrow.BinaryTypes.String),
		arrow.ListOf(arrow.ListOf(arrow.FixedWidthTypes.MonthDayNanoInterval)),
		arrow.LargeListOf(arrow.ListOf(arrow.PrimitiveTypes.Float64)),
	}
	for _, dt := range types {
		t.Run(dt.String(), func(t *testing.T) {
			col, err := newColumn(dt)
			if err != nil {
				t.Fatal(err)
			}
			var vals [2][]any
			for run := range vals {
				b := array.NewBuilder(memory.DefaultAllocator, dt)
				for range 60 {
					v := randVal(r, dt, true)
					vals[run] = append(vals[run], v)
					appendVal(t, b, v)
				}
				arr := b.NewArray()
				b.Release()
				if run == 1 {
					// A sliced run: offsets into its children do not start at 0.
					s := array.NewSlice(arr, 5, int64(arr.Len()))
					arr.Release()
					arr = s
					vals[run] = vals[run][5:]
				}
				defer arr.Release()
				col.add(arr)
			}
			var refs []ent
			for a := range vals {
				for i := range vals[a] {
					refs = append(refs, ent{run: uint32(a), row: uint32(i)})
					for b := range vals {
						for j := range vals[b] {
							want := cmpVals([]any{vals[a][i]}, []any{vals[b][j]})
							if got := col.cmp(a, i, b, j); got != want {
								t.Fatalf("cmp(%s, %s) = %d, want %d", rowKey([]any{vals[a][i]}), rowKey([]any{vals[b][j]}), got, want)
							}
							if col.prefix(a, i) < col.prefix(b, j) && want >= 0 {
								t.Fatalf("prefix of %s is below that of %s", rowKey([]any{vals[a][i]}), rowKey([]any{vals[b][j]}))
							}
						}
					}
				}
			}
			r.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
			out := col.gather(refs)
			defer out.Release()
			if !arrow.TypeEqual(out.DataType(), dt) {
				t.Fatalf("gather type %s, want %s", out.DataType(), dt)
			}
			for k, e := range refs {
				got, want := valAt(t, out, k), vals[e.run][e.row]
				if rowKey([]any{got}) != rowKey([]any{want}) {
					t.Fatalf("gather row %d = %s, want %s", k, rowKey([]any{got}), rowKey([]any{want}))
				}
			}
		})
	}
}

func TestCreateShardRefusesUnsupported(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	for _, dt := range []arrow.DataType{
		arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64),
		arrow.StructOf(arrow.Field{Name: "a", Type: arrow.FixedWidthTypes.DayTimeInterval}),
		arrow.ListOf(arrow.FixedWidthTypes.DayTimeInterval),
		arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Int64),
	} {
		schema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: dt}}, nil)
		if _, err := s.CreateShard(ctx, "bad.t", schema); !errors.Is(err, ErrInvalid) {
			t.Errorf("create with %s: err = %v, want ErrInvalid", dt, err)
		}
	}
}
