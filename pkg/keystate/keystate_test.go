package keystate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// kvCodec is the Codec of a collection (k string, v string): the key is
// k, the row v.
type kvCodec struct{}

func (kvCodec) StateRows(rec arrow.Record, fn func(key, row []byte, diff int64) error) error {
	ks, vs := rec.Column(0).(*array.String), rec.Column(1).(*array.String)
	diffs := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
	for i := 0; i < int(rec.NumRows()); i++ {
		if err := fn([]byte(ks.Value(i)), []byte(vs.Value(i)), diffs.Value(i)); err != nil {
			return err
		}
	}
	return nil
}

var kvSchema = arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String}, {Name: "v", Type: arrow.BinaryTypes.String},
	{Name: pipe.ColTime, Type: arrow.PrimitiveTypes.Uint64}, {Name: pipe.ColDiff, Type: arrow.PrimitiveTypes.Int64}}, nil)

// upd is one update of the collection.
type upd struct {
	k, v string
	diff int64
}

func batch(t uint64, us []upd) arrow.Record {
	b := array.NewRecordBuilder(memory.DefaultAllocator, kvSchema)
	defer b.Release()
	for _, u := range us {
		b.Field(0).(*array.StringBuilder).Append(u.k)
		b.Field(1).(*array.StringBuilder).Append(u.v)
		b.Field(2).(*array.Uint64Builder).Append(t)
		b.Field(3).(*array.Int64Builder).Append(u.diff)
	}
	return b.NewRecord()
}

// history is a keyed collection in a store and its model at every time.
type history struct {
	sh     *store.Shard
	models []map[string]string // models[t]: the collection as of t
}

// grow appends n times of random puts and deletes over keys keys.
func (h *history) grow(t *testing.T, rng *rand.Rand, n, keys int) {
	ctx := context.Background()
	for range n {
		at := uint64(len(h.models))
		cur := map[string]string{}
		if at > 0 {
			for k, v := range h.models[at-1] {
				cur[k] = v
			}
		}
		var us []upd
		touched := map[string]bool{} // one change of a key per time
		for range 1 + rng.IntN(20) {
			k := fmt.Sprintf("key-%d", rng.IntN(keys))
			if touched[k] {
				continue
			}
			touched[k] = true
			if old, had := cur[k]; had {
				us = append(us, upd{k, old, -1})
				delete(cur, k)
			}
			if rng.IntN(4) != 0 {
				v := fmt.Sprintf("v%d-%d", at, rng.IntN(1000))
				us = append(us, upd{k, v, 1})
				cur[k] = v
			}
		}
		rec := batch(at, us)
		if _, err := h.sh.Append(ctx, at, at+1, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		h.models = append(h.models, cur)
	}
}

// check compares d with the model as of at: every key, and no others.
func check(t *testing.T, d *DB, model map[string]string, what string) {
	t.Helper()
	for k, v := range model {
		got, ok, err := d.Get([]byte(k), nil)
		if err != nil || !ok || string(got) != v {
			t.Fatalf("%s: %s = %q %v %v, want %q", what, k, got, ok, err, v)
		}
	}
	n, err := d.count()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(model)) || d.Keys() != n {
		t.Fatalf("%s: %d keys in the DB, %d counted, want %d", what, n, d.Keys(), len(model))
	}
}

// TestSync: a state is rebuilt when there is none, reused at its time,
// caught up (also across compactions that keep its time readable) when
// behind, and rebuilt, saying why, when it is of another collection,
// ahead of the store, unfinished or not a pebble directory; CatchUp
// folds while it is open. It always equals the model.
func TestSync(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	sh := kvShard(t)
	h := &history{sh: sh}
	h.grow(t, rng, 30, 50)
	dir := filepath.Join(t.TempDir(), "state")
	cfg := Config{Dir: dir, Ident: "kv v1"}
	sync := func(cfg Config, asOf uint64, how, why string) *DB {
		t.Helper()
		d, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.Sync(ctx, sh, asOf, kvCodec{})
		if err != nil {
			t.Fatal(err)
		}
		if out.How != how || !strings.Contains(out.Reason, why) {
			t.Fatalf("sync to %d: %+v, want %s (%s)", asOf, out, how, why)
		}
		check(t, d, h.models[asOf], fmt.Sprintf("after %s to %d", how, asOf))
		return d
	}
	closeDB := func(d *DB) {
		t.Helper()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	closeDB(sync(cfg, 20, "rebuilt", "there is none"))
	closeDB(sync(cfg, 20, "reused", ""))
	closeDB(sync(cfg, 29, "caught up", ""))

	// While open: CatchUp as a stream's follower does.
	d := sync(cfg, 29, "reused", "")
	h.grow(t, rng, 10, 50)
	for _, to := range []uint64{33, 33, 39} {
		if _, err := d.CatchUp(ctx, sh, to, kvCodec{}); err != nil {
			t.Fatal(err)
		}
		check(t, d, h.models[to], fmt.Sprintf("caught up to %d", to))
	}
	closeDB(d)
	if _, err := sh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	h.grow(t, rng, 5, 50)
	closeDB(sync(cfg, 44, "caught up", ""))

	closeDB(sync(Config{Dir: dir, Ident: "kv v2"}, 44, "rebuilt", `it is of "kv v1", not "kv v2"`))
	closeDB(sync(Config{Dir: dir, Ident: "kv v2"}, 40, "rebuilt", "it is as of time 44, ahead of the store's 40"))

	// A fold cut short: the meta record says unfinished.
	d = sync(Config{Dir: dir, Ident: "kv v2"}, 44, "caught up", "")
	if err := d.commit(d.db.NewBatch(), meta{Ident: "kv v2", At: 44, Valid: false}, true); err != nil {
		t.Fatal(err)
	}
	closeDB(d)
	closeDB(sync(Config{Dir: dir, Ident: "kv v2"}, 44, "rebuilt", "a fold into it did not finish"))

	// Stray files where the state should be.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	closeDB(sync(cfg, 44, "rebuilt", "it did not open"))
}

// failAfter is a Codec that fails after n rows: a catch-up cut short
// there, as a crash is (what was committed stays, the batch in progress
// is lost, as pebble without a write-ahead log loses an unflushed one).
type failAfter struct{ n int }

var errCut = fmt.Errorf("cut short")

func (c *failAfter) StateRows(rec arrow.Record, fn func(key, row []byte, diff int64) error) error {
	return kvCodec{}.StateRows(rec, func(key, row []byte, diff int64) error {
		if c.n == 0 {
			return errCut
		}
		c.n--
		return fn(key, row, diff)
	})
}

// TestCatchUpCutShort: a catch-up whose batches are committed in the
// middle of times (each batch of a few hundred bytes) and cut short after
// any number of rows leaves a state that the next start catches up, not
// rebuilds, to exactly the model, keys counted right. (A Kafka upsert
// ingest commits ~10 MB a time, over a batch's 8 MiB: before, a restart
// almost always found "a fold into it did not finish" and rebuilt every
// key: 7.4 s for 2M keys.)
func TestCatchUpCutShort(t *testing.T) {
	// 0: the default, every time's keys remembered; 1: past the first
	// key of a time, retractions read the DB.
	for _, insertedCap := range []int{0, 1} {
		t.Run(fmt.Sprintf("inserted-cap-%d", insertedCap), func(t *testing.T) { testCatchUpCutShort(t, insertedCap) })
	}
}

func testCatchUpCutShort(t *testing.T, insertedCap int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	sh := kvShard(t)
	h := &history{sh: sh}
	h.grow(t, rng, 1, 30)
	const from = 0
	h.grow(t, rng, 40, 30)
	to := uint64(len(h.models) - 1)
	var rows int
	if err := sh.StreamChanges(ctx, from, to, func(*arrow.Schema) error { return nil }, func(rec arrow.Record) error {
		rows += int(rec.NumRows())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	partials := 0
	for cut := 0; cut <= rows; cut += 1 + cut/8 {
		dir := filepath.Join(t.TempDir(), "state")
		d, err := Open(Config{Dir: dir, Ident: "kv"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Sync(ctx, sh, from, kvCodec{}); err != nil {
			t.Fatal(err)
		}
		d.memtable = 512 // batches of 256 bytes: several a time
		d.insertedCap = insertedCap
		_, err = d.CatchUp(ctx, sh, to, &failAfter{n: cut})
		if err != nil && !errors.Is(err, errCut) {
			t.Fatal(err)
		}
		at, _ := d.At()
		if at != to && at != from {
			partials++
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d, err = Open(Config{Dir: dir, Ident: "kv"})
		if err != nil {
			t.Fatal(err)
		}
		d.insertedCap = insertedCap
		// The next time first (a later one hides a lost change of a key
		// changed again), then the rest.
		next := min(at+1, to)
		out, err := d.Sync(ctx, sh, next, kvCodec{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "caught up"; at < to && out.How != want {
			t.Fatalf("cut after %d of %d rows: the next start %s (%s), want %s", cut, rows, out.How, out.Reason, want)
		}
		check(t, d, h.models[next], fmt.Sprintf("caught up to %d after a cut at %d of %d rows", next, cut, rows))
		if _, err := d.CatchUp(ctx, sh, to, kvCodec{}); err != nil {
			t.Fatal(err)
		}
		check(t, d, h.models[to], fmt.Sprintf("caught up to %d after a cut at %d of %d rows", to, cut, rows))
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if partials == 0 {
		t.Fatalf("no cut left a state between %d and %d: the test does not cut inside a catch-up", from, to)
	}
}

// TestCatchUpReadsNothing: a catch-up of times of a few keys each (Kafka
// bindings) folds without a lookup of the DB, and past the keys a time
// remembers it reads the DB for retractions; both end equal to the model.
func TestCatchUpReadsNothing(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	sh := kvShard(t)
	h := &history{sh: sh}
	h.grow(t, rng, 20, 40)
	from := uint64(len(h.models) - 1)
	h.grow(t, rng, 60, 40)
	to := uint64(len(h.models) - 1)
	for _, tc := range []struct {
		insertedCap int
		wantGets    bool
	}{{0, false}, {1, true}} {
		d, err := Open(Config{Dir: filepath.Join(t.TempDir(), "state"), Ident: "kv"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Sync(ctx, sh, from, kvCodec{}); err != nil {
			t.Fatal(err)
		}
		d.insertedCap = tc.insertedCap
		before := d.foldGets.Load()
		if _, err := d.CatchUp(ctx, sh, to, kvCodec{}); err != nil {
			t.Fatal(err)
		}
		gets := d.foldGets.Load() - before
		if (gets > 0) != tc.wantGets {
			t.Errorf("inserted cap %d: the catch-up of %d times looked up %d keys; want lookups: %v", tc.insertedCap, to-from, gets, tc.wantGets)
		}
		check(t, d, h.models[to], fmt.Sprintf("inserted cap %d: caught up from %d to %d", tc.insertedCap, from, to))
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRebuildRefusesDuplicates: two rows of one key in the store are an
// error, not a state.
func TestRebuildRefusesDuplicates(t *testing.T) {
	ctx := context.Background()
	sh := kvShard(t)
	rec := batch(0, []upd{{"a", "1", 1}, {"a", "2", 1}})
	defer rec.Release()
	if _, err := sh.Append(ctx, 0, 1, rec); err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Dir: t.TempDir(), Ident: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Sync(ctx, sh, 0, kvCodec{}); err == nil || !strings.Contains(err.Error(), "two rows have the same key") {
		t.Fatalf("sync: %v, want two rows of one key refused", err)
	}
}

// kvShard is a new collection (k, v) in a new store.
func kvShard(t *testing.T) *store.Shard {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.CreateShard(ctx, "kv", kvSchema)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// TestSpill: spilled rows shadow the committed ones under their epoch, an
// epoch past 0 hides the committed ones, Scan merges the two in key
// order, and a reopen forgets everything spilled.
func TestSpill(t *testing.T) {
	ctx := context.Background()
	sh := kvShard(t)
	h := &history{sh: sh}
	h.grow(t, rand.New(rand.NewPCG(5, 6)), 10, 30)
	cfg := Config{Dir: filepath.Join(t.TempDir(), "state"), Ident: "kv v1"}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync(ctx, sh, 9, kvCodec{}); err != nil {
		t.Fatal(err)
	}
	model := h.models[9]
	want := map[string]string{}
	for k, v := range model {
		want[k] = v
	}
	err = d.Spill(0, func(put func(key, row []byte, dead bool) error) error {
		for i := range 40 {
			k := fmt.Sprintf("key-%d", i)
			switch i % 3 {
			case 0:
				delete(want, k)
				if err := put([]byte(k), nil, true); err != nil {
					return err
				}
			case 1:
				want[k] = "spilled"
				if err := put([]byte(k), []byte("spilled"), false); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Spill(1, func(put func(key, row []byte, dead bool) error) error {
		return put([]byte("key-1"), []byte("one"), false)
	}); err != nil {
		t.Fatal(err)
	}
	scan := func(epoch uint32) map[string]string {
		got := map[string]string{}
		var last string
		if err := d.Scan(epoch, func(k, v []byte) error {
			if string(k) <= last {
				return fmt.Errorf("key %q after %q", k, last)
			}
			last, got[string(k)] = string(k), string(v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 40 {
		k := fmt.Sprintf("key-%d", i)
		v, ok, err := d.Lookup(0, []byte(k), nil)
		if w, in := want[k]; err != nil || ok != in || string(v) != w {
			t.Errorf("epoch 0: %s = %q %v %v, want %q %v", k, v, ok, err, w, in)
		}
	}
	if got := scan(0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan of epoch 0: %v, want %v", got, want)
	}
	if got := scan(1); fmt.Sprint(got) != "map[key-1:one]" {
		t.Errorf("scan of epoch 1: %v, want only key-1", got)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := scan(0); fmt.Sprint(got) != fmt.Sprint(model) {
		t.Errorf("after a reopen: %v, want the committed %v", got, model)
	}
}
