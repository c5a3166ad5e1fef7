package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
)

// AppendStatus says what an append did.
type AppendStatus int

const (
	// Appended: the whole interval was appended (a batch, an error, or
	// just progress when there were no rows).
	Appended AppendStatus = iota
	// Skipped: the whole interval was durable already (a replay after a
	// crash); nothing was written.
	Skipped
	// PartiallySkipped: the durable part of the interval was skipped and
	// the rest appended.
	PartiallySkipped
)

func (s AppendStatus) String() string {
	switch s {
	case Appended:
		return "appended"
	case Skipped:
		return "skipped"
	case PartiallySkipped:
		return "partially skipped"
	}
	return fmt.Sprintf("AppendStatus(%d)", int(s))
}

// AppendResult reports the outcome of a compare-and-append.
type AppendResult struct {
	Status AppendStatus
	// Rows is the number of rows written (after consolidation); 0 when
	// only the upper advanced.
	Rows int64
	// SkippedTo ends the skipped, already durable interval
	// [expected upper, SkippedTo) of a replay (0 when nothing was skipped).
	SkippedTo uint64
	// Verified reports whether the skipped part was compared with the
	// durable contents and found equal. It is false when compaction had
	// advanced since past the expected upper, so the original updates are
	// no longer distinguishable: the durable part is then trusted.
	Verified bool
	// Upper is the shard's upper after the append; Version the manifest
	// version that holds it.
	Upper   uint64
	Version uint64
}

// Append is the compare-and-append of a batch of updates: rec holds the
// user columns plus _time (uint64) and _diff (int64), every _time in
// [expectedUpper, newUpper). On success the shard's upper is newUpper.
//
//   - expectedUpper == the shard's upper: the batch is committed (sorted by
//     row then time and consolidated). A nil or empty rec only advances the
//     upper and writes no batch file.
//   - expectedUpper > upper, or another writer committed first: an
//     *UpperMismatchError.
//   - expectedUpper < upper: a replay after a crash. The durable part
//     [expectedUpper, min(upper, newUpper)) of rec must equal, consolidated,
//     what the shard holds there; it is then skipped and the rest appended.
//     If it differs, *UpperMismatchError. If compaction advanced since past
//     expectedUpper the durable part cannot be compared and is skipped
//     unverified (AppendResult.Verified is false).
//
// The batch may come as several records (runs) of the same schema. Runs
// that are each sorted and consolidated and do not overlap, like the
// partition chunks of a Kafka fetch keyed by (partition, offset), are
// written as they are, in row order, without a sort or a copy; other runs
// are concatenated and sorted.
func (sh *Shard) Append(ctx context.Context, expectedUpper, newUpper uint64, recs ...arrow.Record) (AppendResult, error) {
	if sh.kind != kindData {
		return AppendResult{}, fmt.Errorf("append %s: use AppendBindings for a remap shard: %w", sh.what(), ErrInvalid)
	}
	if newUpper <= expectedUpper {
		return AppendResult{}, fmt.Errorf("append %s: new upper %d must be beyond the expected upper %d: %w", sh.what(), newUpper, expectedUpper, ErrInvalid)
	}
	if _, err := sh.refresh(ctx); err != nil {
		return AppendResult{}, err
	}
	var in runs
	defer in.release()
	for _, rec := range recs {
		r, err := sh.prepareInput(rec, expectedUpper, newUpper)
		if err != nil {
			return AppendResult{}, err
		}
		if r != nil {
			in = append(in, r)
		}
	}
	return sh.appendData(ctx, expectedUpper, newUpper, in)
}

func (sh *Shard) mismatch(expected, actual uint64, reason string) *UpperMismatchError {
	return &UpperMismatchError{Collection: sh.name, Expected: expected, Actual: actual, Reason: reason}
}

// casOps is what one kind of append brings to the compare-and-append loop
// (casAppend): checks, the batch file, the change to the manifest, and the
// replay of an interval that is durable already.
type casOps struct {
	// check runs on every manifest read, before its upper is compared
	// (nil: nothing to check).
	check func(m *Manifest) error
	// ready runs on every manifest whose upper is the expected one, before
	// the batch is written (nil: nothing to check).
	ready func(m *Manifest) error
	// write writes the batch file (synced, renamed, directory synced), at
	// most once per append: the first time the upper is the expected one.
	// A nil batch, or a nil write, means no file (progress only). On error
	// it leaves no file behind.
	write func() (*BatchMeta, error)
	// apply records batch (nil when there is none) in next, a copy of the
	// current manifest with the version and the upper already advanced.
	apply func(next *Manifest, batch *BatchMeta)
	// replay handles a first read whose upper is beyond the expected one.
	replay func(m *Manifest) (AppendResult, error)
}

// casAppend is the compare-and-append of one commit over [expected,
// newUpper), shared by data and remap shards (see the commit protocol in
// docs/format-store.md): while the shard's upper is expected, write the
// batch once, then create the next manifest version exclusively. A lost
// race against a writer that did not move the upper (a compaction) is
// retried on the new version; one that moved it is an *UpperMismatchError.
// Every failure before the manifest became visible removes the batch file.
func (sh *Shard) casAppend(ctx context.Context, expected, newUpper uint64, ops casOps) (AppendResult, error) {
	var batch *BatchMeta
	removeBatch := func() {
		if batch != nil {
			sh.st.fs.Remove(filepath.Join(sh.dir, batch.File))
			batch = nil
		}
	}
	written := false
	for attempt := 0; ; attempt++ {
		m, err := sh.refresh(ctx)
		if err != nil {
			removeBatch()
			return AppendResult{}, err
		}
		if ops.check != nil {
			if err := ops.check(m); err != nil {
				removeBatch()
				return AppendResult{}, err
			}
		}
		switch {
		case m.Upper < expected:
			removeBatch()
			return AppendResult{}, sh.mismatch(expected, m.Upper, "")
		case m.Upper > expected:
			removeBatch()
			if attempt > 0 {
				return AppendResult{}, sh.mismatch(expected, m.Upper, "")
			}
			return ops.replay(m)
		}
		if ops.ready != nil {
			if err := ops.ready(m); err != nil {
				removeBatch()
				return AppendResult{}, err
			}
		}
		if !written && ops.write != nil {
			written = true
			b, err := ops.write()
			if err != nil {
				return AppendResult{}, err
			}
			batch = b
		}
		next := m.clone()
		next.Version = m.Version + 1
		next.Upper = newUpper
		ops.apply(next, batch)
		linked, err := sh.commit(ctx, next)
		if errors.Is(err, errLostRace) {
			m2, rerr := sh.refresh(ctx)
			if rerr == nil && m2.Upper == expected && attempt < maxCommitRetries {
				continue // a compaction won; our upper still holds
			}
			removeBatch()
			if rerr != nil {
				return AppendResult{}, rerr
			}
			return AppendResult{}, sh.mismatch(expected, m2.Upper, "")
		}
		if err != nil {
			if !linked {
				removeBatch()
			}
			return AppendResult{}, err
		}
		r := AppendResult{Status: Appended, Upper: newUpper, Version: next.Version}
		if batch != nil {
			r.Rows = batch.Rows
		}
		return r, nil
	}
}

// appendData commits in (nil for none) over [expected, newUpper).
func (sh *Shard) appendData(ctx context.Context, expected, newUpper uint64, in runs) (AppendResult, error) {
	return sh.casAppend(ctx, expected, newUpper, casOps{
		write: func() (*BatchMeta, error) {
			if len(in) == 0 {
				return nil, nil
			}
			sorted, err := sh.sortConsolidate(in)
			if err != nil {
				return nil, fmt.Errorf("append %s: %w", sh.what(), err)
			}
			if len(sorted) == 0 {
				return nil, nil
			}
			meta, err := sh.writeBatch(ctx, expected, newUpper, sorted...)
			sorted.release()
			if err != nil {
				return nil, fmt.Errorf("append %s: %w", sh.what(), err)
			}
			return &meta, nil
		},
		apply: func(next *Manifest, batch *BatchMeta) {
			if batch != nil {
				next.Batches = append(next.Batches, *batch)
			}
		},
		replay: func(m *Manifest) (AppendResult, error) {
			return sh.replayData(ctx, m, expected, newUpper, in)
		},
	})
}

// replayData handles an append whose expected upper is below the shard's.
func (sh *Shard) replayData(ctx context.Context, m *Manifest, expected, newUpper uint64, in runs) (AppendResult, error) {
	durEnd := min(m.Upper, newUpper)
	verified := false
	if m.Since <= expected {
		for _, e := range m.Errors {
			if e.Time >= expected && e.Time < durEnd {
				return AppendResult{}, sh.mismatch(expected, m.Upper, fmt.Sprintf("a definite error is recorded at time %d in the replayed interval, not data", e.Time))
			}
		}
		same, err := sh.sameAsDurable(ctx, m, expected, durEnd, in)
		if err != nil {
			return AppendResult{}, fmt.Errorf("append %s: compare replayed interval: %w", sh.what(), err)
		}
		if !same {
			return AppendResult{}, sh.mismatch(expected, m.Upper, fmt.Sprintf("the replayed interval [%d, %d) differs from the durable contents, so this is not a replay", expected, durEnd))
		}
		verified = true
	}
	if newUpper <= m.Upper {
		return AppendResult{Status: Skipped, SkippedTo: newUpper, Verified: verified, Upper: m.Upper, Version: m.Version}, nil
	}
	rest := sh.filterFrom(in, m.Upper)
	defer rest.release()
	r, err := sh.appendData(ctx, m.Upper, newUpper, rest)
	if err != nil {
		return r, err
	}
	r.Status, r.SkippedTo, r.Verified = PartiallySkipped, m.Upper, verified
	return r, nil
}

// sameAsDurable reports whether in's updates at times in [lo, hi) equal,
// consolidated, the shard's.
func (sh *Shard) sameAsDurable(ctx context.Context, m *Manifest, lo, hi uint64, in runs) (bool, error) {
	rs, err := newRunSet(sh.Schema().Fields())
	if err != nil {
		return false, err
	}
	defer rs.release()
	stored, err := sh.collect(ctx, m, rs, lo, hi)
	if err != nil {
		return false, err
	}
	var mine []ent
	for _, rec := range in {
		mine = append(mine, rs.ents(rs.add(rec), lo, hi)...)
	}
	rs.sortTimeRow(mine)
	mine = rs.consolidateRowTime(mine)
	if len(mine) != len(stored) {
		return false, nil
	}
	for i := range mine {
		a, b := &mine[i], &stored[i]
		if a.time != b.time || a.diff != b.diff || rs.cmpRow(a, b) != 0 {
			return false, nil
		}
	}
	return true, nil
}

// AppendError records a definite error at time expectedUpper and advances
// the upper to newUpper (compare-and-append, like Append). Every read at
// or after that time fails with a *DefiniteError carrying msg. Replaying
// an error already recorded at expectedUpper with the same message is
// skipped.
func (sh *Shard) AppendError(ctx context.Context, expectedUpper, newUpper uint64, msg string) (AppendResult, error) {
	if sh.kind != kindData {
		return AppendResult{}, fmt.Errorf("append error to %s: remap shards hold no errors: %w", sh.what(), ErrInvalid)
	}
	if newUpper <= expectedUpper {
		return AppendResult{}, fmt.Errorf("append error to %s: new upper %d must be beyond the expected upper %d: %w", sh.what(), newUpper, expectedUpper, ErrInvalid)
	}
	if msg == "" {
		return AppendResult{}, fmt.Errorf("append error to %s: the message is empty; say what went wrong: %w", sh.what(), ErrInvalid)
	}
	return sh.casAppend(ctx, expectedUpper, newUpper, casOps{
		apply: func(next *Manifest, _ *BatchMeta) {
			next.Errors = append(next.Errors, ErrorMeta{Time: expectedUpper, Message: msg})
		},
		replay: func(m *Manifest) (AppendResult, error) {
			verified := false
			if m.Since <= expectedUpper {
				found := false
				for _, e := range m.Errors {
					found = found || (e.Time == expectedUpper && e.Message == msg)
				}
				if !found {
					return AppendResult{}, sh.mismatch(expectedUpper, m.Upper, fmt.Sprintf("no error %q is recorded at time %d, so this is not a replay", msg, expectedUpper))
				}
				verified = true
			}
			if newUpper <= m.Upper {
				return AppendResult{Status: Skipped, SkippedTo: newUpper, Verified: verified, Upper: m.Upper, Version: m.Version}, nil
			}
			r, err := sh.appendData(ctx, m.Upper, newUpper, nil)
			r.Status, r.SkippedTo, r.Verified = PartiallySkipped, m.Upper, verified
			return r, err
		},
	})
}
