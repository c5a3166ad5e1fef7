package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// memSink consolidates what a snapshot writes: per collection, the sum of
// diffs per row (zeros dropped), plus what else it saw.
type memSink struct {
	rows     map[string]map[string]int64
	plus     map[string]map[string]int64 // the copied rows only (diff +1)
	times    map[uint64]int
	progress map[string]frontier.Frontier
	order    []string // "data:<coll>" / "progress:<coll>", run-length
}

func newMemSink() *memSink {
	return &memSink{rows: map[string]map[string]int64{}, plus: map[string]map[string]int64{}, times: map[uint64]int{}, progress: map[string]frontier.Frontier{}}
}

func (s *memSink) note(ev string) {
	if len(s.order) == 0 || s.order[len(s.order)-1] != ev {
		s.order = append(s.order, ev)
	}
}

func (s *memSink) Data(coll string, rec arrow.Record) error {
	s.note("data:" + coll)
	if _, ok := s.progress[coll]; ok {
		return fmt.Errorf("data of %s after its progress", coll)
	}
	if s.rows[coll] == nil {
		s.rows[coll], s.plus[coll] = map[string]int64{}, map[string]int64{}
	}
	cols, times, diffs, parts := pipe.SplitData(rec)
	if times == nil || parts != nil {
		return fmt.Errorf("record of %s is not an lsn data record: %s", coll, rec.Schema())
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		k := rowKey(cols, i)
		s.times[times.Value(i)]++
		s.rows[coll][k] += diffs.Value(i)
		if s.rows[coll][k] == 0 {
			delete(s.rows[coll], k)
		}
		if diffs.Value(i) == 1 {
			s.plus[coll][k]++
		}
	}
	return nil
}

func (s *memSink) Progress(coll string, f frontier.Frontier) error {
	s.note("progress:" + coll)
	s.progress[coll] = f
	return nil
}

// rowKey prints row i: column values joined by |, long strings hashed.
func rowKey(cols []arrow.Array, i int) string {
	parts := make([]string, len(cols))
	for j, c := range cols {
		parts[j] = keyPart(c.ValueStr(i), c.IsNull(i))
	}
	return strings.Join(parts, "|")
}

func keyPart(s string, null bool) string {
	if null {
		return "(null)"
	}
	if len(s) > 64 {
		h := sha256.Sum256([]byte(s))
		return "sha:" + hex.EncodeToString(h[:8])
	}
	return s
}

// tableRows reads a table of (id int, v text, n bigint, big text) as the
// keys rowKey makes, each with count 1.
func tableRows(t *testing.T, ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, table string) map[string]int64 {
	t.Helper()
	rows, err := q.Query(ctx, "SELECT id, v, n, big FROM "+table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id int32
		var v, big *string
		var n int64
		if err := rows.Scan(&id, &v, &n, &big); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		k := fmt.Sprintf("%d|%s|%d|%s", id, keyPart(deref(v), v == nil), n, keyPart(deref(big), big == nil))
		out[k]++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// testDB makes a fresh database with tables public.items and
// public.other (REPLICA IDENTITY FULL, in publication pub) and
// public.unpublished, each of (id int PRIMARY KEY, v text, n bigint, big
// text), filled with rows rows.
func testDB(t *testing.T, rows int) (dsn string, conn *pgx.Conn) {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dsn = pg.CreateDatabase(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, tbl := range []string{"items", "other", "unpublished"} {
		mustExec(t, conn, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text, n bigint NOT NULL, big text);
			ALTER TABLE %[1]s REPLICA IDENTITY FULL;
			INSERT INTO %[1]s SELECT i, 'v' || i, i * 10, CASE WHEN i %% 7 = 0 THEN big_value() END FROM generate_series(1, %d) i`,
			tbl, rows))
	}
	mustExec(t, conn, "CREATE PUBLICATION pub FOR TABLE items, other")
	return dsn, conn
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if !strings.Contains(sql, "big_value") || strings.HasPrefix(sql, "CREATE FUNCTION") {
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return
	}
	// A value too big to stay inline (TOASTed out of line, uncompressible).
	if _, err := conn.Exec(t.Context(), `CREATE OR REPLACE FUNCTION big_value() RETURNS text LANGUAGE sql VOLATILE AS
		$$ SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200) $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// uniqueSlot returns a fresh slot name, dropped at cleanup (before the
// database is dropped: a database with a logical slot cannot be).
func uniqueSlot(t *testing.T, conn *pgx.Conn) string {
	var b [6]byte
	rand.Read(b[:])
	name := "rtr_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // still active in a closing walsender
		}
		t.Errorf("drop slot %s failed", name)
	})
	return name
}

// writer commits random inserts, updates and deletes to items, other and
// unpublished until stopped. Holding mu pauses it between transactions.
type writer struct {
	mu      sync.Mutex
	commits atomic.Int64
	stop    chan struct{}
	done    chan error
}

func startWriter(t *testing.T, dsn string, firstID int) *writer {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(context.Background())
		w.done <- w.run(conn, firstID)
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

func (w *writer) halt(t *testing.T) {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Errorf("writer: %v", err)
	}
}

func (w *writer) run(conn *pgx.Conn, nextID int) error {
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(1, 2))
	tables := []string{"items", "items", "other", "unpublished"}
	for {
		select {
		case <-w.stop:
			return nil
		default:
		}
		w.mu.Lock()
		tx, err := conn.Begin(ctx)
		if err != nil {
			w.mu.Unlock()
			return err
		}
		for range 1 + rng.IntN(3) {
			tbl := tables[rng.IntN(len(tables))]
			id := 1 + rng.IntN(nextID)
			var sql string
			switch rng.IntN(6) {
			case 0, 1:
				nextID++
				sql = fmt.Sprintf("INSERT INTO %s VALUES (%d, 'new', %d, CASE WHEN %d %% 5 = 0 THEN big_value() END)", tbl, nextID, rng.IntN(1000), nextID)
			case 2:
				sql = fmt.Sprintf("DELETE FROM %s WHERE id = %d", tbl, id)
			case 3:
				// Leaves big unchanged: a TOASTed value comes as "unchanged".
				sql = fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", tbl, id)
			case 4:
				sql = fmt.Sprintf("UPDATE %s SET v = NULL, n = n * 2 WHERE id = %d", tbl, id)
			default:
				sql = fmt.Sprintf("UPDATE %s SET v = 'u' || n, big = CASE WHEN big IS NULL THEN big_value() END WHERE id BETWEEN %d AND %d", tbl, id, id+3)
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				tx.Rollback(ctx)
				w.mu.Unlock()
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		if rng.IntN(10) == 0 {
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
			w.commits.Add(1)
		}
		w.mu.Unlock()
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
}

// waitCommits waits until the writer has committed n more transactions.
func (w *writer) waitCommits(t *testing.T, n int64) {
	t.Helper()
	target := w.commits.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for w.commits.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("writer committed %d transactions, want %d", w.commits.Load(), target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func takeSnapshot(t *testing.T, cfg Config) (*Result, *memSink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sink := newMemSink()
	res, err := PG(ctx, cfg, sink)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for _, tr := range res.Tables {
		f, ok := sink.progress[tr.Name]
		if !ok || !f.Equal(frontier.Single(frontier.DomainLSN, 1)) {
			t.Errorf("%s: progress %v (seen %v), want upper 1 (time 0 complete)", tr.Name, f, ok)
		}
	}
	if len(sink.times) != 1 || sink.times[0] == 0 {
		t.Errorf("update times %v, want all at time 0", sink.times)
	}
	return res, sink
}

func diffRows(got, want map[string]int64) string {
	var lines []string
	for k, n := range got {
		if want[k] != n {
			lines = append(lines, fmt.Sprintf("  %s: got %d, want %d", k, n, want[k]))
		}
	}
	for k, n := range want {
		if _, ok := got[k]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: got 0, want %d", k, n))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("  ... %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// TestDefinite takes two snapshots at different moments against one slot,
// while a writer keeps changing the tables: both must hold exactly the
// tables as they were when the slot was created.
func TestDefinite(t *testing.T) {
	dsn, conn := testDB(t, 300)
	slot := uniqueSlot(t, conn)
	w := startWriter(t, dsn, 300)
	w.waitCommits(t, 20)

	// Pause the writer, create the slot and read the tables as of it.
	w.mu.Lock()
	slotLSN, created, err := EnsureSlot(t.Context(), conn, slot)
	if err != nil || !created {
		w.mu.Unlock()
		t.Fatalf("EnsureSlot = %s, %v, %v; want a new slot", slotLSN, created, err)
	}
	want := map[string]map[string]int64{
		"public.items": tableRows(t, t.Context(), conn, "items"),
		"public.other": tableRows(t, t.Context(), conn, "other"),
	}
	w.mu.Unlock()

	w.waitCommits(t, 50)
	res1, s1 := takeSnapshot(t, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, Tables: []string{"items"}})
	w.waitCommits(t, 50)
	res2, s2 := takeSnapshot(t, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, Parallel: 2, BatchRows: 100})
	w.halt(t)

	if res1.SlotLSN != slotLSN || res2.SlotLSN != slotLSN || res1.SlotCreated || res2.SlotCreated {
		t.Fatalf("slot at %s (created %v), %s (created %v); want both at %s, found", res1.SlotLSN, res1.SlotCreated, res2.SlotLSN, res2.SlotCreated, slotLSN)
	}
	if !(slotLSN < res1.SnapshotLSN && res1.SnapshotLSN < res2.SnapshotLSN) {
		t.Fatalf("slot %s, snapshots at %s and %s: want them in that order", slotLSN, res1.SnapshotLSN, res2.SnapshotLSN)
	}
	if len(res1.Tables) != 1 || res1.Tables[0].Name != "public.items" || len(s1.rows) != 1 {
		t.Errorf("snapshot 1 tables %+v, collections %d; want only public.items", res1.Tables, len(s1.rows))
	}
	if d := diffRows(s1.rows["public.items"], want["public.items"]); d != "" {
		t.Errorf("snapshot 1 of public.items differs from the table at the slot's start:\n%s", d)
	}
	for _, coll := range []string{"public.items", "public.other"} {
		if d := diffRows(s2.rows[coll], want[coll]); d != "" {
			t.Errorf("snapshot 2 of %s differs from the table at the slot's start:\n%s", coll, d)
		}
		// The copy itself was later than the slot: only the rewind made
		// the two equal.
		if diffRows(s2.plus[coll], want[coll]) == "" {
			t.Errorf("snapshot 2 copied %s exactly as of the slot: the writer did not change it?", coll)
		}
	}
	for _, r := range []*Result{res1, res2} {
		for _, tr := range r.Tables {
			if tr.Rewound == 0 {
				t.Errorf("snapshot at %s rewound nothing of %s", r.SnapshotLSN, tr.Name)
			}
		}
	}
	t.Logf("slot %s; snapshot 1 at %s: %+v; snapshot 2 at %s: %+v; writer commits %d",
		slotLSN, res1.SnapshotLSN, res1.Tables, res2.SnapshotLSN, res2.Tables, w.commits.Load())

	// The slot was never advanced.
	again, found, err := readSlot(t.Context(), conn, slot)
	if err != nil || !found || again != slotLSN {
		t.Errorf("slot after snapshots at %s (found %v, %v), want %s", again, found, err, slotLSN)
	}
}

// TestParallel copies a table in ctid ranges on three connections and
// whole on one: the results are the same rows.
func TestParallel(t *testing.T) {
	dsn, conn := testDB(t, 30000)
	mustExec(t, conn, "ANALYZE items")
	slot := uniqueSlot(t, conn)
	var pages int64
	if err := conn.QueryRow(t.Context(), "SELECT relpages FROM pg_class WHERE relname = 'items'").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	w := startWriter(t, dsn, 30000)
	w.waitCommits(t, 10)

	base := Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, Tables: []string{"public.items"}}
	one := base
	one.Parallel = 1
	three := base
	three.Parallel, three.RangePages, three.BatchRows = 3, pages/7, 1000
	var progress []Progress
	three.OnProgress = func(p Progress) { progress = append(progress, p) }

	r1, s1 := takeSnapshot(t, one)
	w.waitCommits(t, 30)
	r3, s3 := takeSnapshot(t, three)
	w.halt(t)

	if r1.Tables[0].Ranges != 1 || r3.Tables[0].Ranges < 7 {
		t.Errorf("ranges %d and %d, want 1 and >= 7 (%d pages)", r1.Tables[0].Ranges, r3.Tables[0].Ranges, pages)
	}
	if d := diffRows(s3.rows["public.items"], s1.rows["public.items"]); d != "" {
		t.Errorf("parallel 3 differs from parallel 1:\n%s", d)
	}
	if n := len(s1.rows["public.items"]); n < 29000 {
		t.Errorf("%d rows, want about 30000", n)
	}
	if len(progress) < 30 || progress[len(progress)-1].Rows < r3.Tables[0].Rows || progress[0].EstimatedRows < 29000 {
		t.Errorf("progress reports: %d, last %+v", len(progress), progress[len(progress)-1])
	}
}

func TestErrors(t *testing.T) {
	dsn, conn := testDB(t, 3)
	mustExec(t, conn, "CREATE TABLE plain (id int PRIMARY KEY); CREATE TABLE \"Odd T\" (id int); CREATE PUBLICATION pub2 FOR TABLE plain, \"Odd T\", items")
	slot := uniqueSlot(t, conn)
	tests := []struct {
		name   string
		cfg    Config
		target error
		msg    string
		hint   string
	}{
		{"no publication", Config{Publication: "nope"}, ErrNoPublication, "publication nope", "CREATE PUBLICATION nope"},
		{"not in publication", Config{Publication: "pub", Tables: []string{"unpublished"}}, ErrNotInPublication, "public.unpublished", "run: ALTER PUBLICATION pub ADD TABLE public.unpublished"},
		{"no such table", Config{Publication: "pub", Tables: []string{"nosuch"}}, ErrNoTable, "no table nosuch", "--tables"},
		{"replica identity", Config{Publication: "pub2"}, ErrReplicaIdentity, `public."Odd T" is DEFAULT, public.plain is DEFAULT`,
			`run: ALTER TABLE public."Odd T" REPLICA IDENTITY FULL; ALTER TABLE public.plain REPLICA IDENTITY FULL;`},
		{"bad slot", Config{Publication: "pub", Slot: "Bad-Slot"}, ErrSlot, "Bad-Slot", "rtr_"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Upstream = upstream.MustParsePostgres(dsn)
			if tc.cfg.Slot == "" {
				tc.cfg.Slot = slot
			}
			_, err := PG(t.Context(), tc.cfg, newMemSink())
			if !errors.Is(err, tc.target) {
				t.Fatalf("err = %v, want %v", err, tc.target)
			}
			var h interface{ Hint() string }
			if !strings.Contains(err.Error(), tc.msg) || !errors.As(err, &h) || !strings.Contains(h.Hint(), tc.hint) {
				t.Errorf("err = %v (hint %v), want it to mention %q and a hint with %q", err, h, tc.msg, tc.hint)
			}
		})
	}
	// None of the failures created the slot.
	if _, found, err := readSlot(t.Context(), conn, slot); err != nil || found {
		t.Errorf("slot found %v (%v) after failed snapshots", found, err)
	}
}

// Error implements pipe.Sink; a snapshot never reports one.
func (s *memSink) Error(coll string, at frontier.Time, msg string) error {
	return fmt.Errorf("snapshot reported an error of %s at %v: %s", coll, at, msg)
}

func (s *memSink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}
