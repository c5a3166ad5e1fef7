package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/hint"
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
		if tb.failed.Load() {
			continue // a definite error: none of its changes matter
		}
		r.tables[tb.name] = tb
		r.rows += tb.rows
		r.estimate += tb.tuples
	}
	cfg.Logger.Debug("snapshot: rewinding", "slot", cfg.Slot, "from", slotLSN, "to", snapLSN)
	pc := replicate.PGConfig{
		Upstream:    cfg.Upstream,
		Publication: cfg.Publication,
		Slot:        cfg.Slot,
		StartLSN:    slotLSN,
		StopAt:      snapLSN - 1, // every commit below snapLSN
		NoAck:       true,
	}
	if cfg.KeyedIdentity {
		pc.KeyState = r.keyState
	}
	err := replicate.StreamPG(ctx, pc, r)
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
	// states are the key states of the tables that are not FULL: only
	// the rows the rewind sees inserted (older ones are unknown).
	states map[string]*replicate.KeyState
}

// keyState is the rewind's replicate.PGConfig.KeyState: an empty state
// for every snapshotted table that is not FULL (or was not when loaded).
func (r *rewinder) keyState(t *pgarrow.Table) (*replicate.KeyState, error) {
	tb := r.tables[t.QualifiedName()]
	if tb == nil || tb.key == nil && t.ReplicaIdentity == "full" {
		return nil, nil
	}
	if st := r.states[tb.name]; st != nil {
		return st, nil
	}
	key := tb.key
	if key == nil {
		// FULL when loaded: keyed by every column until the stream says
		// which are its key.
		for _, c := range tb.t.Columns {
			key = append(key, c.Name)
		}
	}
	st, err := replicate.NewKeyState(tb.t, key)
	if err != nil {
		return nil, fmt.Errorf("rewind %s: %w", tb.name, err)
	}
	if r.states == nil {
		r.states = map[string]*replicate.KeyState{}
	}
	r.states[tb.name] = st
	return st, nil
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
	in := func(i int) bool {
		if tb.ck == nil {
			return inSnapshot(times.Value(i), r.snapLSN)
		}
		return inSnapshot(times.Value(i), tb.ck.lsnOf(cols, i))
	}
	for lo := 0; lo < n; {
		if !in(lo) {
			lo++
			continue
		}
		hi := lo + 1
		for hi < n && in(hi) {
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
	if tb == nil {
		return nil
	}
	// In a resumable snapshot, the chunks copied at LSNs beyond it saw it.
	until := r.snapLSN
	if tb.ck != nil {
		until = tb.ck.maxLSN()
	}
	if !inSnapshot(uint64(at), until) {
		return nil
	}
	if replicate.IsConversionError(msg) {
		// A value Arrow cannot hold in a change inside the snapshot: the
		// table fails from the snapshot's time on, like one the copy
		// cannot convert; the rewind goes on for the others.
		tb.failed.Store(true)
		tb.errMsg = "snapshot: rewind: " + msg
		delete(r.tables, collection)
		r.cfg.Logger.Error("snapshot: a row does not convert; its collection has a definite error, the others go on", "collection", tb.name, "error", tb.errMsg)
		return r.sink.Error(collection, frontier.Time{}, tb.errMsg)
	}
	err := fmt.Errorf("rewind %s: %w: at %s: %s", tb.name, ErrRewind, at, msg)
	if r.states[tb.name] != nil {
		err = hint.Wrap(err, fmt.Sprintf("the slot %s started before the copy, and changes in between to rows of %s older than the slot cannot be taken back without REPLICA IDENTITY FULL: drop the slot (SELECT pg_drop_replication_slot('%s');) and snapshot into a new store, or set REPLICA IDENTITY FULL on %s before the slot is created",
			r.cfg.Slot, tb.name, r.cfg.Slot, tb.rel.SQL()))
	}
	return err
}

// Reset fails the rewind like an error: the rows a TRUNCATE inside the
// snapshot removed are unknown.
func (r *rewinder) Reset(collection string, t frontier.Time, _ *arrow.Schema) error {
	return r.Error(collection, t, collection+" was reset (truncated) inside the snapshot")
}
