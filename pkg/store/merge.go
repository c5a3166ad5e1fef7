package store

import (
	"context"
	"sort"

	"github.com/apache/arrow/go/v17/arrow"
)

// mergeSrc is one input of a merge: a sorted run, pulled a group at a time.
type mergeSrc struct {
	next func() (arrow.Record, error)
	// pend holds the rows not merged yet, in order.
	pend []arrow.Record
	done bool
	// retime puts every row of the source at time at (staged rows, in
	// source time until their binding); the row order stays.
	retime bool
	at     uint64
	// piece, when positive, is the most rows a record of pend has: a
	// longer one is cut into slices (sharing its buffers), queued in
	// later, so that a window of a merge of many runs stays near one row
	// group rather than one group of each run.
	piece int64
	later []arrow.Record
}

func (s *mergeSrc) load() error {
	if len(s.later) > 0 {
		s.pend = append(s.pend, s.later[0])
		s.later = s.later[1:]
		return nil
	}
	for !s.done {
		rec, err := s.next()
		if err != nil {
			return err
		}
		if rec == nil {
			s.done = true
			return nil
		}
		if rec.NumRows() == 0 {
			rec.Release()
			continue
		}
		if n := rec.NumRows(); s.piece > 0 && n > s.piece {
			for lo := s.piece; lo < n; lo += s.piece {
				s.later = append(s.later, rec.NewSlice(lo, min(lo+s.piece, n)))
			}
			head := rec.NewSlice(0, s.piece)
			rec.Release()
			rec = head
		}
		s.pend = append(s.pend, rec)
		return nil
	}
	return nil
}

// fill loads records until pend holds at least rows rows, the source is
// done, or a load yields nothing more.
func (s *mergeSrc) fill(rows int64) error {
	for {
		held := int64(0)
		for _, r := range s.pend {
			held += r.NumRows()
		}
		if held >= rows || (s.done && len(s.later) == 0) {
			return nil
		}
		n := len(s.pend)
		if err := s.load(); err != nil {
			return err
		}
		if len(s.pend) == n {
			return nil
		}
	}
}

// windowRows is about the most rows a window of mergeRuns takes from all
// its runs together (each run's share is at least minPiece).
const (
	windowRows = DefaultGroupRows
	minPiece   = 1024
)

// mergeOpts say what a merge takes and how it consolidates.
type mergeOpts struct {
	// lo and hi select the updates with lo <= _time < hi (before advance).
	lo, hi uint64
	// advance: times below it become it (compaction's since); 0: none.
	advance uint64
	// perRow consolidates per row over all times (a read as of a time;
	// the first time of a row is kept); otherwise per (row, time).
	perRow bool
	// fillRows, when positive, tops each source's pending rows up to
	// fillRows/len(srcs) (whole groups or pieces) before a window is cut,
	// so that runs of small groups (a snapshot's chunks: 2k rows) still
	// give windows of about fillRows rows, not of the smallest group: a
	// window has a fixed cost (a runSet, slices of each pending record,
	// a record to build and hand over).
	fillRows int64
}

// mergeRuns merges sorted runs (each yields records of the user fields,
// then _time and _diff, sorted by (row, time); consolidated or not) into
// one consolidated stream in (row, time) order, handed to emit in windows:
// each call gets the updates of a range of rows that no later call holds,
// as entries of rs (valid during the call only). Memory is bounded by the
// groups the runs are pulled in: a window holds at most the current group
// of each run (more only while one row spans several groups of a run).
//
// Each window ends just before the smallest last row of the runs' current
// groups (the bound): every run's later rows are at or after it. A run's
// groups are taken in pieces of windowRows/len(srcs) rows, so a merge of
// 16 runs of 64k-row groups holds 16 decoded groups but builds windows
// of about 64k rows, not 1M (heap profile of a Kafka upsert ingest's
// compaction: 93 MB of one window's output columns).
func mergeRuns(user []arrow.Field, srcs []*mergeSrc, o mergeOpts, emit func(rs *runSet, es []ent) error) error {
	defer func() {
		for _, s := range srcs {
			runs(s.pend).release()
			runs(s.later).release()
			s.pend, s.later = nil, nil
		}
	}()
	fill := int64(0)
	if len(srcs) > 0 {
		fill = o.fillRows / int64(len(srcs))
	}
	for _, s := range srcs {
		s.piece = max(windowRows/int64(len(srcs)), minPiece)
		if err := s.load(); err != nil {
			return err
		}
		if err := s.fill(fill); err != nil {
			return err
		}
	}
	// The entries of each source and of the pairwise merges are rebuilt
	// for every window in the same memory (emit's es is valid during the
	// call only): a window is a few thousand rows, and fresh slices for
	// each were a third of a streaming read's allocations, and of the GC
	// work they cause.
	srcEnts := make([][]ent, len(srcs))
	var mergeBufs [][]ent
	for {
		rs, err := newRunSet(user)
		if err != nil {
			return err
		}
		// Runs of the pending records, per source, and the bound.
		runIdx := make([][]int, len(srcs))
		boundSrc, boundRun, boundRow := -1, -1, -1
		any := false
		for si, s := range srcs {
			for _, rec := range s.pend {
				runIdx[si] = append(runIdx[si], rs.add(rec))
				any = true
			}
			if s.done || len(s.pend) == 0 {
				continue
			}
			r := runIdx[si][len(runIdx[si])-1]
			n := int(s.pend[len(s.pend)-1].NumRows()) - 1
			if boundSrc < 0 || rs.cmpRowsAt(r, n, boundRun, boundRow) < 0 {
				boundSrc, boundRun, boundRow = si, r, n
			}
		}
		if !any {
			rs.release()
			return nil
		}
		// Each source's updates below the bound, in (row, time) order.
		lists := make([][]ent, 0, len(srcs))
		for si, s := range srcs {
			es := srcEnts[si][:0]
			var rest []arrow.Record
			for k, rec := range s.pend {
				r, n := runIdx[si][k], int(rec.NumRows())
				cut := n
				if boundSrc >= 0 {
					cut = sort.Search(n, func(i int) bool { return rs.cmpRowsAt(r, i, boundRun, boundRow) >= 0 })
				}
				if cut > 0 {
					part := rec
					if cut < n {
						part = rec.NewSlice(0, int64(cut))
					}
					pr := rs.add(part)
					if cut < n {
						part.Release()
					}
					es = rs.appendEnts(es, pr, o.lo, o.hi)
				}
				if cut < n {
					tail := rec
					if cut > 0 {
						tail = rec.NewSlice(int64(cut), int64(n))
					} else {
						tail.Retain()
					}
					rest = append(rest, tail)
				}
			}
			runs(s.pend).release()
			s.pend = rest
			if s.retime {
				for i := range es {
					es[i].time = s.at
				}
			}
			if o.advance > 0 {
				// Monotone, so the list stays in (row, time) order.
				for i := range es {
					es[i].time = max(es[i].time, o.advance)
				}
			}
			srcEnts[si] = es
			if o.perRow {
				es = rs.consolidateRow(es)
			} else {
				es = rs.consolidateRowTime(es)
			}
			if len(es) > 0 {
				lists = append(lists, es)
			}
		}
		cmp := rs.cmpRowTime
		if o.perRow {
			cmp = rs.cmpRow
		}
		es := mergeInto(lists, cmp, &mergeBufs)
		if len(es) > 0 {
			err = emit(rs, es)
		}
		rs.release()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			if len(s.pend) == 0 {
				if err := s.load(); err != nil {
					return err
				}
			}
		}
		if boundSrc >= 0 {
			// Its rest is the bound row only: the next group decides.
			if err := srcs[boundSrc].load(); err != nil {
				return err
			}
		}
		if fill > 0 {
			for _, s := range srcs {
				if err := s.fill(fill); err != nil {
					return err
				}
			}
		}
	}
}

// cmpRowsAt compares the rows (not times) of row i of run a and row j of
// run b.
func (rs *runSet) cmpRowsAt(a, i, b, j int) int {
	x := ent{run: uint32(a), row: uint32(i)}
	y := ent{run: uint32(b), row: uint32(j)}
	return rs.cmpCols(&x, &y, 0)
}

// mergeBatches merges srcs with o, consolidated per (row, time), into
// records of the batch schema batch, as a record source for writeRun;
// stop ends the merge early.
func mergeBatches(ctx context.Context, user []arrow.Field, batch *arrow.Schema, srcs []*mergeSrc, o mergeOpts) (next func() (arrow.Record, error), stop func()) {
	recs, stop, wait := mergeAsync(ctx, user, srcs, o, func(rs *runSet, es []ent) arrow.Record {
		return rs.build(batch, es, true)
	})
	finished := false
	var res error
	return func() (arrow.Record, error) {
		if finished {
			return nil, res
		}
		rec, ok := <-recs
		if !ok {
			finished, res = true, wait()
			return nil, res
		}
		return rec, nil
	}, stop
}

// mergeAsync runs mergeRuns in its own goroutine, so that merging and the
// consumer of its output (rendering, writing files) overlap: build turns
// each window into a record, handed over on the channel (at most two
// windows in flight). The consumer reads the channel to its end, or calls
// stop; wait returns the merge's error once the channel is closed.
func mergeAsync(ctx context.Context, user []arrow.Field, srcs []*mergeSrc, o mergeOpts, build func(rs *runSet, es []ent) arrow.Record) (recs <-chan arrow.Record, stop func(), wait func() error) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan arrow.Record, 1)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		defer close(ch)
		err = mergeRuns(user, srcs, o, func(rs *runSet, es []ent) error {
			rec := build(rs, es)
			select {
			case ch <- rec:
				return nil
			case <-ctx.Done():
				rec.Release()
				return ctx.Err()
			}
		})
	}()
	stop = func() {
		cancel()
		for rec := range ch {
			rec.Release()
		}
		<-done
	}
	wait = func() error {
		<-done
		cancel()
		return err
	}
	return ch, stop, wait
}
