package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
)

// StreamAsOf is ReadAsOf in bounded memory: it merges the sorted batch
// files of the generation in force at t a row group at a time and hands
// the contents as of t to add as they come, in row order, as records of
// that generation's user columns plus _diff (consolidated across records:
// no row is in two of them). start is called once with that schema
// before the first record (also when there are none). t must be in
// [Since, Upper). A compaction during the stream does not disturb it: the
// files are opened before start. Memory holds one row group of each
// sorted run of the generation, not the collection.
func (sh *Shard) StreamAsOf(ctx context.Context, t uint64, start func(schema *arrow.Schema) error, add func(rec arrow.Record) error) error {
	if sh.kind != kindData {
		return fmt.Errorf("read %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	return sh.streamAsOf(ctx, "read", t, func(g gen) error { return start(g.sc.read) }, func(g gen, rs *runSet, es []ent) arrow.Record {
		return rs.build(g.sc.read, es, false)
	}, add)
}

// ScanAsOf hands the contents as of t of the generation in force at t to
// add, a window of rows at a time in row order (that generation's user
// columns, _time and _diff; consolidated per row across the whole scan,
// each row's _time one of its update times <= t), so that a caller can
// fold the contents as of t into its own structure while the store holds
// no more than a row group of each sorted run. Summed, the updates are
// ReadAsOf(t). begin is called once before the first record; the scan is
// not restarted after it. t must be in [Since, Upper).
func (sh *Shard) ScanAsOf(ctx context.Context, t uint64, begin func(), add func(rec arrow.Record) error) error {
	if sh.kind != kindData {
		return fmt.Errorf("scan %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	return sh.streamAsOf(ctx, "scan", t, func(gen) error { begin(); return nil }, func(g gen, rs *runSet, es []ent) arrow.Record {
		return rs.build(g.sc.batch, es, true)
	}, add)
}

// streamAsOf merges the runs of the generation in force at t, updates at
// times <= t, consolidated per row, into records (build) handed to add;
// the merge runs ahead of add in its own goroutine.
func (sh *Shard) streamAsOf(ctx context.Context, op string, t uint64, start func(g gen) error, build func(g gen, rs *runSet, es []ent) arrow.Record, add func(rec arrow.Record) error) error {
	return sh.readRetry(ctx, func(m *Manifest) error {
		g, err := sh.readableAt(m, "read", t)
		if err != nil {
			return err
		}
		srcs, closeAll, err := sh.openSources(ctx, g, g.batches(m), 0, t+1)
		if err != nil {
			return fmt.Errorf("%s %s as of %d: %w", op, sh.what(), t, err)
		}
		defer closeAll()
		// From here on nothing is retried: output has begun.
		if err := start(g); err != nil {
			return noRetry(err)
		}
		recs, stop, wait := mergeAsync(ctx, g.sc.user.Fields(), srcs, mergeOpts{hi: t + 1, perRow: true, fillRows: sh.st.groupRows()}, func(rs *runSet, es []ent) arrow.Record {
			return build(g, rs, es)
		})
		defer stop()
		for rec := range recs {
			err := add(rec)
			rec.Release()
			if err != nil {
				return noRetry(err)
			}
		}
		if err := wait(); err != nil {
			return noRetry(fmt.Errorf("%s %s as of %d: %w", op, sh.what(), t, err))
		}
		return nil
	})
}

// noRetry keeps readRetry from starting over on an error that matches
// fs.ErrNotExist once a stream has handed out data.
func noRetry(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%v", err)
	}
	return err
}

// changesTimeField leads the rows a changes sort stages: the update's
// time, so that the stage's row order is (time, row).
var changesTimeField = arrow.Field{Name: "_rtr_changes_time", Type: arrow.PrimitiveTypes.Uint64}

// changesChunkBytes is how many bytes of updates StreamChanges sorts in
// memory before it stages them as a sorted run.
const changesChunkBytes = 64 << 20

// StreamChanges is Changes in bounded memory: the same updates in the
// same order (time, then row), handed to add as records of the user
// columns, _time and _diff as they come; start is called once with that
// schema before the first record (also when there are none). Up to 64
// MiB of updates are sorted in memory; beyond that they are sorted in
// chunks staged as sorted runs in a temporary directory, which a k-way
// merge reads a row group of each at a time.
func (sh *Shard) StreamChanges(ctx context.Context, t1, t2 uint64, start func(schema *arrow.Schema) error, add func(rec arrow.Record) error) error {
	return sh.streamChanges(ctx, t1, t2, changesChunkBytes, start, add)
}

func (sh *Shard) streamChanges(ctx context.Context, t1, t2 uint64, chunk int64, start func(schema *arrow.Schema) error, add func(rec arrow.Record) error) error {
	return sh.readRetry(ctx, func(m *Manifest) error {
		gs, i1, i2, err := sh.changesGens(m, t1, t2)
		if err != nil {
			return err
		}
		out := gs[i2].sc
		tmp, err := os.MkdirTemp("", "rtrctl-changes-")
		if err != nil {
			return fmt.Errorf("changes of %s: %w", sh.what(), err)
		}
		defer os.RemoveAll(tmp)
		srt := &changesSorter{out: out, chunk: chunk,
			stage: sh.st.stageIn(tmp, "changes of "+sh.name, arrow.NewSchema(append([]arrow.Field{changesTimeField}, out.user.Fields()...), nil))}
		defer srt.release()
		for k := i1; k <= i2; k++ {
			g := gs[k]
			if k > i1 {
				// The implicit retraction at g.start of what the previous
				// generation holds as of g.start-1.
				if err := sh.retraction(ctx, m, gs[k-1], g.start, srt); err != nil {
					return fmt.Errorf("changes of %s: %w", sh.what(), err)
				}
			}
			if err := sh.changesOf(ctx, m, g, max(t1+1, g.start), min(t2+1, g.end), srt); err != nil {
				return fmt.Errorf("changes of %s: %w", sh.what(), err)
			}
		}
		// From here on nothing is retried: the updates are in srt.
		if err := start(out.batch); err != nil {
			return noRetry(err)
		}
		if err := srt.emit(ctx, add); err != nil {
			return noRetry(fmt.Errorf("changes of %s: %w", sh.what(), err))
		}
		return nil
	})
}

// retraction adds to srt, at time at, the contents of generation prev as
// of at-1 with diffs negated.
func (sh *Shard) retraction(ctx context.Context, m *Manifest, prev gen, at uint64, srt *changesSorter) error {
	srcs, closeAll, err := sh.openSources(ctx, prev, prev.batches(m), 0, at)
	if err != nil {
		return err
	}
	defer closeAll()
	return mergeRuns(prev.sc.user.Fields(), srcs, mergeOpts{hi: at, perRow: true}, func(rs *runSet, es []ent) error {
		for i := range es {
			es[i].time, es[i].diff = at, -es[i].diff
		}
		rec := rs.build(srt.out.batch, es, true)
		defer rec.Release()
		return srt.add(ctx, rec)
	})
}

// changesOf adds to srt the updates of generation g at times in [lo, hi),
// reading only the row groups whose times meet the interval.
func (sh *Shard) changesOf(ctx context.Context, m *Manifest, g gen, lo, hi uint64, srt *changesSorter) error {
	if lo >= hi {
		return nil
	}
	srcs, closeAll, err := sh.openSources(ctx, g, g.batches(m), lo, hi)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, s := range srcs {
		for {
			rec, err := s.next()
			if err != nil {
				return err
			}
			if rec == nil {
				break
			}
			err = srt.addIn(ctx, g, rec, lo, hi)
			rec.Release()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// changesSorter sorts updates by (time, row), consolidated per (row,
// time): in memory up to chunk bytes, beyond that as staged sorted runs
// whose rows lead with the time (changesTimeField).
type changesSorter struct {
	out   *genSchemas
	stage *Stage
	chunk int64
	pend  runs // in the stage's batch schema
	bytes int64
}

// add takes rec (the out batch schema; retained as needed).
func (c *changesSorter) add(ctx context.Context, rec arrow.Record) error {
	if rec.NumRows() == 0 {
		return nil
	}
	n := c.out.user.NumFields()
	cols := append([]arrow.Array{rec.Column(n)}, rec.Columns()...)
	r := array.NewRecord(c.stage.sc.batch, cols, rec.NumRows())
	c.pend = append(c.pend, r)
	c.bytes += arrowutil.RecordBytes(r)
	if c.bytes < c.chunk {
		return nil
	}
	return c.flush(ctx)
}

// addIn adds the rows of rec (of generation g's batch schema) with
// times in [lo, hi).
func (c *changesSorter) addIn(ctx context.Context, g gen, rec arrow.Record, lo, hi uint64) error {
	ts := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64).Uint64Values()
	inside := true
	for _, t := range ts {
		inside = inside && t >= lo && t < hi
	}
	if inside {
		return c.add(ctx, rec)
	}
	rs, err := newRunSet(g.sc.user.Fields())
	if err != nil {
		return err
	}
	defer rs.release()
	es := rs.ents(rs.add(rec), lo, hi)
	if len(es) == 0 {
		return nil
	}
	sub := rs.build(c.out.batch, es, true)
	defer sub.Release()
	return c.add(ctx, sub)
}

// flush stages the pending updates as one sorted run.
func (c *changesSorter) flush(ctx context.Context) error {
	err := c.stage.Write(ctx, c.pend...)
	c.pend.release()
	c.pend, c.bytes = nil, 0
	return err
}

// emit hands the sorted updates to add, without the leading time.
func (c *changesSorter) emit(ctx context.Context, add func(rec arrow.Record) error) error {
	strip := func(rec arrow.Record) error {
		out := array.NewRecord(c.out.batch, rec.Columns()[1:], rec.NumRows())
		defer out.Release()
		return add(out)
	}
	if c.stage.rows == 0 {
		// Everything fits: sort in memory.
		if len(c.pend) == 0 {
			return nil
		}
		sorted, err := c.stage.files.sortConsolidate(c.pend, c.stage.sc)
		if err != nil {
			return err
		}
		defer sorted.release()
		for _, rec := range sorted {
			if err := strip(rec); err != nil {
				return err
			}
		}
		return nil
	}
	if len(c.pend) > 0 {
		if err := c.flush(ctx); err != nil {
			return err
		}
	}
	return c.stage.each(ctx, false, 0, strip)
}

func (c *changesSorter) release() {
	c.pend.release()
	c.pend = nil
	c.stage.Release()
}
