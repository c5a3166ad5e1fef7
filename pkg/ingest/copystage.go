package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// A re-snapshot's copy (pgSink, mySink) is never held whole in memory:
// copyStager, the copy's sink, stages its rows, at the re-snapshot's time
// T, in the store (store.NewCopyStage: DIR/staged/<source>/copies/, files
// synced) in runs, one each time the rows it holds pass its budget and
// one at the end. The hand-over gives the stage to the reclocker
// (stagerSink.DataStaged, as the initial snapshot does), which commits it
// at the first binding past T from its files; a key state is read from
// it a window at a time. A kept copy (keptcopy.go) names the stage's
// files, which then stay (store.Stage.Borrow) until its stream starts
// past T. A crash leaves the files of copies no kept copy names: the next
// stream's start removes them (sweepKept) before it copies anything.

// copyFailed is the error of a sink's hand-over of coll's re-snapshot at
// at (its text) whose copy failed with err, when that is no fact of the
// upstream; nil when it is (the collection's definite error at at):
//   - cut short by the ingest stopping (ctx is done) or by a transient
//     failure (a killed connection, a server restart): a transient error,
//     so the attempt ends without recording anything and the next resumes
//     from the store, before the change that asked for the copy, which
//     copies again;
//   - a failure of this machine (localError: staging the copy, reading a
//     kept one): the ingest's error.
func copyFailed(ctx context.Context, coll, at string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil || retry.Transient(err):
		return retry.MarkTransient(fmt.Errorf("re-snapshot of %s at %s: copy again: %w", coll, at, err))
	}
	if _, ok := errors.AsType[*localError](err); ok {
		return fmt.Errorf("re-snapshot of %s at %s: %w", coll, at, err)
	}
	return nil
}

// localError marks a re-snapshot's failure of this machine (the store's
// disk), never a definite error of the collection.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// local marks err a localError; nil stays nil.
func local(err error) error {
	if err == nil {
		return nil
	}
	return &localError{err}
}

// copyStager is the pipe.Sink of a re-snapshot's copy (snapshot.Copy,
// snapshot.MySQLCopy).
type copyStager struct {
	ctx    context.Context
	st     *store.Store
	source string
	at     frontier.Time
	budget int64 // bytes of rows held before they are staged as a run

	mu    sync.Mutex
	copy  stagedCopy
	recs  []arrow.Record // rows not yet staged, at at
	bytes int64
	held  int64 // rows in recs
}

// newCopyStager returns the sink of a copy of one of source's
// collections, re-snapshotted at at, staging its rows in runs of about
// budget bytes (0 or less: reclock.DefaultMemoryBudget).
func newCopyStager(ctx context.Context, st *store.Store, source string, at frontier.Time, budget int64) *copyStager {
	if budget <= 0 {
		budget = reclock.DefaultMemoryBudget
	}
	return &copyStager{ctx: ctx, st: st, source: source, at: at, budget: budget}
}

// Data implements pipe.Sink: the rows wait in memory, at the re-snapshot's
// time, until they pass the budget.
func (c *copyStager) Data(coll string, rec arrow.Record) error {
	if rec.NumRows() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.copy.stage == nil {
		if c.st == nil {
			return local(fmt.Errorf("re-snapshot of %s: no store to stage the copy in", coll))
		}
		sg, err := c.st.NewCopyStage(c.source, rec.Schema(), nil)
		if err != nil {
			return local(fmt.Errorf("re-snapshot of %s: %w", coll, err))
		}
		c.copy.stage, c.copy.schema, c.copy.at = sg, rec.Schema(), c.at
	}
	r := retimed(rec, c.at, false)
	c.recs, c.bytes, c.held = append(c.recs, r), c.bytes+arrowutil.RecordBytes(r), c.held+r.NumRows()
	c.copy.rows += r.NumRows()
	c.copy.peak = max(c.copy.peak, c.held)
	if c.bytes > c.budget {
		return c.flush(coll)
	}
	return nil
}

// flush stages the rows held as one more run.
func (c *copyStager) flush(coll string) error {
	if len(c.recs) == 0 {
		return nil
	}
	err := c.copy.stage.Write(c.ctx, c.recs...)
	c.dropHeld()
	if err != nil {
		return local(fmt.Errorf("re-snapshot of %s: stage the copy: %w", coll, err))
	}
	return nil
}

func (c *copyStager) dropHeld() {
	for _, r := range c.recs {
		r.Release()
	}
	c.recs, c.bytes, c.held = nil, 0, 0
}

// done stages the rows still held and returns the copy (the caller owns
// it); on err, it drops the copy's files.
func (c *copyStager) done(coll string, err error) (stagedCopy, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.copy.stage != nil {
		err = c.flush(coll)
	}
	c.dropHeld()
	out := c.copy
	c.copy = stagedCopy{}
	if out.stage != nil {
		out.nruns = len(out.stage.Runs())
	}
	if err != nil {
		out.release()
		return stagedCopy{}, err
	}
	return out, nil
}

// Progress implements pipe.Sink.
func (c *copyStager) Progress(string, frontier.Frontier) error { return nil }

// Error implements pipe.Sink.
func (c *copyStager) Error(coll string, _ frontier.Time, msg string) error {
	return errors.New(msg)
}

// Reset implements pipe.Sink.
func (c *copyStager) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("copy of %s: unexpected reset at %d", coll, at.Pos)
}

// stagedCopy is a re-snapshot's copy, staged: every row at the
// re-snapshot's time.
type stagedCopy struct {
	stage  *store.Stage  // nil: no rows
	schema *arrow.Schema // of the copy's data records
	at     frontier.Time
	rows   int64
	nruns  int // runs staged
	// peak is the most rows the copy held in memory at once.
	peak int64
	// kept: the stage is a kept copy's (keptcopy.go), whose files stay.
	kept bool
}

// release drops the copy (its files, unless a kept copy names them).
func (c *stagedCopy) release() {
	if c.stage != nil {
		c.stage.Release()
		c.stage = nil
	}
}

// keep marks the copy kept: its files stay after the hand-over.
func (c *stagedCopy) keep() {
	if c.stage != nil && !c.kept {
		c.stage = c.stage.Borrow()
	}
	c.kept = true
}

// handOver gives sink the copy's rows (at the re-snapshot's time) from
// their files; the copy is empty after.
func (c *stagedCopy) handOver(sink pipe.Sink, coll string) error {
	if c.stage == nil {
		return nil
	}
	ss, ok := sink.(stagerSink)
	if !ok {
		return fmt.Errorf("re-snapshot of %s: the sink takes no staged rows", coll)
	}
	sg := c.stage
	c.stage = nil
	return ss.DataStaged(coll, c.schema, sg, c.at.Partition)
}

// copyAttrs are the log attributes of how a copy was staged.
func copyAttrs(c *stagedCopy) []any {
	return []any{"runs", c.nruns, "rows_held_peak", c.peak}
}
