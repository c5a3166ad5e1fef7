package replicate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// db is a fresh database with a publication and a slot.
type db struct {
	dsn  string
	conn *pgx.Conn
	slot string
	pub  string
}

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func uniqueSlot() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "rtr_test_" + hex.EncodeToString(b)
}

// newDB creates a database on pg, runs setup, creates publication "pub"
// (pubSQL, default FOR ALL TABLES) and a slot; the slot is dropped at
// cleanup (before the database is).
func newDB(t testing.TB, pg *testenv.Postgres, setup string) *db {
	t.Helper()
	d := &db{dsn: pg.CreateDatabase(t), slot: uniqueSlot(), pub: "pub"}
	d.conn = connect(t, d.dsn)
	ctx := context.Background()
	if setup != "" {
		d.exec(t, setup)
	}
	d.exec(t, "CREATE PUBLICATION pub FOR ALL TABLES")
	if _, err := d.conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", d.slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropSlot(t, d.dsn, d.slot) })
	return d
}

func dropSlot(t testing.TB, dsn, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Logf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	for ctx.Err() == nil {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // still active: the walsender is going away
	}
	t.Logf("drop slot %s: %v", slot, ctx.Err())
}

func (d *db) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := d.conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (d *db) lsn(t testing.TB, q string) frontier.LSN {
	t.Helper()
	var s string
	if err := d.conn.QueryRow(context.Background(), q+"::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (d *db) insertLSN(t testing.TB) frontier.LSN {
	return d.lsn(t, "SELECT pg_current_wal_insert_lsn()")
}

func (d *db) confirmed(t testing.TB) frontier.LSN {
	return d.lsn(t, fmt.Sprintf("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '%s'", d.slot))
}

// txn runs stmts in one transaction and returns the insert LSNs read just
// before and just after its commit: the commit record lies between.
func (d *db) txn(t testing.TB, stmts ...string) (before, after frontier.LSN) {
	t.Helper()
	d.exec(t, "BEGIN")
	for _, s := range stmts {
		d.exec(t, s)
	}
	before = d.insertLSN(t)
	d.exec(t, "COMMIT")
	after = d.insertLSN(t)
	return before, after
}

// update is one received update, its row rendered as text.
type update struct {
	coll string
	row  string
	time frontier.LSN
	diff int64
}

func (u update) String() string { return fmt.Sprintf("%s %s @%s %+d", u.coll, u.row, u.time, u.diff) }

type sinkError struct {
	coll string
	at   frontier.LSN
	msg  string
}

// recSink records everything; onChange runs (in the stream goroutine)
// after each Change.
type recSink struct {
	mu        sync.Mutex
	relations []*pgarrow.Table
	updates   []update
	values    map[string][][]any // collection -> rows of GoValues (user columns, then _time, _diff)
	progress  []frontier.LSN
	progAt    []time.Time
	errors    []sinkError
	resets    []sinkError
	changes   int
	late      []string // rows at times below a progress already reported
	onChange  func(coll string, rec arrow.Record)
}

func newRecSink() *recSink { return &recSink{values: map[string][][]any{}} }

func (s *recSink) Relation(t *pgarrow.Table) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relations = append(s.relations, t)
	return nil
}

func (s *recSink) Data(coll string, rec arrow.Record) error {
	s.mu.Lock()
	n := int(rec.NumCols())
	for i := 0; i < int(rec.NumRows()); i++ {
		vals := make([]any, n)
		var parts []string
		for c := 0; c < n; c++ {
			vals[c] = pgarrow.GoValue(rec.Column(c), i)
			if c < n-2 {
				parts = append(parts, fmt.Sprint(vals[c]))
			}
		}
		if tm := frontier.LSN(vals[n-2].(uint64)); len(s.progress) > 0 && tm < s.progress[len(s.progress)-1] {
			s.late = append(s.late, fmt.Sprintf("%s row at %s after progress %s", coll, tm, s.progress[len(s.progress)-1]))
		}
		s.values[coll] = append(s.values[coll], vals)
		s.updates = append(s.updates, update{coll: coll, row: strings.Join(parts, ","), time: frontier.LSN(vals[n-2].(uint64)), diff: vals[n-1].(int64)})
	}
	s.changes++
	f := s.onChange
	s.mu.Unlock()
	if f != nil {
		f(coll, rec)
	}
	return nil
}

func (s *recSink) Progress(_ string, f frontier.Frontier) error {
	upper := frontier.LSN(f.Pos())
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.progress); n > 0 && upper <= s.progress[n-1] {
		return fmt.Errorf("progress went from %s to %s", s.progress[n-1], upper)
	}
	s.progress = append(s.progress, upper)
	s.progAt = append(s.progAt, time.Now())
	return nil
}

func (s *recSink) Error(coll string, t frontier.Time, msg string) error {
	at := frontier.LSN(t.Pos)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors = append(s.errors, sinkError{coll, at, msg})
	return nil
}

func (s *recSink) upper() frontier.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.progress) == 0 {
		return 0
	}
	return s.progress[len(s.progress)-1]
}

func (s *recSink) snapshot() []update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]update(nil), s.updates...)
}

func (s *recSink) errs() []sinkError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkError(nil), s.errors...)
}

// waitFor polls cond until it holds or 15 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stream runs StreamPG in the background; stop cancels it and returns its
// error.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, cfg replicate.PGConfig, sink pipe.Sink) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- replicate.StreamPG(ctx, cfg, sink) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("StreamPG did not return after cancel")
		return nil
	}
}

// failIfDone fails the test if StreamPG has returned.
func (r *running) failIfDone(t testing.TB) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("StreamPG returned early: %v", err)
	default:
	}
}

// consolidate sums diffs per (collection, row) and drops zeros.
func consolidate(us []update) []string {
	m := map[string]int64{}
	for _, u := range us {
		m[u.coll+" "+u.row] += u.diff
	}
	var out []string
	for k, v := range m {
		if v != 0 {
			out = append(out, fmt.Sprintf("%s x%d", k, v))
		}
	}
	sort.Strings(out)
	return out
}

func (s *recSink) Reset(coll string, t frontier.Time, _ *arrow.Schema) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets = append(s.resets, sinkError{coll, frontier.LSN(t.Pos), "reset"})
	return nil
}

func (s *recSink) resetsOf() []sinkError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkError(nil), s.resets...)
}
