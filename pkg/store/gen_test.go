package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// wideFields is testFields with a nullable column added (an ADD COLUMN).
var wideFields = append(append([]arrow.Field(nil), testFields...), arrow.Field{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true})

func appendTest(t testing.TB, sh *Shard, fields []arrow.Field, lower, upper uint64, ups []upd) AppendResult {
	t.Helper()
	rec := buildRecord(t, fields, ups)
	defer rec.Release()
	res, err := sh.Append(context.Background(), lower, upper, rec)
	if err != nil {
		t.Fatalf("append [%d, %d): %v", lower, upper, err)
	}
	return res
}

func newGenTest(t testing.TB, sh *Shard, at uint64, fields []arrow.Field) AppendResult {
	t.Helper()
	res, err := sh.NewGeneration(context.Background(), at, testSchema(fields))
	if err != nil {
		t.Fatalf("new generation at %d: %v", at, err)
	}
	return res
}

func row(k int64, s string) []any { return []any{k, s} }

// TestGenerationTruncate: a generation with the same schema (TRUNCATE)
// makes the old contents stop existing at its start; reads before it are
// unchanged.
func TestGenerationTruncate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	old := []upd{{row(1, "a"), 2, 1}, {row(2, "b"), 5, 1}}
	appendTest(t, sh, testFields, 0, 10, old)
	res := newGenTest(t, sh, 10, testFields)
	if res.Status != Appended || res.Upper != 10 || sh.Upper() != 10 {
		t.Fatalf("new generation: %+v, upper %d; want appended, upper still 10", res, sh.Upper())
	}
	fresh := []upd{{row(3, "c"), 10, 1}, {row(1, "a"), 15, 1}}
	appendTest(t, sh, testFields, 10, 20, fresh)
	// An empty truncate at 20: nothing at all from 20 on.
	newGenTest(t, sh, 20, testFields)
	appendTest(t, sh, testFields, 20, 30, nil)

	m := &model{ups: append(append([]upd(nil), old...), fresh...), gens: []uint64{10, 20}}
	for at := uint64(0); at < 30; at++ {
		checkAsOf(t, ctx, sh, m, 2, at)
	}
	for _, iv := range [][2]uint64{{0, 9}, {9, 10}, {10, 11}, {0, 29}, {5, 25}, {19, 20}, {10, 19}} {
		checkChanges(t, ctx, sh, m, 2, iv[0], iv[1])
	}
	// The retraction is exact and at the start.
	rec, err := sh.Changes(ctx, 9, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := recordRows(t, rec, 2, true)
	rec.Release()
	want := []upd{{row(1, "a"), 10, -1}, {row(2, "b"), 10, -1}, {row(3, "c"), 10, 1}}
	if !equalUpds(got, want, true) {
		t.Fatalf("changes (9, 10]:\ngot\n%swant\n%s", fmtUpds(got), fmtUpds(want))
	}

	// ScanAsOf sees only the generation in force.
	for at, want := range map[uint64]int{9: 2, 12: 1, 16: 2, 25: 0} {
		n := 0
		err := sh.ScanAsOf(ctx, at, func() { n = 0 }, func(rec arrow.Record) error {
			for _, u := range recordRows(t, rec, 2, true) {
				n += int(u.diff)
			}
			return nil
		})
		if err != nil || n != want {
			t.Fatalf("scan as of %d: %d rows, %v; want %d", at, n, err, want)
		}
	}

	info, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Generations) != 3 || info.Generations[0].Start != 0 || info.Generations[1].Start != 10 || info.Generations[2].Start != 20 {
		t.Fatalf("generations %+v, want starts 0, 10, 20", info.Generations)
	}
	for _, b := range info.Batches {
		want := uint64(0)
		if b.Lower >= 10 {
			want = 10
		}
		if b.Generation != want {
			t.Fatalf("batch [%d, %d) in generation %d, want %d", b.Lower, b.Upper, b.Generation, want)
		}
	}
}

// TestGenerationSchemaChange: a generation with an added column; each side
// reads in its own schema, appends must use the schema of the generation
// their times fall in, and changes across the start fail typed.
func TestGenerationSchemaChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	sh := createTest(t, s, "db.t", testFields)
	old := []upd{{row(1, "a"), 2, 1}, {row(2, "b"), 5, 1}, {row(2, "b"), 8, -1}}
	appendTest(t, sh, testFields, 0, 10, old)
	newGenTest(t, sh, 10, wideFields)

	// The old schema is refused from 10 on, with a hint at generations.
	rec := buildRecord(t, testFields, []upd{{row(3, "c"), 10, 1}})
	_, err := sh.Append(ctx, 10, 20, rec)
	rec.Release()
	var sm *SchemaMismatchError
	if !errors.As(err, &sm) || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("append in the old schema after a schema change: %v, want a *SchemaMismatchError naming generations", err)
	}
	fresh := []upd{{[]any{int64(1), "a", int64(7)}, 10, 1}, {[]any{int64(3), "c", nil}, 14, 1}}
	appendTest(t, sh, wideFields, 10, 20, fresh)

	if got := sh.Schema().NumFields(); got != 3 {
		t.Fatalf("Schema() has %d fields, want the latest generation's 3", got)
	}
	if got := sh.SchemaAt(9).NumFields(); got != 2 {
		t.Fatalf("SchemaAt(9) has %d fields, want 2", got)
	}
	if got := sh.SchemaAt(10).NumFields(); got != 3 {
		t.Fatalf("SchemaAt(10) has %d fields, want 3", got)
	}
	if v, _ := sh.SchemaAt(9).Metadata().GetValue("rtr.key"); v != "k" {
		t.Fatalf("SchemaAt(9) lost the schema metadata: %v", sh.SchemaAt(9).Metadata())
	}
	mOld := &model{ups: old}
	mNew := &model{ups: fresh, gens: []uint64{10}}
	for at := uint64(0); at < 10; at++ {
		checkAsOf(t, ctx, sh, mOld, 2, at)
	}
	for at := uint64(10); at < 20; at++ {
		checkAsOf(t, ctx, sh, mNew, 3, at)
	}
	checkChanges(t, ctx, sh, mOld, 2, 0, 9)
	checkChanges(t, ctx, sh, mNew, 3, 10, 19)
	for _, iv := range [][2]uint64{{9, 10}, {0, 19}, {5, 12}} {
		_, err := sh.Changes(ctx, iv[0], iv[1])
		var sc *SchemaChangedError
		if !errors.As(err, &sc) || sc.At != 10 || sc.Collection != "db.t" || !strings.Contains(err.Error(), "9") {
			t.Fatalf("changes (%d, %d] across a schema change: %v, want *SchemaChangedError at 10 saying to read up to 9", iv[0], iv[1], err)
		}
	}

	// Another handle (another process) reads the same.
	sh2, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	checkAsOf(t, ctx, sh2, mOld, 2, 9)
	checkAsOf(t, ctx, sh2, mNew, 3, 19)
	if gs := sh2.Generations(); len(gs) != 2 || gs[0].Schema.NumFields() != 2 || gs[1].Schema.NumFields() != 3 || gs[1].Start != 10 {
		t.Fatalf("generations %+v", gs)
	}
}

// TestGenerationChangesAreDifferences: across same-schema generation
// starts, Changes(t1, t2) summed per row is ReadAsOf(t2) - ReadAsOf(t1).
func TestGenerationChangesAreDifferences(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	appendTest(t, sh, testFields, 0, 10, []upd{{row(1, "a"), 1, 2}, {row(2, "b"), 3, 1}})
	newGenTest(t, sh, 10, testFields)
	// Re-snapshot: some rows again, one new, one old row gone.
	appendTest(t, sh, testFields, 10, 20, []upd{{row(1, "a"), 10, 1}, {row(4, "d"), 10, 1}, {row(4, "d"), 13, -1}})
	newGenTest(t, sh, 20, testFields)
	appendTest(t, sh, testFields, 20, 30, []upd{{row(1, "a"), 20, 1}, {row(2, "b"), 25, 3}})
	contents := func(at uint64) map[string]int64 {
		rec, err := sh.ReadAsOf(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Release()
		out := map[string]int64{}
		for _, u := range recordRows(t, rec, 2, false) {
			out[rowKey(u.row)] += u.diff
		}
		return out
	}
	for t1 := uint64(0); t1 < 30; t1++ {
		for t2 := t1; t2 < 30; t2++ {
			rec, err := sh.Changes(ctx, t1, t2)
			if err != nil {
				t.Fatalf("changes (%d, %d]: %v", t1, t2, err)
			}
			sum := contents(t1)
			for _, u := range recordRows(t, rec, 2, true) {
				if u.time <= t1 || u.time > t2 {
					t.Fatalf("changes (%d, %d] has an update at %d", t1, t2, u.time)
				}
				sum[rowKey(u.row)] += u.diff
			}
			rec.Release()
			want := contents(t2)
			for k, v := range sum {
				if v != want[k] {
					t.Fatalf("as of %d plus changes (%d, %d] gives %s: %d, as of %d has %d", t1, t1, t2, k, v, t2, want[k])
				}
			}
			for k, v := range want {
				if sum[k] != v {
					t.Fatalf("as of %d plus changes (%d, %d] gives %s: %d, as of %d has %d", t1, t1, t2, k, sum[k], t2, v)
				}
			}
		}
	}
}

// TestGenerationReplay: appends replayed below the latest generation's
// start are verified against their own generation and skipped; replays
// that differ, or cross a generation start, are refused and change
// nothing.
func TestGenerationReplay(t *testing.T) {
	ctx := context.Background()
	g0 := []upd{{row(1, "a"), 1, 1}, {row(2, "b"), 5, 1}}
	g1 := []upd{{[]any{int64(1), "a", int64(1)}, 10, 1}, {[]any{int64(3), "c", nil}, 12, 1}}
	tests := []struct {
		name         string
		fields       []arrow.Field
		lower, upper uint64
		ups          []upd
		wantStatus   AppendStatus
		wantErr      string // "mismatch", "schema" or ""
	}{
		{"old generation same", testFields, 0, 10, g0, Skipped, ""},
		{"old generation suffix same", testFields, 5, 10, g0[1:], Skipped, ""},
		{"old generation differs", testFields, 0, 10, g0[:1], 0, "mismatch"},
		{"old generation in the new schema", wideFields, 0, 10, nil, 0, "schema"},
		{"crosses the generation start", testFields, 0, 20, g0, 0, "mismatch"},
		{"new generation same", wideFields, 10, 20, g1, Skipped, ""},
		{"new generation then more", wideFields, 10, 30, append(append([]upd(nil), g1...), upd{[]any{int64(5), "e", nil}, 22, 1}), PartiallySkipped, ""},
		{"new generation differs", wideFields, 10, 20, g1[1:], 0, "mismatch"},
		{"new generation in the old schema", testFields, 10, 20, nil, 0, "schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sh := createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
			appendTest(t, sh, testFields, 0, 10, g0)
			newGenTest(t, sh, 10, wideFields)
			appendTest(t, sh, wideFields, 10, 20, g1)
			before := snapshotDir(t, dir)
			rec := buildRecord(t, tc.fields, tc.ups)
			defer rec.Release()
			res, err := sh.Append(ctx, tc.lower, tc.upper, rec)
			var um *UpperMismatchError
			var sm *SchemaMismatchError
			switch tc.wantErr {
			case "mismatch":
				if !errors.As(err, &um) || um.Reason == "" {
					t.Fatalf("want a mismatch with a reason, got %v", err)
				}
			case "schema":
				if !errors.As(err, &sm) {
					t.Fatalf("want a schema mismatch, got %v", err)
				}
			default:
				if err != nil {
					t.Fatalf("append: %v", err)
				}
				if res.Status != tc.wantStatus || !res.Verified {
					t.Fatalf("result %+v, want status %v verified", res, tc.wantStatus)
				}
			}
			if tc.wantStatus == PartiallySkipped {
				m := &model{ups: append(append([]upd(nil), g1...), upd{[]any{int64(5), "e", nil}, 22, 1}), gens: []uint64{10}}
				checkAsOf(t, ctx, sh, m, 3, 29)
				return
			}
			if after := snapshotDir(t, dir); !equalSnapshots(before, after) {
				t.Fatalf("store changed by a skipped or refused replay")
			}
		})
	}
}

// TestNewGenerationReplay: NewGeneration is a compare-and-append at the
// upper; a replay of one recorded is skipped, anything else is refused.
func TestNewGenerationReplay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	sh := createTest(t, s, "db.t", testFields)
	appendTest(t, sh, testFields, 0, 10, []upd{{row(1, "a"), 1, 1}})

	refused := func(at uint64, fields []arrow.Field, actual uint64) {
		t.Helper()
		before := snapshotDir(t, dir)
		_, err := sh.NewGeneration(ctx, at, testSchema(fields))
		var um *UpperMismatchError
		if !errors.As(err, &um) || um.Expected != at || um.Actual != actual {
			t.Fatalf("new generation at %d: %v, want a mismatch expected %d actual %d", at, err, at, actual)
		}
		if !equalSnapshots(before, snapshotDir(t, dir)) {
			t.Fatalf("a refused new generation at %d changed the store", at)
		}
	}
	skipped := func(at uint64, fields []arrow.Field, verified bool) {
		t.Helper()
		before := snapshotDir(t, dir)
		res, err := sh.NewGeneration(ctx, at, testSchema(fields))
		if err != nil || res.Status != Skipped || res.Verified != verified {
			t.Fatalf("replayed new generation at %d: %+v, %v; want skipped, verified %t", at, res, err, verified)
		}
		if !equalSnapshots(before, snapshotDir(t, dir)) {
			t.Fatalf("a skipped new generation at %d changed the store", at)
		}
	}
	// The shard's first generation starts at 0 with its schema.
	refused(0, wideFields, 10)
	refused(20, testFields, 10) // ahead of the upper

	newGenTest(t, sh, 10, wideFields)
	skipped(10, wideFields, true)   // at the upper: recorded already
	refused(10, testFields, 10)     // a different schema there
	refused(10, testFields[:1], 10) // idem
	appendTest(t, sh, wideFields, 10, 20, []upd{{[]any{int64(2), "b", nil}, 11, 1}})
	skipped(10, wideFields, true) // below the upper
	refused(10, testFields, 20)
	refused(15, wideFields, 20) // no generation starts at 15
	refused(5, testFields, 20)

	// Schema metadata counts: a different rtr.key is another schema.
	md := arrow.NewMetadata([]string{"rtr.key"}, []string{"s"})
	if _, err := sh.NewGeneration(ctx, 10, arrow.NewSchema(wideFields, &md)); err == nil {
		t.Fatal("a replay with other schema metadata was accepted")
	}
	// _time and _diff are dropped from the schema, as by CreateShard.
	withCols := append(append([]arrow.Field(nil), wideFields...), timeField, diffField)
	if res, err := sh.NewGeneration(ctx, 10, testSchema(withCols)); err != nil || res.Status != Skipped {
		t.Fatalf("replay with _time and _diff: %+v, %v", res, err)
	}

	// Unsupported types are refused, like at creation.
	bad := []arrow.Field{{Name: "k", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)}}
	if _, err := sh.NewGeneration(ctx, 20, testSchema(bad)); err == nil {
		t.Fatal("a generation with a map column was accepted")
	}
	// Remap shards have no generations.
	if _, err := s.AppendBindings(ctx, "src", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	rm, err := s.Remap(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.NewGeneration(ctx, 1, testSchema(testFields)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("new generation of a remap shard: %v, want ErrInvalid", err)
	}
}

// TestGenerationErrors: a definite error holds for every read at or after
// it until a later generation starts (a re-snapshot clears it); changes
// over a range with an errored time fail.
func TestGenerationErrors(t *testing.T) {
	ctx := context.Background()
	sh := createTest(t, openTest(t, t.TempDir(), Options{}), "db.t", testFields)
	appendTest(t, sh, testFields, 0, 10, []upd{{row(1, "a"), 1, 1}})
	if _, err := sh.AppendError(ctx, 10, 11, "boom"); err != nil {
		t.Fatal(err)
	}
	newGenTest(t, sh, 11, testFields)
	appendTest(t, sh, testFields, 11, 20, []upd{{row(2, "b"), 12, 1}})
	var de *DefiniteError
	if _, err := sh.ReadAsOf(ctx, 10); !errors.As(err, &de) || de.Time != 10 {
		t.Fatalf("read as of 10: %v, want the definite error at 10", err)
	}
	checkAsOf(t, ctx, sh, &model{ups: []upd{{row(1, "a"), 1, 1}}}, 2, 9)
	checkAsOf(t, ctx, sh, &model{ups: []upd{{row(2, "b"), 12, 1}}, gens: []uint64{11}}, 2, 11)
	checkAsOf(t, ctx, sh, &model{ups: []upd{{row(2, "b"), 12, 1}}, gens: []uint64{11}}, 2, 15)
	for _, r := range [][2]uint64{{5, 15}, {9, 10}} {
		if _, err := sh.Changes(ctx, r[0], r[1]); !errors.As(err, &de) {
			t.Fatalf("changes in (%d, %d], across the error: %v", r[0], r[1], err)
		}
	}
	checkChanges(t, ctx, sh, &model{ups: []upd{{row(2, "b"), 12, 1}}, gens: []uint64{11}}, 2, 11, 15)
	// Without a generation after it, the error holds for ever.
	sh2 := createTest(t, openTest(t, t.TempDir(), Options{}), "db.u", testFields)
	appendTest(t, sh2, testFields, 0, 10, nil)
	if _, err := sh2.AppendError(ctx, 10, 30, "boom"); err != nil {
		t.Fatal(err)
	}
	if _, err := sh2.ReadAsOf(ctx, 29); !errors.As(err, &de) {
		t.Fatalf("read as of 29: %v, want the definite error", err)
	}
}

// TestGenerationCompaction: compaction merges within a generation only;
// once a later generation starts at or below since, the earlier one's
// batches leave the manifest and are removed, and reads at [since, upper)
// stay exact.
func TestGenerationCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sh := createTest(t, openTest(t, dir, Options{Retain: -1}), "db.t", testFields)
	m := &model{}
	app := func(fields []arrow.Field, lo, hi uint64, ups []upd) {
		appendTest(t, sh, fields, lo, hi, ups)
		m.ups = append(m.ups, ups...)
	}
	for i := uint64(0); i < 4; i++ {
		app(testFields, 5*i, 5*i+5, []upd{{row(int64(i), "a"), 5 * i, 1}, {row(9, "z"), 5*i + 1, 1}})
	}
	newGenTest(t, sh, 20, testFields)
	m.gens = append(m.gens, 20)
	for i := uint64(4); i < 8; i++ {
		app(testFields, 5*i, 5*i+5, []upd{{row(int64(i), "b"), 5 * i, 1}, {row(9, "z"), 5*i + 2, 1}})
	}
	compact := func(retain time.Duration) CompactResult {
		t.Helper()
		c, err := openTest(t, dir, Options{Retain: retain, Grace: time.Nanosecond, KeepManifests: 2}).Shard(ctx, "db.t")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Compact(ctx)
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		if err := sh.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		return res
	}
	checkAll := func() {
		t.Helper()
		for at := sh.Since(); at < sh.Upper(); at++ {
			checkAsOf(t, ctx, sh, m, 2, at)
		}
		for t1 := sh.Since(); t1 < sh.Upper(); t1 += 3 {
			checkChanges(t, ctx, sh, m, 2, t1, sh.Upper()-1)
		}
	}
	genOf := func(info Info) map[uint64]bool {
		out := map[uint64]bool{}
		for _, b := range info.Batches {
			out[b.Generation] = true
			if start := b.Generation; b.Lower < start || (start == 0 && b.Upper > 20) {
				t.Fatalf("batch [%d, %d) of generation %d crosses a generation", b.Lower, b.Upper, start)
			}
		}
		return out
	}

	// since 15 < 20: both generations stay, merged separately.
	res := compact(25 * time.Millisecond)
	if sh.Since() != 15 || res.Merged == 0 {
		t.Fatalf("compaction to since 15: %+v", res)
	}
	info, _ := sh.Info(ctx)
	if g := genOf(info); !g[0] || !g[20] || len(info.Generations) != 2 {
		t.Fatalf("after since 15: batches in generations %v, generations %+v", g, info.Generations)
	}
	checkAll()
	oldFiles := map[string]bool{}
	for _, b := range info.Batches {
		if b.Generation == 0 {
			oldFiles[b.File] = true
		}
	}

	// since 22 >= 20: generation 0 is gone.
	res = compact(18 * time.Millisecond)
	if sh.Since() != 22 || !res.Committed || res.DroppedGenerations != 1 {
		t.Fatalf("compaction to since 22: %+v", res)
	}
	info, _ = sh.Info(ctx)
	if g := genOf(info); g[0] || len(info.Generations) != 1 || info.Generations[0].Start != 20 {
		t.Fatalf("after since 22: batches in generations %v, generations %+v", g, info.Generations)
	}
	checkAll()
	// The manifest still records where the kept generation starts.
	raw, err := os.ReadFile(filepath.Join(info.Dir, manifestName(info.Version)))
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Format      int `json:"format"`
		Generations []struct {
			Start uint64 `json:"start"`
		} `json:"generations"`
	}
	if err := json.Unmarshal(raw, &j); err != nil || j.Format != 2 || len(j.Generations) != 1 || j.Generations[0].Start != 20 {
		t.Fatalf("manifest %s: %+v, %v", raw, j, err)
	}
	// Replays: the kept generation's start is still verified; data of the
	// dropped one is skipped unverified.
	if res, err := sh.NewGeneration(ctx, 20, testSchema(testFields)); err != nil || res.Status != Skipped || !res.Verified {
		t.Fatalf("replayed generation start after compaction: %+v, %v", res, err)
	}
	rec := buildRecord(t, testFields, []upd{{row(0, "a"), 0, 1}})
	r, err := sh.Append(ctx, 0, 5, rec)
	rec.Release()
	if err != nil || r.Status != Skipped || r.Verified {
		t.Fatalf("replay into a dropped generation: %+v, %v; want skipped unverified", r, err)
	}

	// Another commit and compaction age the manifests that named the old
	// files out; then they are removed.
	app(testFields, 40, 45, nil)
	compact(18 * time.Millisecond)
	app(testFields, 45, 50, nil)
	compact(18 * time.Millisecond)
	for _, f := range batchFiles(t, info.Dir) {
		if oldFiles[f] {
			t.Fatalf("batch file %s of the dropped generation is still there", f)
		}
	}
	checkAll()
}

// TestGenerationLosesToNewGeneration: an append prepared for one
// generation whose commit finds that another writer started a new one at
// the same upper is refused, and its batch file removed.
func TestGenerationLosesToNewGeneration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	base := createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
	appendTest(t, base, testFields, 0, 10, []upd{{row(1, "a"), 1, 1}})
	osh, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	rfs := &raceFS{FS: OSFS{}}
	rfs.hook = func() {
		if _, err := osh.NewGeneration(ctx, 10, testSchema(testFields)); err != nil {
			t.Errorf("competitor: %v", err)
		}
	}
	sh, err := openTest(t, dir, Options{FS: rfs}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	rec := buildRecord(t, testFields, []upd{{row(2, "b"), 12, 1}})
	defer rec.Release()
	_, err = sh.Append(ctx, 10, 20, rec)
	var um *UpperMismatchError
	if !errors.As(err, &um) || um.Actual != 10 || !strings.Contains(um.Reason, "generation") {
		t.Fatalf("append across a concurrent new generation: %v, want a mismatch naming the generation", err)
	}
	info, _ := sh.Info(ctx)
	if files := batchFiles(t, info.Dir); len(files) != len(info.Batches) {
		t.Fatalf("%d batch files for %d batches: the loser left its batch", len(files), len(info.Batches))
	}
	if len(info.Generations) != 2 || info.Upper != 10 {
		t.Fatalf("info %+v", info)
	}
}

// TestManifestFormatWithoutGenerations: a collection with one generation
// from 0 keeps writing format 1 manifests without the new fields, so
// stores stay readable by rtrctl versions before generations; one with
// generations writes format 2, which those refuse rather than misread.
func TestManifestFormatWithoutGenerations(t *testing.T) {
	ctx := context.Background()
	sh := createTest(t, openTest(t, t.TempDir(), Options{}), "db.t", testFields)
	appendTest(t, sh, testFields, 0, 10, []upd{{row(1, "a"), 1, 1}})
	read := func() (map[string]any, []byte) {
		info, err := sh.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(info.Dir, manifestName(info.Version)))
		if err != nil {
			t.Fatal(err)
		}
		var j map[string]any
		if err := json.Unmarshal(raw, &j); err != nil {
			t.Fatal(err)
		}
		return j, raw
	}
	j, raw := read()
	if j["format"] != float64(1) || j["generations"] != nil || strings.Contains(string(raw), `"generation"`) {
		t.Fatalf("manifest of a collection without generations:\n%s", raw)
	}
	newGenTest(t, sh, 10, wideFields)
	appendTest(t, sh, wideFields, 10, 20, []upd{{[]any{int64(2), "b", nil}, 11, 1}})
	j, raw = read()
	gens, _ := j["generations"].([]any)
	if j["format"] != float64(2) || len(gens) != 2 || !strings.Contains(string(raw), `"generation": 10`) {
		t.Fatalf("manifest with generations:\n%s", raw)
	}
	// The top-level schema is the latest generation's.
	if g1 := gens[1].(map[string]any); g1["schema"] != j["schema"] || g1["start"] != float64(10) {
		t.Fatalf("latest generation %v, top-level schema %v", g1, j["schema"])
	}

	// Decoding checks the generations.
	for name, edit := range map[string]func(m map[string]any){
		"format 1 with generations": func(m map[string]any) { m["format"] = 1 },
		"format 2 without":          func(m map[string]any) { delete(m, "generations") },
		"starts not ascending": func(m map[string]any) {
			m["generations"].([]any)[1].(map[string]any)["start"] = 0
		},
		"batch of an unknown generation": func(m map[string]any) {
			bs := m["batches"].([]any)
			bs[len(bs)-1].(map[string]any)["generation"] = 7
		},
		"batch outside its generation": func(m map[string]any) {
			m["batches"].([]any)[0].(map[string]any)["generation"] = 10
		},
		"schema not the latest": func(m map[string]any) {
			m["schema"] = m["generations"].([]any)[0].(map[string]any)["schema"]
		},
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		delete(m, "checksum") // what is checked here is the shape
		b, _ := json.Marshal(m)
		if _, err := decodeManifest(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if _, err := decodeManifest(raw); err != nil {
		t.Fatalf("the manifest itself: %v", err)
	}
}

// TestApplyPipeReplaysOldGeneration: a pipe replaying data of an earlier
// generation (a restarted stage) is checked against that generation's
// schema and skipped; one in neither schema is refused.
func TestApplyPipeReplaysOldGeneration(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	sh := createTest(t, s, "db.t", testFields)
	old := []upd{{row(1, "a"), 2, 1}}
	appendTest(t, sh, testFields, 0, 10, old)
	newGenTest(t, sh, 10, wideFields)
	appendTest(t, sh, wideFields, 10, 20, []upd{{[]any{int64(2), "b", nil}, 12, 1}})
	apply := func(fields []arrow.Field, ups []upd, upper uint64) (ApplyStats, error) {
		var buf bytes.Buffer
		w := pipe.NewWriter(&buf, nil)
		rec := buildRecord(t, fields, ups)
		defer rec.Release()
		if err := w.WriteRecord(pipe.Header{Kind: pipe.KindData, Collection: "db.t", Domain: frontier.DomainSystem}, rec); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteProgress("db.t", "", frontier.Single(frontier.DomainSystem, upper)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return s.ApplyPipe(ctx, pipe.NewReader(&buf, nil), ApplyOptions{})
	}
	st, err := apply(testFields, old, 10)
	if err != nil || st.Skipped != 1 || st.Rows != 0 {
		t.Fatalf("replay of the old generation through a pipe: %+v, %v", st, err)
	}
	other := []arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}
	if _, err := apply(other, []upd{{[]any{int64(1)}, 3, 1}}, 10); err == nil {
		t.Fatal("a pipe in neither generation's schema was accepted")
	}
}

// TestApplyPipeReset: a reset stream drops the rows of its time that came
// before it, commits the rest and starts a generation (with the schema
// it names, or the same); the next data is the new contents. Applying the
// same pipe again (a restarted stage) is a replay: skipped, same reads.
func TestApplyPipeReset(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	var buf bytes.Buffer
	w := pipe.NewWriter(&buf, nil)
	data := func(fields []arrow.Field, ups []upd) {
		rec := buildRecord(t, fields, ups)
		defer rec.Release()
		if err := w.WriteRecord(pipe.Header{Kind: pipe.KindData, Collection: "db.t", Domain: frontier.DomainSystem}, rec); err != nil {
			t.Fatal(err)
		}
	}
	data(testFields, []upd{{row(1, "a"), 2, 1}, {row(2, "b"), 10, 1}})
	if err := w.WriteReset("db.t", frontier.DomainSystem, 10, nil); err != nil {
		t.Fatal(err)
	}
	data(testFields, []upd{{row(3, "c"), 10, 1}})
	if err := w.WriteReset("db.t", frontier.DomainSystem, 15, testSchema(wideFields)); err != nil {
		t.Fatal(err)
	}
	data(wideFields, []upd{{[]any{int64(4), "d", int64(7)}, 15, 1}})
	if err := w.WriteProgress("db.t", "", frontier.Single(frontier.DomainSystem, 20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	in := buf.Bytes()
	st, err := s.ApplyPipe(ctx, pipe.NewReader(bytes.NewReader(in), nil), ApplyOptions{})
	if err != nil || st.Resets != 2 {
		t.Fatalf("apply: %+v, %v; want 2 resets", st, err)
	}
	sh, err := s.Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for at, want := range map[uint64][]upd{
			9:  {{row(1, "a"), 0, 1}},
			10: {{row(3, "c"), 0, 1}},
			14: {{row(3, "c"), 0, 1}},
			15: {{[]any{int64(4), "d", int64(7)}, 0, 1}},
		} {
			if err := sh.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			rec, err := sh.ReadAsOf(ctx, at)
			if err != nil {
				t.Fatalf("as of %d: %v", at, err)
			}
			got := recordRows(t, rec, int(rec.NumCols())-1, false)
			rec.Release()
			if !equalUpds(got, want, false) {
				t.Errorf("as of %d: %s, want %s", at, fmtUpds(got), fmtUpds(want))
			}
		}
	}
	check()
	st, err = s.ApplyPipe(ctx, pipe.NewReader(bytes.NewReader(in), nil), ApplyOptions{})
	if err != nil || st.Rows != 0 {
		t.Fatalf("apply again: %+v, %v; want a replay", st, err)
	}
	check()
}
