package store

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestConsolidate checks Consolidate against the naive model on random
// unsorted records: contents as of a time, and changes in an interval.
func TestConsolidate(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 17))
		fs := randSchema(r, seed%2 == 1)
		m := &model{}
		var recs []arrow.Record
		for range 1 + r.IntN(4) {
			var ups []upd
			for range r.IntN(30) {
				u := upd{row: randRow(r, fs), time: uint64(r.IntN(6)), diff: int64(r.IntN(5)) - 2}
				ups = append(ups, u)
			}
			m.ups = append(m.ups, ups...)
			recs = append(recs, buildRecord(t, fs, ups))
		}
		for at := range uint64(6) {
			rec, err := Consolidate(fs, recs, ConsolidateOptions{Hi: at + 1})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := recordRows(t, rec, len(fs), false), m.asOf(at); !equalUpds(got, want, false) {
				t.Fatalf("seed %d: as of %d:\ngot\n%swant\n%s", seed, at, fmtUpds(got), fmtUpds(want))
			}
			rec.Release()
		}
		t1, t2 := uint64(r.IntN(3)), uint64(3+r.IntN(3))
		rec, err := Consolidate(fs, recs, ConsolidateOptions{Lo: t1 + 1, Hi: t2 + 1, KeepTime: true})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recordRows(t, rec, len(fs), true), m.changes(t1, t2); !equalUpds(got, want, true) {
			t.Fatalf("seed %d: changes (%d, %d]:\ngot\n%swant\n%s", seed, t1, t2, fmtUpds(got), fmtUpds(want))
		}
		rec.Release()
		all, err := Consolidate(fs, recs, ConsolidateOptions{KeepTime: true})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recordRows(t, all, len(fs), true), m.changes(0, 5); len(got) < len(want) {
			t.Fatalf("seed %d: every change: %d updates, fewer than the %d in (0, 5]", seed, len(got), len(want))
		}
		all.Release()
		for _, rec := range recs {
			rec.Release()
		}
	}
}

func TestConsolidateBadInput(t *testing.T) {
	rec := buildRecord(t, testFields, []upd{{row: []any{int64(1), "a"}, time: 1, diff: 1}})
	defer rec.Release()
	other := []arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int32}, testFields[1]}
	if _, err := Consolidate(other, []arrow.Record{rec}, ConsolidateOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Consolidate with other fields: %v, want ErrInvalid", err)
	}
	if _, err := Consolidate(testFields[:1], []arrow.Record{rec}, ConsolidateOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Consolidate with fewer fields: %v, want ErrInvalid", err)
	}
}
