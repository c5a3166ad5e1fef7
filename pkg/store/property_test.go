package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestPropertyAgainstModel runs random appends (with retractions and
// progress-only steps) and compactions with random retention, and checks
// every read at every time in [since, upper), and changes over random
// intervals, against a naive in-memory model.
func TestPropertyAgainstModel(t *testing.T) {
	forBackends(t, func(t *testing.T, b testBackend) { runProperty(t, b, false, false, false) })
}

// TestPropertyBoundedFiles is TestPropertyAgainstModel and
// TestPropertyGenerations with tiny file bounds: row groups of 1-4 rows
// and, for some seeds, a new file after every group, so that every
// append and merge is a run of many files and groups, and reads and
// compactions merge them a group at a time. checkAsOf compares the
// streaming reads (StreamAsOf, ScanAsOf) with the in-memory ReadAsOf.
func TestPropertyBoundedFiles(t *testing.T) {
	// Tiny bounds make every row a request or two over HTTP, and the S3
	// FS does not care how files are cut: on S3 only the plain variant,
	// on gofakes3.
	t.Run("local", func(t *testing.T) {
		t.Run("plain", func(t *testing.T) { runProperty(t, localBackend, false, false, true) })
		t.Run("nested", func(t *testing.T) { runProperty(t, localBackend, true, false, true) })
		t.Run("generations", func(t *testing.T) { runProperty(t, localBackend, false, true, true) })
	})
	t.Run("gofakes3/plain", func(t *testing.T) { runProperty(t, fakeBackend, false, false, true) })
}

// TestPropertyNestedTypes is TestPropertyAgainstModel with schemas that
// also hold month_day_nano_interval, list<int64>, list<utf8> and
// large_list<utf8> (with null lists and null elements) and
// list<list<int64>>.
func TestPropertyNestedTypes(t *testing.T) {
	forBackends(t, func(t *testing.T, b testBackend) { runProperty(t, b, true, false, false) })
}

// TestPropertyGenerations is TestPropertyAgainstModel with random
// generations: truncates, re-snapshots (the live rows again at the start)
// and added columns, replays of earlier appends and generation starts
// (skipped, verified while at or above since), and changes across
// generation starts (exact across a truncate or re-snapshot, a typed
// error across a schema change).
func TestPropertyGenerations(t *testing.T) {
	forBackends(t, func(t *testing.T, b testBackend) { runProperty(t, b, false, true, false) })
}

// propStep is one append of the property test, kept to replay it.
type propStep struct {
	lower, upper uint64
	fields       []arrow.Field
	ups          []upd
}

// propSeeds is how many seeds runProperty runs: fewer over HTTP, where
// every file open is a request and every row group read another (a
// versitygw seed takes about as long as 12 local ones).
func propSeeds(b testBackend, bounded bool) uint64 {
	switch {
	case b.s3() && bounded:
		return 1
	case b == fakeBackend:
		return 2
	case b == vgwBackend:
		return 1
	}
	return 12
}

func runProperty(t *testing.T, b testBackend, nested, gens, bounded bool) {
	for seed := uint64(1); seed <= propSeeds(b, bounded); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			bounds := func(o Options) Options {
				if bounded {
					o.GroupRows = 1 + int(seed%4)
					o.FileBytes = []int64{1, 1500, 1 << 20}[seed%3]
				}
				return o
			}
			ctx := context.Background()
			r := rand.New(rand.NewPCG(seed, 99))
			fields := randSchema(r, nested)
			if nested && seed%3 == 0 {
				// Make sure the required types appear, each first in turn
				// (the first column's prefix drives sorting).
				fields = rotate(nestedFields, int(seed/3))
			}
			t.Logf("schema: %v", fields)
			dir := b.dir(t)
			s := openTest(t, dir, bounds(Options{Retain: -1}))
			sh := createTest(t, s, "prop.t", fields)
			m := &model{}
			var live []upd // rows currently present, for retractions
			upper := uint64(0)
			// The generations after the first: start and fields.
			type propGen struct {
				start  uint64
				fields []arrow.Field
			}
			genList := []propGen{{0, fields}}
			fieldsAt := func(t uint64) []arrow.Field {
				f := genList[0].fields
				for _, g := range genList {
					if g.start <= t {
						f = g.fields
					}
				}
				return f
			}
			var steps []propStep
			for step := 0; step < 40; step++ {
				if gens && step > 0 && r.IntN(5) == 0 {
					// A new generation at the upper: truncate, re-snapshot, or
					// an added column (re-snapshotted), sometimes replayed.
					var snap []upd
					switch k := r.IntN(3); {
					case k == 2 && len(fields) < 6:
						fields = append(append([]arrow.Field(nil), fields...), arrow.Field{Name: fmt.Sprintf("g%d", len(fields)), Type: arrow.PrimitiveTypes.Int64, Nullable: true})
						for _, l := range live {
							snap = append(snap, upd{append(append([]any(nil), l.row...), nil), upper, 1})
						}
					case k >= 1:
						for _, l := range live {
							snap = append(snap, upd{l.row, upper, 1})
						}
					}
					for i := 0; i < 1+r.IntN(2); i++ {
						res, err := sh.NewGeneration(ctx, upper, testSchema(fields))
						if want := []AppendStatus{Appended, Skipped}[min(i, 1)]; err != nil || res.Status != want {
							t.Fatalf("step %d: new generation at %d: %+v, %v; want %v", step, upper, res, err, want)
						}
					}
					m.gens = append(m.gens, upper)
					genList = append(genList, propGen{upper, fields})
					live = nil
					for _, u := range snap {
						live = append(live, upd{row: u.row})
					}
					if len(snap) > 0 || r.IntN(2) == 0 {
						width := uint64(1 + r.IntN(3))
						rec := buildRecord(t, fields, snap)
						if _, err := sh.Append(ctx, upper, upper+width, rec); err != nil {
							t.Fatalf("step %d: append the snapshot: %v", step, err)
						}
						rec.Release()
						m.ups = append(m.ups, snap...)
						steps = append(steps, propStep{upper, upper + width, fields, snap})
						upper += width
					}
				}
				if gens && len(steps) > 0 && r.IntN(4) == 0 {
					// Replay an earlier append, perhaps of an earlier
					// generation: skipped, verified unless below since.
					p := steps[r.IntN(len(steps))]
					rec := buildRecord(t, p.fields, p.ups)
					res, err := sh.Append(ctx, p.lower, p.upper, rec)
					rec.Release()
					if err != nil || res.Status != Skipped || res.Verified != (sh.Since() <= p.lower) {
						t.Fatalf("step %d: replay of [%d, %d) (since %d): %+v, %v", step, p.lower, p.upper, sh.Since(), res, err)
					}
				}
				width := uint64(1 + r.IntN(6))
				var ups []upd
				if r.IntN(4) != 0 {
					for i := r.IntN(12); i > 0; i-- {
						t0 := upper + uint64(r.IntN(int(width)))
						if len(live) > 0 && r.IntN(3) == 0 {
							k := r.IntN(len(live))
							ups = append(ups, upd{live[k].row, t0, -1})
							live = append(live[:k], live[k+1:]...)
							continue
						}
						row := randRow(r, fields)
						d := int64(1 + r.IntN(2))
						ups = append(ups, upd{row, t0, d})
						for j := int64(0); j < d; j++ {
							live = append(live, upd{row: row})
						}
					}
				}
				rec := buildRecord(t, fields, ups)
				// Sometimes as several runs (slices of the record).
				in := []arrow.Record{rec}
				if n := rec.NumRows(); n > 1 && r.IntN(2) == 0 {
					in = nil
					for lo := int64(0); lo < n; {
						hi := min(n, lo+1+int64(r.IntN(int(n))))
						in = append(in, rec.NewSlice(lo, hi))
						lo = hi
					}
					rec.Release()
				}
				if _, err := sh.Append(ctx, upper, upper+width, in...); err != nil {
					t.Fatalf("step %d: append: %v", step, err)
				}
				for _, x := range in {
					x.Release()
				}
				m.ups = append(m.ups, ups...)
				steps = append(steps, propStep{upper, upper + width, fields, ups})
				upper += width
				compacted := r.IntN(5) == 0
				if compacted {
					// Compact through a second handle with a random retention.
					retain := time.Duration(r.IntN(int(upper)+2)) * time.Millisecond
					cs := openTest(t, dir, bounds(Options{Retain: retain, Grace: time.Nanosecond}))
					csh, err := cs.Shard(ctx, "prop.t")
					if err != nil {
						t.Fatal(err)
					}
					if _, err := csh.Compact(ctx); err != nil {
						t.Fatalf("step %d: compact: %v", step, err)
					}
				}
				if err := sh.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				since := sh.Since()
				if compacted || step == 39 {
					for at := since; at < upper; at++ {
						checkAsOf(t, ctx, sh, m, len(fieldsAt(at)), at)
					}
				} else {
					for i := 0; i < 4; i++ {
						at := since + uint64(r.IntN(int(upper-since)))
						checkAsOf(t, ctx, sh, m, len(fieldsAt(at)), at)
					}
				}
				for i := 0; i < 3; i++ {
					t1 := since + uint64(r.IntN(int(upper-since)))
					t2 := t1 + uint64(r.IntN(int(upper-t1)))
					changed := uint64(0) // the first schema change in (t1, t2]
					for k := 1; k < len(genList) && changed == 0; k++ {
						if g := genList[k]; g.start > t1 && g.start <= t2 && len(g.fields) != len(genList[k-1].fields) {
							changed = g.start
						}
					}
					if changed == 0 {
						checkChanges(t, ctx, sh, m, len(fieldsAt(t2)), t1, t2)
						continue
					}
					_, err := sh.Changes(ctx, t1, t2)
					var sc *SchemaChangedError
					if !errors.As(err, &sc) || sc.At != changed {
						t.Fatalf("step %d: changes (%d, %d] across a schema change at %d: %v", step, t1, t2, changed, err)
					}
				}
			}
			// A last compaction (keeping all history) bounds the batches
			// whatever the random compactions left.
			if _, err := openTest(t, dir, bounds(Options{Retain: -1})).Compact(ctx); err != nil {
				t.Fatalf("final compact: %v", err)
			}
			if err := sh.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			checkAsOf(t, ctx, sh, m, len(fields), upper-1)
			info, err := sh.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The generations kept: the one in force at since and all after.
			var kept []uint64
			for _, g := range genList {
				if g.start > info.Since || len(kept) == 0 {
					kept = append(kept, g.start)
				} else {
					kept[0] = g.start
				}
			}
			var got []uint64
			for _, g := range info.Generations {
				got = append(got, g.Start)
			}
			if fmt.Sprint(got) != fmt.Sprint(kept) {
				t.Errorf("generations %v after compactions to since %d, want %v", got, info.Since, kept)
			}
			// Runs, not files: a run may be cut into many files.
			if n := runCount(t, sh); n > 12+2*len(info.Generations) {
				t.Errorf("%d runs after compactions; size-tiered merging should keep few", n)
			}
		})
	}
}

// nestedFields has every type the nested property test must cover.
var nestedFields = []arrow.Field{
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "s", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "iv", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true},
}

func rotate(fs []arrow.Field, k int) []arrow.Field {
	k %= len(fs)
	return append(append([]arrow.Field(nil), fs[k:]...), fs[:k]...)
}

func TestPlanMerges(t *testing.T) {
	tests := []struct {
		name string
		rows []int64
		want [][2]int
	}{
		{"none", nil, nil},
		{"one", []int64{5}, nil},
		{"two equal", []int64{5, 5}, [][2]int{{0, 2}}},
		{"big then small", []int64{100, 1}, nil},
		{"big then many small", []int64{100, 10, 10, 10, 10}, [][2]int{{1, 4}}},
		{"geometric tail stays", []int64{64, 16, 4, 1}, nil},
		{"small then big", []int64{1, 100}, [][2]int{{0, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var bs []BatchMeta
			for _, r := range tc.rows {
				bs = append(bs, BatchMeta{Rows: r})
			}
			got := planMerges(bs)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("plan = %v, want %v", got, tc.want)
			}
		})
	}
}
