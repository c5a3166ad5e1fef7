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
// The records have the schema of the generation the interval falls in
// (see NewGeneration): at the upper, the latest generation's (Schema); a
// replay below the latest generation's start, an earlier one's (SchemaAt).
// An interval that crosses a generation start is refused (a replay must
// append up to the start and from it separately, as the original did).
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
	m, gs, i, err := sh.genOfAppend(ctx, expectedUpper)
	if err != nil {
		return AppendResult{}, err
	}
	if i < 0 {
		// Compaction removed the generation expectedUpper fell in, so it is
		// below since: a replay whose durable part cannot be compared.
		if newUpper <= m.Upper {
			return AppendResult{Status: Skipped, SkippedTo: newUpper, Upper: m.Upper, Version: m.Version}, nil
		}
		return AppendResult{}, sh.mismatch(expectedUpper, m.Upper, fmt.Sprintf("the interval [%d, %d) crosses the start of the generation at %d", expectedUpper, newUpper, gs[0].start))
	}
	g := gs[i]
	if newUpper > g.end {
		return AppendResult{}, sh.mismatch(expectedUpper, m.Upper, fmt.Sprintf("the interval [%d, %d) crosses the start of the generation at %d; append up to %d, then from %d", expectedUpper, newUpper, g.end, g.end, g.end))
	}
	in, err := sh.prepareAll(recs, expectedUpper, newUpper, g)
	defer in.release()
	if err != nil {
		return AppendResult{}, err
	}
	return sh.appendData(ctx, expectedUpper, newUpper, in, g)
}

// prepareAll is prepareInput of every record, in generation g; the
// caller releases the runs, also on error.
func (sh *Shard) prepareAll(recs []arrow.Record, lower, upper uint64, g gen) (runs, error) {
	var in runs
	for _, rec := range recs {
		r, err := sh.prepareInput(rec, lower, upper, g.start, g.sc)
		if err != nil {
			return in, err
		}
		if r != nil {
			in = append(in, r)
		}
	}
	return in, nil
}

// genOfAppend reads the manifest and returns its generations and the
// index of the one in force at t (-1: compaction removed it).
func (sh *Shard) genOfAppend(ctx context.Context, t uint64) (*Manifest, []gen, int, error) {
	m, err := sh.refresh(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	gs, err := sh.gensOf(m)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("append %s: %w", sh.what(), err)
	}
	return m, gs, genAt(gs, t), nil
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
	// already runs on every manifest whose upper is the expected one,
	// before ready; done means that what the append would commit is there
	// already (a replay of an append that does not move the upper), and
	// the append ends with r, err (nil: never).
	already func(m *Manifest) (r AppendResult, done bool, err error)
	// ready runs on every manifest whose upper is the expected one, before
	// the batch is written (nil: nothing to check).
	ready func(m *Manifest) error
	// write writes the batch file (synced, renamed, directory synced), at
	// most once per append: the first time the upper is the expected one.
	// A nil batch, or a nil write, means no file (progress only). On error
	// it leaves no file behind.
	write func() ([]BatchMeta, error)
	// apply records the batch files (none when there is no batch) in next,
	// a copy of the current manifest with the version and the upper
	// already advanced.
	apply func(next *Manifest, batch []BatchMeta)
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
	var batch []BatchMeta
	removeBatch := func() {
		for _, b := range batch {
			sh.st.fs.Remove(filepath.Join(sh.dir, b.File))
		}
		batch = nil
	}
	written := false
	for attempt := 0; ; attempt++ {
		m, err := sh.refresh(ctx)
		if err != nil {
			removeBatch()
			return AppendResult{}, err
		}
		// A writer holding a lease (S3) that lost it, or that a later
		// holder has committed after, stops here.
		if _, err := sh.st.fence(m.Epoch); err != nil {
			removeBatch()
			return AppendResult{}, fmt.Errorf("append %s: %w", sh.name, err)
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
		if ops.already != nil {
			if r, done, err := ops.already(m); done || err != nil {
				removeBatch()
				return r, err
			}
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
		linked, err := sh.commit(ctx, m, next)
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
		for _, b := range batch {
			r.Rows += b.Rows
		}
		return r, nil
	}
}

// appendData commits in (nil for none), in the schema of generation g,
// over [expected, newUpper).
func (sh *Shard) appendData(ctx context.Context, expected, newUpper uint64, in runs, g gen) (AppendResult, error) {
	write := func() ([]BatchMeta, error) {
		if len(in) == 0 {
			return nil, nil
		}
		sorted, err := sh.sortConsolidate(in, g.sc)
		if err != nil {
			return nil, fmt.Errorf("append %s: %w", sh.what(), err)
		}
		if len(sorted) == 0 {
			return nil, nil
		}
		metas, err := sh.writeRun(ctx, expected, newUpper, g.start, g.sc.batch, recordsOf(sorted...))
		sorted.release()
		if err != nil {
			return nil, fmt.Errorf("append %s: %w", sh.what(), err)
		}
		return metas, nil
	}
	return sh.appendWith(ctx, expected, newUpper, g, len(in) > 0, write, func(m *Manifest) (AppendResult, error) {
		return sh.replayData(ctx, m, expected, newUpper, in, g)
	})
}

// appendWith commits the run write makes (hasRows: there may be one) in
// the schema of generation g over [expected, newUpper); replay handles a
// shard whose upper is beyond expected.
func (sh *Shard) appendWith(ctx context.Context, expected, newUpper uint64, g gen, hasRows bool, write func() ([]BatchMeta, error), replay func(m *Manifest) (AppendResult, error)) (AppendResult, error) {
	return sh.casAppend(ctx, expected, newUpper, casOps{
		ready: func(m *Manifest) error {
			// The upper is expected, so g must be the latest generation:
			// a generation started meanwhile (NewGeneration does not move
			// the upper) makes the rows belong to another one.
			if gs := m.gens(); hasRows && gs[len(gs)-1].Start != g.start {
				return sh.mismatch(expected, m.Upper, fmt.Sprintf("a new generation started at %d meanwhile, and the batch was prepared for the generation from %d", gs[len(gs)-1].Start, g.start))
			}
			return nil
		},
		write: write,
		apply: func(next *Manifest, batch []BatchMeta) {
			next.Batches = append(next.Batches, batch...)
		},
		replay: replay,
	})
}

// replayData handles an append whose expected upper is below the shard's;
// in is in the schema of generation g, in force at expected.
func (sh *Shard) replayData(ctx context.Context, m *Manifest, expected, newUpper uint64, in runs, g gen) (AppendResult, error) {
	durEnd := min(m.Upper, newUpper)
	verified := false
	if m.Since <= expected {
		for _, e := range m.Errors {
			if e.Time >= expected && e.Time < durEnd {
				return AppendResult{}, sh.mismatch(expected, m.Upper, fmt.Sprintf("a definite error is recorded at time %d in the replayed interval, not data", e.Time))
			}
		}
		// expected >= since, so g's batches are still in m.
		same, err := sh.sameAsDurable(ctx, g.batches(m), g.sc, expected, durEnd, in)
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
	// The remainder is at and after the upper, so g is the latest
	// generation (Append checked that the interval does not cross a
	// generation start); appendData checks it still is.
	rest := sh.filterFrom(in, m.Upper, g.sc)
	defer rest.release()
	r, err := sh.appendData(ctx, m.Upper, newUpper, rest, g)
	if err != nil {
		return r, err
	}
	r.Status, r.SkippedTo, r.Verified = PartiallySkipped, m.Upper, verified
	return r, nil
}

// sameAsDurable reports whether in's updates at times in [lo, hi) equal,
// consolidated, those of batches (of one generation, schemas sc).
func (sh *Shard) sameAsDurable(ctx context.Context, batches []BatchMeta, sc *genSchemas, lo, hi uint64, in runs) (bool, error) {
	rs, err := newRunSet(sc.user.Fields())
	if err != nil {
		return false, err
	}
	defer rs.release()
	stored, err := sh.collect(ctx, batches, sc, rs, lo, hi)
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
		apply: func(next *Manifest, _ []BatchMeta) {
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
			r, err := sh.appendData(ctx, m.Upper, newUpper, nil, gen{})
			r.Status, r.SkippedTo, r.Verified = PartiallySkipped, m.Upper, verified
			return r, err
		},
	})
}

// NewGeneration starts a new generation of the collection at time at,
// with the user schema schema (_time and _diff, if present, are dropped):
// from at on, the collection's contents are exactly what is appended at
// times >= at afterwards; the contents before at stop existing there (an
// implicit retraction), while reads at times below at are unchanged. The
// schema may be the current one (a TRUNCATE, a re-snapshot) or another
// (a schema change); appends at and after at use it.
//
// It is a compare-and-append that does not move the upper: at must be
// the shard's upper, else *UpperMismatchError; appends from at on go into
// the new generation. A replay is skipped when a generation with an
// identical schema (fields with their metadata, and the schema metadata)
// starts at at (Verified), or when compaction has removed the generations
// around at, which is then below since (not Verified); another schema
// there, or an upper beyond at with no generation starting at at, is an
// *UpperMismatchError.
func (sh *Shard) NewGeneration(ctx context.Context, at uint64, schema *arrow.Schema) (AppendResult, error) {
	if sh.kind != kindData {
		return AppendResult{}, fmt.Errorf("new generation of %s: a remap shard has none: %w", sh.what(), ErrInvalid)
	}
	user, err := checkUserSchema(schema)
	if err != nil {
		return AppendResult{}, fmt.Errorf("new generation of %s at %d: %w", sh.what(), at, err)
	}
	enc, err := encodeSchema(user)
	if err != nil {
		return AppendResult{}, fmt.Errorf("new generation of %s at %d: %w", sh.what(), at, err)
	}
	// recorded compares with a generation recorded at at.
	recorded := func(m *Manifest, g GenerationMeta) (AppendResult, error) {
		sc, err := sh.schemasOf(g.Schema)
		if err != nil {
			return AppendResult{}, fmt.Errorf("new generation of %s at %d: %w", sh.what(), at, err)
		}
		if !sameSchema(sc.user, user) {
			d := fieldsDiff(user.Fields(), sc.user.Fields())
			if d == "" {
				d = "the metadata differ"
			}
			return AppendResult{}, sh.mismatch(at, m.Upper, fmt.Sprintf("a generation with another schema starts at %d (%s), so this is not a replay", at, d))
		}
		return AppendResult{Status: Skipped, SkippedTo: at, Verified: true, Upper: m.Upper, Version: m.Version}, nil
	}
	return sh.casAppend(ctx, at, at, casOps{
		already: func(m *Manifest) (AppendResult, bool, error) {
			gs := m.gens()
			if last := gs[len(gs)-1]; last.Start == at {
				r, err := recorded(m, last)
				return r, true, err
			}
			return AppendResult{}, false, nil
		},
		apply: func(next *Manifest, _ []BatchMeta) {
			gs := append(slicesClone(next.gens()), GenerationMeta{Start: at, Schema: enc, Columns: columnInfos(user)})
			next.setGens(gs)
		},
		replay: func(m *Manifest) (AppendResult, error) {
			gs := m.gens()
			i := genIndex(gs, at)
			switch {
			case i >= 0 && gs[i].Start == at:
				return recorded(m, gs[i])
			case i < 0:
				// Before every generation kept: compaction removed them, so
				// at is below since and what started there is gone.
				return AppendResult{Status: Skipped, SkippedTo: at, Upper: m.Upper, Version: m.Version}, nil
			}
			return AppendResult{}, sh.mismatch(at, m.Upper, fmt.Sprintf("no generation starts at %d (the generation in force there started at %d), so this is not a replay", at, gs[i].Start))
		},
	})
}
