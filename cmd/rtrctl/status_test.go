package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// statusRun is an in-process ingest for the status tests.
type statusRun struct {
	t       *testing.T
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	stopped bool
}

// statusIngest runs src into dir in-process until stop is called or the
// test ends.
func statusIngest(t *testing.T, dir string, src ingest.Source) *statusRun {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &statusRun{t: t, cancel: cancel, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		defer close(r.done)
		r.err = ingest.Run(ctx, src, st, ingest.Options{CompactEvery: -1, Logger: log})
	}()
	t.Cleanup(r.stop)
	return r
}

// failed fails the test at once when the ingest has ended with an error.
func (r *statusRun) failed() {
	r.t.Helper()
	select {
	case <-r.done:
		if !r.stopped {
			r.t.Fatalf("ingest ended: %v", r.err)
		}
	default:
	}
}

func (r *statusRun) stop() {
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	<-r.done
	if r.err != nil && !errors.Is(r.err, context.Canceled) {
		r.t.Errorf("ingest: %v", r.err)
	}
}

// sourceIn is source name of s.
func sourceIn(t *testing.T, s statusJSON, name string) sourceStatus {
	t.Helper()
	for _, src := range s.Sources {
		if src.Name == name {
			return src
		}
	}
	t.Fatalf("status has no source %s: %+v", name, s.Sources)
	return sourceStatus{}
}

// statusCaughtUp waits (wait-recent, then status with args) until status
// measures source at lag 0, and returns that status.
func statusCaughtUp(t *testing.T, r *statusRun, dir, source string, args ...string) statusJSON {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.failed()
		// Until the ingest has recorded its source, wait-recent fails.
		_, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--source-id", source, "--timeout", "10s", "--wait-for-ingest")
		var src sourceStatus
		if code == exitOK {
			s := statusOf(t, dir, args...)
			if src = sourceIn(t, s, source); src.LagPositions != nil && *src.LagPositions == 0 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never measured %s caught up: %+v (lag %v); last wait-recent: exit %d: %s", source, src, src.LagPositions, code, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkLag checks the lag fields of a measured source against their
// definition: upstream minus the last binding's frontier, summed over
// partitions; lag_wal_bytes only for LSN sources; lag_ms 0 exactly when
// caught up.
func checkLag(t *testing.T, src sourceStatus, domain frontier.Domain) {
	t.Helper()
	if src.Upstream == nil || src.Frontier == nil || src.LagPositions == nil || src.LagMillis == nil {
		t.Fatalf("source %s not measured: %+v", src.Name, src)
	}
	if src.Upstream.Domain() != domain || src.Frontier.Domain() != domain {
		t.Errorf("source %s: upstream %s and frontier %s, want domain %s", src.Name, src.Upstream.Domain(), src.Frontier.Domain(), domain)
	}
	var want uint64
	for _, p := range src.Upstream.Partitions() {
		if u, h := src.Upstream.Get(p), src.Frontier.Get(p); u > h {
			want += u - h
		}
	}
	if *src.LagPositions != want {
		t.Errorf("source %s: lag_positions %d, want %d (upstream %s, frontier %s)", src.Name, *src.LagPositions, want, src.Upstream, src.Frontier)
	}
	if domain == frontier.DomainLSN {
		if src.LagBytes == nil || *src.LagBytes != want {
			t.Errorf("source %s: lag_wal_bytes %v, want %d", src.Name, src.LagBytes, want)
		}
	} else if src.LagBytes != nil {
		t.Errorf("source %s of domain %s has lag_wal_bytes %d", src.Name, domain, *src.LagBytes)
	}
	if (*src.LagMillis == 0) != (want == 0) || *src.LagMillis < 0 {
		t.Errorf("source %s: lag_ms %d with lag %d", src.Name, *src.LagMillis, want)
	}
	if src.LagNote != "" {
		t.Errorf("source %s measured, but with note %q", src.Name, src.LagNote)
	}
}

// statusFails runs status with args and checks its exit status and that
// stderr has every one of wants.
func statusFails(t *testing.T, code int, args []string, wants ...string) {
	t.Helper()
	_, stderr, got := runCLI(t, "", append([]string{"status"}, args...)...)
	t.Logf("status %s: exit %d\n%s", strings.Join(args, " "), got, stderr)
	if got != code {
		t.Errorf("status %s: exit %d, want %d\n%s", strings.Join(args, " "), got, code, stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("status %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, stderr)
		}
	}
}

// fakeSource gives dir a source of kind (none: recorded by no ingest) with
// one binding at frontier f.
func fakeSource(t *testing.T, dir, source, kind string, up map[string]string, f frontier.Frontier) {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if kind != "" {
		if err := st.WriteSourceInfo(store.SourceInfo{Source: source, Kind: kind, Upstream: up}); err != nil {
			t.Fatal(err)
		}
	}
	now := uint64(time.Now().UnixMilli())
	if _, err := st.AppendBindings(ctxT(t), source, 0, now+1, []frontier.Binding{{Time: now, Frontier: f}}); err != nil {
		t.Fatal(err)
	}
}

// TestStatusPG: status --dsn of a PostgreSQL source measures the lag in
// WAL bytes: 0 once caught up, the WAL written since once the ingest
// stopped; --probe-recorded measures the same against the upstream the
// ingest recorded (password from PGPASSWORD). A store with a mysql source
// too skips that one with a note. The server is dedicated: other tests'
// WAL would move the upstream LSN.
func TestStatusPG(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{})
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	execAll(t, conn,
		"CREATE TABLE items (id int PRIMARY KEY, note text)",
		"ALTER TABLE items REPLICA IDENTITY FULL",
		"CREATE PUBLICATION pub FOR TABLE items",
		"INSERT INTO items SELECT g, 'x' FROM generate_series(1, 10) g")
	insertLSN := func() frontier.LSN {
		var s string
		if err := conn.QueryRow(ctxT(t), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		l, err := frontier.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	dir := t.TempDir()
	ing := statusIngest(t, dir, ingest.NewPG(ingest.PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub"}))

	s := statusCaughtUp(t, ing, dir, "pg", "--dsn", dsn)
	checkLag(t, sourceIn(t, s, "pg"), frontier.DomainLSN)

	ing.stop()
	execAll(t, conn, "INSERT INTO items SELECT g, 'y' FROM generate_series(11, 500) g")
	before := insertLSN()
	time.Sleep(5 * time.Millisecond) // the last binding is older than a ms
	src := sourceIn(t, statusOf(t, dir, "--dsn", dsn), "pg")
	after := insertLSN()
	checkLag(t, src, frontier.DomainLSN)
	if up := frontier.LSN(src.Upstream.Pos()); up < before || up > after {
		t.Errorf("upstream %s, want the insert LSN, between %s and %s", up, before, after)
	}
	if *src.LagPositions == 0 || *src.LagMillis <= 0 || src.Running {
		t.Errorf("after writes with no ingest running: %+v, lag %d WAL bytes, %d ms; want both > 0", src, *src.LagPositions, *src.LagMillis)
	}
	out := mustRun(t, "", "status", dir, "--dsn", dsn)
	if want := fmt.Sprintf("%d WAL bytes, ", *src.LagPositions); !strings.Contains(out, want) {
		t.Errorf("status text lacks %q:\n%s", want, out)
	}
	// The slot holds back the WAL written while no ingest runs, and lets
	// it go once an ingest has caught up again.
	r0, r1, lagStopped := slotRetained(t, sourceIn(t, s, "pg")), slotRetained(t, src), *src.LagPositions
	if r1 <= r0 || src.Retention.WALStatus != "reserved" {
		t.Errorf("slot retains %d WAL bytes after %d were written while stopped, %d before; status %q", r1, *src.LagPositions, r0, src.Retention.WALStatus)
	}
	if !strings.Contains(out, fmt.Sprintf("slot %s retains ", src.Retention.Slot)) {
		t.Errorf("status text lacks the slot's retention:\n%s", out)
	}

	// The recorded upstream has no password: PGPASSWORD supplies it.
	t.Setenv("PGPASSWORD", pg.Password)
	rec := sourceIn(t, statusOf(t, dir, "--probe-recorded"), "pg")
	checkLag(t, rec, frontier.DomainLSN)
	if !rec.Upstream.Equal(*src.Upstream) {
		t.Errorf("--probe-recorded: upstream %s, want %s as with --dsn", rec.Upstream, src.Upstream)
	}
	if s := statusOf(t, dir); s.Sources[0].Upstream != nil || s.Sources[0].LagPositions != nil || s.Sources[0].LagNote != "" {
		t.Errorf("status without --dsn probed: %+v", s.Sources[0])
	}

	// A mysql source in the same store: --dsn of PostgreSQL measures the
	// pg source and skips the other with a note.
	fakeSource(t, dir, "my", "mariadb", map[string]string{"dsn": "mysql://root@127.0.0.1:1/app"}, mariadbAt(t, 5))
	s = statusOf(t, dir, "--dsn", dsn)
	checkLag(t, sourceIn(t, s, "pg"), frontier.DomainLSN)
	if my := sourceIn(t, s, "my"); my.Upstream != nil || my.LagPositions != nil || !strings.Contains(my.LagNote, "--dsn is not the upstream of a mysql source") {
		t.Errorf("the mysql source with a PostgreSQL --dsn: %+v, want skipped with a note", my)
	}
	out = mustRun(t, "", "status", dir, "--dsn", dsn)
	if !strings.Contains(out, "NOTE") || !strings.Contains(out, "not measured: --dsn is not the upstream of a mysql source") {
		t.Errorf("status text lacks the note:\n%s", out)
	}

	// Resumed and caught up, the slot lets go of the WAL it held back.
	ing = statusIngest(t, dir, ingest.NewPG(ingest.PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub"}))
	statusCaughtUp(t, ing, dir, "pg", "--dsn", dsn)
	for deadline := time.Now().Add(60 * time.Second); ; {
		// A checkpoint logs the running transactions, from which the slot's
		// restart_lsn advances (else at most 15 s later).
		execAll(t, conn, "CHECKPOINT")
		r2 := slotRetained(t, sourceIn(t, statusOf(t, dir, "--dsn", dsn), "pg"))
		if r2 < r1 {
			t.Logf("slot retained %d WAL bytes caught up, %d after %d bytes written while stopped, %d after resuming", r0, r1, lagStopped, r2)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot still retains %d WAL bytes 60 s after the ingest resumed (%d when stopped)", r2, r1)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ing.stop()
}

// slotRetained is the WAL a measured pg source's slot retains.
func slotRetained(t *testing.T, src sourceStatus) uint64 {
	t.Helper()
	if r := src.Retention; r == nil || r.RetainedBytes == nil || r.Slot == "" {
		t.Fatalf("source %s: no slot retention measured: %+v (%s)", src.Name, r, src.RetentionNote)
	}
	return *src.Retention.RetainedBytes
}

// mariadbAt is the MariaDB frontier of GTID domain 0 at next seq.
func mariadbAt(t *testing.T, next uint64) frontier.Frontier {
	t.Helper()
	f, err := frontier.New(frontier.DomainMariaDB, map[string]uint64{"0": next})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStatusMariaDB: status --dsn of a MariaDB source measures the lag in
// transactions: 0 once caught up, one per transaction committed since the
// ingest stopped. A PostgreSQL DSN fits no source of the store: an error.
// The server is dedicated: other tests' transactions would move its GTID
// position.
func TestStatusMariaDB(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBOptions{})
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v varchar(20))", "INSERT INTO items VALUES (1, 'a'), (2, 'b')")
	dir := t.TempDir()
	ing := statusIngest(t, dir, ingest.NewMySQL(ingest.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{d.name + ".items"}}))

	for _, dsn := range []string{m.URL(), m.DSN()} { // both DSN forms
		s := statusCaughtUp(t, ing, dir, "mysql", "--dsn", dsn)
		src := sourceIn(t, s, "mysql")
		checkLag(t, src, frontier.DomainMariaDB)
		if src.Kind != "mariadb" {
			t.Errorf("kind %q, want mariadb", src.Kind)
		}
	}

	ing.stop()
	d.exec(t, "INSERT INTO items VALUES (3, 'c')", "UPDATE items SET v = 'z' WHERE id = 1", "DELETE FROM items WHERE id = 2")
	time.Sleep(5 * time.Millisecond) // the last binding is older than a ms
	src := sourceIn(t, statusOf(t, dir, "--dsn", m.URL()), "mysql")
	checkLag(t, src, frontier.DomainMariaDB)
	if want := d.upstream(t); !src.Upstream.Equal(want) {
		t.Errorf("upstream %s, want the server's gtid_binlog_pos %s", src.Upstream, want)
	}
	if *src.LagPositions != 3 || *src.LagMillis <= 0 {
		t.Errorf("after 3 transactions with no ingest running: lag %d transactions, %d ms; want 3 and > 0", *src.LagPositions, *src.LagMillis)
	}
	if out := mustRun(t, "", "status", dir, "--dsn", m.URL()); !strings.Contains(out, "3 transactions, ") || !strings.Contains(out, "binlogs never expire") {
		t.Errorf("status text lacks the lag in transactions or the binlog retention:\n%s", out)
	}
	// Retention headroom: binlogs kept a day, minus the lag.
	d.exec(t, "SET GLOBAL binlog_expire_logs_seconds = 86400")
	src = sourceIn(t, statusOf(t, dir, "--dsn", m.URL()), "mysql")
	if r := src.Retention; r == nil || r.BinlogRetentionSeconds == nil || *r.BinlogRetentionSeconds != 86400 || src.BinlogHeadroomSeconds == nil ||
		*src.BinlogHeadroomSeconds != 86400-float64(*src.LagMillis)/1000 {
		t.Errorf("binlogs kept a day: retention %+v, headroom %v, lag %d ms", r, src.BinlogHeadroomSeconds, *src.LagMillis)
	}
	d.exec(t, "SET GLOBAL binlog_expire_logs_seconds = 0")

	statusFails(t, exitError, []string{dir, "--dsn", "postgres://app@127.0.0.1/app"},
		"--dsn fits no source of the store", "mysql source mysql", "parse mysql dsn", "hint: use user:pass@tcp(host:3306)/db")

	// A pg source in the same store: a MySQL --dsn measures the mysql
	// source and skips the pg one with a note, which does not show the
	// password.
	fakeSource(t, dir, "pg", "pg", map[string]string{"dsn": "postgres://app@127.0.0.1:1/app"}, frontier.Single(frontier.DomainLSN, 100))
	for _, out := range []string{"json", "text"} {
		stdout, stderr, code := runCLI(t, "", "status", dir, "--dsn", m.DSN(), "--output", out)
		if code != exitOK || strings.Contains(stdout+stderr, m.Password) {
			t.Fatalf("status --output %s, a mysql and a pg source: exit %d, or the password shows:\n%s%s", out, code, stdout, stderr)
		}
		if !strings.Contains(stdout, "not measured: --dsn is not the upstream of a pg source: parse postgres dsn") {
			t.Errorf("status --output %s: no note on the pg source:\n%s", out, stdout)
		}
	}
	s := statusOf(t, dir, "--dsn", m.DSN())
	checkLag(t, sourceIn(t, s, "mysql"), frontier.DomainMariaDB)
	if pg := sourceIn(t, s, "pg"); pg.Upstream != nil || pg.LagPositions != nil {
		t.Errorf("the pg source with a MySQL --dsn: %+v, want skipped", pg)
	}
}

// TestStatusKafka: status --brokers measures every Kafka source of the
// store (one per topic, each at the topic its ingest recorded) in records:
// 0 once caught up, the records produced since the ingest stopped, summed
// over partitions. --probe-recorded needs no flags. A --dsn fits no source
// of a Kafka store: a usage error.
func TestStatusKafka(t *testing.T) {
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, "a", 2)
	kafkaTestTopic(t, k.Brokers, "b", 1)
	produce := func(topic string, partition int32, n int) {
		t.Helper()
		for i := range n {
			r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(fmt.Sprint(i))}
			if err := cl.ProduceSync(ctxT(t), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("a", 0, 3)
	produce("a", 1, 2)
	produce("b", 0, 1)
	dir := t.TempDir()
	ing := statusIngest(t, dir, ingest.NewKafka(ingest.KafkaConfig{Upstream: k.Upstream(), Topics: []string{"a", "b"}}))
	brokers := strings.Join(k.Brokers, ",")

	statusCaughtUp(t, ing, dir, "kafka.a", "--brokers", brokers)
	s := statusCaughtUp(t, ing, dir, "kafka.b", "--brokers", brokers)
	for _, c := range []struct {
		source string
		want   map[string]uint64
	}{{"kafka.a", map[string]uint64{"0": 3, "1": 2}}, {"kafka.b", map[string]uint64{"0": 1}}} {
		src := sourceIn(t, s, c.source)
		checkLag(t, src, frontier.DomainKafka)
		if got := src.Upstream.Map(); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s caught up: upstream %v, want %v", c.source, got, c.want)
		}
	}

	ing.stop()
	produce("a", 0, 2)
	produce("a", 1, 1)
	time.Sleep(5 * time.Millisecond) // the last binding is older than a ms
	for _, args := range [][]string{{"--brokers", brokers}, {"--probe-recorded"}} {
		s := statusOf(t, dir, args...)
		a, b := sourceIn(t, s, "kafka.a"), sourceIn(t, s, "kafka.b")
		checkLag(t, a, frontier.DomainKafka)
		checkLag(t, b, frontier.DomainKafka)
		if got := a.Upstream.Map(); fmt.Sprint(got) != fmt.Sprint(map[string]uint64{"0": 5, "1": 3}) {
			t.Errorf("%v: kafka.a upstream %v, want 0:5,1:3", args, got)
		}
		if *a.LagPositions != 3 || *a.LagMillis <= 0 || *b.LagPositions != 0 || *b.LagMillis != 0 {
			t.Errorf("%v: lag of kafka.a %d records, %d ms (want 3, > 0); of kafka.b %d, %d ms (want 0, 0)", args, *a.LagPositions, *a.LagMillis, *b.LagPositions, *b.LagMillis)
		}
	}
	out := mustRun(t, "", "status", dir, "--brokers", brokers)
	t.Log(out)
	if !strings.Contains(out, "3 records, ") || !strings.Contains(out, "0 records, 0 ms") {
		t.Errorf("status text lacks the lags in records:\n%s", out)
	}

	statusFails(t, exitUsage, []string{dir, "--dsn", "postgres://app@127.0.0.1/app"},
		"--dsn names the upstream of mysql or pg sources, and the store has none (its sources: kafka.a (kafka), kafka.b (kafka))", "hint: drop --dsn")
}

// TestStatusUpstreamFlags: which source --dsn and --brokers measure, with
// no server: the kind of a source no ingest recorded is that of its
// frontiers; a flag that fits no source fails before any connection, one
// whose upstream cannot be probed fails naming the source.
func TestStatusUpstreamFlags(t *testing.T) {
	dir := t.TempDir()
	fakeSource(t, dir, "pg", "pg", map[string]string{"dsn": "postgres://app@127.0.0.1:1/app"}, frontier.Single(frontier.DomainLSN, 100))
	fakeSource(t, dir, "my", "mariadb", map[string]string{"dsn": "mysql://root@127.0.0.1:1/app"}, mariadbAt(t, 5))
	fakeSource(t, dir, "hand", "", nil, frontier.Single(frontier.DomainLSN, 100))
	fakeSource(t, dir, "kafka.t", "", nil, kafkaAt(t, 4))

	s := statusOf(t, dir)
	for _, src := range s.Sources {
		if src.Upstream != nil || src.LagPositions != nil || src.LagNote != "" {
			t.Errorf("no flags: source %+v measured or noted", src)
		}
	}

	statusFails(t, exitError, []string{dir, "--dsn", "not a dsn"},
		"--dsn fits no source of the store", "pg source pg: parse postgres dsn", "pg source hand: parse postgres dsn", "mysql source my: parse mysql dsn",
		"hint: use postgres://user:pass@host:5432/db", "; or use user:pass@tcp(host:3306)/db")
	statusFails(t, exitError, []string{dir, "--brokers", "127.0.0.1:1"},
		"--brokers fits no source of the store", "kafka source kafka.t: the store does not record the source's topic")
	// The mysql source fits; its server does not answer.
	statusFails(t, exitError, []string{dir, "--dsn", "root@tcp(127.0.0.1:1)/app"}, "status my: ")

	only := t.TempDir()
	fakeSource(t, only, "hand", "", nil, frontier.Single(frontier.DomainLSN, 100))
	statusFails(t, exitUsage, []string{only, "--brokers", "127.0.0.1:9092"},
		"--brokers names the upstream of kafka sources, and the store has none (its sources: hand (kind not recorded))",
		"hint: drop --brokers, or name the upstream of the store's sources: --brokers for kafka, --dsn for mysql or pg")

	fakeSource(t, only, "kafka.t", "", nil, kafkaAt(t, 4))
	t.Log(mustRun(t, "", "status", only, "--probe-recorded"))
	s = statusOf(t, only, "--probe-recorded")
	if src := sourceIn(t, s, "hand"); src.LagNote != "not measured: no ingest recorded its upstream; name it with --dsn" {
		t.Errorf("--probe-recorded, a source no ingest recorded: note %q", src.LagNote)
	}
	if src := sourceIn(t, s, "kafka.t"); src.LagNote != "not measured: no ingest recorded its upstream; name it with --brokers" {
		t.Errorf("--probe-recorded, a source no ingest recorded: note %q", src.LagNote)
	}
}

// kafkaAt is the Kafka frontier of partition 0 at next offset.
func kafkaAt(t *testing.T, next uint64) frontier.Frontier {
	t.Helper()
	f, err := frontier.New(frontier.DomainKafka, map[string]uint64{"0": next})
	if err != nil {
		t.Fatal(err)
	}
	return f
}
