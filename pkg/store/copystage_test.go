package store

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestCopyStage: a re-snapshot's copy staged in two runs survives
// SweepStaged (a reclocker's start); a borrowed stage committed with
// AppendStaged and released leaves its files, which a stage read back
// from the recorded runs commits again identically; SweepCopies removes
// the files no record names and keeps the named ones; a released stage
// (not borrowed) leaves nothing.
func TestCopyStage(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 11))
	st := openTest(t, t.TempDir(), Options{GroupRows: 4, FileBytes: 600})
	fields := randSchema(r, false)
	schema := arrow.NewSchema(fields, nil)
	sg, err := st.NewCopyStage("src", schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{}
	for range 2 {
		var ups []upd
		for range 5 + r.IntN(30) {
			ups = append(ups, upd{row: randRow(r, fields), time: 42, diff: 1})
		}
		rec := buildRecord(t, fields, ups)
		if err := sg.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		for _, u := range ups {
			m.ups = append(m.ups, upd{row: u.row, time: 100, diff: u.diff})
		}
	}
	runs := sg.Runs()
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if err := st.SweepStaged("src"); err != nil || !st.CopyFilesExist("src", runs) {
		t.Fatalf("SweepStaged removed copy files (err %v)", err)
	}
	commit := func(coll string, sg *Stage) {
		t.Helper()
		sh := createTest(t, st, coll, fields)
		if _, err := sh.AppendStaged(ctx, 0, 101, []StagedPart{{Stage: sg, At: 100}}); err != nil {
			t.Fatal(err)
		}
		sg.Release()
		checkAsOf(t, ctx, sh, m, len(fields), 100)
	}
	commit("a", sg.Borrow())
	if !st.CopyFilesExist("src", runs) {
		t.Fatal("a borrowed stage's release removed its files")
	}
	again, err := st.NewCopyStage("src", schema, runs)
	if err != nil {
		t.Fatal(err)
	}
	commit("b", again.Borrow())
	// A stray copy (a crash before it was committed) beside the named one.
	stray, err := st.NewCopyStage("src", schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := buildRecord(t, fields, []upd{{row: randRow(r, fields), time: 7, diff: 1}})
	if err := stray.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	named := map[string]bool{}
	for _, run := range runs {
		for _, b := range run {
			named[b.File] = true
		}
	}
	n, err := st.SweepCopies("src", named)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(stray.Runs()[0]); n != want || st.CopyFilesExist("src", stray.Runs()) || !st.CopyFilesExist("src", runs) {
		t.Errorf("SweepCopies removed %d files, want the stray copy's %d and none named", n, want)
	}
	sg.Release()
	if st.CopyFilesExist("src", runs[:1]) || st.CopyFilesExist("src", runs[1:]) {
		t.Error("release of the owning stage left files")
	}
}
