package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// TestAppendStaged stages random updates at source times in several runs
// (small files and groups), splits the stage at a source time, and
// commits both parts with AppendStaged, each part's rows at one system
// time, plus some in-memory records: the shard then reads as the model
// says, and Release leaves no staged file.
func TestAppendStaged(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		st := openTest(t, t.TempDir(), Options{GroupRows: 1 + r.IntN(8), FileBytes: 1 + r.Int64N(2000)})
		fields := randSchema(r, seed%2 == 1)
		sh := createTest(t, st, "c", fields)
		sg, err := st.NewStage("src", arrow.NewSchema(fields, nil))
		if err != nil {
			t.Fatal(err)
		}
		m := &model{}
		// Rows pick from a small pool, so that runs consolidate.
		pool := make([][]any, 1+r.IntN(15))
		for i := range pool {
			pool[i] = randRow(r, fields)
		}
		const split = 50 // source times below bind at 100, the rest at 200
		for range 1 + r.IntN(4) {
			var ups []upd
			for range r.IntN(30) {
				ups = append(ups, upd{row: pool[r.IntN(len(pool))], time: uint64(r.IntN(100)), diff: int64(r.IntN(5) - 2)})
			}
			rec := buildRecord(t, fields, ups)
			if err := sg.Write(ctx, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			for _, u := range ups {
				at := uint64(100)
				if u.time >= split {
					at = 200
				}
				m.ups = append(m.ups, upd{row: u.row, time: at, diff: u.diff})
			}
		}
		below, rest, err := sg.Split(ctx, split)
		if err != nil {
			t.Fatal(err)
		}
		var mem []upd
		for range r.IntN(10) {
			mem = append(mem, upd{row: pool[r.IntN(len(pool))], time: 150, diff: 1})
		}
		m.ups = append(m.ups, mem...)
		rec := buildRecord(t, fields, mem)
		if _, err := sh.AppendStaged(ctx, 0, 300, []StagedPart{{below, 100}, {rest, 200}}, rec); err != nil {
			t.Fatalf("seed %d: append staged: %v", seed, err)
		}
		rec.Release()
		for _, at := range []uint64{100, 150, 200, 299} {
			checkAsOf(t, ctx, sh, m, len(fields), at)
		}
		checkChanges(t, ctx, sh, m, len(fields), 0, 299)
		below.Release()
		rest.Release()
		if left, _ := os.ReadDir(filepath.Join(st.Dir(), "staged", "src")); len(left) != 0 {
			t.Fatalf("seed %d: staged files left after Release: %d", seed, len(left))
		}
	}
}

// TestStagedLargeFile stages a run of several MiB (past the first MiB a
// file is written around the page cache, and staged files are not
// synced): every row reads back, the tail of the file included.
func TestStagedLargeFile(t *testing.T) {
	ctx := context.Background()
	st := openTest(t, t.TempDir(), Options{})
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "s", Type: arrow.BinaryTypes.String}}
	sg, err := st.NewStage("src", arrow.NewSchema(fields, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sg.Release()
	const n = 200_003
	ups := make([]upd, n)
	for i := range ups {
		ups[i] = upd{row: []any{int64(i), fmt.Sprintf("row %d of the staged run", i)}, time: 7, diff: 1}
	}
	rec := buildRecord(t, fields, ups)
	defer rec.Release()
	if err := sg.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	var got int64
	var last int64 = -1
	err = sg.Each(ctx, 100, func(r arrow.Record) error {
		got += r.NumRows()
		last = r.Column(0).(*array.Int64).Value(int(r.NumRows()) - 1)
		return nil
	})
	if err != nil || got != n || last != n-1 {
		t.Fatalf("read back %d rows, the last id %d, want %d and %d: %v", got, last, n, n-1, err)
	}
}
