package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/ipc"
)

// bigUpdates returns n updates of distinct rows at times in [0, 10).
func bigUpdates(n int) []upd {
	ups := make([]upd, n)
	for i := range ups {
		ups[i] = upd{row(int64(n-i), fmt.Sprintf("name-%06d", i)), uint64(i % 10), 1}
	}
	return ups
}

// TestAppendCutsFiles: one append of many rows becomes one manifest
// version naming a run of files, each of bounded size, of row groups of
// bounded rows, indexed in the manifest; any Arrow reader sees the groups
// as the file's record batches.
func TestAppendCutsFiles(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{GroupRows: 100, FileBytes: 8 << 10})
	sh := createTest(t, s, "db.t", testFields)
	before, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	appendTest(t, sh, testFields, 0, 10, bigUpdates(5000))
	info, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != before.Version+1 || len(info.Batches) < 5 {
		t.Fatalf("version %d -> %d, %d files; want one version, many files", before.Version, info.Version, len(info.Batches))
	}
	var rows int64
	for i, b := range info.Batches {
		if b.Cont != (i > 0) || b.Lower != 0 || b.Upper != 10 {
			t.Fatalf("file %d: cont %t, [%d, %d); want one run over [0, 10)", i, b.Cont, b.Lower, b.Upper)
		}
		last := b.Groups[len(b.Groups)-1]
		if b.Bytes-last.Bytes > 8<<10+4096 {
			t.Errorf("file %d: %d bytes; it should end after the group that reaches 8 KiB", i, b.Bytes)
		}
		f, err := os.Open(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewFileReader(f)
		if err != nil {
			t.Fatal(err)
		}
		if r.NumRecords() != len(b.Groups) {
			t.Errorf("file %d: %d record batches, %d groups indexed", i, r.NumRecords(), len(b.Groups))
		}
		for k, g := range b.Groups {
			rec, err := r.Record(k)
			if err != nil {
				t.Fatal(err)
			}
			if g.Rows > 100 || rec.NumRows() != g.Rows {
				t.Errorf("file %d group %d: %d rows, indexed %d; want at most 100", i, k, rec.NumRows(), g.Rows)
			}
		}
		r.Close()
		f.Close()
		rows += b.Rows
	}
	if rows != 5000 {
		t.Fatalf("%d rows in the files, want 5000", rows)
	}
	checkReads(t, sh, &model{ups: bigUpdates(5000)}, []uint64{0, 4, 9}, 3, 7)
}

// checkReads checks reads as of each time in ats, and the changes in
// (t1, t2], against the model.
func checkReads(t *testing.T, sh *Shard, m *model, ats []uint64, t1, t2 uint64) {
	t.Helper()
	for _, at := range ats {
		checkAsOf(t, context.Background(), sh, m, len(testFields), at)
	}
	checkChanges(t, context.Background(), sh, m, len(testFields), t1, t2)
}

// runCount counts the runs of the shard's batches (Info).
func runCount(t testing.TB, sh *Shard) int {
	t.Helper()
	info, err := sh.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var metas []BatchMeta
	for _, b := range info.Batches {
		metas = append(metas, b.BatchMeta)
	}
	return len(runsOf(metas))
}

// TestCompactWritesBoundedRuns: compaction merges runs into a run of
// bounded files and reads stay the same.
func TestCompactWritesBoundedRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{GroupRows: 64, FileBytes: 4 << 10, Retain: -1}
	s := openTest(t, dir, opts)
	sh := createTest(t, s, "db.t", testFields)
	m := &model{}
	all := bigUpdates(3000)
	for k := range 10 {
		var ups []upd
		for _, u := range all[k*300 : (k+1)*300] {
			u.time = uint64(10 * k)
			ups = append(ups, u)
		}
		if k > 0 {
			// Retract a row of the previous append.
			r := all[(k-1)*300]
			ups = append(ups, upd{r.row, uint64(10 * k), -1})
		}
		appendTest(t, sh, testFields, uint64(10*k), uint64(10*(k+1)), ups)
		m.ups = append(m.ups, ups...)
	}
	res, err := sh.Compact(ctx)
	if err != nil || !res.Committed || res.Written < 2 {
		t.Fatalf("compact: %+v, %v; want a commit of several files", res, err)
	}
	if n := runCount(t, sh); n >= 10 {
		t.Fatalf("%d runs after compaction, want fewer than the 10 appended", n)
	}
	checkReads(t, sh, m, []uint64{0, 35, 99}, 0, 99)
}

// TestReadsFilesWithoutGroupIndex: a store written before the group
// index (batch entries without groups or cont) reads and compacts as
// before.
func TestReadsFilesWithoutGroupIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, Options{Retain: -1})
	sh := createTest(t, s, "db.t", testFields)
	m := &model{}
	for k := range 3 {
		ups := []upd{{row(int64(k), "a"), uint64(k), 1}, {row(9, "z"), uint64(k), 1}}
		appendTest(t, sh, testFields, uint64(k), uint64(k+1), ups)
		m.ups = append(m.ups, ups...)
	}
	cur, err := sh.refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := cur.clone()
	old.Version++
	for i := range old.Batches {
		old.Batches[i].Groups = nil
	}
	if _, err := sh.commit(ctx, cur, old); err != nil {
		t.Fatal(err)
	}
	// A fresh handle reads the rewritten manifest from disk.
	sh2, err := openTest(t, dir, Options{Retain: -1}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	for at := range uint64(3) {
		checkAsOf(t, ctx, sh2, m, len(testFields), at)
	}
	if _, err := sh2.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for at := range uint64(3) {
		checkAsOf(t, ctx, sh2, m, len(testFields), at)
	}
}

// TestMergeWindowsAreBounded: merging runs of many groups never holds
// more than about one group per run: every window, and every run's
// pending rows, stay within a small multiple of the group size however
// long the runs are.
func TestMergeWindowsAreBounded(t *testing.T) {
	ctx := context.Background()
	const groupRows, runs = 16, 4
	s := openTest(t, t.TempDir(), Options{GroupRows: groupRows, Retain: -1})
	sh := createTest(t, s, "db.t", testFields)
	m := &model{}
	for k := range runs {
		var ups []upd
		for i := range 2000 {
			// Interleaved keys, so that every run spans the key range.
			ups = append(ups, upd{row(int64(i*runs+k), "v"), uint64(k), 1})
		}
		appendTest(t, sh, testFields, uint64(k), uint64(k+1), ups)
		m.ups = append(m.ups, ups...)
	}
	cur, err := sh.refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := sh.gensOf(cur)
	if err != nil {
		t.Fatal(err)
	}
	srcs, closeAll, err := sh.openSources(ctx, gs[0], cur.Batches, 0, runs)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if len(srcs) != runs {
		t.Fatalf("%d sources, want %d", len(srcs), runs)
	}
	total, windows := 0, 0
	err = mergeRuns(testFields, srcs, mergeOpts{hi: runs, perRow: true}, func(rs *runSet, es []ent) error {
		windows++
		total += len(es)
		if len(es) > runs*groupRows {
			t.Fatalf("a window of %d rows; at most %d (a group per run) expected", len(es), runs*groupRows)
		}
		for i, src := range srcs {
			held := 0
			for _, rec := range src.pend {
				held += int(rec.NumRows())
			}
			if held > 2*groupRows {
				t.Fatalf("run %d holds %d rows; at most two groups expected", i, held)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total != runs*2000 || windows < runs*2000/(runs*groupRows) {
		t.Fatalf("%d rows in %d windows, want %d rows in many windows", total, windows, runs*2000)
	}
	checkAsOf(t, ctx, sh, m, len(testFields), runs-1)
}

// TestStreamSurvivesCompaction: a compaction that replaces and removes
// the files a stream is reading (no grace period) does not disturb it:
// the stream opened them first.
func TestStreamSurvivesCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{GroupRows: 8, Retain: -1, Grace: time.Nanosecond, KeepManifests: 2}
	sh := createTest(t, openTest(t, dir, opts), "db.t", testFields)
	m := &model{}
	for k := range 6 {
		ups := bigUpdates(200)
		for i := range ups {
			ups[i].time = uint64(k)
		}
		appendTest(t, sh, testFields, uint64(k), uint64(k+1), ups)
		m.ups = append(m.ups, ups...)
	}
	before, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := openTest(t, dir, opts).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	var got []upd
	err = sh.StreamAsOf(ctx, 5, func(*arrow.Schema) error {
		// Compact, then move on two manifest versions and clean up, so
		// that no kept manifest names the files the stream reads.
		if res, err := other.Compact(ctx); err != nil || !res.Committed {
			return fmt.Errorf("compact: %+v, %v; want the files replaced", res, err)
		}
		for up := uint64(6); up < 8; up++ {
			if _, err := other.Append(ctx, up, up+1); err != nil {
				return err
			}
		}
		if res, err := other.Compact(ctx); err != nil || res.Removed == 0 {
			return fmt.Errorf("compact: %+v, %v; want the old files removed", res, err)
		}
		return nil
	}, func(rec arrow.Record) error {
		got = append(got, recordRows(t, rec, len(testFields), false)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, b := range after.Batches {
		kept[b.File] = true
	}
	gone := 0
	for _, b := range before.Batches {
		if _, err := os.Stat(b.Path); !kept[b.File] && errors.Is(err, fs.ErrNotExist) {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("no file the stream read was removed; the test shows nothing")
	}
	if want := m.asOf(5); !equalUpds(got, want, false) {
		t.Fatalf("stream during compaction:\ngot\n%swant\n%s", fmtUpds(got), fmtUpds(want))
	}
}
