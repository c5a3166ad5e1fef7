package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// stagedDirName is the store's directory of staged files, one directory
// per source under it (docs/format-store.md, Staged files).
const stagedDirName = "staged"

// Stage holds updates of one collection that wait for their binding (a
// large transaction before its commit), written as sorted runs of
// bounded batch files to DIR/staged/<escaped source>/, which no reader
// looks at. Its rows carry the source's own times in _time until they are
// committed: Shard.AppendStaged merges the runs, every row at the one
// system time its binding gave, into the shard's own files (the staged
// files are rewritten, not linked, so a crash at any point leaves the
// shard as it was and the source replays the transaction). Stray staged
// files (a crash) are removed by SweepStaged, which the owner of the
// source's writer lock calls at its start.
//
// A Stage is not safe for concurrent use.
type Stage struct {
	files *Shard // reads and writes the runs in the staged directory
	sc    *genSchemas
	runs  [][]BatchMeta
	rows  int64
	// minTime and maxTime bound the staged rows' _time (valid when rows > 0).
	minTime, maxTime uint64
	// borrowed: Release leaves the files (Borrow).
	borrowed bool
}

// stagedDir returns the staged directory of source.
func (s *Store) stagedDir(source string) (string, error) {
	esc, err := escapeName(source)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, stagedDirName, esc), nil
}

// SweepStaged removes every staged file of source: the staged updates of
// an earlier run (a crash) that were never committed. Only the holder of
// the source's writer lock (LockSource) may call it.
func (s *Store) SweepStaged(source string) error {
	dir, err := s.stagedDir(source)
	if err != nil {
		return fmt.Errorf("sweep staged files of %s: %w", source, err)
	}
	files, err := s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep staged files of %s: %w", source, err)
	}
	for _, f := range files {
		if f.Name() == snapshotDirName || f.Name() == copiesDirName {
			continue // a resumable snapshot's or re-snapshots' copies, swept by their owner
		}
		if err := s.fs.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sweep staged files of %s: %w", source, err)
		}
	}
	return nil
}

// NewStage returns an empty stage for updates of a collection of source
// in schema (the user columns, _time and _diff; other columns, such as
// _partition, are not staged).
func (s *Store) NewStage(source string, schema *arrow.Schema) (*Stage, error) {
	dir, err := s.stagedDir(source)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", source, err)
	}
	user, err := checkUserSchema(stripStaged(schema))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", source, err)
	}
	return s.stageIn(dir, "staged updates of "+source, user), nil
}

// stageIn returns an empty stage of the user schema user writing to dir.
func (s *Store) stageIn(dir, name string, user *arrow.Schema) *Stage {
	sc := &genSchemas{user: user, batch: withColumns(user, timeField, diffField), read: withColumns(user, diffField)}
	return &Stage{files: &Shard{st: s, name: name, kind: kindData, dir: dir, scratch: true}, sc: sc}
}

// stripStaged drops the columns a stage does not keep besides _time and
// _diff (which checkUserSchema drops).
func stripStaged(schema *arrow.Schema) *arrow.Schema {
	var fs []arrow.Field
	for _, f := range schema.Fields() {
		if f.Name != "_partition" {
			fs = append(fs, f)
		}
	}
	md := schema.Metadata()
	return arrow.NewSchema(fs, &md)
}

// Rows is the number of staged rows (before consolidation across runs).
func (sg *Stage) Rows() int64 { return sg.rows }

// TimeRange returns the least and greatest staged _time (ok false when
// the stage is empty).
func (sg *Stage) TimeRange() (lo, hi uint64, ok bool) {
	return sg.minTime, sg.maxTime, sg.rows > 0
}

// Write sorts and consolidates recs (each with the stage's user columns,
// _time and _diff in any order, other columns ignored) and stages them as
// one more run.
func (sg *Stage) Write(ctx context.Context, recs ...arrow.Record) error {
	var in runs
	defer in.release()
	for _, rec := range recs {
		r, err := sg.prepare(rec)
		if err != nil {
			return err
		}
		if r != nil {
			in = append(in, r)
		}
	}
	if len(in) == 0 {
		return nil
	}
	sorted, err := sg.files.sortConsolidate(in, sg.sc)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	return sg.writeRun(ctx, recordsOf(sorted...), sorted.release)
}

// writeRun stages the sorted records next yields as a run (done, if not
// nil, runs after).
func (sg *Stage) writeRun(ctx context.Context, next func() (arrow.Record, error), done func()) error {
	if err := sg.files.st.fs.MkdirAll(sg.files.dir); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	track := func() (arrow.Record, error) {
		rec, err := next()
		if rec != nil {
			ts := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64).Uint64Values()
			for _, t := range ts {
				lo, hi = min(lo, t), max(hi, t)
			}
		}
		return rec, err
	}
	metas, err := sg.files.writeRun(ctx, 0, 0, 0, sg.sc.batch, track)
	if done != nil {
		done()
	}
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if len(metas) == 0 {
		return nil
	}
	var n int64
	for _, m := range metas {
		n += m.Rows
	}
	if sg.rows == 0 {
		sg.minTime, sg.maxTime = lo, hi
	}
	sg.minTime, sg.maxTime = min(sg.minTime, lo), max(sg.maxTime, hi)
	sg.rows += n
	sg.runs = append(sg.runs, metas)
	return nil
}

// prepare returns rec's user columns, _time and _diff in batch order.
func (sg *Stage) prepare(rec arrow.Record) (arrow.Record, error) {
	if rec.NumRows() == 0 {
		return nil, nil
	}
	s := rec.Schema()
	var cols []arrow.Array
	for _, f := range sg.sc.batch.Fields() {
		idx := s.FieldIndices(f.Name)
		if len(idx) != 1 || !arrow.TypeEqual(s.Field(idx[0]).Type, f.Type) {
			return nil, &SchemaMismatchError{Collection: sg.files.name, Detail: fmt.Sprintf("the staged records lack column %s (%s)", f.Name, f.Type)}
		}
		cols = append(cols, rec.Column(idx[0]))
	}
	return array.NewRecord(sg.sc.batch, cols, rec.NumRows()), nil
}

// sources opens the stage's runs as merge sources of rows with _time in
// [lo, hi); retime, when set, puts every row at time at.
func (sg *Stage) sources(ctx context.Context, lo, hi uint64, retime bool, at uint64) ([]*mergeSrc, func(), error) {
	head, err := sg.sc.ipcHead()
	if err != nil {
		return nil, nil, err
	}
	var rds []*runReader
	closeAll := func() {
		for _, r := range rds {
			r.close()
		}
	}
	var srcs []*mergeSrc
	for _, run := range sg.runs {
		r, err := sg.files.openRun(ctx, run, sg.sc.batch, head, lo, hi)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("read staged updates: %w", err)
		}
		rds = append(rds, r)
		srcs = append(srcs, &mergeSrc{next: r.next, retime: retime, at: at})
	}
	return srcs, closeAll, nil
}

// Split returns the staged rows with _time below t and those at or after
// it as two stages (either may be empty) and releases sg.
func (sg *Stage) Split(ctx context.Context, t uint64) (below, rest *Stage, err error) {
	defer sg.Release()
	below, rest = &Stage{files: sg.files, sc: sg.sc}, &Stage{files: sg.files, sc: sg.sc}
	for _, part := range []struct {
		lo, hi uint64
		to     *Stage
	}{{0, t, below}, {t, math.MaxUint64, rest}} {
		if err := sg.mergeInto(ctx, part.lo, part.hi, part.to); err != nil {
			below.Release()
			rest.Release()
			return nil, nil, err
		}
	}
	return below, rest, nil
}

// mergeInto merges sg's rows with _time in [lo, hi) into one run of to.
func (sg *Stage) mergeInto(ctx context.Context, lo, hi uint64, to *Stage) error {
	if sg.rows == 0 || sg.maxTime < lo || sg.minTime >= hi {
		return nil
	}
	srcs, closeAll, err := sg.sources(ctx, lo, hi, false, 0)
	if err != nil {
		return err
	}
	defer closeAll()
	next, stop := mergeBatches(ctx, sg.sc.user.Fields(), sg.sc.batch, srcs, mergeOpts{lo: lo, hi: hi})
	defer stop()
	return to.writeRun(ctx, next, nil)
}

// Each hands the staged rows, merged and consolidated, every one at time
// at, to fn in (row) order, a window at a time (the record is released
// after the call).
func (sg *Stage) Each(ctx context.Context, at uint64, fn func(rec arrow.Record) error) error {
	return sg.each(ctx, true, at, fn)
}

// each is Each, retiming the rows only when retime is set.
func (sg *Stage) each(ctx context.Context, retime bool, at uint64, fn func(rec arrow.Record) error) error {
	if sg.rows == 0 {
		return nil
	}
	srcs, closeAll, err := sg.sources(ctx, 0, math.MaxUint64, retime, at)
	if err != nil {
		return err
	}
	defer closeAll()
	next, stop := mergeBatches(ctx, sg.sc.user.Fields(), sg.sc.batch, srcs, mergeOpts{hi: math.MaxUint64})
	defer stop()
	for {
		rec, err := next()
		if err != nil || rec == nil {
			return err
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
}

// Release removes the stage's files (a borrowed stage's stay).
func (sg *Stage) Release() {
	for _, run := range sg.runs {
		if sg.borrowed {
			break
		}
		for _, b := range run {
			sg.files.st.fs.Remove(filepath.Join(sg.files.dir, b.File))
		}
	}
	sg.runs, sg.rows = nil, 0
}

// StagedPart is a stage whose rows are all committed at time At.
type StagedPart struct {
	Stage *Stage
	At    uint64
}

// AppendStaged is Append of recs plus the rows of staged parts, each
// part's rows at its At (which must be in [expectedUpper, newUpper)):
// the parts' runs and the records are merged into the shard's files a
// row group at a time, so memory does not grow with the staged rows. The
// stages are not released. A replay (expectedUpper below the shard's
// upper) reads the parts into memory and appends them with Append.
func (sh *Shard) AppendStaged(ctx context.Context, expectedUpper, newUpper uint64, parts []StagedPart, recs ...arrow.Record) (AppendResult, error) {
	var staged []StagedPart
	for _, p := range parts {
		if p.Stage == nil || p.Stage.rows == 0 {
			continue
		}
		if p.At < expectedUpper || p.At >= newUpper {
			return AppendResult{}, fmt.Errorf("append %s: staged rows at time %d outside the appended interval [%d, %d): %w", sh.what(), p.At, expectedUpper, newUpper, ErrInvalid)
		}
		staged = append(staged, p)
	}
	if len(staged) == 0 {
		return sh.Append(ctx, expectedUpper, newUpper, recs...)
	}
	m, gs, i, err := sh.genOfAppend(ctx, expectedUpper)
	if err != nil {
		return AppendResult{}, err
	}
	if m.Upper != expectedUpper || i < 0 || newUpper > gs[i].end {
		return sh.appendMaterialized(ctx, expectedUpper, newUpper, staged, recs)
	}
	g := gs[i]
	for _, p := range staged {
		if d := fieldsDiff(p.Stage.sc.user.Fields(), g.sc.user.Fields()); d != "" {
			return AppendResult{}, &SchemaMismatchError{Collection: sh.name, Detail: d, Generation: g.start, InGeneration: true}
		}
	}
	in, err := sh.prepareAll(recs, expectedUpper, newUpper, g)
	defer in.release()
	if err != nil {
		return AppendResult{}, err
	}
	write := func() ([]BatchMeta, error) {
		var srcs []*mergeSrc
		var closers []func()
		defer func() {
			for _, c := range closers {
				c()
			}
		}()
		for _, p := range staged {
			s, c, err := p.Stage.sources(ctx, 0, math.MaxUint64, true, p.At)
			if err != nil {
				return nil, fmt.Errorf("append %s: %w", sh.what(), err)
			}
			srcs, closers = append(srcs, s...), append(closers, c)
		}
		if len(in) > 0 {
			sorted, err := sh.sortConsolidate(in, g.sc)
			if err != nil {
				return nil, fmt.Errorf("append %s: %w", sh.what(), err)
			}
			closers = append(closers, sorted.release)
			srcs = append(srcs, &mergeSrc{next: recordsOf(sorted...)})
		}
		next, stop := mergeBatches(ctx, g.sc.user.Fields(), g.sc.batch, srcs, mergeOpts{hi: math.MaxUint64})
		defer stop()
		metas, err := sh.writeRun(ctx, expectedUpper, newUpper, g.start, g.sc.batch, next)
		if err != nil {
			return nil, fmt.Errorf("append %s: %w", sh.what(), err)
		}
		return metas, nil
	}
	return sh.appendWith(ctx, expectedUpper, newUpper, g, true, write, func(m *Manifest) (AppendResult, error) {
		// Another writer moved the upper meanwhile: compare in memory.
		return sh.appendMaterialized(ctx, expectedUpper, newUpper, staged, recs)
	})
}

// appendMaterialized appends recs and the staged parts read into memory
// (the rare replay of staged rows).
func (sh *Shard) appendMaterialized(ctx context.Context, expectedUpper, newUpper uint64, staged []StagedPart, recs []arrow.Record) (AppendResult, error) {
	var all runs
	defer all.release()
	for _, p := range staged {
		err := p.Stage.Each(ctx, p.At, func(rec arrow.Record) error {
			rec.Retain()
			all = append(all, rec)
			return nil
		})
		if err != nil {
			return AppendResult{}, fmt.Errorf("append %s: %w", sh.what(), err)
		}
	}
	return sh.Append(ctx, expectedUpper, newUpper, append(append([]arrow.Record{}, recs...), all...)...)
}
