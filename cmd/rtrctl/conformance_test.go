package main

// The conformance suite (internal/ingesttest) run against every source
// through the rtrctl binary: PostgreSQL and MariaDB on dedicated servers
// (they are restarted), Kafka on a dedicated kfake whose connections the
// test can cut.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func TestConformance(t *testing.T) {
	t.Run("pg", func(t *testing.T) {
		ingesttest.Run(t, &pgHarness{pg: testenv.StartPostgres(t, testenv.PostgresOptions{})})
	})
	t.Run("mariadb", func(t *testing.T) {
		ingesttest.Run(t, &myHarness{m: testenv.StartMariaDB(t, testenv.MariaDBOptions{})})
	})
	t.Run("kafka", func(t *testing.T) { ingesttest.Run(t, newKafkaHarness(t)) })
}

// binProc is a proc as an ingesttest.Proc.
type binProc struct{ p *proc }

func (b binProc) Kill(t *testing.T) { b.p.kill(t) }
func (b binProc) Stop(t *testing.T) int {
	b.p.signal(syscall.SIGTERM)
	return b.p.wait(t, 60*time.Second)
}
func (b binProc) Wait(t *testing.T) int { return b.p.wait(t, 120*time.Second) }
func (b binProc) Exited() bool          { return b.p.exited() }
func (b binProc) Stderr() string        { return string(b.p.stderr.Bytes()) }

func runBin(t *testing.T, env []string, args ...string) ingesttest.Proc {
	return binProc{startProc(t, env, args...)}
}

var bankColls = []string{"acc_a", "acc_b"}

// --- PostgreSQL ---------------------------------------------------------------

type pgHarness struct{ pg *testenv.Postgres }

func (h *pgHarness) Name() string { return "pg" }
func (h *pgHarness) Run(t *testing.T, env []string, args ...string) ingesttest.Proc {
	return runBin(t, env, args...)
}

func (h *pgHarness) New(t *testing.T) ingesttest.Fixture {
	dsn := h.pg.CreateDatabase(t)
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, c := range bankColls {
		execAll(t, conn, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL)", c),
			fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", c),
			fmt.Sprintf("INSERT INTO %s SELECT g, %d FROM generate_series(1, %d) g", c, ingesttest.Balance, ingesttest.Accounts))
	}
	execAll(t, conn, "CREATE PUBLICATION rtr FOR TABLE "+strings.Join(bankColls, ", "))
	f := &pgFixture{h: h, dsn: dsn}
	t.Cleanup(func() {
		if f.conn != nil {
			f.conn.Close(context.Background())
		}
	})
	return f
}

type pgFixture struct {
	h    *pgHarness
	dsn  string
	conn *pgx.Conn // the writer's
	// slot, when set, is the ingest's --slot (else the ingest's default
	// rtr_<source-id>_<store id>).
	slot string
}

func (f *pgFixture) IngestArgs(dir, source string) []string {
	args := []string{"ingest", "--source", "pg", "--dsn", f.dsn, "--publication", "rtr", "--store", dir, "--source-id", source}
	if f.slot != "" {
		args = append(args, "--slot", f.slot)
	}
	return args
}

func (f *pgFixture) Layout(source string) ingesttest.Layout {
	return ingesttest.Layout{Atomic: true, Sources: []ingesttest.SourceColls{{ID: source, Collections: []string{"public.acc_a", "public.acc_b"}}}}
}

func (f *pgFixture) Caps() ingesttest.Caps { return ingesttest.Caps{Snapshot: true, Acks: true} }

func (f *pgFixture) Apply(ctx context.Context, sets []ingesttest.Set) ([]ingesttest.Pos, error) {
	if f.conn == nil || f.conn.IsClosed() {
		c, err := pgx.Connect(ctx, f.dsn)
		if err != nil {
			return nil, err
		}
		f.conn = c
	}
	var lo, hi string
	err := pgx.BeginFunc(ctx, f.conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lo); err != nil {
			return err
		}
		for _, s := range sets {
			tag, err := tx.Exec(ctx, bankSQL(strings.TrimPrefix(s.Coll, "public."), s))
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("%s %s %s: %d rows", s.Op, s.Coll, s.ID, tag.RowsAffected())
			}
		}
		return nil
	})
	if err == nil {
		err = f.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&hi)
	}
	if err != nil {
		f.conn.Close(context.Background())
		return nil, err
	}
	l, err1 := frontier.ParseLSN(lo)
	u, err2 := frontier.ParseLSN(hi)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("parse lsn %q %q", lo, hi)
	}
	return []ingesttest.Pos{{Lo: uint64(l), Hi: uint64(u) - 1}}, nil
}

// bankSQL is the statement of one set on table (PostgreSQL and MariaDB
// alike; the id and balance are the suite's numbers, written literally).
func bankSQL(table string, s ingesttest.Set) string {
	switch s.Op {
	case ingesttest.Insert:
		return fmt.Sprintf("INSERT INTO %s (id, balance) VALUES (%s, %d)", table, s.ID, s.Balance)
	case ingesttest.Delete:
		return fmt.Sprintf("DELETE FROM %s WHERE id = %s", table, s.ID)
	}
	return fmt.Sprintf("UPDATE %s SET balance = %d WHERE id = %s", table, s.Balance, s.ID)
}

func (f *pgFixture) Read(ctx context.Context) (ingesttest.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	out := ingesttest.State{}
	for _, tb := range bankColls {
		rows, err := c.Query(ctx, "SELECT id::text, balance FROM "+tb)
		if err != nil {
			return nil, err
		}
		m := map[string]int64{}
		for rows.Next() {
			var id string
			var b int64
			if err := rows.Scan(&id, &b); err != nil {
				return nil, err
			}
			m[id] = b
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out["public."+tb] = m
	}
	return out, nil
}

func (f *pgFixture) RestartUpstream(t *testing.T, i int) {
	mode := []string{"fast", "immediate"}[i%2]
	if err := f.h.pg.Restart(ctxT(t), servers.RestartOptions{Mode: mode, Down: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

var retryLine = regexp.MustCompile(`transient failure; retrying`)

func (f *pgFixture) Retries(stderr string) int { return len(retryLine.FindAllStringIndex(stderr, -1)) }

func (f *pgFixture) Acked(t *testing.T, source string) map[string]frontier.Frontier {
	c, err := pgx.Connect(ctxT(t), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	pattern := "rtr_" + source + "%"
	if f.slot != "" {
		pattern = f.slot
	}
	var s *string
	err = c.QueryRow(ctxT(t), "SELECT max(confirmed_flush_lsn)::text FROM pg_replication_slots WHERE database = current_database() AND slot_name LIKE $1", pattern).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return nil
	}
	l, err := frontier.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]frontier.Frontier{source: frontier.Single(frontier.DomainLSN, uint64(l))}
}

func (f *pgFixture) BreakCollection(t *testing.T, coll string) {
	c, err := pgx.Connect(ctxT(t), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	// A table left without a key under the stream is a definite error of
	// its collection (a column change is re-snapshotted instead); the
	// insert makes pgoutput send the new relation.
	name := strings.TrimPrefix(coll, "public.")
	execAll(t, c, "ALTER TABLE "+name+" DROP CONSTRAINT "+name+"_pkey", "ALTER TABLE "+name+" REPLICA IDENTITY DEFAULT",
		"INSERT INTO "+name+" VALUES (1000000, 0)")
}

func (f *pgFixture) Truncate(t *testing.T, coll string, rows map[string]int64) {
	c, err := pgx.Connect(ctxT(t), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	qs := []string{"BEGIN", "TRUNCATE " + coll}
	for id, bal := range rows {
		qs = append(qs, fmt.Sprintf("INSERT INTO %s VALUES (%s, %d)", coll, id, bal))
	}
	execAll(t, c, append(qs, "COMMIT")...)
}

// --- MariaDB ------------------------------------------------------------------

type myHarness struct{ m *testenv.MariaDB }

func (h *myHarness) Name() string { return "mariadb" }
func (h *myHarness) Run(t *testing.T, env []string, args ...string) ingesttest.Proc {
	return runBin(t, env, args...)
}

func (h *myHarness) New(t *testing.T) ingesttest.Fixture {
	d := newMyDB(t, h.m)
	for _, c := range bankColls {
		var vals []string
		for i := 1; i <= ingesttest.Accounts; i++ {
			vals = append(vals, fmt.Sprintf("(%d, %d)", i, ingesttest.Balance))
		}
		d.exec(t, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL)", c),
			fmt.Sprintf("INSERT INTO %s VALUES %s", c, strings.Join(vals, ",")))
	}
	f := &myFixture{h: h, db: d.name}
	t.Cleanup(func() {
		if f.conn != nil {
			f.conn.Close()
		}
	})
	return f
}

type myFixture struct {
	h    *myHarness
	db   string
	conn *client.Conn // the writer's
}

func (f *myFixture) IngestArgs(dir, source string) []string {
	return []string{"ingest", "--source", "mysql", "--dsn", f.h.m.URL(), "--tables", f.db + ".acc_a," + f.db + ".acc_b", "--store", dir, "--source-id", source}
}

func (f *myFixture) Layout(source string) ingesttest.Layout {
	return ingesttest.Layout{Atomic: true, Sources: []ingesttest.SourceColls{{ID: source, Collections: []string{f.db + ".acc_a", f.db + ".acc_b"}}}}
}

func (f *myFixture) Caps() ingesttest.Caps { return ingesttest.Caps{Snapshot: true} }

func (f *myFixture) Apply(ctx context.Context, sets []ingesttest.Set) ([]ingesttest.Pos, error) {
	if err := f.writer(ctx); err != nil {
		return nil, err
	}
	return f.applySQL(sets, nil)
}

// writer connects the writer's connection, unless it is there.
func (f *myFixture) writer(ctx context.Context) error {
	if f.conn == nil {
		c, err := f.h.m.Connect(ctx, f.db)
		if err != nil {
			return err
		}
		f.conn = c
	}
	return nil
}

// run runs qs, a transaction ending in SELECT @@last_gtid, on the
// writer's connection: every statement but BEGIN and COMMIT changes one
// row. It returns the transaction's position.
func (f *myFixture) run(qs []string) ([]ingesttest.Pos, error) {
	var gtid string
	for _, q := range qs {
		r, err := f.conn.Execute(q)
		if err != nil {
			f.conn.Close()
			f.conn = nil
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		if q != "BEGIN" && q != "COMMIT" && !strings.HasPrefix(q, "SELECT") && r.AffectedRows != 1 {
			return nil, fmt.Errorf("%s: %d rows", q, r.AffectedRows)
		}
		if strings.HasPrefix(q, "SELECT") {
			gtid, _ = r.GetString(0, 0)
		}
	}
	_, up, err := replicate.ParsePosition(true, gtid)
	if err != nil || up.Len() != 1 {
		return nil, fmt.Errorf("last gtid %q: %v", gtid, err)
	}
	p := up.Partitions()[0]
	return []ingesttest.Pos{{Partition: p, Lo: up.Get(p) - 1, Hi: up.Get(p) - 1}}, nil
}

func (f *myFixture) Read(ctx context.Context) (ingesttest.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := f.h.m.Connect(ctx, f.db)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := ingesttest.State{}
	for _, tb := range bankColls {
		r, err := c.Execute("SELECT id, balance FROM " + tb)
		if err != nil {
			return nil, err
		}
		m := map[string]int64{}
		for i := range r.RowNumber() {
			id, _ := r.GetString(i, 0)
			b, _ := r.GetInt(i, 1)
			m[id] = b
		}
		out[f.db+"."+tb] = m
	}
	return out, nil
}

func (f *myFixture) RestartUpstream(t *testing.T, i int) {
	if err := f.h.m.Restart(ctxT(t), servers.RestartOptions{Mode: "kill", Down: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

func (f *myFixture) Retries(stderr string) int { return len(retryLine.FindAllStringIndex(stderr, -1)) }

func (f *myFixture) Acked(*testing.T, string) map[string]frontier.Frontier { return nil }

func (f *myFixture) BreakCollection(t *testing.T, coll string) {
	c, err := f.h.m.Connect(ctxT(t), f.db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	table := strings.TrimPrefix(coll, f.db+".")
	// An ALTER TABLE of the columns is a re-snapshot, and a change
	// without the whole row (binlog_row_image not FULL for the session)
	// of a table with a primary key is followed by key. Without a
	// primary key MINIMAL logs whole rows, unless the table has a UNIQUE
	// NOT NULL index: then the old row is that index's columns alone,
	// which breaks the collection (keys are primary keys only).
	for _, q := range []string{"ALTER TABLE " + table + " DROP PRIMARY KEY, ADD UNIQUE KEY (id)", "SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE " + table + " SET balance = balance + 1"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *myFixture) Truncate(t *testing.T, coll string, rows map[string]int64) {
	c, err := f.h.m.Connect(ctxT(t), f.db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	table := strings.TrimPrefix(coll, f.db+".")
	qs := []string{"TRUNCATE " + table} // commits on its own
	for id, bal := range rows {
		qs = append(qs, fmt.Sprintf("INSERT INTO %s VALUES (%s, %d)", table, id, bal))
	}
	for _, q := range qs {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
}

// --- Kafka --------------------------------------------------------------------

// cutListener is kfake's listener: Cut closes every connection it
// accepted and refuses new ones until Restore (kfake advertises the
// listener's own address, so a proxy in front would be bypassed).
type cutListener struct {
	net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	cut     bool
	refused int
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.cut {
			l.refused++
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		return c, nil
	}
}

func (l *cutListener) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

func (l *cutListener) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

type kafkaHarness struct {
	k  *testenv.Kafka
	ln *cutListener
	n  int
}

func newKafkaHarness(t *testing.T) *kafkaHarness {
	h := &kafkaHarness{}
	h.k = testenv.StartKafka(t, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		h.ln = &cutListener{Listener: l}
		return h.ln, nil
	}))
	return h
}

func (h *kafkaHarness) Name() string { return "kafka" }
func (h *kafkaHarness) Run(t *testing.T, env []string, args ...string) ingesttest.Proc {
	return runBin(t, env, args...)
}

func (h *kafkaHarness) New(t *testing.T) ingesttest.Fixture {
	h.n++
	f := &kafkaFixture{h: h, prefix: fmt.Sprintf("conf%d", h.n)}
	for _, c := range bankColls {
		f.topics = append(f.topics, f.prefix+"-"+c)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.k.Brokers...), kgo.DefaultProduceTopic(f.topics[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f.cl = cl
	resp, err := kadm.NewClient(cl).CreateTopics(ctxT(t), 1, 1, nil, f.topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range f.topics {
		for i := 1; i <= ingesttest.Accounts; i++ {
			if err := cl.ProduceSync(ctxT(t), &kgo.Record{Topic: tp, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(ingesttest.Balance))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

type kafkaFixture struct {
	h      *kafkaHarness
	prefix string
	topics []string
	cl     *kgo.Client
}

func (f *kafkaFixture) IngestArgs(dir, source string) []string {
	return []string{"ingest", "--source", "kafka", "--brokers", strings.Join(f.h.k.Brokers, ","), "--topics", strings.Join(f.topics, ","),
		"--envelope", "upsert", "--key-format", "text", "--value-format", "json", "--group", f.prefix + "-" + source,
		"--store", dir, "--source-id", source}
}

func (f *kafkaFixture) Layout(source string) ingesttest.Layout {
	var l ingesttest.Layout
	for _, tp := range f.topics {
		l.Sources = append(l.Sources, ingesttest.SourceColls{ID: source + "." + tp, Collections: []string{tp}})
	}
	return l
}

func (f *kafkaFixture) Caps() ingesttest.Caps { return ingesttest.Caps{Acks: true} }

// Apply produces one record per set, in order; the producer retries
// through lost connections (idempotently), so it does not fail.
func (f *kafkaFixture) Apply(ctx context.Context, sets []ingesttest.Set) ([]ingesttest.Pos, error) {
	var pos []ingesttest.Pos
	for _, s := range sets {
		rec := &kgo.Record{Topic: s.Coll, Key: []byte(s.ID), Value: []byte(strconv.FormatInt(s.Balance, 10))}
		if s.Op == ingesttest.Delete {
			rec.Value = nil // a tombstone
		}
		r, err := f.cl.ProduceSync(ctx, rec).First()
		if err != nil {
			return nil, err
		}
		pos = append(pos, ingesttest.Pos{Partition: strconv.Itoa(int(r.Partition)), Lo: uint64(r.Offset), Hi: uint64(r.Offset)})
	}
	return pos, nil
}

// Read consumes the topics from their start to their end and folds the
// records by key.
func (f *kafkaFixture) Read(ctx context.Context) (ingesttest.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(f.cl).ListEndOffsets(ctx, f.topics...)
	if err != nil {
		return nil, err
	}
	parts := map[string]map[int32]kgo.Offset{}
	want := map[string]int64{}
	for _, tp := range f.topics {
		parts[tp] = map[int32]kgo.Offset{0: kgo.NewOffset().AtStart()}
		o, ok := ends.Lookup(tp, 0)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("end offset of %s: %v", tp, o.Err)
		}
		want[tp] = o.Offset
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(f.h.k.Brokers...), kgo.ConsumePartitions(parts), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := ingesttest.State{}
	next := map[string]int64{}
	for _, tp := range f.topics {
		out[tp] = map[string]int64{}
	}
	for {
		done := true
		for _, tp := range f.topics {
			done = done && next[tp] >= want[tp]
		}
		if done {
			return out, nil
		}
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Topic] = r.Offset + 1
			if r.Value == nil {
				delete(out[r.Topic], string(r.Key))
			} else if n, err := strconv.ParseInt(string(r.Value), 10, 64); err == nil {
				out[r.Topic][string(r.Key)] = n
			}
		})
	}
}

func (f *kafkaFixture) RestartUpstream(t *testing.T, i int) {
	f.h.ln.Cut()
	time.Sleep(time.Second)
	f.h.ln.Restore()
}

var kafkaRetryLine = regexp.MustCompile(`transient failure; retrying|kafka fetch failed; the client retries|kafka metadata check failed; will retry`)

// Retries: franz-go reconnects without surfacing the loss, so besides the
// log lines the evidence is the reconnections refused during the cuts.
func (f *kafkaFixture) Retries(stderr string) int {
	f.h.ln.mu.Lock()
	defer f.h.ln.mu.Unlock()
	return len(kafkaRetryLine.FindAllStringIndex(stderr, -1)) + f.h.ln.refused
}

func (f *kafkaFixture) Acked(t *testing.T, source string) map[string]frontier.Frontier {
	offs, err := kadm.NewClient(f.cl).FetchOffsets(ctxT(t), f.prefix+"-"+source)
	if err != nil {
		return nil
	}
	out := map[string]frontier.Frontier{}
	for _, tp := range f.topics {
		if o, ok := offs.Lookup(tp, 0); ok && o.Err == nil && o.At >= 0 {
			fr, err := frontier.New(frontier.DomainKafka, map[string]uint64{"0": uint64(o.At)})
			if err != nil {
				t.Fatal(err)
			}
			out[source+"."+tp] = fr
		}
	}
	return out
}

func (f *kafkaFixture) BreakCollection(t *testing.T, coll string) {
	if err := f.cl.ProduceSync(ctxT(t), &kgo.Record{Topic: coll, Key: []byte("1"), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// --- a broken source fails the suite -------------------------------------------

// progressFirst is a PostgreSQL source that breaks the contract: its
// stream hands each transaction's data over only after the next progress,
// which is already past it, at that progress's time (data behind the
// progress would be refused by the driver; moved to it, it is accepted
// and lands later than its source time).
type progressFirst struct{ *ingest.PG }

func (s progressFirst) Stream(ctx context.Context, r ingest.StreamRequest) error {
	r.Sink = &lateSink{Sink: r.Sink}
	return s.PG.Stream(ctx, r)
}

type lateSink struct {
	pipe.Sink
	held []heldData
}

type heldData struct {
	coll string
	rec  arrow.Record
}

func (s *lateSink) Data(coll string, rec arrow.Record) error {
	rec.Retain()
	s.held = append(s.held, heldData{coll, rec})
	return nil
}

func (s *lateSink) Progress(coll string, upper frontier.Frontier) error {
	if err := s.Sink.Progress(coll, upper); err != nil {
		return err
	}
	held := s.held
	s.held = nil
	var err error
	for _, h := range held {
		if err == nil {
			moved := retime(h.rec, upper.Pos())
			err = s.Sink.Data(h.coll, moved)
			moved.Release()
		}
		h.rec.Release()
	}
	return err
}

// retime is rec with every _time set to t.
func retime(rec arrow.Record, t uint64) arrow.Record {
	cols := make([]arrow.Array, rec.NumCols())
	for i, f := range rec.Schema().Fields() {
		cols[i] = rec.Column(i)
		if f.Name == pipe.ColTime {
			b := array.NewUint64Builder(memory.DefaultAllocator)
			for range rec.NumRows() {
				b.Append(t)
			}
			cols[i] = b.NewArray()
			defer cols[i].Release()
		}
	}
	return array.NewRecord(rec.Schema(), cols, rec.NumRows())
}

// TestConformanceBrokenSource: check 2 passes for the PostgreSQL source
// run in-process and fails for the same source with progress handed over
// before the data it covers.
func TestConformanceBrokenSource(t *testing.T) {
	h := &pgHarness{pg: testenv.SharedPostgres(t)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := func(t *testing.T, broken bool) error {
		fx := h.New(t).(*pgFixture)
		lay := fx.Layout("conf")
		log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
		dir := t.TempDir()
		st, err := store.Open(ctxT(t), dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var src ingest.Source = ingest.NewPG(ingest.PGConfig{Upstream: upstream.MustParsePostgres(fx.dsn), Publication: "rtr", Source: "conf", Logger: quiet})
		if broken {
			src = progressFirst{src.(*ingest.PG)}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- ingest.Run(ctx, src, st, ingest.Options{Interval: 20 * time.Millisecond, CompactEvery: -1, Logger: quiet})
		}()
		ended := false
		defer func() {
			cancel()
			if !ended {
				<-done
			}
		}()
		w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
		for log.Len() < 300 {
			select {
			case err := <-done:
				ended = true
				t.Fatalf("ingest.Run ended early: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		w.Halt(t)
		ingesttest.WaitEqual(t, fx, dir, lay, nil, 60*time.Second)
		cancel()
		ended = true
		if err := <-done; err != nil {
			t.Fatalf("ingest.Run: %v", err)
		}
		_, err = ingesttest.CheckTimes(ctxT(t), dir, lay, log)
		return err
	}
	if err := run(t, false); err != nil {
		t.Fatalf("check 2 fails for the PostgreSQL source: %v", err)
	}
	err := run(t, true)
	if err == nil {
		t.Fatal("check 2 passes for a source that hands progress over before its data")
	}
	t.Logf("the broken source fails check 2: %v", err)
}

// Position implements ingesttest.Fixture: the insert position now.
func (f *pgFixture) Position(ctx context.Context) (ingesttest.Pos, error) {
	c, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		return ingesttest.Pos{}, err
	}
	defer c.Close(context.Background())
	var s string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return ingesttest.Pos{}, err
	}
	l, err := frontier.ParseLSN(s)
	return ingesttest.Pos{Hi: uint64(l) - 1}, err
}

// Position implements ingesttest.Fixture: the last GTID now.
func (f *myFixture) Position(ctx context.Context) (ingesttest.Pos, error) {
	c, err := f.h.m.Connect(ctx, f.db)
	if err != nil {
		return ingesttest.Pos{}, err
	}
	defer c.Close()
	r, err := c.Execute("SELECT @@global.gtid_binlog_pos")
	if err != nil {
		return ingesttest.Pos{}, err
	}
	s, _ := r.GetString(0, 0)
	_, up, err := replicate.ParsePosition(true, s)
	if err != nil || up.Len() != 1 {
		return ingesttest.Pos{}, fmt.Errorf("gtid_binlog_pos %q: %v", s, err)
	}
	p := up.Partitions()[0]
	return ingesttest.Pos{Partition: p, Hi: up.Get(p) - 1}, nil
}

// Position implements ingesttest.Fixture; Apply does not fail (the
// producer retries for ever), so nothing needs placing.
func (f *kafkaFixture) Position(context.Context) (ingesttest.Pos, error) {
	return ingesttest.Pos{}, fmt.Errorf("kafka writes are not left unanswered")
}
