package ingest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/upstream"
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
// The copy is staged in the store as it comes, in runs of bounded size
// (copystage.go), and committed from its files at the hand-over; the
// held changes are in memory (the reclocker stages them past its budget
// once handed over).
//
// A table with a key state (replica identity DEFAULT or USING INDEX:
// replicate.StateTaker) is not rewound: the changes held between T and S
// have no old rows in the new columns. The stream holds its changes as
// pgoutput sent them; at the hand-over the collection is reset at T with
// the copy as it is (at S), the state is read from the copy, and the
// stream drops the held changes below S (in the copy) and hands the
// others over through the state. Progress jumps from T to beyond S, so
// no binding falls in between and the collection is exact at every
// binding time.
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
	add     func(timeline string, c Collection) error
	subset  bool // a --tables run: tables added are not its own
	poller  *pubPoller
	seen    uint64 // the last reading applied
	pollCap frontier.LSN
	polled  bool
	removed map[string]bool // tables removed, given their error

	stateTaking // the stream's key states read from copies
}

// pollInterval is how often the publication's tables are read; pollHeld
// is the least time between two readings (asked for while the last one's
// position holds progress back, a busy stream).
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
	// silent: the collection is durable past at already; the copy only
	// gives the stream its key state (stateTaking.later).
	silent bool
	held   []arrow.Record // the collection's changes after at, in order
	// limit is how far progress may go while it runs: at, or for a table
	// added to the publication the position of the poll before the one
	// that found it (before the change), so that the first binding past
	// the change (the one a wait-recent issued after it answers) is also
	// past the table's reset.
	limit frontier.LSN

	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed.
	copy    stagedCopy
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
	var kept pgarrow.Table
	if k, err := readKept(ctx, s.p.st, s.p.cfg.Source, coll, frontier.Time{Pos: uint64(at)}, at.String(), &kept); err != nil || k != nil {
		// Done before a crash: handed over again as it was.
		if err == nil {
			j.copy, j.copied = k.copy, &kept
			j.snapLSN, err = frontier.ParseLSN(k.snap)
			s.p.log.Info("re-snapshot: the copy kept before a restart", "source", s.p.cfg.Source, "collection", coll, "at", at, "snapshot_lsn", k.snap)
		}
		j.err = err
		close(j.done)
		s.p.Nudge("")
		return j
	}
	go func() {
		defer close(j.done)
		defer s.p.Nudge("") // the stream reports its progress at once
		began := time.Now()
		defer func() {
			s.p.log.Debug("re-snapshot copied", "collection", coll, "took", time.Since(began), "snapshot_lsn", j.snapLSN, "error", j.err)
		}()
		c := newCopyStager(ctx, s.p.st, s.p.cfg.Source, frontier.Time{Pos: uint64(at)}, s.p.cfg.CopyMemory)
		lsn, tabs, err := snapshot.Copy(ctx, snapshot.Config{
			Upstream: s.p.cfg.Upstream, Publication: s.p.cfg.Publication, Tables: []string{coll}, Logger: s.p.log,
			KeyedIdentity: true, // a table with a key state: read into one (finishKeyed)
		}, c)
		j.copy, err = c.done(coll, err)
		j.snapLSN, j.err = lsn, err
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
	s.unstate(j.coll)
	s.p.log.Warn("re-snapshot failed; the collection has a definite error from its time", "source", s.p.cfg.Source, "collection", j.coll, "at", j.at, "error", msg)
	return s.Sink.Error(j.coll, frontier.Time{Pos: uint64(j.at)}, msg)
}

func (j *resnap) release() {
	j.copy.release()
	for _, r := range j.held {
		r.Release()
	}
	j.held = nil
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
		delete(s.taken, coll) // the stream's state is empty from the reset on
	}
	return s.Sink.Reset(coll, at, schema)
}

// limit is the stream's replicate.PGConfig.Limit: with the stream at
// position, it applies the publication poller's latest reading, hands
// over the re-snapshots whose copies the stream has reached, and returns
// how far progress may go: no further than the earliest re-snapshot
// still running, nor than the last reading's position.
func (s *pgSink) limit(position frontier.LSN) (frontier.LSN, error) {
	if err := s.poll(position); err != nil {
		return 0, err
	}
	// What progress may report but for the jobs: no further than the last
	// reading of the publication.
	lo := position
	if s.polled {
		lo = min(lo, s.pollCap)
	}
	// The copies done are handed over together once the progress reported
	// with them (held back by the jobs still running) is past each of
	// them: a keyed copy is not rewound, so the first binding past its
	// change must cover it (a binding between would read it early), and a
	// rewound one needs every change below it held.
	var done, running []*resnap
	for _, j := range s.jobs {
		if isDone(j) {
			done = append(done, j)
		} else {
			running = append(running, j)
		}
	}
	after := lo
	for _, j := range running {
		after = min(after, j.limit)
	}
	if len(done) > 0 && !slices.ContainsFunc(done, func(j *resnap) bool { return j.err == nil && after < j.snapLSN }) {
		s.jobs = running
		for _, j := range done {
			if err := s.finish(j); err != nil {
				return 0, err
			}
		}
	}
	for _, j := range s.jobs {
		lo = min(lo, j.limit)
	}
	return lo, nil
}

// poll applies the poller's latest reading of the publication (asking
// for a new one while the last holds progress back, or a recency waiter
// nudged): a table added is registered (StreamRequest.Add) and
// re-snapshotted from the reading's WAL position on, with progress held
// before it; a table removed gets a definite error at the last reading's
// position (it was still published there, and no binding has passed
// it). While the poller cannot read the publication (the server is going
// away), progress is not held back by it.
func (s *pgSink) poll(position frontier.LSN) error {
	if s.poller == nil {
		return nil
	}
	if s.p.pollNow.Swap(false) || s.polled && position > s.pollCap {
		s.poller.ask()
	}
	r, failed := s.poller.latest()
	if failed {
		s.polled = false
	}
	if r == nil || r.seq == s.seen {
		return nil
	}
	s.seen = r.seq
	// No binding has passed limit: a change of the publication found now
	// (after the last reading) is timed there, so that the first binding
	// past it is past the change.
	limit := position
	if s.polled {
		limit = min(limit, s.pollCap)
	}
	for _, name := range slices.Sorted(maps.Keys(r.published)) {
		if s.keep[name] && !s.removed[name] || s.subset || s.add == nil {
			continue
		}
		t := r.published[name]
		if t == nil {
			t = s.p.tabs[name]
		}
		if t == nil {
			continue // not described yet: the next reading
		}
		// From the reading's position or, if the stream is past it
		// already (it went on meanwhile, dropping the table's changes),
		// from where the stream is: the copy has everything before.
		if err := s.added(name, t, max(r.at, position), limit); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.keep)) {
		if _, ok := r.published[name]; ok || s.removed[name] {
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
			name, s.p.cfg.Publication, r.at, pgarrow.QuoteIdent(s.p.cfg.Publication), name)); err != nil {
			return err
		}
	}
	s.pollCap, s.polled = r.at, true
	return nil
}

// added takes a table added to the publication on from at.
func (s *pgSink) added(name string, t *pgarrow.Table, at, limit frontier.LSN) error {
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

// pubPoller reads the publication's tables in the background, every
// pollInterval and when asked (at most every pollHeld), on a connection
// of its own, so that a slow upstream never slows the stream: the WAL
// position first, then the tables in a statement of their own (one
// round trip), so every change of the publication before that position
// is in the reading. Tables it has not described yet are loaded.
type pubPoller struct {
	p     *PG
	kick  chan struct{}
	known map[string]bool // described already (the run's tables, and those loaded)
	dial  *upstream.Dial  // the first connection, opened early (PG.poll)

	mu     sync.Mutex
	last   *pollReading
	failed bool
}

// pollReading is one reading of the publication.
type pollReading struct {
	seq uint64
	at  frontier.LSN
	// published: every table of the publication, with its description
	// when the poller loaded it for this reading (a table new to it).
	published map[string]*pgarrow.Table
}

func newPubPoller(ctx context.Context, p *PG) *pubPoller {
	pp := &pubPoller{p: p, kick: make(chan struct{}, 1), known: map[string]bool{}, dial: p.poll}
	p.poll = nil
	for name := range p.tables {
		pp.known[name] = true
	}
	go pp.run(ctx)
	return pp
}

func (pp *pubPoller) ask() {
	select {
	case pp.kick <- struct{}{}:
	default:
	}
}

func (pp *pubPoller) latest() (*pollReading, bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.last, pp.failed
}

func (pp *pubPoller) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
		if pp.dial != nil {
			pp.dial.Close()
		}
	}()
	var seq uint64
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-pp.kick:
		}
		began := time.Now()
		if conn == nil || conn.IsClosed() {
			connect := pp.p.cfg.Upstream.Connect
			if d := pp.dial; d != nil {
				pp.dial, connect = nil, func(context.Context) (*pgx.Conn, error) { return d.Wait() }
			}
			c, err := connect(ctx)
			if err != nil {
				pp.fail(err)
				conn = nil
			} else {
				conn = c
			}
		}
		if conn != nil {
			seq++
			r, err := pp.read(ctx, conn, seq)
			if err != nil {
				pp.fail(err)
				conn.Close(context.Background())
				conn = nil
			} else {
				pp.mu.Lock()
				pp.last, pp.failed = r, false
				pp.mu.Unlock()
				// The stream reports its progress at once, and applies it.
				select {
				case pp.p.nudge <- struct{}{}:
				default:
				}
			}
		}
		timer.Reset(pollInterval)
		if d := pollHeld - time.Since(began); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

func (pp *pubPoller) fail(err error) {
	if pp.p.log != nil {
		pp.p.log.Debug("cannot read the publication's tables; retrying", "source", pp.p.cfg.Source, "error", err)
	}
	pp.mu.Lock()
	pp.failed = true
	pp.mu.Unlock()
}

// read takes one reading.
func (pp *pubPoller) read(ctx context.Context, conn *pgx.Conn, seq uint64) (*pollReading, error) {
	pub := "'" + strings.ReplaceAll(pp.p.cfg.Publication, "'", "''") + "'"
	res, err := conn.PgConn().Exec(ctx, "SELECT pg_catalog.pg_current_wal_lsn()::text; SELECT schemaname::text, tablename::text FROM pg_catalog.pg_publication_tables WHERE pubname = "+pub).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("poll publication %s: %w", pp.p.cfg.Publication, err)
	}
	if len(res) != 2 || len(res[0].Rows) != 1 {
		return nil, fmt.Errorf("poll publication %s: unexpected result", pp.p.cfg.Publication)
	}
	at, err := frontier.ParseLSN(string(res[0].Rows[0][0]))
	if err != nil {
		return nil, fmt.Errorf("poll publication %s: %w", pp.p.cfg.Publication, err)
	}
	r := &pollReading{seq: seq, at: at, published: map[string]*pgarrow.Table{}}
	var unknown []pgarrow.TableName
	for _, row := range res[1].Rows {
		n := pgarrow.TableName{Schema: string(row[0]), Name: string(row[1])}
		name := n.String()
		r.published[name] = nil
		if !pp.known[name] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return r, nil
	}
	tabs, err := pgarrow.LoadTables(ctx, conn, unknown)
	if err != nil {
		return nil, fmt.Errorf("poll publication %s: describe the tables new to it: %w", pp.p.cfg.Publication, err)
	}
	for i, t := range tabs {
		name := unknown[i].String()
		r.published[name] = t
		pp.known[name] = true
	}
	return r, nil
}

func isDone(j *resnap) bool { return closed(j.done) }

// finish hands j over: the reset at j.at, the copy rewound to it, then
// the held changes.
func (s *pgSink) finish(j *resnap) error {
	defer j.release()
	at := frontier.Time{Pos: uint64(j.at)}
	if err := copyFailed(s.ctx, j.coll, j.at.String(), j.err); err != nil {
		s.p.log.Warn("re-snapshot: the copy failed, not for the upstream", "source", s.p.cfg.Source, "collection", j.coll, "error", j.err)
		return err
	}
	if j.err != nil || j.copied == nil {
		msg := fmt.Sprintf("re-snapshot of %s at %s failed: %v; the collection stops here: run the ingest with --resnapshot %s", j.coll, j.at, j.err, j.coll)
		s.p.log.Warn("re-snapshot failed", "source", s.p.cfg.Source, "collection", j.coll, "error", j.err)
		s.unstate(j.coll)
		return s.Sink.Error(j.coll, at, msg)
	}
	if d := arrowutil.FieldsChange(j.table.Fields(), j.copied.Fields()); d != "" {
		s.unstate(j.coll)
		return s.Sink.Error(j.coll, at, fmt.Sprintf("the columns of %s changed again while it was re-snapshotted from %s (%s); the collection stops here until the stream shows the change", j.coll, j.at, d))
	}
	if key, ok := s.restating[j.coll]; ok {
		return s.finishKeyed(j, key)
	}
	if err := s.Sink.Reset(j.coll, at, arrow.NewSchema(j.copied.Fields(), nil)); err != nil {
		return err
	}
	copied, rewound := j.copy.rows, int64(0)
	if err := j.copy.handOver(s.Sink, j.coll); err != nil {
		return err
	}
	for _, rec := range j.held {
		times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
		var below []int
		for i := 0; i < times.Len(); i++ {
			if frontier.LSN(times.Value(i)) < j.snapLSN {
				below = append(below, i)
			}
		}
		if err := retimedRows(s.Sink, j.coll, rec, below, at, true); err != nil {
			return err
		}
		rewound += int64(len(below))
	}
	for _, rec := range j.held {
		if err := s.Sink.Data(j.coll, rec); err != nil {
			return err
		}
	}
	s.p.log.Info("re-snapshot done", append([]any{"source", s.p.cfg.Source, "collection", j.coll, "at", j.at, "rows", copied, "rewound", rewound, "snapshot_lsn", j.snapLSN}, copyAttrs(&j.copy)...)...)
	return nil
}

// finishKeyed hands over j of a table with a key state (by the columns
// key): the reset at j.at with the copy as it is, and the state of the
// copy for the stream, which hands over the changes it held that the
// copy does not have.
func (s *pgSink) finishKeyed(j *resnap, key []string) error {
	at := frontier.Time{Pos: uint64(j.at)}
	st, err := replicate.NewKeyState(j.copied, key)
	if err == nil {
		if err := s.p.keys.fill(s.ctx, j.coll, st, &j.copy); err != nil {
			// Local (the staged files, the state's disk) or the ingest
			// stopping: no fact of the upstream.
			return fmt.Errorf("re-snapshot of %s at %s: key state from the copy: %w", j.coll, j.at, err)
		}
	}
	if err == nil && len(j.held) > 0 {
		err = fmt.Errorf("%d changes were held decoded", len(j.held))
	}
	if err != nil {
		s.give(j.coll, nil, frontier.Frontier{})
		return s.Sink.Error(j.coll, at, fmt.Sprintf("re-snapshot of %s at %s: its rows by key cannot be read from the copy: %v; the collection stops here: run ALTER TABLE %s REPLICA IDENTITY FULL, then the ingest with --resnapshot %s",
			j.coll, j.at, err, j.copied.QuotedName(), j.coll))
	}
	var copied int64
	if !j.silent {
		// Durable before any binding past j.at can be (keptcopy.go).
		if err := keepCopy(s.p.st, s.p.cfg.Source, j.coll, j.at.String(), j.snapLSN.String(), j.copied, j.copied.Fields(), &j.copy); err != nil {
			return err
		}
		if err := s.Sink.Reset(j.coll, at, arrow.NewSchema(j.copied.Fields(), nil)); err != nil {
			return err
		}
		copied = j.copy.rows
		if err := j.copy.handOver(s.Sink, j.coll); err != nil {
			return err
		}
	}
	s.give(j.coll, st, frontier.Single(frontier.DomainLSN, uint64(j.snapLSN)))
	s.p.log.Info("re-snapshot done", append(append([]any{"source", s.p.cfg.Source, "collection", j.coll, "at", j.at, "rows", copied, "snapshot_lsn", j.snapLSN}, stateAttrs(st)...), copyAttrs(&j.copy)...)...)
	return nil
}

// RelationChanged implements replicate.RelationChanger: a collection
// this run ingests is re-snapshotted from the change on.
func (s *pgSink) RelationChanged(t *pgarrow.Table, at frontier.LSN, change string) (bool, error) {
	coll := t.QualifiedName()
	if !s.keep[coll] {
		return false, nil
	}
	if s.skipped(coll, at) {
		// Durable already, reset included; a table with a key state needs
		// it read from a copy all the same.
		s.later(coll, func() { s.start(coll, at, t, change).silent = true })
		return true, nil
	}
	s.later(coll, nil)
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
	for _, j := range s.jobs {
		j.cancel()
		<-j.done
		j.release()
	}
	s.jobs = nil
}
