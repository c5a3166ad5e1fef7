package store

import (
	"context"
	"testing"
)

// TestFanIn: a merge of many runs is cut into consecutive merges that
// cover them all, each of at least 2 and at most maxFanIn runs.
func TestFanIn(t *testing.T) {
	for n := 2; n <= 5*maxFanIn+3; n++ {
		r := [2]int{7, 7 + n}
		cs := fanIn(r)
		at := r[0]
		for _, c := range cs {
			if c[0] != at || c[1]-c[0] < 2 || c[1]-c[0] > maxFanIn {
				t.Fatalf("%d runs: merges %v", n, cs)
			}
			at = c[1]
		}
		if at != r[1] {
			t.Fatalf("%d runs: merges %v end at %d", n, cs, at)
		}
	}
}

// TestCompactCrowded: only the open collections with at least the given
// number of batches are compacted, and they then have fewer.
func TestCompactCrowded(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	busy := createTest(t, s, "db.busy", testFields)
	quiet := createTest(t, s, "db.quiet", testFields)
	for i := uint64(0); i < 40; i++ {
		for _, sh := range []*Shard{busy, quiet} {
			if sh == quiet && i >= 5 {
				continue
			}
			rec := buildRecord(t, testFields, []upd{{[]any{int64(i), "x"}, i, 1}})
			if _, err := sh.Append(ctx, i, i+1, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
	}
	res, err := s.CompactCrowded(ctx, 41)
	if err != nil || len(res) != 0 {
		t.Fatalf("with a bound over every collection's batches: %v, %v; want nothing compacted", res, err)
	}
	res, err = s.CompactCrowded(ctx, 20)
	if err != nil || len(res) != 1 || res[0].Name != "db.busy" || !res[0].Committed {
		t.Fatalf("CompactCrowded(20) = %+v, %v; want db.busy compacted", res, err)
	}
	if info, _ := busy.Info(ctx); len(info.Batches) >= 40 {
		t.Fatalf("db.busy has %d batches after its compaction", len(info.Batches))
	}
	if info, _ := quiet.Info(ctx); len(info.Batches) != 5 {
		t.Fatalf("db.quiet has %d batches, want its 5 untouched", len(info.Batches))
	}
}
