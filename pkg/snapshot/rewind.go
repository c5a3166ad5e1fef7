package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
)

// ErrRewind is wrapped by errors that make a rewind impossible: a table
// changed shape, or was truncated, between slot_lsn and snapshot_lsn.
var ErrRewind = errors.New("cannot rewind the snapshot")

// inSnapshot reports whether a change at commit LSN t (the time
// pkg/replicate gives it: the LSN of the transaction's commit record) is
// part of a snapshot pinned at snapLSN, the consistent point of the slot
// that exported it. The snapshot sees exactly the transactions whose commit
// record starts before the consistent point: logical decoding of that slot
// would skip them (SnapBuildXactNeedsSkip: commit LSN < start point) and
// stream every later one.
func inSnapshot(t uint64, snapLSN frontier.LSN) bool { return t < uint64(snapLSN) }

// rewind reads the permanent slot from slotLSN and writes every change to
// the snapshotted tables that the snapshot (at snapLSN) includes, negated,
// at time 0. It confirms nothing.
func rewind(ctx context.Context, cfg Config, tables []*table, slotLSN, snapLSN frontier.LSN, sink pipe.Sink, began time.Time) error {
	if slotLSN >= snapLSN {
		return nil
	}
	r := &rewinder{cfg: cfg, sink: sink, snapLSN: snapLSN, tables: map[string]*table{}, began: began}
	for _, tb := range tables {
		r.tables[tb.name] = tb
		r.rows += tb.rows
		r.estimate += tb.tuples
	}
	cfg.Logger.Debug("snapshot: rewinding", "slot", cfg.Slot, "from", slotLSN, "to", snapLSN)
	err := replicate.StreamPG(ctx, replicate.PGConfig{
		Upstream:    cfg.Upstream,
		Publication: cfg.Publication,
		Slot:        cfg.Slot,
		StartLSN:    slotLSN,
		StopAt:      snapLSN - 1, // every commit below snapLSN
		NoAck:       true,
	}, r)
	if err != nil {
		return fmt.Errorf("rewind from %s to %s: %w", slotLSN, snapLSN, err)
	}
	return nil
}

// rewinder is the pipe.Sink (and replicate.RelationSink) of a rewind.
type rewinder struct {
	cfg      Config
	sink     pipe.Sink
	snapLSN  frontier.LSN
	tables   map[string]*table
	began    time.Time
	rows     int64
	estimate int64
	rewound  int64
}

// Relation checks that a snapshotted table still has the columns it was
// copied with.
func (r *rewinder) Relation(t *pgarrow.Table) error {
	tb := r.tables[t.QualifiedName()]
	if tb == nil {
		return nil
	}
	if !sameColumns(tb.t.Columns, t.Columns) {
		return fmt.Errorf("rewind %s: %w: its columns changed after the slot's start (an ALTER TABLE); drop and re-create the slot, or snapshot it before the change",
			tb.name, ErrRewind)
	}
	return nil
}

func sameColumns(a, b []pgarrow.Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].SameType(b[i]) {
			return false
		}
	}
	return true
}

// Data negates the rows of rec that the snapshot includes and writes
// them at time 0.
func (r *rewinder) Data(collection string, rec arrow.Record) error {
	tb := r.tables[collection]
	if tb == nil || rec.NumRows() == 0 {
		return nil
	}
	cols, times, diffs, _ := pipe.SplitData(rec)
	if times == nil || len(cols) != len(tb.t.Columns) {
		return fmt.Errorf("rewind %s: %w: a change has %d columns, the copy %d", tb.name, ErrRewind, len(cols), len(tb.t.Columns))
	}
	for i, c := range cols {
		if want := tb.schema.Field(i).Type; !arrow.TypeEqual(c.DataType(), want) {
			return fmt.Errorf("rewind %s: %w: column %s is %s in a change, %s in the copy", tb.name, ErrRewind, tb.schema.Field(i).Name, c.DataType(), want)
		}
	}
	// Write each run of included rows as one record.
	n := int(rec.NumRows())
	for lo := 0; lo < n; {
		if !inSnapshot(times.Value(lo), r.snapLSN) {
			lo++
			continue
		}
		hi := lo + 1
		for hi < n && inSnapshot(times.Value(hi), r.snapLSN) {
			hi++
		}
		if err := r.emit(tb, cols, diffs, lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// emit writes rows [lo, hi) negated at time 0.
func (r *rewinder) emit(tb *table, cols []arrow.Array, diffs *array.Int64, lo, hi int) error {
	n := hi - lo
	out := make([]arrow.Array, 0, len(cols)+2)
	defer func() {
		for _, a := range out {
			a.Release()
		}
	}()
	for _, c := range cols {
		out = append(out, array.NewSlice(c, int64(lo), int64(hi)))
	}
	tb2 := array.NewUint64Builder(memory.DefaultAllocator)
	defer tb2.Release()
	db := array.NewInt64Builder(memory.DefaultAllocator)
	defer db.Release()
	tb2.AppendValues(make([]uint64, n), nil)
	for i := lo; i < hi; i++ {
		db.Append(-diffs.Value(i))
	}
	out = append(out, tb2.NewArray(), db.NewArray())
	rec := array.NewRecord(tb.schema, out, int64(n))
	defer rec.Release()
	if err := r.sink.Data(tb.name, rec); err != nil {
		return err
	}
	tb.rewound += int64(n)
	r.rewound += int64(n)
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(Progress{Phase: "rewind", Table: tb.name, Rows: r.rows, EstimatedRows: r.estimate, Rewound: r.rewound, Elapsed: time.Since(r.began)})
	}
	return nil
}

// Progress is of no use to a rewind: StreamPG returns at the stop LSN.
func (r *rewinder) Progress(string, frontier.Frontier) error { return nil }

// Error fails the rewind when a snapshotted table has a definite error
// (e.g. a TRUNCATE) inside the snapshot: rows it removed are unknown, so
// the snapshot cannot be taken back to slot_lsn.
func (r *rewinder) Error(collection string, t frontier.Time, msg string) error {
	at := frontier.LSN(t.Pos)
	tb := r.tables[collection]
	if tb == nil || !inSnapshot(uint64(at), r.snapLSN) {
		return nil
	}
	return fmt.Errorf("rewind %s: %w: at %s: %s", tb.name, ErrRewind, at, msg)
}

// Reset fails the rewind like an error: the rows a TRUNCATE inside the
// snapshot removed are unknown.
func (r *rewinder) Reset(collection string, t frontier.Time, _ *arrow.Schema) error {
	return r.Error(collection, t, collection+" was reset (truncated) inside the snapshot")
}
