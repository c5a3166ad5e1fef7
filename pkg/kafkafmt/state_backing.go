package kafkafmt

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Backing holds the upsert state beyond what a decoder keeps in memory
// (pkg/keystate through pkg/ingest): the collection as of a committed
// store time. The decoder's table is then a cache of bounded size in
// front of it: a key it does not hold is looked up in the backing, and an
// entry is dropped from the table only when its last change is in the
// backing already (Clean), so that the table and the backing together
// always answer what the stream has decoded.
type Backing interface {
	// Get appends key's value to dst; false when the key has none.
	Get(key, dst []byte) ([]byte, bool, error)
	// Clean reports whether a change at (partition, offset) is in the
	// backing already. It is called from the decoder's goroutine while
	// the backing is caught up in another.
	Clean(partition int32, offset int64) bool
	// Folds counts the catch-ups of the backing: while it stays the same,
	// what Clean answers does not change.
	Folds() uint64
}

// Backed is implemented by decoders whose state can live in a Backing
// (upsert).
type Backed interface {
	// SetBacking makes b the decoder's state, with keys keys, the table
	// in memory a cache of about budget bytes. It replaces any state
	// held (the caller synced b to where the stream resumes).
	SetBacking(b Backing, keys int, budget int64)
	// StateRows is keystate.Codec: every row's raw key and value bytes
	// and _diff of a store record of the collection.
	StateRows(rec arrow.Record, fn func(key, value []byte, diff int64) error) error
}

// Failer is implemented by decoders that can fail outside Add (a backed
// upsert decoder whose backing failed while Flush applied the last
// records): after Flush, a non-nil Err means the batch is not the
// topic's and the stream must stop.
type Failer interface {
	Err() error
}

// Err implements Failer.
func (d *upsertDecoder) Err() error { return d.err }

// posLoaded is the partition of an entry loaded from the backing and not
// changed since (always clean).
const posLoaded = -1

// SetBacking implements Backed.
func (d *upsertDecoder) SetBacking(b Backing, keys int, budget int64) {
	d.ResetState()
	d.loading = nil
	d.backing, d.live, d.budget = b, keys, budget
}

// load puts key (hash h), which the table does not hold, into the table
// from the backing: live with its value, or not at all when it has none.
func (d *upsertDecoder) load(key []byte, h uint64) (uint32, bool, error) {
	v, ok, err := d.backing.Get(key, d.got[:0])
	if err != nil || !ok {
		return 0, false, err
	}
	d.got = v
	id := d.state.add(key, h, len(v))
	d.state.setValue(id, v)
	d.state.setLive(id, true)
	d.state.setPos(id, posLoaded, 0)
	return id, true, nil
}

// lookup is the entry of key (hash h) in the table, loaded from the
// backing when there is one and the table does not hold the key; ok is
// false when neither has it. The entry may be a deleted key's, not live.
func (d *upsertDecoder) lookup(key []byte, h uint64) (id uint32, ok bool, err error) {
	if id, ok = d.state.findHashed(key, h); ok || d.backing == nil {
		return id, ok, nil
	}
	return d.load(key, h)
}

// forget drops id from the table at the end of a batch when the key is
// deleted: without a backing the table holds live keys only; with one a
// deleted key stays (as not live) until the backing has the deletion.
func (d *upsertDecoder) forget(id uint32) {
	if d.backing == nil {
		d.state.remove(id)
	}
}

// tableBytes estimates the memory the table holds.
func (t *stateTable) tableBytes() int64 {
	return int64(cap(t.arena)) + 8*int64(len(t.slots)+len(t.ids)) + 4*int64(cap(t.free))
}

// evict drops clean entries (loaded from the backing and unchanged, or
// whose last change is in the backing) until the table's live records
// and the slots take three quarters of the budget, when the table is over budget. It runs between
// batches (no entry is netted).
func (d *upsertDecoder) evict() {
	st := d.state
	if d.backing == nil || st.tableBytes() <= d.budget {
		return
	}
	folds := d.backing.Folds()
	if d.evictedAt == folds+1 {
		return // nothing more is clean since the last pass
	}
	// compact leaves the arena twice its live records.
	target := int(max(d.budget*3/4-8*int64(len(st.slots)+len(st.ids)), 0) / 2)
	var drop []uint32
	used := len(st.arena) - st.garbage
	st.each(func(id uint32) {
		if used <= target {
			return
		}
		if part, off := st.pos(id); part == posLoaded || d.backing.Clean(part, off) {
			drop = append(drop, id)
			used -= st.recSize(st.ids[id])
		}
	})
	if len(drop) > st.len()/8 {
		st.removeMany(drop)
	} else {
		for _, id := range drop {
			st.remove(id)
		}
	}
	if st.tableBytes() > d.budget {
		// All that is clean is gone: wait for the next fold.
		d.evictedAt = folds + 1
	}
	d.evicted += len(drop)
	if st.garbage > 0 {
		// Give the memory back now rather than at the next growth.
		st.compact(0)
	}
}

// Evicted is how many entries the table dropped for its budget (a
// backed decoder's cache evictions).
func (d *upsertDecoder) Evicted() int { return d.evicted }

// StateRows implements Backed: the rows as the envelope writes them
// (upsertRows.stateOf).
func (d *upsertDecoder) StateRows(rec arrow.Record, fn func(key, value []byte, diff int64) error) error {
	di := rec.Schema().FieldIndices(pipe.ColDiff)
	if len(di) != 1 {
		return fmt.Errorf("upsert state rows: no column %s in %v", pipe.ColDiff, rec.Schema())
	}
	diffs, ok := rec.Column(di[0]).(*array.Int64)
	if !ok {
		return fmt.Errorf("upsert state rows: _diff is %s, want int64", rec.Column(di[0]).DataType())
	}
	row, err := d.out.stateOf(rec)
	if err != nil {
		return fmt.Errorf("upsert state rows: %w", err)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		k, v, err := row(i)
		if err != nil {
			return fmt.Errorf("upsert state rows: %w", err)
		}
		if err := fn(k, v, diffs.Value(i)); err != nil {
			return err
		}
	}
	return nil
}
