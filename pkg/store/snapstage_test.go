package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
)

// TestSnapshotStage stages a resumable snapshot's runs, "restarts" (a new
// stage from the runs recorded, as an ingest reads them back), adds a run
// and commits it all with AppendStaged: the shard reads as the model
// says. SweepStaged (a reclocker's start) leaves the snapshot directory
// alone; SweepSnapshot removes the files not named and keeps the record;
// RemoveSnapshot leaves nothing.
func TestSnapshotStage(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 9))
	st := openTest(t, t.TempDir(), Options{GroupRows: 4, FileBytes: 600})
	fields := randSchema(r, false)
	sh := createTest(t, st, "c", fields)
	schema := arrow.NewSchema(fields, nil)
	sg, err := st.NewSnapshotStage("src", schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{}
	write := func(sg *Stage) []BatchMeta {
		var ups []upd
		for range 5 + r.IntN(30) {
			ups = append(ups, upd{row: randRow(r, fields), time: 0, diff: 1})
		}
		rec := buildRecord(t, fields, ups)
		defer rec.Release()
		run, err := sg.WriteRun(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ups {
			m.ups = append(m.ups, upd{row: u.row, time: 100, diff: u.diff})
		}
		return run
	}
	var recorded [][]BatchMeta
	for range 3 {
		recorded = append(recorded, write(sg))
	}
	n0 := len(m.ups)
	lost := write(sg) // a chunk not recorded: its rows are copied again
	m.ups = m.ups[:n0]
	if err := st.WriteSnapshotRecord("src", []byte(`{"format":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.SweepStaged("src"); err != nil {
		t.Fatalf("sweep staged with a snapshot directory: %v", err)
	}
	keep := map[string]bool{}
	for _, run := range recorded {
		for _, b := range run {
			keep[b.File] = true
			if !st.SnapshotFileExists("src", b.File) {
				t.Fatalf("SweepStaged removed a snapshot file %s", b.File)
			}
		}
	}
	n, err := st.SweepSnapshot("src", keep)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(lost) {
		t.Errorf("SweepSnapshot removed %d files, want the %d of the run not recorded", n, len(lost))
	}
	if b, err := st.ReadSnapshotRecord("src"); err != nil || string(b) != `{"format":1}` {
		t.Errorf("record after the sweep: %q, %v", b, err)
	}

	again, err := st.NewSnapshotStage("src", schema, recorded)
	if err != nil {
		t.Fatal(err)
	}
	write(again)
	if _, err := sh.AppendStaged(ctx, 0, 101, []StagedPart{{again, 100}}); err != nil {
		t.Fatal(err)
	}
	checkAsOf(t, ctx, sh, m, len(fields), 100)
	again.Release()
	if err := st.RemoveSnapshot("src"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(st.Dir(), "staged", "src", "snapshot")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot directory after RemoveSnapshot: %v", err)
	}
	if _, err := st.ReadSnapshotRecord("src"); !errors.Is(err, ErrNotFound) {
		t.Errorf("record after RemoveSnapshot: %v, want ErrNotFound", err)
	}
	// A run recorded with times other than the stage's own is refused.
	bad := []BatchMeta{{File: "x.arrow", Lower: 5, Upper: 6}}
	if _, err := st.NewSnapshotStage("src", schema, [][]BatchMeta{bad}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a run with times [5, 6): %v, want ErrInvalid", err)
	}
}
