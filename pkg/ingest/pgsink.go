package ingest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
)

// pgSink is the PostgreSQL source's sink between replicate.StreamPG and
// the driver. It drops the collections this run does not ingest, and the
// changes of a collection the store already holds (a collection ahead of
// the others replays nothing: see skip); and it re-snapshots a
// collection in the middle of the stream, when its columns change there
// or when --resnapshot asks, so that it is exact from the change's own
// commit LSN T on:
//
//  1. at T, a copy of the table starts in the background at a snapshot
//     exported then (snapshot.Copy; its LSN S is beyond T) while the
//     stream goes on;
//  2. meanwhile the collection's changes after T are held, those at T
//     dropped (the copy has them), and progress is reported no further
//     than T, so no binding passes T (wait-recent does not answer past
//     it);
//  3. once the copy is done and the stream has reached S, the collection
//     is reset at T with the copy's schema (pipe.Sink.Reset), given the
//     copy at T minus the held changes below S (the copy rewound to T),
//     then the held changes at their own times; progress goes on.
//
// A failed copy, or something it cannot follow meanwhile (a TRUNCATE, a
// definite error, the columns changing again), gives the collection a
// definite error at T instead; a later re-snapshot clears it.
//
// The copy and the held changes are in memory until the reset is handed
// over (the bounded-memory work stages them).
type pgSink struct {
	pipe.Sink
	p    *PG
	ctx  context.Context
	keep map[string]bool
	// skip: changes of a collection at source times below it are durable
	// already (the collection is ahead of the stream's start).
	skip map[string]frontier.LSN
	jobs []*resnap

	// Tables added to or removed from the publication are found by
	// polling it (every pollInterval, and at once after a nudge): the
	// WAL position is read first, then the tables, so every change of
	// the publication before that position is seen, and progress is
	// reported no further than the last poll's position: no binding
	// passes a publication change that was not noticed.
	add      func(timeline string, c Collection) error
	subset   bool // a --tables run: tables added are not its own
	conn     *pgx.Conn
	lastPoll time.Time
	pollCap  frontier.LSN
	polled   bool
	removed  map[string]bool // tables removed, given their error
}

// pollInterval is how often the publication's tables are read; pollHeld
// how often while the last poll's position holds progress back (a busy
// stream), so that the poll adds at most that to the stream's latency.
const (
	pollInterval = time.Second
	pollHeld     = 20 * time.Millisecond
)

// resnap is one re-snapshot of a collection at source time at.
type resnap struct {
	coll  string
	at    frontier.LSN
	table *pgarrow.Table // as the stream describes it from at on
	why   string
	held  []arrow.Record // the collection's changes after at, in order
	// limit is how far progress may go while it runs: at, or for a table
	// added to the publication the position of the poll before the one
	// that found it (before the change), so that the first binding past
	// the change (the one a wait-recent issued after it answers) is also
	// past the table's reset.
	limit frontier.LSN

	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed.
	rows    []arrow.Record
	snapLSN frontier.LSN
	copied  *pgarrow.Table
	err     error
}

func (s *pgSink) job(coll string) *resnap {
	for _, j := range s.jobs {
		if j.coll == coll {
			return j
		}
	}
	return nil
}

// start re-snapshots coll at at, after what the stream handed over so
// far; t is the stream's description of the table from at on.
func (s *pgSink) start(coll string, at frontier.LSN, t *pgarrow.Table, why string) *resnap {
	ctx, cancel := context.WithCancel(s.ctx)
	j := &resnap{coll: coll, at: at, limit: at, table: t, why: why, cancel: cancel, done: make(chan struct{})}
	s.jobs = append(s.jobs, j)
	s.p.log.Info("re-snapshot", "source", s.p.cfg.Source, "collection", coll, "at", at, "why", why)
	go func() {
		defer close(j.done)
		defer s.p.Nudge("") // the stream reports its progress at once
		began := time.Now()
		defer func() {
			s.p.log.Debug("re-snapshot copied", "collection", coll, "took", time.Since(began), "snapshot_lsn", j.snapLSN, "error", j.err)
		}()
		c := &collectSink{}
		lsn, tabs, err := snapshot.Copy(ctx, snapshot.Config{
			Upstream: s.p.cfg.Upstream, Publication: s.p.cfg.Publication, Tables: []string{coll}, Logger: s.p.log,
		}, c)
		j.rows, j.snapLSN, j.err = c.recs, lsn, err
		if err == nil && len(tabs) == 1 {
			j.copied = tabs[0]
		}
	}()
	return j
}

// abort ends j without a reset: the collection has a definite error at
// j.at (which a later reset clears).
func (s *pgSink) abort(j *resnap, msg string) error {
	s.jobs = slices.DeleteFunc(s.jobs, func(x *resnap) bool { return x == j })
	j.cancel()
	<-j.done
	j.release()
	s.p.log.Warn("re-snapshot failed; the collection has a definite error from its time", "source", s.p.cfg.Source, "collection", j.coll, "at", j.at, "error", msg)
	return s.Sink.Error(j.coll, frontier.Time{Pos: uint64(j.at)}, msg)
}

func (j *resnap) release() {
	for _, r := range j.rows {
		r.Release()
	}
	for _, r := range j.held {
		r.Release()
	}
	j.rows, j.held = nil, nil
}

// skipped reports whether coll's update at source time at is durable
// already.
func (s *pgSink) skipped(coll string, at frontier.LSN) bool { return at < s.skip[coll] }

// Data implements pipe.Sink.
func (s *pgSink) Data(coll string, rec arrow.Record) error {
	if !s.keep[coll] {
		return nil
	}
	times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
	j := s.job(coll)
	from := s.skip[coll]
	if j != nil {
		from = max(from, j.at+1)
	}
	if from == 0 {
		return s.Sink.Data(coll, rec)
	}
	var rows []int
	for i := 0; i < times.Len(); i++ {
		if frontier.LSN(times.Value(i)) >= from {
			rows = append(rows, i)
		}
	}
	var out arrow.Record
	switch len(rows) {
	case 0:
		return nil
	case times.Len():
		rec.Retain()
		out = rec
	default:
		var err error
		if out, err = arrowutil.Take(rec, rows, memory.DefaultAllocator); err != nil {
			return err
		}
	}
	if j == nil {
		defer out.Release()
		return s.Sink.Data(coll, out)
	}
	j.held = append(j.held, out)
	return nil
}

// Error implements pipe.Sink.
func (s *pgSink) Error(coll string, at frontier.Time, msg string) error {
	if !s.keep[coll] || s.skipped(coll, frontier.LSN(at.Pos)) {
		return nil
	}
	if j := s.job(coll); j != nil {
		return s.abort(j, msg)
	}
	return s.Sink.Error(coll, at, msg)
}

// Reset implements pipe.Sink.
func (s *pgSink) Reset(coll string, at frontier.Time, schema *arrow.Schema) error {
	if !s.keep[coll] || s.skipped(coll, frontier.LSN(at.Pos)) {
		return nil
	}
	if j := s.job(coll); j != nil {
		if err := s.abort(j, fmt.Sprintf("%s was truncated at %s while it was re-snapshotted from %s; its contents in between are not known", coll, frontier.LSN(at.Pos), j.at)); err != nil {
			return err
		}
	}
	return s.Sink.Reset(coll, at, schema)
}

// Progress implements pipe.Sink: finished re-snapshots are handed over
// once the stream has reached their copies, and progress stops at the
// earliest one still running and at the last poll of the publication.
func (s *pgSink) Progress(coll string, upper frontier.Frontier) error {
	if err := s.poll(upper); err != nil {
		return err
	}
	for len(s.jobs) > 0 {
		j := s.jobs[0]
		if !isDone(j) || (j.err == nil && upper.Pos() < uint64(j.snapLSN)) {
			break
		}
		s.jobs = s.jobs[1:]
		if err := s.finish(j); err != nil {
			return err
		}
	}
	lo := frontier.LSN(upper.Pos())
	if s.polled {
		lo = min(lo, s.pollCap)
	}
	for _, j := range s.jobs {
		lo = min(lo, j.limit)
	}
	if uint64(lo) < upper.Pos() {
		upper = frontier.Single(frontier.DomainLSN, uint64(lo))
	}
	return s.Sink.Progress(coll, upper)
}

// poll reads the publication's tables when it is time: a table added is
// registered (StreamRequest.Add) and re-snapshotted from the poll's WAL
// position on, with progress held before it; a table removed gets a
// definite error at the last poll's position (it was still published
// there, and no binding has passed it).
func (s *pgSink) poll(upper frontier.Frontier) error {
	since := time.Since(s.lastPoll)
	held := s.polled && upper.Pos() > uint64(s.pollCap) // the last poll holds progress back
	if s.polled && since < pollInterval && !(held && since >= pollHeld) && !s.p.pollNow.Swap(false) {
		return nil
	}
	s.lastPoll = time.Now()
	ctx := s.ctx
	if s.conn == nil || s.conn.IsClosed() {
		c, err := s.p.cfg.Upstream.Connect(ctx)
		if err != nil {
			s.p.log.Warn("cannot read the publication's tables; retrying", "source", s.p.cfg.Source, "error", err)
			return nil
		}
		s.conn = c
	}
	var at string
	if err := s.conn.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_lsn()::text").Scan(&at); err != nil {
		s.p.log.Warn("cannot read the WAL position; retrying", "source", s.p.cfg.Source, "error", err)
		s.conn.Close(context.Background())
		return nil
	}
	lsn, err := frontier.ParseLSN(at)
	if err != nil {
		return fmt.Errorf("poll publication %s: %w", s.p.cfg.Publication, err)
	}
	rows, err := s.conn.Query(ctx, "SELECT schemaname::text, tablename::text FROM pg_catalog.pg_publication_tables WHERE pubname = $1", s.p.cfg.Publication)
	if err != nil {
		s.p.log.Warn("cannot read the publication's tables; retrying", "source", s.p.cfg.Source, "error", err)
		s.conn.Close(context.Background())
		return nil
	}
	published := map[string]pgarrow.TableName{}
	for rows.Next() {
		var n pgarrow.TableName
		if err := rows.Scan(&n.Schema, &n.Name); err != nil {
			rows.Close()
			return fmt.Errorf("poll publication %s: %w", s.p.cfg.Publication, err)
		}
		published[n.String()] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("poll publication %s: %w", s.p.cfg.Publication, err)
	}
	// No binding has passed limit: a change of the publication found now
	// (after the last poll) is timed there, so that the first binding
	// past it is past the change.
	limit := frontier.LSN(upper.Pos())
	if s.polled {
		limit = min(limit, s.pollCap)
	}
	for _, name := range slices.Sorted(maps.Keys(published)) {
		if s.keep[name] && !s.removed[name] || s.subset || s.add == nil {
			continue
		}
		if err := s.added(name, published[name], lsn, limit); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.keep)) {
		if _, ok := published[name]; ok || s.removed[name] {
			continue
		}
		s.removed[name] = true
		if j := s.job(name); j != nil {
			s.jobs = slices.DeleteFunc(s.jobs, func(x *resnap) bool { return x == j })
			j.cancel()
			<-j.done
			j.release()
		}
		s.p.log.Warn("table removed from the publication; its collection stops", "source", s.p.cfg.Source, "collection", name)
		if err := s.Sink.Error(name, frontier.Time{Pos: uint64(limit)}, fmt.Sprintf("%s was removed from publication %s before %s; the collection stops here: add it back (ALTER PUBLICATION %s ADD TABLE %s) and it is snapshotted again",
			name, s.p.cfg.Publication, lsn, pgarrow.QuoteIdent(s.p.cfg.Publication), name)); err != nil {
			return err
		}
	}
	s.pollCap, s.polled = lsn, true
	return nil
}

// added takes a table added to the publication on from at.
func (s *pgSink) added(name string, n pgarrow.TableName, at, limit frontier.LSN) error {
	t, err := pgarrow.LoadTableByName(s.ctx, s.conn, n)
	if err != nil {
		return fmt.Errorf("add %s: %w", name, err)
	}
	if err := s.add(s.p.cfg.Source, Collection{Name: name, Schema: arrow.NewSchema(t.Fields(), nil)}); err != nil {
		return err
	}
	s.keep[name] = true
	delete(s.removed, name)
	s.p.tabs[name] = t
	if t.ReplicaIdentity != "full" {
		return s.Sink.Error(name, frontier.Time{Pos: uint64(at)}, fmt.Sprintf("%s was added to publication %s with replica identity %s, which a snapshot in the stream cannot take; the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL, then the ingest with --resnapshot %s",
			name, s.p.cfg.Publication, t.ReplicaIdentity, t.QuotedName(), name))
	}
	s.start(name, at, t, "added to publication "+s.p.cfg.Publication).limit = limit
	return nil
}

func isDone(j *resnap) bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// finish hands j over: the reset at j.at, the copy rewound to it, then
// the held changes.
func (s *pgSink) finish(j *resnap) error {
	defer j.release()
	at := frontier.Time{Pos: uint64(j.at)}
	if j.err != nil || j.copied == nil {
		msg := fmt.Sprintf("re-snapshot of %s at %s failed: %v; the collection stops here: run the ingest with --resnapshot %s", j.coll, j.at, j.err, j.coll)
		s.p.log.Warn("re-snapshot failed", "source", s.p.cfg.Source, "collection", j.coll, "error", j.err)
		return s.Sink.Error(j.coll, at, msg)
	}
	if d := arrowutil.FieldsChange(j.table.Fields(), j.copied.Fields()); d != "" {
		return s.Sink.Error(j.coll, at, fmt.Sprintf("the columns of %s changed again while it was re-snapshotted from %s (%s); the collection stops here until the stream shows the change", j.coll, j.at, d))
	}
	if err := s.Sink.Reset(j.coll, at, arrow.NewSchema(j.copied.Fields(), nil)); err != nil {
		return err
	}
	var copied, rewound int64
	for _, rec := range j.rows {
		if err := s.retimed(j.coll, rec, nil, j.at, false); err != nil {
			return err
		}
		copied += rec.NumRows()
	}
	for _, rec := range j.held {
		times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
		var below []int
		for i := 0; i < times.Len(); i++ {
			if frontier.LSN(times.Value(i)) < j.snapLSN {
				below = append(below, i)
			}
		}
		if err := s.retimed(j.coll, rec, below, j.at, true); err != nil {
			return err
		}
		rewound += int64(len(below))
	}
	for _, rec := range j.held {
		if err := s.Sink.Data(j.coll, rec); err != nil {
			return err
		}
	}
	s.p.log.Info("re-snapshot done", "source", s.p.cfg.Source, "collection", j.coll, "at", j.at, "rows", copied, "rewound", rewound, "snapshot_lsn", j.snapLSN)
	return nil
}

// retimed hands over rows of rec (all when rows is nil; none when it is
// empty) at source time at, with their diffs negated when negate.
func (s *pgSink) retimed(coll string, rec arrow.Record, rows []int, at frontier.LSN, negate bool) error {
	if rows != nil {
		if len(rows) == 0 {
			return nil
		}
		sub, err := arrowutil.Take(rec, rows, memory.DefaultAllocator)
		if err != nil {
			return err
		}
		defer sub.Release()
		rec = sub
	}
	n := int(rec.NumRows())
	tb := array.NewUint64Builder(memory.DefaultAllocator)
	defer tb.Release()
	db := array.NewInt64Builder(memory.DefaultAllocator)
	defer db.Release()
	diffs := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
	for i := 0; i < n; i++ {
		tb.Append(uint64(at))
		d := diffs.Value(i)
		if negate {
			d = -d
		}
		db.Append(d)
	}
	ta, da := tb.NewArray(), db.NewArray()
	defer ta.Release()
	defer da.Release()
	cols := append(slices.Clone(rec.Columns()[:rec.NumCols()-2]), ta, da)
	out := array.NewRecord(rec.Schema(), cols, int64(n))
	defer out.Release()
	return s.Sink.Data(coll, out)
}

// RelationChanged implements replicate.RelationChanger: a collection
// this run ingests is re-snapshotted from the change on.
func (s *pgSink) RelationChanged(t *pgarrow.Table, at frontier.LSN, change string) (bool, error) {
	coll := t.QualifiedName()
	if !s.keep[coll] {
		return false, nil
	}
	if s.skipped(coll, at) {
		return true, nil // durable already, reset included
	}
	if j := s.job(coll); j != nil {
		if err := s.abort(j, fmt.Sprintf("%s at %s while %s was re-snapshotted from %s", change, at, coll, j.at)); err != nil {
			return false, err
		}
	}
	s.start(coll, at, t, change)
	return true, nil
}

// close stops the copies still running.
func (s *pgSink) close() {
	if s.conn != nil {
		s.conn.Close(context.Background())
	}
	for _, j := range s.jobs {
		j.cancel()
		<-j.done
		j.release()
	}
	s.jobs = nil
}

// collectSink keeps a copy's records (snapshot.Copy calls it from one
// goroutine).
type collectSink struct {
	mu   sync.Mutex
	recs []arrow.Record
}

func (c *collectSink) Data(_ string, rec arrow.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec.Retain()
	c.recs = append(c.recs, rec)
	return nil
}
func (c *collectSink) Progress(string, frontier.Frontier) error { return nil }
func (c *collectSink) Error(coll string, _ frontier.Time, msg string) error {
	return errors.New(msg)
}
func (c *collectSink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("copy of %s: unexpected reset at %d", coll, at.Pos)
}
