package store

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestMergeFillProperty: mergeRuns topping sources up to fillRows
// (streaming reads) gives what it gives without (one group at a time),
// and, per row, the model's contents: random runs of tiny records (as a
// snapshot's chunks are) with repeated rows, several times per row,
// retractions and zero sums, in windows that stay bounded.
func TestMergeFillProperty(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 9))
			nruns := r.IntN(8) // none too: no sources
			var runs [][]upd
			var all []upd
			for range nruns {
				var ups []upd
				for range r.IntN(120) {
					ups = append(ups, upd{row(int64(r.IntN(40)), []string{"", "a", "b"}[r.IntN(3)]), uint64(r.IntN(6)), int64(r.IntN(5)) - 2})
				}
				slices.SortFunc(ups, func(a, b upd) int {
					if c := cmpVals(a.row, b.row); c != 0 {
						return c
					}
					return cmp.Compare(a.time, b.time)
				})
				runs = append(runs, ups)
				all = append(all, ups...)
			}
			maxRec := 1 + r.IntN(6)
			fill := int64(1 + r.IntN(200))
			at := uint64(r.IntN(6))
			for _, perRow := range []bool{true, false} {
				o := mergeOpts{hi: at + 1, perRow: perRow}
				plain := mergeTestRun(t, runs, maxRec, r.Uint64(), o, 0)
				o.fillRows = fill
				filled := mergeTestRun(t, runs, maxRec, r.Uint64(), o, fill)
				if !equalUpds(filled, plain, !perRow) {
					t.Fatalf("perRow %v, fillRows %d: got\n%swithout fill\n%s", perRow, fill, fmtUpds(filled), fmtUpds(plain))
				}
				if perRow {
					if want := (&model{ups: all}).asOf(at); !equalUpds(filled, want, false) {
						t.Fatalf("as of %d: got\n%swant\n%s", at, fmtUpds(filled), fmtUpds(want))
					}
				}
			}
		})
	}
}

// mergeTestRun merges runs, each handed over in records of 1 to maxRec
// rows (cut at random, seeded by cuts), and returns the output's updates
// in order; it fails when a row is in two windows or when a source holds
// more than fill/len(runs) rows plus a record (or a piece) at a window.
func mergeTestRun(t *testing.T, runs [][]upd, maxRec int, cuts uint64, o mergeOpts, fill int64) []upd {
	t.Helper()
	r := rand.New(rand.NewPCG(cuts, 1))
	var srcs []*mergeSrc
	for _, ups := range runs {
		var recs []arrow.Record
		for lo := 0; lo < len(ups); {
			hi := min(len(ups), lo+1+r.IntN(maxRec))
			recs = append(recs, buildRecord(t, testFields, ups[lo:hi]))
			lo = hi
		}
		srcs = append(srcs, &mergeSrc{next: func() (arrow.Record, error) {
			if len(recs) == 0 {
				return nil, nil
			}
			rec := recs[0]
			recs = recs[1:]
			return rec, nil
		}})
	}
	schema := arrow.NewSchema(append(append([]arrow.Field(nil), testFields...), timeField, diffField), nil)
	var out []upd
	err := mergeRuns(testFields, srcs, o, func(rs *runSet, es []ent) error {
		for si, s := range srcs {
			held := int64(0)
			for _, rec := range s.pend {
				held += rec.NumRows()
			}
			if limit := fill/int64(len(srcs)) + int64(maxRec); held > limit {
				t.Fatalf("source %d holds %d rows at a window; at most %d expected", si, held, limit)
			}
		}
		rec := rs.build(schema, es, true)
		defer rec.Release()
		got := recordRows(t, rec, len(testFields), true)
		if len(out) > 0 && len(got) > 0 && cmpVals(out[len(out)-1].row, got[0].row) >= 0 && o.perRow {
			t.Fatalf("row %v of a window is not after the last row %v of the one before", got[0].row, out[len(out)-1].row)
		}
		out = append(out, got...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.perRow {
		for i := range out {
			out[i].time = 0
		}
	}
	return out
}
