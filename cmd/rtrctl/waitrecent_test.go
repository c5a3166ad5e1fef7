package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// The real-time recency tests run rtrctl ingest in-process
// (ingest.RunPG, which also starts the recency server on the store's
// socket) against the shared PostgreSQL, usually through a testenv.Proxy
// that slows ingestion down, and call wait-recent through runCLI or the
// recency API.

// rrUpstream is a fresh database with a table in publication "pub".
type rrUpstream struct {
	pg    *testenv.Postgres
	dsn   string // direct
	conn  *pgx.Conn
	table string // schema.table
	proxy *testenv.Proxy
	app   string // application_name of the ingest's connections
}

func rrRandom() string {
	var b [5]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rrNewUpstream creates a database with table (id int primary key, note
// text), REPLICA IDENTITY FULL, in publication pub, and a proxy in front
// of the server.
func rrNewUpstream(t *testing.T, table string) *rrUpstream {
	t.Helper()
	return rrNewUpstreamOn(t, testenv.SharedPostgres(t), table)
}

// rrNewUpstreamOn is rrNewUpstream on server pg.
func rrNewUpstreamOn(t *testing.T, pg *testenv.Postgres, table string) *rrUpstream {
	t.Helper()
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	execAll(t, conn,
		"CREATE TABLE "+table+" (id int PRIMARY KEY, note text)",
		"ALTER TABLE "+table+" REPLICA IDENTITY FULL",
		"CREATE PUBLICATION pub FOR TABLE "+table,
	)
	u := &rrUpstream{pg: pg, dsn: dsn, conn: conn, table: "public." + table, app: "rtrctl-ingest-" + rrRandom()}
	u.proxy = testenv.StartProxy(t, fmt.Sprintf("%s:%d", pg.Host, pg.Port))
	return u
}

// ingestDSN is the DSN the ingest uses: through the proxy, with an
// application_name that pg_stat_activity shows.
func (u *rrUpstream) ingestDSN() string {
	return u.proxy.DSN(u.dsn) + "&application_name=" + u.app
}

// insert commits rows from..to (inclusive) in one transaction.
func (u *rrUpstream) insert(t *testing.T, conn *pgx.Conn, from, to int) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s SELECT g, 'row ' || g FROM generate_series(%d, %d) g", u.table, from, to)); err != nil {
		t.Fatalf("insert %d..%d: %v", from, to, err)
	}
}

func (u *rrUpstream) insertLSN(t *testing.T) frontier.LSN {
	t.Helper()
	var s string
	if err := u.conn.QueryRow(t.Context(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rrIngest is an in-process rtrctl ingest of one upstream into dir.
type rrIngest struct {
	slot   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// rrStartIngest starts ingest.RunPG for u into dir as source, with a slot
// unique to the test (dropped at cleanup, after the ingest stops), and
// waits until wait-recent works through the daemon.
func rrStartIngest(t *testing.T, u *rrUpstream, dir, source string) *rrIngest {
	t.Helper()
	ing := rrStartIngestNoWait(t, u, dir, source)
	rrWaitReady(t, dir, source)
	return ing
}

// rrStartIngestNoWait is rrStartIngest without the wait.
func rrStartIngestNoWait(t *testing.T, u *rrUpstream, dir, source string) *rrIngest {
	t.Helper()
	slot := "rtr_rr_" + rrRandom()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var n int
			if err := u.conn.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not drop slot %s", slot)
	})
	return rrRunIngest(t, u, dir, source, slot)
}

func rrRunIngest(t *testing.T, u *rrUpstream, dir, source, slot string) *rrIngest {
	t.Helper()
	st, err := store.Open(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ing := &rrIngest{slot: slot, cancel: cancel, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("RTR_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() {
		ing.done <- ingest.Run(ctx, ingest.NewPG(ingest.PGConfig{
			Upstream: upstream.MustParsePostgres(u.ingestDSN()), Publication: "pub", Slot: slot, Source: source, Logger: log,
		}), st, ingest.Options{CompactEvery: -1, Logger: log})
	}()
	t.Cleanup(func() {
		if err := ing.stop(); err != nil {
			t.Errorf("ingest %s: %v", source, err)
		}
	})
	return ing
}

// stop stops the ingest and returns its error.
func (ing *rrIngest) stop() error {
	ing.once.Do(func() {
		ing.cancel()
		select {
		case ing.err = <-ing.done:
		case <-time.After(60 * time.Second):
			ing.err = errors.New("did not stop within 60s")
		}
	})
	return ing.err
}

// rrWaitReady waits until the daemon answers a wait-recent (snapshot
// done, replication running, socket listening).
func rrWaitReady(t *testing.T, dir, source string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := os.Stat(recency.SocketPath(dir, source))
		if err == nil {
			stdout, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--source-id", source, "--timeout", "5s", "--output", "json")
			var res recency.Result
			if code == exitOK && json.Unmarshal([]byte(stdout), &res) == nil && res.Via == "daemon" {
				return
			}
			err = fmt.Errorf("exit %d: %s%s", code, stdout, stderr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest %s not ready after 60s: %v", source, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rrWaitSlotActive waits until a walsender streams slot.
func rrWaitSlotActive(t *testing.T, u *rrUpstream, slot string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		err := u.conn.QueryRow(t.Context(), `SELECT count(*) > 0 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = $1 AND r.state = 'streaming'`, slot).Scan(&active)
		if err == nil && active {
			time.Sleep(100 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s not active after 30s (%v)", slot, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rrWaitRecent runs wait-recent and returns t. mode is "daemon" or
// "direct" (probing directDSN itself).
func rrWaitRecent(t *testing.T, dir, source, mode, directDSN string, extra ...string) (uint64, string, int) {
	t.Helper()
	args := []string{"wait-recent", "--store", dir, "--source-id", source, "--output", "json"}
	if mode == "direct" {
		args = append(args, "--no-daemon", "--source", "pg", "--dsn", directDSN)
	}
	args = append(args, extra...)
	stdout, stderr, code := runCLI(t, "", args...)
	if code != exitOK {
		return 0, stderr, code
	}
	var res recency.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("wait-recent output %q: %v", stdout, err)
	}
	if res.Via != mode {
		t.Fatalf("wait-recent answered via %q, want %q", res.Via, mode)
	}
	if !res.Binding.Covers(res.Upstream) || res.Upstream.Domain() != frontier.DomainLSN {
		t.Fatalf("binding %s does not cover upstream %s", res.Binding, res.Upstream)
	}
	if strings.Contains(stdout+stderr, "password") {
		t.Fatalf("output mentions a password: %s %s", stdout, stderr)
	}
	return res.Time, stderr, code
}

// rrReadIDs reads collection with rtrctl read (as of asOf, or the latest
// complete time when asOf is 0) and returns the ids, sorted.
func rrReadIDs(t *testing.T, dir, collection string, asOf uint64) []int {
	t.Helper()
	args := []string{"read", dir, collection, "--format", "csv"}
	if asOf != 0 {
		args = append(args, "--as-of", strconv.FormatUint(asOf, 10))
	}
	stdout, stderr, code := runCLI(t, "", args...)
	if code != exitOK {
		t.Fatalf("read: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var ids []int
	for _, l := range lines[1:] {
		id, err := strconv.Atoi(strings.SplitN(l, ",", 2)[0])
		if err != nil {
			t.Fatalf("read: bad line %q", l)
		}
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// isPrefix reports whether ids are exactly 1..n.
func rrIsPrefix(ids []int, n int) bool {
	if len(ids) != n {
		return false
	}
	for i, id := range ids {
		if id != i+1 {
			return false
		}
	}
	return true
}

// TestWaitRecentSeed is the seed's scenario: ingestion slowed by 300 ms
// of latency from PostgreSQL to the ingest; a writer commits rows; a plain
// read right after misses them, and a read as of the time wait-recent
// returns has exactly them, every round, through the daemon and directly.
// The subtest async commits with synchronous_commit=off.
func TestWaitRecentSeed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		async bool
	}{{"sync", false}, {"async", true}} {
		t.Run(tc.name, func(t *testing.T) {
			u := rrNewUpstream(t, "orders")
			dir := t.TempDir()
			rrStartIngest(t, u, dir, "pg")
			// Warm up: the first change of a table makes the ingest look up
			// its catalog (several round trips), which is not what this
			// test measures.
			u.insert(t, u.conn, 1, 5)
			if _, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", ""); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			u.proxy.SetLatencyDir(testenv.ToClient, 300*time.Millisecond)
			u.proxy.SetLatencyDir(testenv.ToTarget, 50*time.Millisecond)
			writer, err := pgx.Connect(t.Context(), u.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close(context.Background())
			if tc.async {
				execAll(t, writer, "SET synchronous_commit = off")
			}
			const rounds = 20
			n := 5
			var durs []time.Duration
			for round := range rounds {
				mode := []string{"daemon", "direct"}[round%2]
				u.insert(t, writer, n+1, n+5)
				n += 5
				if got := rrReadIDs(t, dir, u.table, 0); len(got) >= n {
					t.Fatalf("round %d: a plain read right after the commit already sees %d rows; the proxy does not slow ingestion enough", round, len(got))
				}
				start := time.Now()
				ts, stderr, code := rrWaitRecent(t, dir, "pg", mode, u.dsn, "--timeout", "20s")
				if code != exitOK {
					t.Fatalf("round %d (%s): wait-recent exit %d: %s", round, mode, code, stderr)
				}
				durs = append(durs, time.Since(start))
				if testing.Verbose() {
					t.Logf("round %d (%s): %v", round, mode, time.Since(start).Round(time.Millisecond))
				}
				if got := rrReadIDs(t, dir, u.table, ts); !rrIsPrefix(got, n) {
					t.Fatalf("round %d (%s): read as of %d has %d rows, want exactly 1..%d", round, mode, ts, len(got), n)
				}
			}
			p50, p99 := rrPercentiles(durs)
			t.Logf("%d rounds, 300ms latency to the ingest: wait-recent p50 %v, max %v", rounds, p50, p99)
		})
	}
}

// TestWaitRecentTwoSources ingests two databases of different lag (100 ms
// and 400 ms behind their proxies) into one store as two sources: each
// recent read sees exactly the rows committed before it was issued.
func TestWaitRecentTwoSources(t *testing.T) {
	a, b := rrNewUpstream(t, "alpha"), rrNewUpstream(t, "beta")
	dir := t.TempDir()
	rrStartIngest(t, a, dir, "pga")
	rrStartIngest(t, b, dir, "pgb")
	a.proxy.SetLatencyDir(testenv.ToClient, 100*time.Millisecond)
	b.proxy.SetLatencyDir(testenv.ToClient, 400*time.Millisecond)
	n := 0
	for round := range 5 {
		a.insert(t, a.conn, n+1, n+3)
		b.insert(t, b.conn, n+1, n+3)
		n += 3
		if got := rrReadIDs(t, dir, b.table, 0); len(got) >= n {
			t.Fatalf("round %d: the slow source is already ingested", round)
		}
		var wg sync.WaitGroup
		for _, u := range []struct {
			up  *rrUpstream
			src string
		}{{a, "pga"}, {b, "pgb"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mode := []string{"daemon", "direct"}[round%2]
				ts, stderr, code := rrWaitRecent(t, dir, u.src, mode, u.up.dsn)
				if code != exitOK {
					t.Errorf("round %d %s: exit %d: %s", round, u.src, code, stderr)
					return
				}
				if got := rrReadIDs(t, dir, u.up.table, ts); !rrIsPrefix(got, n) {
					t.Errorf("round %d %s: read as of %d has %d rows, want exactly 1..%d", round, u.src, ts, len(got), n)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	// Without --source-id a store of two sources is ambiguous.
	if _, stderr, code := runCLI(t, "", "wait-recent", "--store", dir); code != exitError || !strings.Contains(stderr, "2 sources") {
		t.Errorf("wait-recent without --source-id: exit %d, %s", code, stderr)
	}
}

// TestWaitRecentIdle: with nothing written, wait-recent returns at once
// (upstream idle, everything bound). Latencies are reported, not asserted
// beyond a generous bound.
func TestWaitRecentIdle(t *testing.T) {
	u := rrNewUpstream(t, "orders")
	dir := t.TempDir()
	rrStartIngest(t, u, dir, "pg")
	u.insert(t, u.conn, 1, 10)
	for _, mode := range []string{"direct", "daemon"} {
		var durs []time.Duration
		for range 100 {
			start := time.Now()
			ts, stderr, code := rrWaitRecent(t, dir, "pg", mode, u.dsn, "--timeout", "5s")
			d := time.Since(start)
			if code != exitOK {
				t.Fatalf("%s: exit %d: %s", mode, code, stderr)
			}
			if d > 5*time.Second {
				t.Fatalf("%s: an idle wait took %v", mode, d)
			}
			if ts == 0 {
				t.Fatal("time 0")
			}
			durs = append(durs, d)
		}
		p50, p99 := rrPercentiles(durs)
		t.Logf("idle upstream, %s: 100 calls, p50 %v, p99 %v", mode, p50, p99)
	}
	if got := rrReadIDs(t, dir, u.table, 0); !rrIsPrefix(got, 10) {
		t.Errorf("store has %d rows, want 10", len(got))
	}
}

// TestWaitRecentConcurrent: 200 concurrent waiters against the daemon
// while a writer commits: every returned time covers the commits made
// before that call started, and the upstream sees at most 3 connections of
// the ingest besides its walsender (the catalog's, the probe's and the
// publication poller's), however many waiters there are.
func TestWaitRecentConcurrent(t *testing.T) {
	u := rrNewUpstream(t, "orders")
	dir := t.TempDir()
	rrStartIngest(t, u, dir, "pg")
	st, err := store.Open(t.Context(), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	// The writer commits one row per transaction and records when.
	writer, err := pgx.Connect(t.Context(), u.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	var committed atomic.Int64
	var commitAt sync.Map // id -> time.Time
	stopWriter := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for id := 1; ; id++ {
			select {
			case <-stopWriter:
				writerDone <- nil
				return
			default:
			}
			if _, err := writer.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s VALUES (%d, 'w')", u.table, id)); err != nil {
				writerDone <- err
				return
			}
			commitAt.Store(id, time.Now())
			committed.Store(int64(id))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// Sample the ingest's backends.
	var maxConns atomic.Int64
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			var n int64
			err := u.conn.QueryRow(context.Background(),
				"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'", u.app).Scan(&n)
			if err == nil && n > maxConns.Load() {
				maxConns.Store(n)
			}
			select {
			case <-stopSampler:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	const waiters = 200
	type answer struct {
		before int64
		res    recency.Result
		err    error
		dur    time.Duration
	}
	answers := make([]answer, waiters)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%50) * 10 * time.Millisecond) // arrive over ~0.5s
			a := answer{before: committed.Load()}
			t0 := time.Now()
			a.res, a.err = recency.Wait(t.Context(), st, recency.Options{Source: "pg", Timeout: 20 * time.Second, Recorded: recordedProber})
			a.dur = time.Since(t0)
			answers[i] = a
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopSampler)
	<-samplerDone
	close(stopWriter)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(t.Context(), u.table)
	if err != nil {
		t.Fatal(err)
	}
	var durs []time.Duration
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("waiter %d: %v", i, a.err)
		}
		if a.res.Via != "daemon" {
			t.Fatalf("waiter %d answered %s, want daemon", i, a.res.Via)
		}
		durs = append(durs, a.dur)
		rec, err := sh.ReadAsOf(t.Context(), a.res.Time)
		if err != nil {
			t.Fatal(err)
		}
		ids := rec.Column(0).(*array.Int32)
		var got []int
		for j := 0; j < ids.Len(); j++ {
			got = append(got, int(ids.Value(j)))
		}
		rec.Release()
		sort.Ints(got)
		if len(got) < int(a.before) || !rrIsPrefix(got, len(got)) {
			t.Fatalf("waiter %d: as of %d the store has %d rows (prefix %v), but %d were committed before the call", i, a.res.Time, len(got), rrIsPrefix(got, len(got)), a.before)
		}
	}
	// Ingestion lag: commit -> system time of the row's binding.
	if err := sh.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	ch, err := sh.Changes(t.Context(), sh.Since(), sh.Upper()-1)
	if err != nil {
		t.Fatal(err)
	}
	var lags []time.Duration
	idc := ch.Column(0).(*array.Int32)
	timec := ch.Column(int(ch.NumCols()) - 2).(*array.Uint64)
	for j := 0; j < idc.Len(); j++ {
		if at, ok := commitAt.Load(int(idc.Value(j))); ok {
			lags = append(lags, time.UnixMilli(int64(timec.Value(j))).Sub(at.(time.Time)))
		}
	}
	ch.Release()
	stats := rrBindingCount(t, dir)
	p50, p99 := rrPercentiles(durs)
	l50, l99 := rrPercentiles(lags)
	t.Logf("%d concurrent waiters in %v with a writer (%d rows): wait p50 %v, p99 %v; ingestion (commit -> binding) p50 %v, p99 %v; ingest client backends at most %d; %s",
		waiters, elapsed.Round(time.Millisecond), committed.Load(), p50, p99, l50, l99, maxConns.Load(), stats)
	if n := maxConns.Load(); n > 3 {
		t.Errorf("the ingest had %d client backends on the upstream, want at most 3 (catalog, one probe connection, the publication poller)", n)
	}
}

// rrBindingCount says how many bindings source pg has.
func rrBindingCount(t *testing.T, dir string) string {
	t.Helper()
	st, err := store.Open(t.Context(), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(t.Context(), "pg")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d bindings", len(bs))
}

// TestWaitRecentResumption cuts the ingest's connection to the upstream
// while a wait-recent waits (and before one starts), then restores it:
// the wait either fails with status 3 or returns a time whose read holds
// every row committed before it started; never a stale answer.
func TestWaitRecentResumption(t *testing.T) {
	u := rrNewUpstream(t, "orders")
	dir := t.TempDir()
	ing := rrStartIngest(t, u, dir, "pg")
	u.proxy.SetLatencyDir(testenv.ToClient, 100*time.Millisecond)
	n := 0
	check := func(t *testing.T, what string, ts uint64, stderr string, code int) {
		t.Helper()
		switch code {
		case exitOK:
			if got := rrReadIDs(t, dir, u.table, ts); !rrIsPrefix(got, n) {
				t.Fatalf("%s: stale answer: read as of %d has %d rows, want 1..%d", what, ts, len(got), n)
			}
			t.Logf("%s: correct answer", what)
		case exitRecencyWait:
			t.Logf("%s: timed out (status 3): %s", what, strings.TrimSpace(stderr))
		default:
			t.Fatalf("%s: exit %d: %s", what, code, stderr)
		}
	}
	for i, mode := range []string{"daemon", "direct", "daemon", "direct"} {
		cutFirst := i >= 2
		if i > 0 {
			// A fresh ingest (resuming from the store): the replication
			// stream's reconnect backoff grows with every cut it saw.
			// Errors before replication has started are definite (the
			// ingest exits): restart without latency and cut only once the
			// slot is being read.
			if err := ing.stop(); err != nil {
				t.Fatal(err)
			}
			u.proxy.SetLatency(0)
			ing = rrRunIngest(t, u, dir, "pg", ing.slot)
			rrWaitReady(t, dir, "pg")
			rrWaitSlotActive(t, u, ing.slot)
			u.proxy.SetLatencyDir(testenv.ToClient, 100*time.Millisecond)
		}
		u.insert(t, u.conn, n+1, n+5)
		n += 5
		if cutFirst {
			u.proxy.Cut()
		}
		type out struct {
			ts     uint64
			stderr string
			code   int
		}
		res := make(chan out, 1)
		start := time.Now()
		go func() {
			// The direct path probes through the proxy too.
			ts, stderr, code := rrWaitRecent(t, dir, "pg", mode, u.proxy.DSN(u.dsn), "--timeout", "15s")
			res <- out{ts, stderr, code}
		}()
		time.Sleep(100 * time.Millisecond)
		if !cutFirst {
			u.proxy.Cut()
		}
		time.Sleep(600 * time.Millisecond)
		u.proxy.Restore()
		o := <-res
		check(t, fmt.Sprintf("%s, cut %s the call (%v)", mode, map[bool]string{true: "before", false: "during"}[cutFirst], time.Since(start).Round(time.Millisecond)), o.ts, o.stderr, o.code)
	}
}

// TestWaitRecentTimeout: with the ingest stopped and the store behind the
// upstream, wait-recent --timeout 2s exits with status 3 and names both
// frontiers: at once by default (no ingest runs), after the timeout with
// --wait-for-ingest. The upstream comes from the store's source info, the
// password from PGPASSWORD.
func TestWaitRecentTimeout(t *testing.T) {
	u := rrNewUpstream(t, "orders")
	dir := t.TempDir()
	ing := rrStartIngest(t, u, dir, "pg")
	u.insert(t, u.conn, 1, 5)
	if _, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", ""); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if err := ing.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(recency.SocketPath(dir, "pg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlived the ingest: %v", err)
	}
	u.insert(t, u.conn, 6, 10)
	before := u.insertLSN(t)
	t.Setenv("PGPASSWORD", u.pg.Password)
	lsnRE := regexp.MustCompile(`upstream at ([0-9A-F]+/[0-9A-F]+), ingested up to ([0-9A-F]+/[0-9A-F]+) \(last binding at \d+, [^)]+ ago\)`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no ingest is running to catch up"},
		{[]string{"--wait-for-ingest"}, "timed out after 2s"},
	} {
		start := time.Now()
		stdout, stderr, code := runCLI(t, "", append([]string{"wait-recent", "--store", dir, "--timeout", "2s"}, tc.args...)...)
		d := time.Since(start)
		if code != exitRecencyWait {
			t.Fatalf("%v: exit %d, want 3\nstdout: %s\nstderr: %s", tc.args, code, stdout, stderr)
		}
		m := lsnRE.FindStringSubmatch(stderr)
		if m == nil || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "no ingest is running") || !strings.Contains(stderr, "hint: ") {
			t.Fatalf("%v: message does not name both frontiers, the reason and a hint:\n%s", tc.args, stderr)
		}
		up, _ := frontier.ParseLSN(m[1])
		got, _ := frontier.ParseLSN(m[2])
		if up < before || got >= up {
			t.Errorf("%v: upstream %s (want >= %s), ingested %s (want below it)", tc.args, up, before, got)
		}
		if strings.Contains(stderr, u.pg.Password) {
			t.Errorf("the message shows the password")
		}
		t.Logf("%v: status 3 after %v: %s", tc.args, d.Round(time.Millisecond), strings.TrimSpace(stderr))
		if d > 15*time.Second {
			t.Errorf("%v: took %v", tc.args, d)
		}
	}
}

func TestWaitRecentUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no store", []string{"wait-recent"}, exitUsage, "no --store given"},
		{"bad output", []string{"wait-recent", "--store", dir, "--output", "xml"}, exitUsage, `bad --output "xml"`},
		{"dsn without source", []string{"wait-recent", "--store", dir, "--dsn", "postgres://x@127.0.0.1/db"}, exitUsage, "--dsn needs --source"},
		{"dsn-file without source", []string{"wait-recent", "--store", dir, "--dsn-file", "/nonexistent"}, exitUsage, "--dsn needs --source"},
		{"bad timeout", []string{"wait-recent", "--store", dir, "--timeout", "0s"}, exitUsage, "bad --timeout"},
		{"stray argument", []string{"wait-recent", "--store", dir, "x"}, exitUsage, `unexpected argument "x"`},
		// An ingest that is starting creates the store: waited for.
		{"no store there", []string{"wait-recent", "--store", dir + "/none", "--timeout", "200ms"}, exitRecencyWait, "no store in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func rrPercentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(10 * time.Microsecond), s[min(len(s)-1, len(s)*99/100)].Round(10 * time.Microsecond)
}
