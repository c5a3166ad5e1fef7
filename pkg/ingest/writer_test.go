package ingest

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/store"
)

// TestStoreWriterCommitsInBackground: Progress hands data to the
// committer, Flush waits for it, a commit error stops every later commit
// and comes back from Progress, Err and Close, and nothing is handed over
// after Close.
func TestStoreWriterCommitsInBackground(t *testing.T) {
	ctx := context.Background()
	st, sh := kStore(t)
	rec, data := kRecord, func(w *storeWriter, k int64, at uint64) { kData(t, w, k, at) }

	var committed []uint64
	w := newStoreWriter(st, "src", []string{"c"})
	w.afterCommit = func(_ string, upper uint64) { committed = append(committed, upper) }
	for i := uint64(0); i < 5; i++ {
		data(w, int64(i), 10+i)
		if err := w.Progress(11 + i); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := w.DurableUpper(); got != 15 {
		t.Fatalf("durable upper %d after Flush, want 15", got)
	}
	if len(committed) != 5 || committed[4] != 15 {
		t.Fatalf("commits at %v, want 11..15 in order", committed)
	}
	if err := sh.Refresh(ctx); err != nil || sh.Upper() != 15 {
		t.Fatalf("shard upper %d (%v), want 15", sh.Upper(), err)
	}

	// Another writer moves the shard on: the next commit fails, and so
	// does everything after it, without writing.
	other := rec(99, 15)
	if _, err := sh.Append(ctx, 15, 17, other); err != nil {
		t.Fatal(err)
	}
	other.Release()
	data(w, 7, 15)
	if err := w.Progress(16); err != nil {
		t.Fatalf("handing over: %v", err)
	}
	if err := w.Flush(); !errors.As(err, new(*store.UpperMismatchError)) {
		t.Fatalf("Flush after a lost race: %v, want an upper mismatch", err)
	}
	data(w, 8, 17)
	if err := w.Progress(18); err == nil {
		t.Fatal("Progress after a failed commit returned nil")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a failed commit returned nil")
	}
	if err := sh.Refresh(ctx); err != nil || sh.Upper() != 17 {
		t.Fatalf("shard upper %d (%v), want 17 (the other writer's)", sh.Upper(), err)
	}

	// Closed: nothing more is handed over.
	w2 := newStoreWriter(st, "src", []string{"c"})
	w2.Close()
	data(w2, 1, 20)
	if err := w2.Progress(21); !errors.Is(err, errWriterClosed) {
		t.Fatalf("Progress after Close: %v, want errWriterClosed", err)
	}
	if err := w2.Flush(); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
	w2.Close()
}

// TestStoreWriterReplayAheadOfProgress: a collection behind the others
// replays durable bindings, and the reclocker hands over data of a later
// binding before the progress of an earlier one (rows of several
// transactions in one record). Progress(u) commits only what is below u
// and keeps the rest for the next progress.
func TestStoreWriterReplayAheadOfProgress(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	sh, err := st.CreateShard(ctx, "c", arrow.NewSchema(kFields, nil))
	if err != nil {
		t.Fatal(err)
	}
	schema := kSchema
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	for i, at := range []uint64{30, 10, 20, 10} {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Uint64Builder).Append(at)
		b.Field(2).(*array.Int64Builder).Append(1)
	}
	rec := b.NewRecord()
	b.Release()
	defer rec.Release()

	w := newStoreWriter(st, "src", []string{"c"})
	defer w.Close()
	if err := w.Data("c", schema, rec); err != nil {
		t.Fatal(err)
	}
	for _, u := range []uint64{11, 21, 31} {
		if err := w.Progress(u); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatalf("commit to %d: %v", u, err)
		}
		got, err := readAsOf(ctx, sh, u-1)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[uint64]int{11: 2, 21: 3, 31: 4}[u]; got != want {
			t.Errorf("as of %d: %d rows, want %d", u-1, got, want)
		}
	}
}

// readAsOf counts the rows of sh as of t.
func readAsOf(ctx context.Context, sh *store.Shard, t uint64) (int, error) {
	if err := sh.Refresh(ctx); err != nil {
		return 0, err
	}
	rec, err := sh.ReadAsOf(ctx, t)
	if err != nil {
		return 0, err
	}
	defer rec.Release()
	return int(rec.NumRows()), nil
}

// TestStoreWriterErrorAtItsTime: a definite error bound at system time t
// makes every read at t fail, so a recency answer t never shows the
// collection as it was before the error (a TRUNCATE or a schema change
// it could not follow), and a transaction whose other tables are visible
// at t is never shown torn. The rows bound at t are not committed.
func TestStoreWriterErrorAtItsTime(t *testing.T) {
	ctx := context.Background()
	st, sh := kStore(t)
	data := func(w *storeWriter, k int64, at uint64) { kData(t, w, k, at) }
	w := newStoreWriter(st, "src", []string{"c"})
	defer w.Close()
	data(w, 1, 10)
	if err := w.Progress(11); err != nil {
		t.Fatal(err)
	}
	data(w, 2, 20)
	if err := w.Error("c", 20, "c was truncated"); err != nil {
		t.Fatal(err)
	}
	data(w, 3, 25)
	if err := w.Progress(30); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := readAsOf(ctx, sh, 19); err != nil || n != 1 {
		t.Fatalf("as of 19: %d rows, %v; want the 1 row before the error", n, err)
	}
	for _, at := range []uint64{20, 29} {
		var de *store.DefiniteError
		if _, err := readAsOf(ctx, sh, at); !errors.As(err, &de) || de.Time != 20 {
			t.Fatalf("as of %d: %v; want the definite error at 20", at, err)
		}
	}
	if sh.Upper() != 30 {
		t.Fatalf("upper %d, want 30", sh.Upper())
	}
}

// TestStoreWriterReset: a reset at t supersedes the rows at t handed over
// before it and starts a new generation: reads before t are unchanged,
// reads at t show only what came after the reset; a schema change is a
// reset with the new schema; a writer replaying the same input (a
// restart) is verified and skipped, and reads stay the same.
func TestStoreWriterReset(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	wide := append(append([]arrow.Field{}, kFields...), arrow.Field{Name: "color", Type: arrow.BinaryTypes.String, Nullable: true})
	narrowS, wideS := kSchema, withTimeDiff(wide)
	if _, err := st.CreateShard(ctx, "c", arrow.NewSchema(kFields, nil)); err != nil {
		t.Fatal(err)
	}
	data := func(w *storeWriter, k int64, at uint64, colored bool) {
		s := narrowS
		if colored {
			s = wideS
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, s)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(k)
		i := 1
		if colored {
			b.Field(1).(*array.StringBuilder).Append("red")
			i = 2
		}
		b.Field(i).(*array.Uint64Builder).Append(at)
		b.Field(i + 1).(*array.Int64Builder).Append(1)
		r := b.NewRecord()
		defer r.Release()
		if err := w.Data("c", s, r); err != nil {
			t.Fatal(err)
		}
	}
	feed := func(w *storeWriter) {
		data(w, 1, 10, false)
		must(t, w.Progress(11))
		data(w, 2, 20, false) // superseded by the reset at 20
		must(t, w.Reset("c", 20, nil))
		data(w, 3, 20, false)
		data(w, 4, 25, false)
		must(t, w.Progress(30))
		data(w, 5, 35, false)
		must(t, w.Reset("c", 40, arrow.NewSchema(wide, nil)))
		data(w, 6, 40, true)
		must(t, w.Progress(50))
		must(t, w.Flush())
	}
	w := newStoreWriter(st, "src", []string{"c"})
	feed(w)
	w.Close()
	sh, err := st.Shard(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	reads := func() map[uint64]string {
		if err := sh.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		out := map[uint64]string{}
		for _, at := range []uint64{10, 19, 20, 29, 35, 39, 40, 49} {
			rec, err := sh.ReadAsOf(ctx, at)
			if err != nil {
				t.Fatalf("as of %d: %v", at, err)
			}
			var rows []string
			for i := 0; i < int(rec.NumRows()); i++ {
				var cells []string
				for c := 0; c < int(rec.NumCols())-1; c++ {
					cells = append(cells, rec.Column(c).ValueStr(i))
				}
				rows = append(rows, strings.Join(cells, "|"))
			}
			rec.Release()
			out[at] = strings.Join(rows, " ")
		}
		return out
	}
	want := map[uint64]string{10: "1", 19: "1", 20: "3", 29: "3 4", 35: "3 4 5", 39: "3 4 5", 40: "6|red", 49: "6|red"}
	got := reads()
	if !maps.Equal(got, want) {
		t.Fatalf("reads %v, want %v", got, want)
	}
	if gs := sh.Generations(); len(gs) != 3 || gs[1].Start != 20 || gs[2].Start != 40 {
		t.Fatalf("generations %+v, want starts 0, 20, 40", gs)
	}
	// A restart replays the same input: verified, skipped, identical.
	w2 := newStoreWriter(st, "src", []string{"c"})
	feed(w2)
	w2.Close()
	if got := reads(); !maps.Equal(got, want) {
		t.Fatalf("reads after a replay %v, want %v", got, want)
	}
}

// kFields is the user column of the writer tests' collection c, and
// kSchema the data schema its writer takes.
var (
	kFields = []arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}
	kSchema = withTimeDiff(kFields)
)

// withTimeDiff is fs with _time and _diff after them.
func withTimeDiff(fs []arrow.Field) *arrow.Schema {
	return arrow.NewSchema(append(append([]arrow.Field{}, fs...),
		arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64}), nil)
}

// kStore is a fresh store with collection c of kFields.
func kStore(t *testing.T) (*store.Store, *store.Shard) {
	t.Helper()
	st := openStore(t)
	sh, err := st.CreateShard(context.Background(), "c", arrow.NewSchema(kFields, nil))
	if err != nil {
		t.Fatal(err)
	}
	return st, sh
}

// kRecord is row k at time at, diff +1.
func kRecord(k int64, at uint64) arrow.Record {
	b := array.NewRecordBuilder(memory.DefaultAllocator, kSchema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(k)
	b.Field(1).(*array.Uint64Builder).Append(at)
	b.Field(2).(*array.Int64Builder).Append(1)
	return b.NewRecord()
}

// kData hands row k at time at to w.
func kData(t *testing.T, w *storeWriter, k int64, at uint64) {
	t.Helper()
	r := kRecord(k, at)
	defer r.Release()
	must(t, w.Data("c", kSchema, r))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoreWriterResetClearsError: a reset after a definite error (a
// re-snapshot) gives the collection contents again from its time; reads
// between the two fail with the error; the rows in between are never
// committed.
func TestStoreWriterResetClearsError(t *testing.T) {
	ctx := context.Background()
	st, sh := kStore(t)
	data := func(w *storeWriter, k int64, at uint64) { kData(t, w, k, at) }
	w := newStoreWriter(st, "src", []string{"c"})
	defer w.Close()
	data(w, 1, 10)
	must(t, w.Error("c", 20, "column added"))
	data(w, 2, 25)
	must(t, w.Progress(26))
	data(w, 3, 27) // after a progress: still under the error
	must(t, w.Reset("c", 30, nil))
	data(w, 4, 30)
	must(t, w.Progress(40))
	must(t, w.Flush())
	var de *store.DefiniteError
	for at, want := range map[uint64]int{19: 1, 30: 1, 39: 1} {
		n, err := readAsOf(ctx, sh, at)
		if err != nil || n != want {
			t.Errorf("as of %d: %d rows, %v; want %d", at, n, err, want)
		}
	}
	for _, at := range []uint64{20, 25, 29} {
		if _, err := readAsOf(ctx, sh, at); !errors.As(err, &de) || de.Time != 20 {
			t.Errorf("as of %d: %v, want the error at 20", at, err)
		}
	}
	rec, err := sh.ReadAsOf(ctx, 39)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if rec.NumRows() != 1 || rec.Column(0).ValueStr(0) != "4" {
		t.Errorf("as of 39: %v, want only the row after the reset", rec)
	}
}
