package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
)

// mySink is the MySQL/MariaDB source's sink between
// replicate.StreamMySQL and the driver. It re-snapshots a collection in
// the middle of the binlog stream, when an ALTER TABLE changes its
// columns there (replicate.TableChanger), when --resnapshot asks, or
// when its columns differ from the store's at the start (altered while
// the ingest was stopped), so that it is exact from the re-snapshot's
// transaction T on. It is pgSink's algorithm with GTID times:
//
//  1. at T, a copy of the table starts in the background in a
//     transaction WITH CONSISTENT SNAPSHOT (snapshot.MySQLCopy) whose
//     upper S is beyond T, while the stream goes on;
//  2. meanwhile every change of the collection the stream brings after
//     T's start (in binlog order) is held, and progress is reported no
//     further than the stream's progress before T, so no binding covers
//     T (wait-recent does not answer past it);
//  3. once the copy is done and the stream's progress covers S, the
//     collection is reset at T with the copy's schema, given the copy at
//     T minus the held changes S is beyond (those in the copy), then the
//     held changes at their own times; progress goes on.
//
// The order of times. Within one GTID domain (MariaDB) or server UUID
// (MySQL) the binlog holds transactions in sequence order, so "S is
// beyond h" (h's sequence number is below S's there) is exactly "h is in
// the copy", whatever the other domains do. Across domains there is no
// order but the binlog's, and it is the one used: the changes held are
// those after T in the binlog, and each of them gets a system time at or
// after T's (progress is reported in binlog order and covers a
// transaction only once the stream passed it, and T before it). A
// re-snapshot that is not at a DDL (--resnapshot, altered while stopped)
// therefore starts at the first transaction the stream receives, of any
// table, rather than at a position guessed in one domain: on an idle
// server it waits for the next write.
//
// A failed copy, or what it cannot follow meanwhile (a TRUNCATE, a
// definite error, the columns changing again after a change of the
// collection was held), gives the collection a definite error at T; a
// later re-snapshot (the next ALTER, or --resnapshot) clears it. An ALTER
// while nothing of the collection has been held yet restarts the copy at
// the same T.
//
// A table whose binlog events were not FULL has a key state in the
// stream (replicate.StateTaker): its re-snapshot (at an ALTER, or a
// table added again) is not rewound. The stream holds its changes as the
// binlog has them; at the hand-over the collection is reset at T with
// the copy as it is (at S), the state is read from the copy, and the
// stream drops the held changes below S (in the copy) and hands the
// others over through the state. Progress jumps from before T to beyond
// S, so no binding falls in between and the collection is exact at every
// binding time; what source times T..S map to is the copy.
type mySink struct {
	pipe.Sink
	m   *MySQL
	ctx context.Context
	// skip: changes of a collection at source times the frontier is
	// beyond are durable already (the collection is ahead of the start).
	skip map[string]frontier.Frontier
	jobs []*myResnap
	// waiting re-snapshots (collection: why) start at the next
	// transaction the stream begins.
	waiting map[string]string
	// resnapped: collections re-snapshotted in this stream (their
	// columns are the stream's, whatever the store had at its start).
	resnapped map[string]bool
	// add registers a collection found in the stream (a table created
	// in a --tables db.* database).
	add         func(timeline string, c Collection) error
	stateTaking // the stream's key states read from copies
}

// myResnap is one re-snapshot of a collection at source time at.
type myResnap struct {
	coll  string
	at    frontier.Time
	limit frontier.Frontier // the stream's progress before at
	table *myarrow.Table    // as the stream decodes it from at on
	// silent: the collection is durable past at already; the copy only
	// gives the stream its key state (stateTaking.later).
	silent bool
	why    string
	held   []arrow.Record

	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed.
	copy   stagedCopy
	snap   frontier.Frontier
	copied *myarrow.Table
	err    error
}

func (s *mySink) job(coll string) *myResnap {
	if i := slices.IndexFunc(s.jobs, func(j *myResnap) bool { return j.coll == coll }); i >= 0 {
		return s.jobs[i]
	}
	return nil
}

func (s *mySink) skipped(coll string, at frontier.Time) bool {
	f, ok := s.skip[coll]
	return ok && f.Beyond(at)
}

// start re-snapshots coll at at; t is the stream's description of the
// table from at on, before the stream's progress before at.
func (s *mySink) start(coll string, at frontier.Time, before frontier.Frontier, t *myarrow.Table, why string) *myResnap {
	ctx, cancel := context.WithCancel(s.ctx)
	j := &myResnap{coll: coll, at: at, limit: before, table: t, why: why, cancel: cancel, done: make(chan struct{})}
	s.jobs = append(s.jobs, j)
	s.resnapped[coll] = true
	log := s.m.log
	log.Info("re-snapshot", "source", s.m.cfg.Source, "collection", coll, "at", gtidText(at), "why", why)
	var kept myKept
	if k, err := readKept(ctx, s.m.st, s.m.cfg.Source, coll, at, gtidText(at), &kept); err != nil || k != nil {
		// Done before a crash: handed over again as it was, in the
		// columns it was copied in (described by the stream's, or from
		// their types).
		if err == nil {
			j.copy = k.copy
			j.copied, err = myarrow.TableFromFields(t.Schema, t.Name, k.fields, t)
		}
		if err == nil {
			j.copied.PrimaryKey = kept.PrimaryKey
			err = json.Unmarshal([]byte(k.snap), &j.snap)
			log.Info("re-snapshot: the copy kept before a restart", "source", s.m.cfg.Source, "collection", coll, "at", gtidText(at), "snapshot", k.snap)
		}
		j.err = err
		close(j.done)
		s.m.Nudge("")
		return j
	}
	go func() {
		defer close(j.done)
		defer s.m.Nudge("") // the stream reports its progress at once
		began := time.Now()
		c := newCopyStager(ctx, s.m.st, s.m.cfg.Source, at, s.m.cfg.CopyMemory)
		snap, tabs, err := snapshot.MySQLCopy(ctx, snapshot.MySQLConfig{
			Upstream: s.m.cfg.Upstream, Tables: []string{coll}, Source: s.m.cfg.Source, Logger: log,
		}, c)
		j.copy, err = c.done(coll, err)
		j.snap, j.err = snap, err
		if err == nil && len(tabs) == 1 {
			j.copied = tabs[0]
		}
		log.Debug("re-snapshot copied", "collection", coll, "took", time.Since(began), "snapshot", snap, "error", err)
	}()
	return j
}

// stop ends j without handing anything over.
func (s *mySink) stop(j *myResnap) {
	s.jobs = slices.DeleteFunc(s.jobs, func(x *myResnap) bool { return x == j })
	j.cancel()
	<-j.done
	j.release()
}

// release drops j's copy and held changes.
func (j *myResnap) release() {
	j.copy.release()
	for _, r := range j.held {
		r.Release()
	}
	j.held = nil
}

// abort ends j: the collection has a definite error from j.at.
func (s *mySink) abort(j *myResnap, msg string) error {
	s.stop(j)
	s.unstate(j.coll)
	s.m.log.Warn("re-snapshot failed; the collection has a definite error from its time", "source", s.m.cfg.Source, "collection", j.coll, "at", gtidText(j.at), "error", msg)
	return s.Sink.Error(j.coll, j.at, msg)
}

// Data implements pipe.Sink.
func (s *mySink) Data(coll string, rec arrow.Record) error {
	if f, ok := s.skip[coll]; ok {
		_, times, _, parts := pipe.SplitData(rec)
		var rows []int
		for i := 0; i < times.Len(); i++ {
			t := frontier.Time{Pos: times.Value(i)}
			if parts != nil {
				t.Partition = parts.Value(i)
			}
			if !f.Beyond(t) {
				rows = append(rows, i)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		if len(rows) < times.Len() {
			sub, err := arrowutil.Take(rec, rows, memory.DefaultAllocator)
			if err != nil {
				return err
			}
			defer sub.Release()
			rec = sub
		}
	}
	if j := s.job(coll); j != nil {
		rec.Retain()
		j.held = append(j.held, rec)
		return nil
	}
	return s.Sink.Data(coll, rec)
}

// Error implements pipe.Sink.
func (s *mySink) Error(coll string, at frontier.Time, msg string) error {
	if s.skipped(coll, at) {
		return nil
	}
	if j := s.job(coll); j != nil {
		return s.abort(j, msg)
	}
	return s.Sink.Error(coll, at, msg)
}

// Reset implements pipe.Sink.
func (s *mySink) Reset(coll string, at frontier.Time, schema *arrow.Schema) error {
	if s.skipped(coll, at) {
		return nil
	}
	if j := s.job(coll); j != nil {
		if err := s.abort(j, fmt.Sprintf("%s was truncated at %s while it was re-snapshotted from %s; its contents in between are not known: re-snapshot it (rtrctl ingest --resnapshot %s)", coll, gtidText(at), gtidText(j.at), coll)); err != nil {
			return err
		}
		delete(s.taken, coll) // the stream's state is empty from the reset on

	}
	return s.Sink.Reset(coll, at, schema)
}

// TableChanged implements replicate.TableChanger.
func (s *mySink) TableChanged(t *myarrow.Table, at frontier.Time, before frontier.Frontier, change string) (bool, error) {
	coll := t.QualifiedName()
	if s.skipped(coll, at) {
		// Durable already, reset included; a table with a key state needs
		// it read from a copy all the same.
		s.later(coll, func() { s.start(coll, at, before, t, change).silent = true })
		return true, nil
	}
	s.later(coll, nil)
	delete(s.waiting, coll) // this one re-snapshots it
	if j := s.job(coll); j != nil {
		if len(j.held) == 0 {
			// Nothing of it in the old columns: the copy starts again, at
			// the same time.
			s.stop(j)
			s.start(coll, j.at, j.limit, t, j.why+"; then "+change)
			return true, nil
		}
		if err := s.abort(j, fmt.Sprintf("%s while %s was re-snapshotted from %s: its changes in between are not known", change, coll, gtidText(j.at))); err != nil {
			return false, err
		}
	}
	s.start(coll, at, before, t, change)
	return true, nil
}

// Wants implements replicate.TableAdder: a table of a db.* entry of
// --tables that this run does not ingest yet.
func (s *mySink) Wants(db, table string) bool {
	return s.add != nil && slices.Contains(s.m.patterns, db)
}

// TableAdded implements replicate.TableAdder: the collection is
// registered and snapshotted at at, with progress held before it until
// its copy is handed over.
func (s *mySink) TableAdded(t *myarrow.Table, at frontier.Time, before frontier.Frontier, why string) error {
	coll := t.QualifiedName()
	if s.skipped(coll, at) {
		return nil
	}
	if err := s.add(s.m.cfg.Source, Collection{Name: coll, Schema: arrow.NewSchema(t.Fields(), nil)}); err != nil {
		return err
	}
	if !slices.Contains(s.m.tables, coll) {
		s.m.tables = append(s.m.tables, coll)
	}
	s.m.schemas[coll] = t
	if !strings.EqualFold(t.Engine, "InnoDB") {
		return s.Sink.Error(coll, at, fmt.Sprintf("%s (%s) uses engine %s, which has no consistent snapshots; the collection stops here: run ALTER TABLE %s ENGINE = InnoDB, then the ingest with --resnapshot %s", coll, why, t.Engine, t.SQL(), coll))
	}
	if j := s.job(coll); j != nil {
		s.stop(j)
	}
	s.start(coll, at, before, t, why)
	return nil
}

// TxnBegin implements replicate.TxnBeginner: the waiting re-snapshots
// start at this transaction.
func (s *mySink) TxnBegin(at frontier.Time, before frontier.Frontier) error {
	for _, coll := range slices.Sorted(maps.Keys(s.waiting)) {
		if s.skipped(coll, at) {
			continue // ahead of the stream: at its first new transaction
		}
		why := s.waiting[coll]
		delete(s.waiting, coll)
		s.start(coll, at, before, s.m.schemas[coll], why)
	}
	return nil
}

// limit is the stream's replicate.MySQLConfig.Limit: it hands over the
// re-snapshots whose copies the stream has reached, and returns how far
// progress may go: no further than the progress before the earliest one
// still running.
func (s *mySink) limit(progress frontier.Frontier) (frontier.Frontier, error) {
	// The copies done are handed over together once the progress reported
	// with them (held back by the jobs still running) covers each of
	// them: a keyed copy is not rewound, so the first binding past its
	// change must cover it (a binding between would read it early), and a
	// rewound one needs every change below it held.
	var done, running []*myResnap
	for _, j := range s.jobs {
		if closed(j.done) {
			done = append(done, j)
		} else {
			running = append(running, j)
		}
	}
	after := progress
	for _, j := range running {
		var err error
		if after, err = frontier.Meet(after, j.limit); err != nil {
			return frontier.Frontier{}, err
		}
	}
	if len(done) > 0 && !slices.ContainsFunc(done, func(j *myResnap) bool { return j.err == nil && !after.Covers(j.snap) }) {
		s.jobs = running
		for _, j := range done {
			if err := s.finish(j); err != nil {
				return frontier.Frontier{}, err
			}
		}
	}
	lo := progress
	for _, j := range s.jobs {
		var err error
		if lo, err = frontier.Meet(lo, j.limit); err != nil {
			return frontier.Frontier{}, err
		}
	}
	return lo, nil
}

// finish hands j over: the reset at j.at, the copy rewound to it, then
// the held changes.
func (s *mySink) finish(j *myResnap) error {
	defer j.release()
	log := s.m.log
	if err := copyFailed(s.ctx, j.coll, gtidText(j.at), j.err); err != nil {
		log.Warn("re-snapshot: the copy failed, not for the upstream", "source", s.m.cfg.Source, "collection", j.coll, "error", j.err)
		return err
	}
	if j.err != nil || j.copied == nil {
		log.Warn("re-snapshot failed", "source", s.m.cfg.Source, "collection", j.coll, "error", j.err)
		s.unstate(j.coll)
		return s.Sink.Error(j.coll, j.at, fmt.Sprintf("re-snapshot of %s at %s failed: %v; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", j.coll, gtidText(j.at), j.err, j.coll))
	}
	if d := replicate.TableChange(j.table, j.copied); d != "" {
		s.unstate(j.coll)
		return s.Sink.Error(j.coll, j.at, fmt.Sprintf("the columns of %s changed again while it was re-snapshotted from %s (%s); the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", j.coll, gtidText(j.at), d, j.coll))
	}
	if _, ok := s.restating[j.coll]; ok {
		return s.finishKeyed(j)
	}
	if err := s.Sink.Reset(j.coll, j.at, arrow.NewSchema(j.copied.Fields(), nil)); err != nil {
		return err
	}
	copied, rewound := j.copy.rows, int64(0)
	if err := j.copy.handOver(s.Sink, j.coll); err != nil {
		return err
	}
	for _, rec := range j.held {
		_, times, _, parts := pipe.SplitData(rec)
		below := []int{}
		for i := 0; i < times.Len(); i++ {
			t := frontier.Time{Pos: times.Value(i)}
			if parts != nil {
				t.Partition = parts.Value(i)
			}
			if j.snap.Beyond(t) {
				below = append(below, i)
			}
		}
		if err := retimedRows(s.Sink, j.coll, rec, below, j.at, true); err != nil {
			return err
		}
		rewound += int64(len(below))
	}
	for _, rec := range j.held {
		if err := s.Sink.Data(j.coll, rec); err != nil {
			return err
		}
	}
	log.Info("re-snapshot done", append([]any{"source", s.m.cfg.Source, "collection", j.coll, "at", gtidText(j.at), "rows", copied, "rewound", rewound, "snapshot", j.snap}, copyAttrs(&j.copy)...)...)
	return nil
}

// finishKeyed hands over j of a table with a key state: the reset at
// j.at with the copy as it is, and the state of the copy for the stream,
// which hands over the changes it held that the copy does not have.
func (s *mySink) finishKeyed(j *myResnap) error {
	st, err := replicate.NewMySQLKeyState(j.copied)
	if err == nil {
		if err := s.m.keys.fill(s.ctx, j.coll, st, &j.copy); err != nil {
			// Local (the staged files, the state's disk) or the ingest
			// stopping: no fact of the upstream.
			return fmt.Errorf("re-snapshot of %s at %s: key state from the copy: %w", j.coll, gtidText(j.at), err)
		}
	}
	if err != nil || len(j.held) > 0 {
		s.give(j.coll, nil, frontier.Frontier{})
		if err == nil {
			err = fmt.Errorf("%d changes were held decoded", len(j.held))
		}
		return s.Sink.Error(j.coll, j.at, fmt.Sprintf("re-snapshot of %s at %s: its rows by primary key cannot be read from the copy: %v; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", j.coll, gtidText(j.at), err, j.coll))
	}
	var copied int64
	if !j.silent {
		// Durable before any binding past j.at can be (keptcopy.go).
		snap, err := json.Marshal(j.snap)
		if err == nil {
			err = keepCopy(s.m.st, s.m.cfg.Source, j.coll, gtidText(j.at), string(snap), myKept{PrimaryKey: j.copied.PrimaryKey}, j.copied.Fields(), &j.copy)
		}
		if err != nil {
			return err
		}
		if err := s.Sink.Reset(j.coll, j.at, arrow.NewSchema(j.copied.Fields(), nil)); err != nil {
			return err
		}
		copied = j.copy.rows
		if err := j.copy.handOver(s.Sink, j.coll); err != nil {
			return err
		}
	}
	s.give(j.coll, st, j.snap)
	s.m.log.Info("re-snapshot done", append(append([]any{"source", s.m.cfg.Source, "collection", j.coll, "at", gtidText(j.at), "rows", copied, "snapshot", j.snap}, stateAttrs(st)...), copyAttrs(&j.copy)...)...)
	return nil
}

// myKept is what a kept copy (keptcopy.go) records of the table as
// copied besides its columns.
type myKept struct {
	PrimaryKey []int
}

// close stops the copies still running.
func (s *mySink) close() {
	for len(s.jobs) > 0 {
		s.stop(s.jobs[0])
	}
}

// gtidText prints a source time as its transaction: domain:seq (MariaDB),
// uuid:n (MySQL).
func gtidText(t frontier.Time) string { return fmt.Sprintf("%s:%d", t.Partition, t.Pos) }
