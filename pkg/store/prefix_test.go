package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestCommonPrefixKeys appends batches whose first column shares a long
// prefix (the sort then keys on the bytes after it) with duplicates,
// retractions and nulls, and checks reads against a simple model.
func TestCommonPrefixKeys(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, t.TempDir(), Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "v", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	sh, err := st.CreateShard(ctx, "t.prefix", schema)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	model := map[string]int64{} // "k|v" -> multiplicity
	full := arrow.NewSchema(append(schema.Fields(), arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
	upper := uint64(0)
	for batch := 0; batch < 6; batch++ {
		b := array.NewRecordBuilder(memory.DefaultAllocator, full)
		for i := 0; i < 500; i++ {
			key, null := fmt.Sprintf("key-0000000%03d", rng.IntN(200)), rng.IntN(50) == 0
			if batch == 3 && i%7 == 0 {
				key = "key-00000" // shorter than the others: a prefix of them
			}
			v := int64(rng.IntN(3))
			diff := int64(1)
			if rng.IntN(4) == 0 {
				diff = -1
			}
			if null {
				b.Field(0).(*array.StringBuilder).AppendNull()
				key = "<null>"
			} else {
				b.Field(0).(*array.StringBuilder).Append(key)
			}
			b.Field(1).(*array.Int64Builder).Append(v)
			b.Field(2).(*array.Uint64Builder).Append(upper + uint64(rng.IntN(3)))
			b.Field(3).(*array.Int64Builder).Append(diff)
			model[fmt.Sprintf("%s|%d", key, v)] += diff
		}
		rec := b.NewRecord()
		if _, err := sh.Append(ctx, upper, upper+3, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
		upper += 3
	}
	got, err := sh.ReadAsOf(ctx, upper-1)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	ks, vs, ds := got.Column(0).(*array.String), got.Column(1).(*array.Int64), got.Column(2).(*array.Int64)
	seen := map[string]int64{}
	var order []string
	for i := 0; i < int(got.NumRows()); i++ {
		k := "<null>"
		if ks.IsValid(i) {
			k = ks.Value(i)
		}
		seen[fmt.Sprintf("%s|%d", k, vs.Value(i))] = ds.Value(i)
		order = append(order, k)
	}
	for k, d := range model {
		if d != 0 && seen[k] != d {
			t.Errorf("%s: multiplicity %d, want %d", k, seen[k], d)
		}
	}
	for k, d := range seen {
		if model[k] != d {
			t.Errorf("%s: read %d, model %d", k, d, model[k])
		}
	}
	// Sorted by row: nulls first, then bytewise.
	if !sort.SliceIsSorted(order, func(i, j int) bool {
		if (order[i] == "<null>") != (order[j] == "<null>") {
			return order[i] == "<null>"
		}
		return order[i] < order[j]
	}) {
		t.Errorf("read is not sorted by row: %v", order[:min(len(order), 20)])
	}
}
