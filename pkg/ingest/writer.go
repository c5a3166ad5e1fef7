package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// storeWriter is the reclocker's Output for an in-process ingest: it
// buffers system-time data per collection and, when a binding's data is
// complete, hands every collection of the source to a committer goroutine.
// Commits run while the next binding's data is decoded (concatenating,
// sorting, writing and syncing a batch is most of an ingest's work, and
// the change stream would otherwise wait for it); at most one commit waits
// behind the running one, so a slow disk slows the stream instead of
// growing memory. The bindings are durable before their data is handed
// over, so a crash with commits in flight loses nothing: a restart
// replays from the store's durable upper.
//
// Binding, Data, Error and Progress are called by the reclocker's owner
// (one goroutine at a time); Durable, DurableUpper, Err, Flush and Close
// are safe from any goroutine.
type storeWriter struct {
	st          *store.Store
	source      string
	collections []string // every collection of the source, sorted; guarded by mu
	// fresh are collections added while streaming (add) whose contents
	// (their first reset) are not committed yet; guarded by mu.
	fresh map[string]bool

	// Owned by the reclocker's caller.
	pending map[string][]segment

	jobs chan commitJob
	done chan struct{} // closed when the committer exits
	// sendMu orders sends on jobs with closing it.
	sendMu sync.Mutex
	closed bool // guarded by sendMu

	mu sync.Mutex
	// durable is the upper every collection has committed (min over them).
	durable uint64
	// err is the first commit error; later jobs are dropped (their data
	// is replayed after a restart).
	err error
	// afterCommit is a test hook called after each collection's commit.
	afterCommit func(collection string, upper uint64)
	onCommit    func(collection string, rows int64, upper uint64)
}

type buffered struct {
	schema *arrow.Schema
	recs   []arrow.Record
	// staged are rows the reclocker staged (a large transaction), each
	// part at one time.
	staged           []store.StagedPart
	rows             int64
	minTime, maxTime uint64
}

// addStaged takes the staged rows of p (owning its stage) into b.
func (b *buffered) addStaged(p store.StagedPart) {
	if b.rows == 0 {
		b.minTime, b.maxTime = p.At, p.At
	}
	b.minTime, b.maxTime = min(b.minTime, p.At), max(b.maxTime, p.At)
	b.staged = append(b.staged, p)
	b.rows += p.Stage.Rows()
}

// add takes rec (retaining it) into b.
func (b *buffered) add(rec arrow.Record) {
	times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
	for i := 0; i < times.Len(); i++ {
		v := times.Value(i)
		if b.rows == 0 && i == 0 {
			b.minTime, b.maxTime = v, v
		}
		b.minTime, b.maxTime = min(b.minTime, v), max(b.maxTime, v)
	}
	rec.Retain()
	b.recs = append(b.recs, rec)
	b.rows += rec.NumRows()
}

// split returns b's rows at times below upper and at or above it (either
// may be nil), and releases b. Only a replay of a collection that is
// behind the source's bindings hands over data beyond the progress that
// follows it, so this is rarely more than a comparison.
func (b *buffered) split(upper uint64) (below, rest *buffered, err error) {
	if b.maxTime < upper {
		return b, nil, nil
	}
	defer b.release()
	below, rest = &buffered{schema: b.schema}, &buffered{schema: b.schema}
	for _, p := range b.staged {
		if p.At < upper {
			below.addStaged(p)
		} else {
			rest.addStaged(p)
		}
	}
	b.staged = nil
	for _, rec := range b.recs {
		times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
		var lo, hi []int
		for i := 0; i < times.Len(); i++ {
			if times.Value(i) < upper {
				lo = append(lo, i)
			} else {
				hi = append(hi, i)
			}
		}
		for _, part := range []struct {
			rows []int
			to   *buffered
		}{{lo, below}, {hi, rest}} {
			if len(part.rows) == 0 {
				continue
			}
			sub, err := arrowutil.Take(rec, part.rows, memory.DefaultAllocator)
			if err != nil {
				below.release()
				rest.release()
				return nil, nil, err
			}
			part.to.add(sub)
			sub.Release()
		}
	}
	if below.rows == 0 {
		below = nil
	}
	return below, rest, nil
}

func (b *buffered) release() {
	for _, r := range b.recs {
		r.Release()
	}
	b.recs = nil
	for _, p := range b.staged {
		p.Stage.Release()
	}
	b.staged = nil
}

// segment is a collection's buffered data from one event on (a reset, a
// definite error) or, with neither, from what the store holds: a
// collection's pending data is a list of them in time order, each holding
// only rows at times before the next one's event. The rows of an error's
// segment are never committed: the collection has no contents until a
// reset after it.
type segment struct {
	reset *timedReset
	err   *timedError
	b     *buffered // nil: no rows
}

// at is the time of sg's event; ok is false when it has none.
func (sg segment) at() (t uint64, ok bool) {
	switch {
	case sg.reset != nil:
		return sg.reset.t, true
	case sg.err != nil:
		return sg.err.t, true
	}
	return 0, false
}

// timedReset is a reset (pipe.Sink.Reset) at system time t.
type timedReset struct {
	t      uint64
	schema *arrow.Schema // nil: unchanged
}

func releaseSegments(segs []segment) {
	for _, sg := range segs {
		if sg.b != nil {
			sg.b.release()
		}
	}
}

// splitSegments returns the segments' rows below upper (the resets below
// it with them) and the rest.
func splitSegments(segs []segment, upper uint64) (below, rest []segment, err error) {
	for i, sg := range segs {
		if t, ok := sg.at(); ok && t >= upper {
			return below, append(rest, segs[i:]...), nil
		}
		lo := segment{reset: sg.reset, err: sg.err}
		if sg.b != nil {
			var hi *buffered
			if lo.b, hi, err = sg.b.split(upper); err != nil {
				releaseSegments(below)
				releaseSegments(segs[i+1:])
				return nil, nil, err
			}
			if hi != nil {
				// A replay ahead of progress: the rows stay, after the
				// event that is committed now.
				rest = append(rest, segment{err: continued(sg.err), b: hi})
			}
		}
		below = append(below, lo)
	}
	return below, rest, nil
}

// continued is the event of the rest of a segment cut at a progress: an
// error goes on holding (its rows stay uncommitted), a reset is done.
func continued(e *timedError) *timedError {
	if e == nil {
		return nil
	}
	return &timedError{t: e.t, msg: e.msg, recorded: true}
}

// commitJob is the data of every collection below upper, or (flushed not
// nil) a request to report when the jobs before it are done.
type commitJob struct {
	upper   uint64
	pending map[string][]segment
	flushed chan struct{}
}

func (j commitJob) release() {
	for _, segs := range j.pending {
		releaseSegments(segs)
	}
}

func newStoreWriter(st *store.Store, source string, collections []string) *storeWriter {
	cs := append([]string{}, collections...)
	sort.Strings(cs)
	w := &storeWriter{st: st, source: source, collections: cs, pending: map[string][]segment{},
		jobs: make(chan commitJob, 1), done: make(chan struct{})}
	go w.committer()
	return w
}

// committer commits the jobs in order until jobs is closed.
func (w *storeWriter) committer() {
	defer close(w.done)
	ctx := context.Background()
	for j := range w.jobs {
		if j.flushed != nil {
			close(j.flushed)
			continue
		}
		if w.Err() != nil {
			j.release()
			continue
		}
		complete, err := w.commitAll(ctx, j)
		j.release()
		w.mu.Lock()
		if err != nil {
			w.err = err
		} else if complete {
			w.durable = j.upper
		}
		w.mu.Unlock()
	}
}

// commitAll commits every collection of the source up to j.upper.
// complete is false while a collection has no shard yet (one added while
// streaming, before its snapshot): nothing is durable for the source
// until it has its contents.
func (w *storeWriter) commitAll(ctx context.Context, j commitJob) (complete bool, err error) {
	complete = true
	for _, c := range w.collectionList() {
		has, err := w.commit(ctx, c, j.upper, j.pending[c])
		if err != nil {
			return false, err
		}
		complete = complete && has
	}
	return complete, nil
}

func (w *storeWriter) collectionList() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.collections)
}

// add makes collection one of the source's: from its first reset on
// (its snapshot) it is committed with the others; until then its upper
// stays where it is, and nothing is durable for the source.
func (w *storeWriter) add(collection string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.collections, collection) {
		w.collections = append(w.collections, collection)
		slices.Sort(w.collections)
		if w.fresh == nil {
			w.fresh = map[string]bool{}
		}
		w.fresh[collection] = true
	}
}

// waiting reports whether c is fresh and segs do not start its contents.
func (w *storeWriter) waiting(c string, segs []segment) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.fresh[c] {
		return false
	}
	for _, sg := range segs {
		if sg.reset != nil || sg.err != nil {
			delete(w.fresh, c)
			return false
		}
	}
	return true
}

// Err returns the first commit error, if any.
func (w *storeWriter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// DurableUpper is the upper this writer has committed every collection
// to (or found them committed to at the start).
func (w *storeWriter) DurableUpper() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durable
}

// setDurable records the durable upper found at the start.
func (w *storeWriter) setDurable(u uint64) {
	w.mu.Lock()
	w.durable = u
	w.mu.Unlock()
}

// Flush waits until every commit handed over so far is done and returns
// the first commit error.
func (w *storeWriter) Flush() error {
	ch := make(chan struct{})
	if w.send(commitJob{flushed: ch}) {
		<-ch
	}
	return w.Err()
}

// send hands j to the committer, waiting while the queue is full; false
// when the writer is closed.
func (w *storeWriter) send(j commitJob) bool {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.closed {
		return false
	}
	w.jobs <- j
	return true
}

// Close finishes the handed-over commits, stops the committer and drops
// data not yet handed over (it is not bound complete; a restart replays
// it). It returns the first commit error. Close is idempotent.
func (w *storeWriter) Close() error {
	w.sendMu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.sendMu.Unlock()
	<-w.done
	for c, segs := range w.pending {
		releaseSegments(segs)
		delete(w.pending, c)
	}
	return w.Err()
}

// Binding implements reclock.Output: the binding is already durable.
func (w *storeWriter) Binding(frontier.Binding) error { return nil }

// Data implements reclock.Output.
func (w *storeWriter) Data(collection string, schema *arrow.Schema, rec arrow.Record) error {
	w.tail(collection, schema).add(rec)
	return nil
}

// tail returns the buffer of collection's last pending segment.
func (w *storeWriter) tail(collection string, schema *arrow.Schema) *buffered {
	segs := w.pending[collection]
	if len(segs) == 0 {
		segs = []segment{{}}
	}
	last := &segs[len(segs)-1]
	if last.b == nil {
		last.b = &buffered{schema: schema}
	}
	w.pending[collection] = segs
	return last.b
}

// DataStaged implements reclock.StagedOutput: the staged rows are
// committed from their files (store.Shard.AppendStaged), never held.
func (w *storeWriter) DataStaged(collection string, schema *arrow.Schema, stage *store.Stage, t uint64) error {
	w.tail(collection, schema).addStaged(store.StagedPart{Stage: stage, At: t})
	return nil
}

// Reset implements reclock.Output: the rows of collection at t or later
// handed over so far are superseded, and a new segment starts at t; its
// commit starts a new generation of the collection's shard there.
func (w *storeWriter) Reset(collection string, t uint64, schema *arrow.Schema) error {
	return w.event(collection, t, segment{reset: &timedReset{t: t, schema: schema}})
}

// Error implements reclock.Output: from t on the collection has the
// definite error msg (until a reset after it): rows at t or later handed
// over so far are not committed, and the error is recorded at t.
func (w *storeWriter) Error(collection string, t uint64, msg string) error {
	return w.event(collection, t, segment{err: &timedError{t: t, msg: msg}})
}

// event cuts collection's pending rows at t (the later ones came before
// the event, which supersedes them) and starts segment sg there.
func (w *storeWriter) event(collection string, t uint64, sg segment) error {
	segs, rest, err := splitSegments(w.pending[collection], t)
	if err != nil {
		return fmt.Errorf("commit %s: %w", collection, err)
	}
	releaseSegments(rest)
	w.pending[collection] = append(segs, sg)
	return nil
}

// timedError is a definite error at system time t; recorded says a
// commit before recorded it already (the rest of its segment).
type timedError struct {
	t        uint64
	msg      string
	recorded bool
}

// Progress implements reclock.Output: every collection of the source is
// complete below upper; hand them all to the committer. It returns an
// earlier commit's error, and waits while one commit is running and
// another is queued.
func (w *storeWriter) Progress(upper uint64) error {
	if err := w.Err(); err != nil {
		return err
	}
	j := commitJob{upper: upper, pending: map[string][]segment{}}
	rest := map[string][]segment{}
	for c, segs := range w.pending {
		below, later, err := splitSegments(segs, upper)
		if err != nil {
			j.release()
			return fmt.Errorf("commit %s: %w", c, err)
		}
		if len(below) > 0 {
			j.pending[c] = below
		}
		if len(later) > 0 {
			rest[c] = later
		}
	}
	w.pending = rest
	if !w.send(j) {
		j.release()
		return errWriterClosed
	}
	return nil
}

// errWriterClosed: data bound after the ingest stopped committing (it is
// replayed after a restart).
var errWriterClosed = errors.New("ingest: store writer closed")

// commit commits c's segs up to upper; exists is false when c has no
// shard, and had nothing to create one with.
func (w *storeWriter) commit(ctx context.Context, c string, upper uint64, segs []segment) (exists bool, err error) {
	if w.waiting(c, segs) {
		return false, nil
	}
	sh, err := w.st.Shard(ctx, c)
	if errors.Is(err, store.ErrNotFound) {
		schema := segmentsSchema(segs)
		if schema == nil {
			// No data and no shard yet: nothing to say about it until its
			// first data (its snapshot) arrives.
			return false, nil
		}
		sh, err = w.st.CreateShard(ctx, c, schema)
	}
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", c, err)
	}
	if err := sh.Refresh(ctx); err != nil {
		return false, fmt.Errorf("commit %s: %w", c, err)
	}
	return true, w.commitSegments(ctx, sh, c, upper, segs)
}

// commitSegments commits segs to sh.
func (w *storeWriter) commitSegments(ctx context.Context, sh *store.Shard, c string, upper uint64, segs []segment) error {
	var rows int64
	appended := false
	if len(segs) == 0 {
		segs = []segment{{}}
	}
	for i, sg := range segs {
		next := upper
		if i+1 < len(segs) {
			next, _ = segs[i+1].at()
		}
		switch {
		case sg.reset != nil:
			schema := sh.SchemaAt(sg.reset.t)
			if sg.reset.schema != nil {
				// The new columns, with the collection's metadata (its
				// source, its keys).
				md := mergeMetadata(sg.reset.schema.Metadata(), schema.Metadata())
				schema = arrow.NewSchema(sg.reset.schema.Fields(), &md)
			}
			if err := w.appendTo(ctx, sh, c, sg.reset.t, nil, &appended); err != nil {
				return err
			}
			if _, err := sh.NewGeneration(ctx, sg.reset.t, schema); err != nil {
				return fmt.Errorf("commit reset of %s at %d: %w", c, sg.reset.t, err)
			}
		case sg.err != nil && i+1 < len(segs) && next == sg.err.t:
			continue // a reset at the same time supersedes it
		case sg.err != nil && !sg.err.recorded:
			// A definite error holds from its own time on: the data went
			// up to it, the error is recorded at it, and its segment's
			// rows (its own transaction's, say) are not committed. So
			// every read at the error's time fails, never shows the
			// collection as it was before.
			if err := w.appendTo(ctx, sh, c, sg.err.t, nil, &appended); err != nil {
				return err
			}
			if err := w.recordError(ctx, sh, c, sg.err, max(next, sg.err.t+1)); err != nil {
				return err
			}
			continue
		case sg.err != nil:
			if err := w.appendTo(ctx, sh, c, next, nil, &appended); err != nil {
				return err
			}
			continue
		}
		if sg.b != nil {
			rows += sg.b.rows
		}
		if err := w.appendTo(ctx, sh, c, next, sg.b, &appended); err != nil {
			return err
		}
	}
	if w.onCommit != nil && appended {
		w.onCommit(c, rows, upper)
	}
	if w.afterCommit != nil {
		w.afterCommit(c, upper)
	}
	return nil
}

// recordError records e in sh, advancing its upper to newUpper. A replay
// that meets an error the first run did not record (the upstream's
// catalog moved in between) keeps history as committed: the error holds
// from the collection's upper on.
func (w *storeWriter) recordError(ctx context.Context, sh *store.Shard, c string, e *timedError, newUpper uint64) error {
	_, err := sh.AppendError(ctx, e.t, newUpper, e.msg)
	if _, ok := errors.AsType[*store.UpperMismatchError](err); ok && e.t < sh.Upper() {
		at := sh.Upper()
		_, err = sh.AppendError(ctx, at, max(newUpper, at+1), e.msg)
	}
	if err != nil {
		return fmt.Errorf("commit error of %s: %w", c, err)
	}
	return nil
}

// appendTo appends b's rows (b may be nil) to sh, advancing its upper to
// newUpper: a compare-and-append from the shard's upper or, for rows
// below it (a replay), from their least time, verified and skipped.
// *appended notes whether anything new was written.
func (w *storeWriter) appendTo(ctx context.Context, sh *store.Shard, c string, newUpper uint64, b *buffered, appended *bool) error {
	expected := sh.Upper()
	var recs []arrow.Record
	var staged []store.StagedPart
	if b != nil && b.rows > 0 {
		if b.minTime < expected {
			expected = b.minTime // a replay: verified against the store and skipped
		}
		recs, staged = b.recs, b.staged
	}
	if newUpper <= expected {
		return nil // already durable
	}
	res, err := sh.AppendStaged(ctx, expected, newUpper, staged, recs...)
	if err != nil {
		return fmt.Errorf("commit %s: %w", c, err)
	}
	if res.Status == store.Appended {
		*appended = true
	}
	return nil
}

// segmentsSchema is the user schema a new shard for segs is created
// with: the first reset's or data's, nil when segs hold nothing.
func segmentsSchema(segs []segment) *arrow.Schema {
	for _, sg := range segs {
		if sg.reset != nil && sg.reset.schema != nil {
			return sg.reset.schema
		}
		if sg.b != nil {
			return sg.b.schema
		}
	}
	return nil
}

// Durable returns the system upper below which every collection of the
// source is committed, reading the store (another process may have
// committed more; this one never has less).
func (w *storeWriter) Durable(ctx context.Context) (uint64, error) {
	return w.st.LeastUpper(ctx, w.collectionList())
}

// durableFrontier maps a system upper to the source frontier below which
// everything is durable: the frontier of the last binding at a time below
// upper (empty when there is none).
func durableFrontier(bs []frontier.Binding, upper uint64, d frontier.Domain) frontier.Frontier {
	k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= upper })
	if k == 0 {
		return frontier.Empty(d)
	}
	return bs[k-1].Frontier
}
