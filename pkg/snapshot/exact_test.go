package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pgarrow/pgarrowtest"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// exactKey is the canonical form of a row of public.every: each column's
// pgarrow.GoValue printed with %#v (so NULL, "NULL" and "" differ, and NaN
// is NaN), values over 96 bytes replaced by a hash.
func exactKey(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		s := fmt.Sprintf("%#v", v)
		if len(s) > 96 {
			h := sha256.Sum256([]byte(s))
			s = fmt.Sprintf("sha:%s(%d bytes)", hex.EncodeToString(h[:8]), len(s))
		}
		parts[i] = s
	}
	return strings.Join(parts, "|")
}

func recordKey(cols []arrow.Array, i int) string {
	vals := make([]any, len(cols))
	for j, c := range cols {
		vals[j] = pgarrow.GoValue(c, i)
	}
	return exactKey(vals)
}

// readEvery reads public.every through PostgreSQL's text output (a plain
// SELECT with text results, under pgarrow's session settings) and
// pgarrow.RowBuilder: the same text and parser replication uses.
func readEvery(t *testing.T, ctx context.Context, conn *pgx.Conn, tbl *pgarrow.Table) map[string]int64 {
	t.Helper()
	b, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	names := make([]string, len(tbl.Columns))
	for i, c := range tbl.Columns {
		names[i] = pgarrow.QuoteIdent(c.Name)
	}
	rr := conn.PgConn().ExecParams(ctx, "SELECT "+strings.Join(names, ", ")+" FROM public.every", nil, nil, nil, nil)
	isNull := make([]bool, len(names))
	for rr.NextRow() {
		vals := rr.Values()
		for i, v := range vals {
			isNull[i] = v == nil
		}
		if err := b.AppendText(vals, isNull); err != nil {
			t.Fatalf("read every: %v", err)
		}
	}
	if _, err := rr.Close(); err != nil {
		t.Fatalf("read every: %v", err)
	}
	arrs := b.NewArrays()
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	out := map[string]int64{}
	for i := 0; i < arrs[0].Len(); i++ {
		out[recordKey(arrs, i)]++
	}
	return out
}

// everyWriter commits random inserts, updates and deletes to public.every
// until stopped, with values of every type taken from the edge-case rows
// of pgarrowtest (kept in the unpublished table tmpl), NULLs, large
// out-of-line TOASTed text and jsonb, and updates that leave TOASTed
// values unchanged. Holding mu pauses it between transactions.
type everyWriter struct {
	mu      sync.Mutex
	commits atomic.Int64
	stop    chan struct{}
	done    chan error
}

func startEveryWriter(t *testing.T, dsn string) *everyWriter {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &everyWriter{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(context.Background())
		w.done <- w.run(conn)
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

func (w *everyWriter) halt(t *testing.T) {
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

// value returns an SQL expression for column c of a new or updated row.
func everyValue(rng *mrand.Rand, c string, id int) string {
	switch r := rng.IntN(10); {
	case c == "t" && r < 3:
		return "big_text()" // ~12 kB, stored out of line
	case c == "jb" && r < 3:
		return fmt.Sprintf(`jsonb_build_object('id', %d, 'big', big_text(), 'arr', jsonb_build_array(1, 'two', null))`, id)
	case c == "at" && r < 2:
		return `ARRAY['x,y', NULL, '{"q"}', big_text()]`
	case c == "i8" && r < 3:
		return fmt.Sprint(rng.Int64() - rng.Int64())
	case c == "f8" && r < 2:
		return fmt.Sprintf("'%v'::float8", rng.NormFloat64()*1e10)
	case r == 9:
		return "NULL"
	}
	return fmt.Sprintf("(SELECT %s FROM tmpl WHERE id = %d)", pgarrow.QuoteIdent(c), 1+rng.IntN(3))
}

func (w *everyWriter) run(conn *pgx.Conn) error {
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(7, 11))
	nextID := 3
	cols := pgarrowtest.Columns[1:]
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
			id := 1 + rng.IntN(nextID)
			var sql string
			switch rng.IntN(8) {
			case 0, 1, 2:
				nextID++
				vals := make([]string, len(cols))
				for i, c := range cols {
					vals[i] = everyValue(rng, c, nextID)
				}
				sql = fmt.Sprintf("INSERT INTO every VALUES (%d, %s)", nextID, strings.Join(vals, ", "))
			case 3:
				sql = fmt.Sprintf("DELETE FROM every WHERE id = %d", id)
			case 4:
				// Leaves t and jb as they are: TOASTed values come as "unchanged".
				sql = fmt.Sprintf("UPDATE every SET i4 = %d WHERE id = %d", rng.Int32(), id)
			case 5:
				sql = fmt.Sprintf("UPDATE every SET i2 = NULL, ai = ARRAY[%d, NULL], b = NOT coalesce(b, false) WHERE id BETWEEN %d AND %d", rng.IntN(100), id, id+2)
			default:
				c := cols[rng.IntN(len(cols))]
				sql = fmt.Sprintf("UPDATE every SET %s = %s WHERE id = %d", pgarrow.QuoteIdent(c), everyValue(rng, c, id), id)
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
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
	}
}

func (w *everyWriter) waitCommits(t *testing.T, n int64) {
	t.Helper()
	target := w.commits.Load() + n
	deadline := time.Now().Add(60 * time.Second)
	for w.commits.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("writer committed %d transactions, want %d", w.commits.Load(), target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkpoint is the table's contents when L was the WAL insert position.
type checkpoint struct {
	L    frontier.LSN
	rows map[string]int64
}

// change is one replicated update.
type change struct {
	at   frontier.LSN
	key  string
	diff int64
}

// changeSink collects what replicate.StreamPG emits.
type changeSink struct {
	changes []change
}

func (s *changeSink) Data(coll string, rec arrow.Record) error {
	if coll != "public.every" {
		return fmt.Errorf("change of %s", coll)
	}
	cols, times, diffs, _ := pipe.SplitData(rec)
	for i := 0; i < int(rec.NumRows()); i++ {
		s.changes = append(s.changes, change{frontier.LSN(times.Value(i)), recordKey(cols, i), diffs.Value(i)})
	}
	return nil
}

func (s *changeSink) Progress(string, frontier.Frontier) error { return nil }

func (s *changeSink) Error(coll string, at frontier.Time, msg string) error {
	return fmt.Errorf("definite error of %s at %d: %s", coll, at.Pos, msg)
}

func (s *changeSink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}

// everySnapshotSink consolidates a snapshot of public.every by exactKey.
type everySnapshotSink struct {
	rows     map[string]int64
	progress frontier.Frontier
}

func (s *everySnapshotSink) Data(coll string, rec arrow.Record) error {
	if coll != "public.every" {
		return fmt.Errorf("snapshot of %s", coll)
	}
	cols, times, diffs, _ := pipe.SplitData(rec)
	for i := 0; i < int(rec.NumRows()); i++ {
		if times.Value(i) != 0 {
			return fmt.Errorf("snapshot row at time %d", times.Value(i))
		}
		k := recordKey(cols, i)
		s.rows[k] += diffs.Value(i)
		if s.rows[k] == 0 {
			delete(s.rows, k)
		}
	}
	return nil
}

func (s *everySnapshotSink) Progress(coll string, f frontier.Frontier) error {
	s.progress = f
	return nil
}

// TestSnapshotPlusReplicationIsExact: for several LSNs L taken while a
// writer changes a table of every supported type, the snapshot plus the
// replicated changes at commit LSNs below L, consolidated, equal the
// table as SELECT saw it when L was the WAL insert position.
func TestSnapshotPlusReplicationIsExact(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgarrow.ConfigureSession(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	mustExec(t, conn, pgarrowtest.Setup)
	for _, ins := range pgarrowtest.Inserts {
		mustExec(t, conn, ins)
	}
	mustExec(t, conn, `ALTER TABLE every REPLICA IDENTITY FULL;
		CREATE TABLE tmpl AS SELECT * FROM every;
		CREATE PUBLICATION pub FOR TABLE every;
		CREATE FUNCTION big_text() RETURNS text LANGUAGE sql VOLATILE AS
			$$ SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 400) $$`)
	tbl, err := pgarrow.LoadTable(ctx, conn, "public.every")
	if err != nil {
		t.Fatal(err)
	}

	// The read path itself gives pgarrowtest's expected values.
	initial := readEvery(t, ctx, conn, tbl)
	want := map[string]int64{}
	for _, row := range pgarrowtest.Expected {
		want[exactKey(row)]++
	}
	if d := diffRows(initial, want); d != "" {
		t.Fatalf("public.every read as text differs from pgarrowtest.Expected:\n%s", d)
	}

	slot := uniqueSlot(t, conn)
	slotLSN, created, err := EnsureSlot(ctx, conn, slot)
	if err != nil || !created {
		t.Fatalf("EnsureSlot = %s, %v, %v", slotLSN, created, err)
	}
	cps := []checkpoint{{slotLSN, initial}}
	w := startEveryWriter(t, dsn)
	take := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		var s string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		l, err := frontier.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, checkpoint{l, readEvery(t, ctx, conn, tbl)})
	}
	w.waitCommits(t, 40)
	take()
	w.waitCommits(t, 40)
	take()
	// The snapshot is taken while the writer runs, between checkpoints.
	snap := &everySnapshotSink{rows: map[string]int64{}}
	res, err := PG(ctx, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, Parallel: 2}, snap)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	w.waitCommits(t, 40)
	take()
	w.waitCommits(t, 40)
	take()
	w.halt(t)

	if !snap.progress.Equal(frontier.Single(frontier.DomainLSN, 1)) {
		t.Errorf("snapshot progress %v, want upper 1", snap.progress)
	}
	if res.SlotLSN != slotLSN || len(res.Tables) != 1 || res.Tables[0].Rewound == 0 {
		t.Fatalf("snapshot %+v: want it at the slot %s, of public.every, with changes rewound", res, slotLSN)
	}
	last := cps[len(cps)-1].L
	sink := &changeSink{}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := replicate.StreamPG(sctx, replicate.PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, StopAt: last - 1, NoAck: true}, sink); err != nil {
		t.Fatalf("replicate: %v", err)
	}

	var big, nulls int
	for k := range cps[len(cps)-1].rows {
		big += strings.Count(k, "bytes)")
		nulls += strings.Count(k, "<nil>")
	}
	if big == 0 || nulls == 0 {
		t.Errorf("the last checkpoint has %d large values and %d NULLs: the writer did not exercise them", big, nulls)
	}
	for i, cp := range cps {
		got := map[string]int64{}
		for k, n := range snap.rows {
			got[k] = n
		}
		applied := 0
		for _, c := range sink.changes {
			if c.at >= cp.L {
				continue
			}
			if c.at < slotLSN {
				t.Fatalf("change at %s, below the slot's start %s", c.at, slotLSN)
			}
			applied++
			got[c.key] += c.diff
			if got[c.key] == 0 {
				delete(got, c.key)
			}
		}
		if i > 0 && applied == 0 {
			t.Errorf("checkpoint %d at %s: no changes below it", i, cp.L)
		}
		if d := diffRows(got, cp.rows); d != "" {
			t.Errorf("checkpoint %d at %s (%d changes applied): snapshot + changes differ from the table:\n%s", i, cp.L, applied, d)
		}
		t.Logf("checkpoint %d at %s: %d rows, %d changes below it", i, cp.L, len(cp.rows), applied)
	}
	t.Logf("snapshot at %s: %+v; %d changes replicated; writer commits %d", res.SnapshotLSN, res.Tables, len(sink.changes), w.commits.Load())
}

// Error implements pipe.Sink; a snapshot never reports one.
func (s *everySnapshotSink) Error(coll string, at frontier.Time, msg string) error {
	return fmt.Errorf("snapshot reported an error of %s at %v: %s", coll, at, msg)
}

func (s *everySnapshotSink) Reset(coll string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("unexpected reset of %s at %d", coll, at.Pos)
}
