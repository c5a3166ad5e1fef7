package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// DefaultGroupInterval is how long ApplyPipe gathers commits before it
// writes them, unless the pipe ends first.
const DefaultGroupInterval = time.Second

// ApplyOptions tune ApplyPipe.
type ApplyOptions struct {
	// GroupInterval: commits are gathered (validated, not yet written)
	// until the pipe ends or this long has passed since the first of them;
	// then they are written in order. Zero means DefaultGroupInterval.
	GroupInterval time.Duration
}

// ApplyStats says what ApplyPipe committed.
type ApplyStats struct {
	Streams int
	// Commits counts data appends (including progress-only ones).
	Commits int
	// Rows counts committed data rows, Skipped rows already durable (a
	// replay).
	Rows, Skipped int64
	Bindings      int
	Errors        int
	// Resets counts new generations (a TRUNCATE, a re-snapshot).
	Resets int
	// Uncommitted counts data rows after the last progress record of
	// their collection when the pipe ended: they were not committed.
	Uncommitted map[string]int64
}

// pending is what a pipe has said about one collection since its last
// commit.
type pending struct {
	schema *arrow.Schema // user columns + _time + _diff
	recs   []arrow.Record
	rows   int64
	// minTime is the smallest _time of recs.
	minTime uint64
	// closed is the upper of the last progress applied for this collection
	// in this pipe (0: none yet). Data below it is a time going backwards.
	closed uint64
	// reset is the user schema of the last reset of this pipe with a
	// schema, which the next data stream must have (its generation is
	// written with the group).
	reset *arrow.Schema
}

// dropFrom drops p's rows at times t or later.
func (p *pending) dropFrom(t uint64) error {
	var keep []arrow.Record
	p.rows = 0
	for _, rec := range p.recs {
		times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
		var rows []int
		for i := 0; i < times.Len(); i++ {
			if times.Value(i) < t {
				rows = append(rows, i)
			}
		}
		switch len(rows) {
		case times.Len():
			keep = append(keep, rec)
		case 0:
			rec.Release()
		default:
			sub, err := arrowutil.Take(rec, rows, memory.DefaultAllocator)
			rec.Release()
			if err != nil {
				return err
			}
			keep = append(keep, sub)
		}
	}
	p.recs = keep
	for _, rec := range keep {
		p.rows += rec.NumRows()
	}
	return nil
}

// ApplyPipe commits a pipe of system-time updates to the store:
//
//   - data streams are buffered per collection; their rows must be at
//     system times (rtr.time = system_ms);
//   - a progress stream with upper U for a collection (or, with an empty
//     collection, for every collection the pipe has carried so far)
//     commits that collection's buffered rows with a compare-and-append
//     that advances its upper to U;
//   - a bindings stream is committed to the source's remap shard at once,
//     so bindings are durable before data at their times;
//   - an error stream commits the collection's buffered rows up to the
//     error's time, then records the definite error there;
//   - a reset stream drops the collection's buffered rows at its time or
//     later (they came before it), commits the rest up to its time and
//     starts a new generation of the collection there.
//
// A pipe may replay times the store already holds (a restarted stage): the
// replayed part must equal what is durable, and is skipped. Data at a time
// below a progress already seen for its collection in the same pipe is bad
// input.
//
// Commits are written in groups: everything is validated as it arrives,
// and the commits gathered are written, in order, when the pipe ends or
// opts.GroupInterval after the first of them. On bad input ApplyPipe stops
// and writes nothing of the current group; earlier groups stay (each
// commit is atomic). So a finite pipe with bad input anywhere leaves the
// store exactly as it was, unless the pipe took longer than a group
// interval to arrive. Rows not closed by a progress record are never
// committed. Shards are created only by their first commit.
func (s *Store) ApplyPipe(ctx context.Context, r *pipe.Reader, opts ApplyOptions) (ApplyStats, error) {
	if opts.GroupInterval <= 0 {
		opts.GroupInterval = DefaultGroupInterval
	}
	st := ApplyStats{Uncommitted: map[string]int64{}}
	var group []func() error
	var groupStart time.Time
	queue := func(op func() error) {
		if len(group) == 0 {
			groupStart = time.Now()
		}
		group = append(group, op)
	}
	flush := func() error {
		for i, op := range group {
			if err := op(); err != nil {
				group = group[i+1:]
				return err
			}
		}
		group = group[:0]
		return nil
	}
	pend := map[string]*pending{}
	order := []string{} // collections in order of first appearance
	defer func() {
		for _, p := range pend {
			for _, rec := range p.recs {
				rec.Release()
			}
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("apply pipe: %w", err)
		}
		if len(group) > 0 && time.Since(groupStart) >= opts.GroupInterval {
			if err := flush(); err != nil {
				return st, fmt.Errorf("apply pipe: %w", err)
			}
		}
		stream, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("apply pipe: %w", err)
		}
		st.Streams++
		h := stream.Header
		switch h.Kind {
		case pipe.KindData:
			if h.Domain != frontier.DomainSystem {
				return st, fmt.Errorf("apply pipe: stream %d: data of %s is at %s times, but the store holds system times; pipe it through 'rtrctl reclock' first", stream.Index, h.Collection, h.Domain)
			}
			p := pend[h.Collection]
			if p == nil {
				p = &pending{}
				pend[h.Collection] = p
				order = append(order, h.Collection)
			}
			if err := s.checkSchema(ctx, h.Collection, p, stream.Schema); err != nil {
				return st, fmt.Errorf("apply pipe: stream %d: %w", stream.Index, err)
			}
			for {
				rec, err := stream.NextRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return st, fmt.Errorf("apply pipe: %w", err)
				}
				if rec.NumRows() == 0 {
					rec.Release()
					continue
				}
				times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
				for i := 0; i < times.Len(); i++ {
					t := times.Value(i)
					if t < p.closed {
						rec.Release()
						return st, fmt.Errorf("apply pipe: stream %d: %s has a row at time %d, but this pipe already said %s was complete up to %d (times went backwards)", stream.Index, h.Collection, t, h.Collection, p.closed)
					}
					if p.rows == 0 || t < p.minTime {
						p.minTime = t
					}
					p.rows++
				}
				p.recs = append(p.recs, rec)
			}
		case pipe.KindProgress:
			f, err := stream.ReadProgress()
			if err != nil {
				return st, fmt.Errorf("apply pipe: %w", err)
			}
			if h.Domain != frontier.DomainSystem {
				return st, fmt.Errorf("apply pipe: stream %d: progress at %s times, but the store holds system times; pipe it through 'rtrctl reclock' first", stream.Index, h.Domain)
			}
			targets := []string{h.Collection}
			if h.Collection == "" {
				targets = append([]string{}, order...)
				if h.Source != "" {
					more, err := s.SourceCollections(ctx, h.Source)
					if err != nil {
						return st, fmt.Errorf("apply pipe: %w", err)
					}
					for _, c := range more {
						if pend[c] == nil {
							targets = append(targets, c)
						}
					}
				}
			}
			for _, c := range targets {
				p := pend[c]
				if p == nil {
					p = &pending{}
					pend[c] = p
					order = append(order, c)
				}
				op, err := s.prepareCommit(ctx, c, p, f.Pos(), &st)
				if err != nil {
					return st, fmt.Errorf("apply pipe: stream %d: %w", stream.Index, err)
				}
				queue(op)
			}
		case pipe.KindBindings:
			bs, err := stream.ReadBindings()
			if err != nil {
				return st, fmt.Errorf("apply pipe: %w", err)
			}
			source := h.Source
			queue(func() error {
				if err := s.applyBindings(ctx, source, bs); err != nil {
					return err
				}
				st.Bindings += len(bs)
				return nil
			})
		case pipe.KindError, pipe.KindReset:
			if h.Domain != frontier.DomainSystem {
				return st, fmt.Errorf("apply pipe: stream %d: %s of %s at %s time, but the store holds system times; pipe it through 'rtrctl reclock' first", stream.Index, h.Kind, h.Collection, h.Domain)
			}
			p := pend[h.Collection]
			if p == nil {
				p = &pending{}
				pend[h.Collection] = p
				order = append(order, h.Collection)
			}
			var op func() error
			if h.Kind == pipe.KindError {
				t, msg, rerr := stream.ReadError()
				if rerr != nil {
					return st, fmt.Errorf("apply pipe: %w", rerr)
				}
				op, err = s.prepareError(ctx, h.Collection, p, t, msg, &st)
			} else {
				t, schema, rerr := stream.ReadReset()
				if rerr != nil {
					return st, fmt.Errorf("apply pipe: %w", rerr)
				}
				op, err = s.prepareReset(ctx, h.Collection, p, t, schema, &st)
			}
			if err != nil {
				return st, fmt.Errorf("apply pipe: stream %d: %w", stream.Index, err)
			}
			queue(op)
		}
	}
	if err := flush(); err != nil {
		return st, fmt.Errorf("apply pipe: %w", err)
	}
	for _, c := range order {
		if p := pend[c]; p.rows > 0 {
			st.Uncommitted[c] = p.rows
		}
	}
	return st, nil
}

// SourceCollections returns the collections whose data came from source
// (their schema's rtr.source).
func (s *Store) SourceCollections(ctx context.Context, source string) ([]string, error) {
	names, err := s.Collections(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		sh, err := s.Shard(ctx, n)
		if err != nil {
			return nil, err
		}
		if src, ok := sh.Schema().Metadata().GetValue(pipe.KeySource); ok && src == source {
			out = append(out, n)
		}
	}
	return out, nil
}

// checkSchema compares a data stream's schema with what the pipe said
// before and with the shard's, before anything is committed.
func (s *Store) checkSchema(ctx context.Context, name string, p *pending, schema *arrow.Schema) error {
	if p.schema == nil && p.reset != nil {
		if d := fieldsDiff(pipeUserFields(schema), p.reset.Fields()); d != "" {
			return &SchemaMismatchError{Collection: name, Detail: "the data after a reset differs from the reset's schema: " + d}
		}
		p.schema = schema
		return nil
	}
	if p.schema != nil {
		if d := fieldsDiff(schema.Fields(), p.schema.Fields()); d != "" {
			return &SchemaMismatchError{Collection: name, Detail: "two data streams of this pipe differ: " + d}
		}
		return nil
	}
	p.schema = schema
	sh, err := s.Shard(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// The latest generation's schema, or for a replay an earlier one's;
	// the append checks the generation its times fall in.
	d := fieldsDiff(pipeUserFields(schema), sh.Schema().Fields())
	for _, g := range sh.Generations() {
		if fieldsDiff(pipeUserFields(schema), g.Schema.Fields()) == "" {
			d = ""
		}
	}
	if d != "" {
		return &SchemaMismatchError{Collection: name, Detail: d}
	}
	return nil
}

func pipeUserFields(s *arrow.Schema) []arrow.Field {
	var fs []arrow.Field
	for _, f := range s.Fields() {
		if f.Name == pipe.ColTime || f.Name == pipe.ColDiff || f.Name == pipe.ColPartition {
			continue
		}
		fs = append(fs, f)
	}
	return fs
}

// prepareCommit checks that p's rows can be committed to collection name
// with its upper advanced to newUpper, detaches them from p, and returns
// the operation that commits them.
func (s *Store) prepareCommit(ctx context.Context, name string, p *pending, newUpper uint64, st *ApplyStats) (func() error, error) {
	if newUpper < p.closed {
		return nil, fmt.Errorf("progress of %s went backwards: %d after %d", name, newUpper, p.closed)
	}
	for _, rec := range p.recs {
		times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
		for i := 0; i < times.Len(); i++ {
			if times.Value(i) >= newUpper {
				return nil, fmt.Errorf("%s has a row at time %d at or beyond its progress %d: progress must come after the rows it completes", name, times.Value(i), newUpper)
			}
		}
	}
	if p.schema == nil {
		if _, err := s.Shard(ctx, name); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("progress for %s, which has neither data in this pipe nor a shard in the store", name)
			}
			return nil, err
		}
	}
	schema, recs, rows, minTime, prevClosed := p.schema, p.recs, p.rows, p.minTime, p.closed
	p.recs, p.rows, p.minTime = nil, 0, 0
	p.closed = newUpper
	return func() error {
		defer func() {
			for _, r := range recs {
				r.Release()
			}
		}()
		var sh *Shard
		var err error
		if schema != nil {
			sh, err = s.CreateShard(ctx, name, schema)
		} else {
			sh, err = s.Shard(ctx, name)
		}
		if err != nil {
			return err
		}
		if err := sh.Refresh(ctx); err != nil {
			return err
		}
		upper := sh.Upper()
		expected := upper
		if rows > 0 && minTime < upper {
			expected = minTime // a replay: the store verifies and skips the durable part
		} else if prevClosed > 0 && prevClosed < upper {
			expected = prevClosed
		}
		if newUpper <= expected && rows == 0 {
			return nil // nothing new
		}
		res, err := sh.Append(ctx, expected, newUpper, recs...)
		if err != nil {
			return err
		}
		st.Commits++
		if res.Status == Appended {
			st.Rows += rows
		} else {
			st.Skipped += rows
		}
		return nil
	}, nil
}

// prepareError returns the operation that commits p's rows up to t and
// then records the definite error msg of collection name at t.
func (s *Store) prepareError(ctx context.Context, name string, p *pending, t uint64, msg string, st *ApplyStats) (func() error, error) {
	var commit func() error
	if t > p.closed || p.rows > 0 {
		var err error
		if commit, err = s.prepareCommit(ctx, name, p, t, st); err != nil {
			return nil, err
		}
	}
	p.closed = t + 1
	return s.then(ctx, commit, name, func(sh *Shard) error {
		expected := sh.Upper()
		if t < expected {
			expected = t
		}
		if _, err := sh.AppendError(ctx, expected, t+1, msg); err != nil {
			return err
		}
		st.Errors++
		return nil
	}), nil
}

// then is the operation that runs commit (when not nil), then fn on the
// refreshed shard of collection name.
func (s *Store) then(ctx context.Context, commit func() error, name string, fn func(sh *Shard) error) func() error {
	return func() error {
		if commit != nil {
			if err := commit(); err != nil {
				return err
			}
		}
		sh, err := s.Shard(ctx, name)
		if err != nil {
			return err
		}
		if err := sh.Refresh(ctx); err != nil {
			return err
		}
		return fn(sh)
	}
}

// prepareReset returns the operation that commits p's rows below t, then
// starts a new generation of collection name at t in schema (nil: the
// schema in force before t). p's rows at t or later came before the
// reset: they are superseded and dropped.
func (s *Store) prepareReset(ctx context.Context, name string, p *pending, t uint64, schema *arrow.Schema, st *ApplyStats) (func() error, error) {
	if t < p.closed {
		return nil, fmt.Errorf("reset of %s at %d, but this pipe already said %s was complete up to %d (times went backwards)", name, t, name, p.closed)
	}
	if err := p.dropFrom(t); err != nil {
		return nil, err
	}
	var commit func() error
	if t > p.closed || p.rows > 0 {
		if p.schema == nil && schema != nil {
			p.schema = schema // a collection that begins with a reset
		}
		var err error
		if commit, err = s.prepareCommit(ctx, name, p, t, st); err != nil {
			return nil, err
		}
	}
	p.closed = t
	if schema != nil {
		p.schema, p.reset = nil, schema
	}
	return s.then(ctx, commit, name, func(sh *Shard) error {
		g := schema
		if g == nil {
			g = sh.SchemaAt(t)
		}
		if _, err := sh.NewGeneration(ctx, t, g); err != nil {
			return err
		}
		st.Resets++
		return nil
	}), nil
}

func (s *Store) applyBindings(ctx context.Context, source string, bs []frontier.Binding) error {
	if len(bs) == 0 {
		return nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Time < bs[j].Time })
	var expected uint64
	rm, err := s.Remap(ctx, source)
	switch {
	case errors.Is(err, ErrNotFound):
		// The first bindings of this source create its remap shard.
	case err != nil:
		return err
	default:
		expected = rm.Upper()
	}
	if bs[0].Time < expected {
		expected = bs[0].Time
	}
	_, err = s.AppendBindings(ctx, source, expected, bs[len(bs)-1].Time+1, bs)
	return err
}
