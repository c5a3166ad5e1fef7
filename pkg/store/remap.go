package store

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// remapSchema is the schema of remap batches: one row per (binding,
// partition) with a non-zero upper, in partition order; a binding whose
// frontier is empty is one row with a null _partition and _upper 0.
var remapSchema = arrow.NewSchema([]arrow.Field{
	{Name: TimeColumn, Type: arrow.PrimitiveTypes.Uint64},
	{Name: PartitionColumn, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: UpperColumn, Type: arrow.PrimitiveTypes.Uint64},
}, func() *arrow.Metadata { m := arrow.NewMetadata([]string{"rtr.kind"}, []string{"bindings"}); return &m }())

// Remap opens the remap shard of a source (for Info, Upper, Compact). It
// fails with an error wrapping ErrNotFound when none exists yet.
func (s *Store) Remap(ctx context.Context, source string) (*Shard, error) {
	sh, err := s.handle(kindRemap, source)
	if err != nil {
		return nil, fmt.Errorf("open source %s: %w", source, err)
	}
	if _, err := sh.refresh(ctx); err != nil {
		return nil, err
	}
	return sh, nil
}

// AppendBindings is the compare-and-append of bindings to a source's
// remap shard (created on first use): every binding's time is in
// [expectedUpper, newUpper), times strictly ascend, all frontiers are of one
// domain (the shard's), and each frontier covers the one before it,
// including the last durable binding. Mismatches and replays behave as in
// Shard.Append.
func (s *Store) AppendBindings(ctx context.Context, source string, expectedUpper, newUpper uint64, bs []frontier.Binding) (AppendResult, error) {
	if newUpper <= expectedUpper {
		return AppendResult{}, fmt.Errorf("append bindings of source %s: new upper %d must be beyond the expected upper %d: %w", source, newUpper, expectedUpper, ErrInvalid)
	}
	for i, b := range bs {
		if b.Time < expectedUpper || b.Time >= newUpper {
			return AppendResult{}, fmt.Errorf("append bindings of source %s: binding time %d is outside [%d, %d): %w", source, b.Time, expectedUpper, newUpper, ErrInvalid)
		}
		if b.Frontier.Domain() == "" {
			return AppendResult{}, fmt.Errorf("append bindings of source %s: binding at %d has a frontier without a time domain: %w", source, b.Time, ErrInvalid)
		}
		if i > 0 {
			p := bs[i-1]
			if b.Time <= p.Time {
				return AppendResult{}, fmt.Errorf("append bindings of source %s: binding times must strictly ascend, got %d after %d: %w", source, b.Time, p.Time, ErrInvalid)
			}
			if b.Frontier.Domain() != p.Frontier.Domain() {
				return AppendResult{}, fmt.Errorf("append bindings of source %s: bindings mix time domains %s and %s: %w", source, p.Frontier.Domain(), b.Frontier.Domain(), ErrInvalid)
			}
			if !b.Frontier.Covers(p.Frontier) {
				return AppendResult{}, fmt.Errorf("append bindings of source %s: frontier %s at %d does not cover %s at %d; bindings only grow: %w", source, b.Frontier, b.Time, p.Frontier, p.Time, ErrInvalid)
			}
		}
	}
	sh, err := s.handle(kindRemap, source)
	if err != nil {
		return AppendResult{}, fmt.Errorf("append bindings of source %s: %w", source, err)
	}
	if err := sh.create(ctx, remapSchema); err != nil {
		return AppendResult{}, err
	}
	return sh.appendBindings(ctx, expectedUpper, newUpper, bs)
}

// appendBindings commits bs over [expected, newUpper).
func (sh *Shard) appendBindings(ctx context.Context, expected, newUpper uint64, bs []frontier.Binding) (AppendResult, error) {
	return sh.casAppend(ctx, expected, newUpper, casOps{
		check: func(m *Manifest) error {
			if len(bs) > 0 && m.Domain != "" && bs[0].Frontier.Domain() != m.Domain {
				return fmt.Errorf("append bindings of %s: frontiers are of domain %s but the source's bindings are of domain %s: %w", sh.what(), bs[0].Frontier.Domain(), m.Domain, ErrInvalid)
			}
			return nil
		},
		ready: func(m *Manifest) error {
			if len(bs) > 0 && m.LastBinding != nil && !bs[0].Frontier.Covers(m.LastBinding.Frontier) {
				return fmt.Errorf("append bindings of %s: frontier %s at %d does not cover the last durable binding %s at %d; bindings only grow: %w",
					sh.what(), bs[0].Frontier, bs[0].Time, m.LastBinding.Frontier, m.LastBinding.Time, ErrInvalid)
			}
			return nil
		},
		write: func() ([]BatchMeta, error) {
			if len(bs) == 0 {
				return nil, nil
			}
			rec := encodeBindings(bs)
			meta, err := sh.writeBatch(ctx, expected, newUpper, rec)
			rec.Release()
			if err != nil {
				return nil, fmt.Errorf("append bindings of %s: %w", sh.what(), err)
			}
			return []BatchMeta{meta}, nil
		},
		apply: func(next *Manifest, batch []BatchMeta) {
			if len(batch) > 0 {
				next.Batches = append(next.Batches, batch...)
				last := bs[len(bs)-1]
				next.LastBinding = &BindingJSON{Time: last.Time, Frontier: last.Frontier}
				next.Domain = last.Frontier.Domain()
			}
		},
		replay: func(m *Manifest) (AppendResult, error) {
			return sh.replayBindings(ctx, m, expected, newUpper, bs)
		},
	})
}

func (sh *Shard) replayBindings(ctx context.Context, m *Manifest, expected, newUpper uint64, bs []frontier.Binding) (AppendResult, error) {
	durEnd := min(m.Upper, newUpper)
	verified := false
	if m.Since <= expected {
		stored, err := sh.loadBindings(ctx, m, expected, durEnd)
		if err != nil {
			return AppendResult{}, fmt.Errorf("append bindings of %s: compare replayed interval: %w", sh.what(), err)
		}
		var mine []frontier.Binding
		for _, b := range bs {
			if b.Time < durEnd {
				mine = append(mine, b)
			}
		}
		same := len(mine) == len(stored)
		for i := 0; same && i < len(mine); i++ {
			same = mine[i].Time == stored[i].Time && mine[i].Frontier.Equal(stored[i].Frontier)
		}
		if !same {
			return AppendResult{}, sh.mismatch(expected, m.Upper, fmt.Sprintf("the replayed bindings in [%d, %d) differ from the durable ones, so this is not a replay", expected, durEnd))
		}
		verified = true
	}
	if newUpper <= m.Upper {
		return AppendResult{Status: Skipped, SkippedTo: newUpper, Verified: verified, Upper: m.Upper, Version: m.Version}, nil
	}
	var rest []frontier.Binding
	for _, b := range bs {
		if b.Time >= m.Upper {
			rest = append(rest, b)
		}
	}
	r, err := sh.appendBindings(ctx, m.Upper, newUpper, rest)
	if err != nil {
		return r, err
	}
	r.Status, r.SkippedTo, r.Verified = PartiallySkipped, m.Upper, verified
	return r, nil
}

// Bindings returns a source's durable bindings in time order (those at or
// after since and the last one before it) and the remap shard's upper.
func (s *Store) Bindings(ctx context.Context, source string) ([]frontier.Binding, uint64, error) {
	sh, err := s.Remap(ctx, source)
	if err != nil {
		return nil, 0, err
	}
	var out []frontier.Binding
	var upper uint64
	err = sh.readRetry(ctx, func(m *Manifest) error {
		var err error
		out, err = sh.loadBindings(ctx, m, 0, m.Upper)
		upper = m.Upper
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read bindings of source %s: %w", source, err)
	}
	return out, upper, nil
}

// loadBindings reads the bindings with times in [lo, hi).
func (sh *Shard) loadBindings(ctx context.Context, m *Manifest, lo, hi uint64) ([]frontier.Binding, error) {
	var out []frontier.Binding
	for _, b := range m.Batches {
		if b.Lower >= hi || b.Upper <= lo {
			continue
		}
		recs, err := sh.loadBatch(ctx, b, sh.Schema())
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			bs, err := decodeBindings(m.Domain, rec)
			rec.Release()
			if err != nil {
				return nil, &CorruptError{Path: filepath.Join(sh.dir, b.File), Detail: err.Error()}
			}
			for _, x := range bs {
				if x.Time >= lo && x.Time < hi {
					out = append(out, x)
				}
			}
		}
	}
	return out, nil
}

// encodeBindings renders bindings as a remap batch (pure).
func encodeBindings(bs []frontier.Binding) arrow.Record {
	mem := memory.DefaultAllocator
	tb := array.NewUint64Builder(mem)
	pb := array.NewStringBuilder(mem)
	ub := array.NewUint64Builder(mem)
	defer tb.Release()
	defer pb.Release()
	defer ub.Release()
	for _, b := range bs {
		ps := b.Frontier.Partitions()
		if len(ps) == 0 {
			tb.Append(b.Time)
			pb.AppendNull()
			ub.Append(0)
			continue
		}
		for _, p := range ps {
			tb.Append(b.Time)
			pb.Append(p)
			ub.Append(b.Frontier.Get(p))
		}
	}
	cols := []arrow.Array{tb.NewArray(), pb.NewArray(), ub.NewArray()}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	return array.NewRecord(remapSchema, cols, int64(cols[0].Len()))
}

// decodeBindings reads a remap batch (pure).
func decodeBindings(d frontier.Domain, rec arrow.Record) ([]frontier.Binding, error) {
	if rec.NumCols() != 3 {
		return nil, fmt.Errorf("remap batch has %d columns, want 3", rec.NumCols())
	}
	ts, ok1 := rec.Column(0).(*array.Uint64)
	ps, ok2 := rec.Column(1).(*array.String)
	us, ok3 := rec.Column(2).(*array.Uint64)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("remap batch columns have the wrong types")
	}
	var out []frontier.Binding
	n := int(rec.NumRows())
	for i := 0; i < n; {
		t := ts.Value(i)
		parts := map[string]uint64{}
		j := i
		for ; j < n && ts.Value(j) == t; j++ {
			if ps.IsValid(j) {
				parts[ps.Value(j)] = us.Value(j)
			}
		}
		f, err := frontier.New(d, parts)
		if err != nil {
			return nil, fmt.Errorf("binding at %d: %w", t, err)
		}
		if len(out) > 0 && out[len(out)-1].Time >= t {
			return nil, fmt.Errorf("binding times not ascending at %d", t)
		}
		out = append(out, frontier.Binding{Time: t, Frontier: f})
		i = j
	}
	return out, nil
}

// mergeRemap merges remap batches into one, keeping every binding at or
// after since and the last one before it.
func (sh *Shard) mergeRemap(ctx context.Context, in []BatchMeta, since uint64) (*BatchMeta, int64, error) {
	var all []frontier.Binding
	var before int64
	lower, upper := in[0].Lower, uint64(0)
	sh.mu.Lock()
	domain := sh.cur.Domain
	sh.mu.Unlock()
	for _, b := range in {
		upper = max(upper, b.Upper)
		before += b.Rows
		recs, err := sh.loadBatch(ctx, b, sh.Schema())
		if err != nil {
			return nil, 0, err
		}
		for _, rec := range recs {
			bs, err := decodeBindings(domain, rec)
			rec.Release()
			if err != nil {
				return nil, 0, &CorruptError{Path: filepath.Join(sh.dir, b.File), Detail: err.Error()}
			}
			all = append(all, bs...)
		}
	}
	keep := all[:0]
	for i, b := range all {
		if b.Time >= since || i+1 == len(all) || all[i+1].Time >= since {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		return nil, before, nil
	}
	rec := encodeBindings(keep)
	defer rec.Release()
	meta, err := sh.writeBatch(ctx, lower, upper, rec)
	if err != nil {
		return nil, 0, err
	}
	return &meta, before, nil
}
