package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/apache/arrow/go/v17/arrow"
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
		recs, stop, wait := mergeAsync(ctx, g.sc.user.Fields(), srcs, mergeOpts{hi: t + 1, perRow: true}, func(rs *runSet, es []ent) arrow.Record {
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
