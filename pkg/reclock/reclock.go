// Package reclock maps a source's updates from source time onto the
// store's system clock (milliseconds since the Unix epoch).
//
// It writes bindings (t_sys, F), each saying "by system time t_sys the
// source had reached frontier F", to the store's remap shard for the
// source, and only then releases the updates they bind. An update at
// source time s gets the first binding time t whose frontier is strictly
// beyond s (F[s.Partition] > s.Pos). Bindings only grow (a later binding's
// frontier covers every earlier one's) and system time never goes
// backwards, even when the wall clock does.
//
// Because bindings are durable before the data at their times, a restart
// that replays source updates finds the same bindings and assigns the same
// system times: the output is definite. docs/reclocking.md states the rule
// and the argument.
package reclock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// DefaultInterval is the least time between two minted bindings.
const DefaultInterval = 100 * time.Millisecond

// DefaultMemoryBudget is how many bytes of updates not yet bound a
// Reclocker holds in memory before it stages them in the store.
const DefaultMemoryBudget = 32 << 20

// StagedOutput is an Output that takes staged updates as they are: the
// rows of stage (in source time) all at system time t, in the place of a
// Data call. It owns stage from then on (Stage.Release). An Output
// without it gets the rows through Data, a window at a time.
type StagedOutput interface {
	DataStaged(collection string, schema *arrow.Schema, stage *store.Stage, t uint64) error
}

// Output receives reclocked updates, in order: for each binding, first the
// binding, then the data at its time, then the progress past it.
type Output interface {
	// Binding is called once a binding is durable in the remap shard.
	Binding(b frontier.Binding) error
	// Data receives system-time updates of one collection: the user
	// columns, _time (system ms) and _diff. The record is released after
	// the call; retain it to keep it.
	Data(collection string, schema *arrow.Schema, rec arrow.Record) error
	// Error is a definite error of a collection from system time t on.
	Error(collection string, t uint64, msg string) error
	// Reset says that from system time t on, the collection holds only
	// the data that follows the reset (pipe.Sink.Reset), in schema (its
	// user columns; nil: unchanged).
	Reset(collection string, t uint64, schema *arrow.Schema) error
	// Progress says every collection of the source is complete below
	// upper (system ms).
	Progress(upper uint64) error
}

// Options configure a Reclocker.
type Options struct {
	// Interval is the least time between two minted bindings; zero means
	// DefaultInterval.
	Interval time.Duration
	// Now is the wall clock; nil means time.Now.
	Now func() time.Time
	// Mem allocates the output records; nil means the default allocator.
	Mem memory.Allocator
	// MemoryBudget is how many bytes of updates not yet bound (a large
	// transaction before its commit) are held in memory; beyond it they
	// are staged in the store (store.Stage) until their binding. Zero
	// means DefaultMemoryBudget, negative never stages. Kafka's updates
	// (bound at every fetch) are never staged.
	MemoryBudget int64
}

// Reclocker reclocks one source. It is not safe for concurrent use.
type Reclocker struct {
	st     *store.Store
	source string
	domain frontier.Domain
	opts   Options
	out    Output

	bindings []frontier.Binding // durable, ascending
	// released is the number of bindings whose data is known complete
	// (reported through Output.Progress) in this run.
	released   int
	remapUpper uint64
	progress   frontier.Frontier // the source's progress so far
	lastMint   time.Time
	pending    []held // updates not yet bound
	// pendBytes is the size of the pending records in memory.
	pendBytes int64
	errs      []heldErr
}

type heldErr struct {
	collection string
	at         frontier.Time
	msg        string
	next       bool // bind at the next binding (partitioned domains)
}

// held is a data record waiting for its binding or, when reset is set, a
// reset: both wait in one list, so they come out in the order they came.
type held struct {
	collection string
	reset      *heldReset
	schema     *arrow.Schema // output schema: user columns + _time + _diff
	rec        arrow.Record  // input record
	times      *array.Uint64
	parts      *array.String // nil for unpartitioned domains
	// stage holds staged rows instead of rec, all of partition part.
	stage *store.Stage
	part  string
}

type heldReset struct {
	at     frontier.Time
	schema *arrow.Schema
}

// New loads the source's durable bindings from st and returns a
// Reclocker writing to out.
func New(ctx context.Context, st *store.Store, source string, domain frontier.Domain, out Output, opts Options) (*Reclocker, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Mem == nil {
		opts.Mem = memory.DefaultAllocator
	}
	if opts.MemoryBudget == 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	// Staged updates of an earlier run were never bound (else they would
	// have been committed and removed): the source replays them.
	if err := st.SweepStaged(source); err != nil {
		return nil, fmt.Errorf("reclock %s: %w", source, err)
	}
	r := &Reclocker{st: st, source: source, domain: domain, opts: opts, out: out, progress: frontier.Empty(domain)}
	bs, upper, err := st.Bindings(ctx, source)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reclock %s: %w", source, err)
	}
	for _, b := range bs {
		if b.Frontier.Domain() != domain {
			return nil, fmt.Errorf("reclock %s: the store binds this source in time domain %s, but the input is in %s; use another --source name", source, b.Frontier.Domain(), domain)
		}
	}
	r.bindings, r.remapUpper = bs, upper
	return r, nil
}

// Bindings returns the durable bindings (do not modify).
func (r *Reclocker) Bindings() []frontier.Binding { return r.bindings }

// Progress returns the source progress seen so far in this run.
func (r *Reclocker) Progress() frontier.Frontier { return r.progress }

// Data takes source-time updates of one collection (a pipe data record:
// user columns, _time, _diff and, for partitioned domains, _partition).
// Updates already covered by a durable binding are released at once at
// its time (a replay); the others wait for the next binding beyond them.
func (r *Reclocker) Data(ctx context.Context, collection string, rec arrow.Record) error {
	if rec.NumRows() == 0 {
		return nil
	}
	h, err := r.hold(collection, rec)
	if err != nil {
		return err
	}
	// New data (the usual case) is beyond every binding: it all waits.
	if n := len(r.bindings); n == 0 || countBound(h, r.bindings[n-1].Frontier) == 0 {
		rec.Retain()
		return r.wait(ctx, h)
	}
	// Rows bound by durable bindings go out now; the rest wait.
	var waitRows []int
	byBinding := map[int][]int{}
	for i := 0; i < int(rec.NumRows()); i++ {
		t := h.timeOf(i)
		if k := r.firstBeyond(t); k >= 0 {
			byBinding[k] = append(byBinding[k], i)
		} else {
			waitRows = append(waitRows, i)
		}
	}
	if len(byBinding) > 0 {
		keys := make([]int, 0, len(byBinding))
		for k := range byBinding {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			if err := r.emit(h, byBinding[k], r.bindings[k].Time); err != nil {
				return err
			}
		}
	}
	if len(waitRows) == int(rec.NumRows()) {
		rec.Retain()
		return r.wait(ctx, h)
	}
	if len(waitRows) > 0 {
		sub, err := arrowutil.Take(rec, waitRows, r.opts.Mem)
		if err != nil {
			return err
		}
		h2, err := r.hold(collection, sub)
		if err != nil {
			sub.Release()
			return err
		}
		return r.wait(ctx, h2)
	}
	return nil
}

// wait adds h (its record retained) to the pending updates, staging them
// when they pass the memory budget.
func (r *Reclocker) wait(ctx context.Context, h held) error {
	r.pending = append(r.pending, h)
	r.pendBytes += arrowutil.RecordBytes(h.rec)
	if r.opts.MemoryBudget < 0 || r.domain == frontier.DomainKafka || r.pendBytes <= r.opts.MemoryBudget {
		return nil
	}
	return r.spill(ctx)
}

// spill stages the pending records: each collection's records since its
// last pending reset go into one stage (a run more of it), which takes
// the place of the first of them. Only the order of a collection's data
// and its resets matters, and that stays.
func (r *Reclocker) spill(ctx context.Context) error {
	var out []held
	// open: per collection, per partition, its stage in out.
	open := map[string]map[string]int{}
	recs := map[int][]arrow.Record{}
	for _, h := range r.pending {
		switch {
		case h.reset != nil:
			delete(open, h.collection)
			out = append(out, h)
			continue
		case h.stage != nil:
			if open[h.collection] == nil {
				open[h.collection] = map[string]int{}
			}
			open[h.collection][h.part] = len(out)
			out = append(out, h)
			continue
		}
		parts, err := r.byPartition(h)
		if err != nil {
			return err
		}
		for _, part := range slices.Sorted(maps.Keys(parts)) {
			rec := parts[part]
			k, ok := open[h.collection][part]
			if !ok || !out[k].schema.Equal(h.schema) {
				sg, err := r.st.NewStage(r.source, rec.Schema())
				if err != nil {
					return fmt.Errorf("reclock %s: %w", r.source, err)
				}
				k = len(out)
				if open[h.collection] == nil {
					open[h.collection] = map[string]int{}
				}
				open[h.collection][part] = k
				out = append(out, held{collection: h.collection, schema: h.schema, stage: sg, part: part})
			}
			recs[k] = append(recs[k], rec)
		}
	}
	r.pending, r.pendBytes = out, 0
	var first error
	for k, rs := range recs {
		if first == nil {
			if err := out[k].stage.Write(ctx, rs...); err != nil {
				first = fmt.Errorf("reclock %s: stage updates of %s: %w", r.source, out[k].collection, err)
			}
		}
		for _, rec := range rs {
			rec.Release()
		}
	}
	return first
}

// byPartition returns h's rows per partition ("" in unpartitioned
// domains), taking over h's reference to its record.
func (r *Reclocker) byPartition(h held) (map[string]arrow.Record, error) {
	if h.parts == nil {
		return map[string]arrow.Record{"": h.rec}, nil
	}
	rows := map[string][]int{}
	for i := 0; i < h.parts.Len(); i++ {
		p := h.parts.Value(i)
		rows[p] = append(rows[p], i)
	}
	out := map[string]arrow.Record{}
	if len(rows) == 1 {
		for p := range rows {
			out[p] = h.rec
		}
		return out, nil
	}
	defer h.rec.Release()
	for p, idx := range rows {
		sub, err := arrowutil.Take(h.rec, idx, r.opts.Mem)
		if err != nil {
			for _, rec := range out {
				rec.Release()
			}
			return nil, err
		}
		out[p] = sub
	}
	return out, nil
}

// Error takes a definite error of a collection at source time at; it is
// released at the time of the first binding beyond at.
//
// Error times of partitioned domains carry no partition; their errors are
// released at the next binding.
func (r *Reclocker) Error(ctx context.Context, collection string, at frontier.Time, msg string) error {
	if r.domain.Partitioned() {
		r.errs = append(r.errs, heldErr{collection: collection, at: at, msg: msg, next: true})
		return nil
	}
	if k := r.firstBeyond(at); k >= 0 {
		return r.out.Error(collection, r.bindings[k].Time, msg)
	}
	r.errs = append(r.errs, heldErr{collection: collection, at: at, msg: msg})
	return nil
}

// Reset takes a reset of a collection at source time at; it is released
// at the time of the first binding beyond at, in order with the data
// around it (the data before it at at is superseded, the data after it is
// the new contents).
func (r *Reclocker) Reset(ctx context.Context, collection string, at frontier.Time, schema *arrow.Schema) error {
	if k := r.firstBeyond(at); k >= 0 {
		return r.out.Reset(collection, r.bindings[k].Time, schema)
	}
	r.pending = append(r.pending, held{collection: collection, reset: &heldReset{at: at, schema: schema}})
	return nil
}

// SourceProgress records that the source is complete below f. A binding is
// minted now if f is beyond the last binding and the interval since the
// last mint has passed; otherwise at a later Tick.
func (r *Reclocker) SourceProgress(ctx context.Context, f frontier.Frontier) error {
	if f.Domain() != r.domain {
		return fmt.Errorf("reclock %s: progress in domain %s, want %s", r.source, f.Domain(), r.domain)
	}
	j, err := frontier.Join(r.progress, f)
	if err != nil {
		return fmt.Errorf("reclock %s: %w", r.source, err)
	}
	r.progress = j
	// Durable bindings from an earlier run that the source has now passed
	// again: their replayed data is complete, report it.
	for r.released < len(r.bindings) && r.progress.Covers(r.bindings[r.released].Frontier) {
		b := r.bindings[r.released]
		r.released++
		if err := r.out.Progress(b.Time + 1); err != nil {
			return err
		}
	}
	return r.Tick(ctx, false)
}

// Tick mints a binding if the source progressed beyond the last binding
// and the interval has passed (or now is true: a recency request waits).
func (r *Reclocker) Tick(ctx context.Context, now bool) error {
	if n := len(r.bindings); n > 0 && r.bindings[n-1].Frontier.Covers(r.progress) {
		return nil // nothing new to bind
	}
	if r.progress.IsEmpty() || r.replaying() {
		return nil
	}
	wall := r.opts.Now()
	if !now && !r.lastMint.IsZero() && wall.Sub(r.lastMint) < r.opts.Interval {
		return nil
	}
	return r.mint(ctx, wall)
}

// Pending reports whether source progress is waiting to be bound.
func (r *Reclocker) Pending() bool {
	n := len(r.bindings)
	return !r.progress.IsEmpty() && (n == 0 || !r.bindings[n-1].Frontier.Covers(r.progress))
}

// replaying reports whether progress has not yet passed the last durable
// binding again (after a restart). A partitioned source can then be
// beyond it in one partition and behind it in another: a binding of that
// progress would be less than the last, which bindings never are, so none
// is minted until the replay covers it.
func (r *Reclocker) replaying() bool {
	n := len(r.bindings)
	return n > 0 && !r.progress.Covers(r.bindings[n-1].Frontier)
}

// mint makes the binding (t, progress) durable, then releases every held
// update it binds, then reports progress t+1.
func (r *Reclocker) mint(ctx context.Context, wall time.Time) error {
	t := uint64(wall.UnixMilli())
	if n := len(r.bindings); n > 0 && t <= r.bindings[n-1].Time {
		t = r.bindings[n-1].Time + 1 // never backwards, even if the wall clock is
	}
	if t < r.remapUpper {
		t = r.remapUpper
	}
	b := frontier.Binding{Time: t, Frontier: r.progress}
	if _, err := r.st.AppendBindings(ctx, r.source, r.remapUpper, t+1, []frontier.Binding{b}); err != nil {
		return fmt.Errorf("reclock %s: persist binding at %d: %w", r.source, t, err)
	}
	r.bindings = append(r.bindings, b)
	r.released = len(r.bindings)
	r.remapUpper = t + 1
	r.lastMint = wall
	if err := r.out.Binding(b); err != nil {
		return err
	}
	k := len(r.bindings) - 1
	var still []held
	for _, h := range r.pending {
		if h.reset != nil {
			if !b.Frontier.Beyond(h.reset.at) {
				still = append(still, h)
			} else if err := r.out.Reset(h.collection, t, h.reset.schema); err != nil {
				return err
			}
			continue
		}
		if h.stage != nil {
			rest, err := r.emitStaged(ctx, h, b.Frontier, t)
			if err != nil {
				return err
			}
			if rest != nil {
				still = append(still, held{collection: h.collection, schema: h.schema, stage: rest, part: h.part})
			}
			continue
		}
		// Held rows are beyond no earlier binding: this one binds those
		// its frontier is beyond.
		switch n := countBound(h, b.Frontier); {
		case n == 0:
			still = append(still, h)
			continue
		case n == int(h.rec.NumRows()):
			if err := r.emit(h, nil, t); err != nil {
				return err
			}
			h.rec.Release()
			continue
		}
		var bound, wait []int
		for i := 0; i < int(h.rec.NumRows()); i++ {
			if b.Frontier.Beyond(h.timeOf(i)) {
				bound = append(bound, i)
			} else {
				wait = append(wait, i)
			}
		}
		if err := r.emit(h, bound, t); err != nil {
			return err
		}
		sub, err := arrowutil.Take(h.rec, wait, r.opts.Mem)
		h.rec.Release()
		if err != nil {
			return err
		}
		h2, err := r.hold(h.collection, sub)
		if err != nil {
			return err
		}
		still = append(still, h2)
	}
	r.pending = still
	r.pendBytes = 0
	for _, h := range still {
		if h.rec != nil {
			r.pendBytes += arrowutil.RecordBytes(h.rec)
		}
	}
	var stillErrs []heldErr
	for _, e := range r.errs {
		if e.next || r.firstBeyond(e.at) == k {
			if err := r.out.Error(e.collection, t, e.msg); err != nil {
				return err
			}
			continue
		}
		stillErrs = append(stillErrs, e)
	}
	r.errs = stillErrs
	return r.out.Progress(t + 1)
}

// firstBeyond returns the index of the first durable binding whose
// frontier is beyond t, or -1. Frontiers only grow, so beyond-ness is
// monotone in the index: binary search.
func (r *Reclocker) firstBeyond(t frontier.Time) int {
	k := sort.Search(len(r.bindings), func(i int) bool { return r.bindings[i].Frontier.Beyond(t) })
	if k == len(r.bindings) {
		return -1
	}
	return k
}

// Close releases held updates. Updates not yet bound are dropped: they
// will be replayed by the source after a restart.
func (r *Reclocker) Close() {
	for _, h := range r.pending {
		if h.rec != nil {
			h.rec.Release()
		}
		if h.stage != nil {
			h.stage.Release()
		}
	}
	r.pending, r.pendBytes = nil, 0
}

// emitStaged emits the rows of h's stage that binding frontier f binds at
// time t, and returns the stage of the rows that still wait (nil: none).
func (r *Reclocker) emitStaged(ctx context.Context, h held, f frontier.Frontier, t uint64) (*store.Stage, error) {
	lo, hi, ok := h.stage.TimeRange()
	if !ok {
		h.stage.Release()
		return nil, nil
	}
	upper := f.Get(h.part)
	if lo >= upper {
		return h.stage, nil // none bound
	}
	bound, rest := h.stage, (*store.Stage)(nil)
	if hi >= upper {
		var err error
		if bound, rest, err = h.stage.Split(ctx, upper); err != nil {
			return nil, fmt.Errorf("reclock %s: %w", r.source, err)
		}
	}
	if so, ok := r.out.(StagedOutput); ok {
		return rest, so.DataStaged(h.collection, h.schema, bound, t)
	}
	defer bound.Release()
	err := bound.Each(ctx, t, func(rec arrow.Record) error {
		out := array.NewRecord(h.schema, rec.Columns(), rec.NumRows())
		defer out.Release()
		return r.out.Data(h.collection, h.schema, out)
	})
	if err != nil {
		rest.Release()
		return nil, err
	}
	return rest, nil
}

func (r *Reclocker) hold(collection string, rec arrow.Record) (held, error) {
	s := rec.Schema()
	ti := s.FieldIndices(pipe.ColTime)
	di := s.FieldIndices(pipe.ColDiff)
	if len(ti) != 1 || len(di) != 1 {
		return held{}, fmt.Errorf("reclock %s: data of %s lacks _time or _diff", r.source, collection)
	}
	h := held{collection: collection, rec: rec, times: rec.Column(ti[0]).(*array.Uint64)}
	if r.domain.Partitioned() {
		pi := s.FieldIndices(pipe.ColPartition)
		if len(pi) != 1 {
			return held{}, fmt.Errorf("reclock %s: data of %s lacks _partition", r.source, collection)
		}
		h.parts = rec.Column(pi[0]).(*array.String)
	}
	h.schema = outSchema(s)
	return h, nil
}

// outSchema is the output schema of updates in input schema s: the user
// columns, _time in system time and _diff.
func outSchema(s *arrow.Schema) *arrow.Schema {
	var fields []arrow.Field
	for _, f := range s.Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		}
		fields = append(fields, f)
	}
	md := s.Metadata()
	return pipe.DataSchema(fields, frontier.DomainSystem, systemMetadata(md))
}

// DataStaged takes source-time updates of one collection that are staged
// already (a resumable snapshot's copy: records in schema in, with the
// user columns, _time and _diff), all of partition part in a partitioned
// domain (MySQL's time-0 partition; "" otherwise): like Data's, they go
// out at the first binding beyond their times, read from the stage's
// files then. The Reclocker owns stage from then on.
func (r *Reclocker) DataStaged(ctx context.Context, collection string, in *arrow.Schema, stage *store.Stage, part string) error {
	if r.domain.Partitioned() != (part != "") {
		stage.Release()
		return fmt.Errorf("reclock %s: staged updates of %s in partition %q of domain %s", r.source, collection, part, r.domain)
	}
	lo, _, ok := stage.TimeRange()
	if !ok {
		stage.Release()
		return nil
	}
	h := held{collection: collection, schema: outSchema(in), stage: stage, part: part}
	// A replay: the rows durable bindings bind go out now.
	for k := r.firstBeyond(frontier.Time{Partition: part, Pos: lo}); k >= 0 && k < len(r.bindings) && h.stage != nil; k++ {
		rest, err := r.emitStaged(ctx, h, r.bindings[k].Frontier, r.bindings[k].Time)
		if err != nil {
			return err
		}
		h.stage = rest
	}
	if h.stage != nil {
		r.pending = append(r.pending, h)
	}
	return nil
}

// systemMetadata rewrites a data stream's metadata for system time.
func systemMetadata(md arrow.Metadata) arrow.Metadata {
	keys, vals := append([]string{}, md.Keys()...), append([]string{}, md.Values()...)
	for i, k := range keys {
		if k == pipe.KeyTime {
			vals[i] = string(frontier.DomainSystem)
		}
	}
	return arrow.NewMetadata(keys, vals)
}

func (h held) timeOf(i int) frontier.Time {
	t := frontier.Time{Pos: h.times.Value(i)}
	if h.parts != nil {
		t.Partition = h.parts.Value(i)
	}
	return t
}

// countBound returns how many rows of h frontier f is beyond. Rows come
// in runs of one partition (a source's chunks), so f is looked up once
// per run.
func countBound(h held, f frontier.Frontier) int {
	n := 0
	var part string
	var upper uint64
	for i := 0; i < h.times.Len(); i++ {
		if i == 0 || h.parts != nil && h.parts.Value(i) != part {
			t := h.timeOf(i)
			part, upper = t.Partition, f.Get(t.Partition)
		}
		if h.times.Value(i) < upper {
			n++
		}
	}
	return n
}

// emit writes rows of h (every row when rows is nil) at system time t.
func (r *Reclocker) emit(h held, rows []int, t uint64) error {
	sub := h.rec
	if rows != nil {
		var err error
		if sub, err = arrowutil.Take(h.rec, rows, r.opts.Mem); err != nil {
			return err
		}
		defer sub.Release()
	}
	n := int(sub.NumRows())
	s := sub.Schema()
	cols := make([]arrow.Array, 0, h.schema.NumFields())
	var diff arrow.Array
	for i, f := range s.Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColPartition:
			continue
		case pipe.ColDiff:
			diff = sub.Column(i)
			continue
		}
		cols = append(cols, sub.Column(i))
	}
	buf := memory.NewResizableBuffer(r.opts.Mem)
	buf.Resize(n * 8)
	ts := arrow.Uint64Traits.CastFromBytes(buf.Bytes())
	for i := range ts {
		ts[i] = t
	}
	data := array.NewData(arrow.PrimitiveTypes.Uint64, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
	buf.Release()
	times := array.NewUint64Data(data)
	data.Release()
	defer times.Release()
	cols = append(cols, times, diff)
	out := array.NewRecord(h.schema, cols, int64(n))
	defer out.Release()
	return r.out.Data(h.collection, h.schema, out)
}
