package replicate_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// logBuffer collects slog text output safely across goroutines.
type logBuffer struct{ testenv.LogBuffer }

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// load inserts rows 1, 2, ... one per transaction until stop is closed,
// reconnecting whenever the server goes away. An insert whose outcome is
// unknown (the server died around the commit) is retried idempotently
// (the caller's insert ignores a duplicate key), so the table afterwards
// is the truth about what was committed.
type load struct {
	stop    chan struct{}
	done    chan struct{}
	next    atomic.Int64 // the id being written
	failed  atomic.Int64 // statements that failed (server down)
	written atomic.Int64
}

func startLoad(t *testing.T, insert func(ctx context.Context, id int64) error, reconnect func(ctx context.Context) error) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	l.next.Store(1)
	go func() {
		defer close(l.done)
		connected := false
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := error(nil)
			if !connected {
				err = reconnect(ctx)
				connected = err == nil
			}
			if err == nil {
				if err = insert(ctx, l.next.Load()); err == nil {
					l.written.Add(1)
					l.next.Add(1)
				} else {
					connected = false
				}
			}
			cancel()
			if err != nil {
				l.failed.Add(1)
				time.Sleep(50 * time.Millisecond)
			} else {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(l.end)
	return l
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// waitRows waits until more than n rows have been written.
func (l *load) waitRows(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d rows written", n), func() bool { return l.written.Load() > n })
}

// TestReplicatePGRestart restarts a dedicated PostgreSQL (pg_ctl restart
// -m fast and -m immediate, twice each) under a write load while StreamPG
// runs: it rides through every restart, logs its retries, and the stream
// holds every committed row exactly once, at increasing commit LSNs.
func TestReplicatePGRestart(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{})
	t.Cleanup(func() {
		// The restarted server is not necessarily the process StartPostgres
		// stops.
		_ = testenv.StopPostgresDir(context.Background(), filepath.Dir(pg.DataDir))
	})
	d := newDB(t, pg, "CREATE TABLE r (id bigint PRIMARY KEY, w bigint); ALTER TABLE r REPLICA IDENTITY FULL;")
	var logs logBuffer
	cfg := d.cfg()
	// As an ingest does: the sink holds what it got, and the slot follows.
	// (A walsender lets a fast shutdown finish only once the client's flush
	// position reaches what it sent: with NoAck it never does.)
	sink := newRecSink()
	cfg.NoAck = false
	cfg.Ack = func(context.Context) (frontier.LSN, error) { return sink.upper(), nil }
	cfg.MaxBackoff = 300 * time.Millisecond
	cfg.RetryFor = time.Minute
	cfg.Logger = logs.logger()
	r := start(t, cfg, sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })

	var conn *pgx.Conn
	l := startLoad(t, func(ctx context.Context, id int64) error {
		_, err := conn.Exec(ctx, "INSERT INTO r VALUES ($1, $1) ON CONFLICT DO NOTHING", id)
		return err
	}, func(ctx context.Context) error {
		if conn != nil {
			conn.Close(context.Background())
		}
		var err error
		conn, err = pgx.Connect(ctx, d.dsn)
		return err
	})
	var recoveries []time.Duration
	for i, mode := range []string{"fast", "immediate", "fast", "immediate"} {
		l.waitRows(t, int64(200*(i+1)))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t0 := time.Now()
		if err := pg.Restart(ctx, testenv.RestartOptions{Mode: mode, Down: 200 * time.Millisecond}); err != nil {
			cancel()
			t.Fatalf("restart %d (%s): %v", i+1, mode, err)
		}
		cancel()
		up := time.Since(t0)
		// Recovered: the stream delivers a row written after the restart.
		after := l.next.Load() + 1
		t1 := time.Now()
		waitFor(t, fmt.Sprintf("the stream after restart %d (%s)", i+1, mode), func() bool {
			r.failIfDone(t)
			us := sink.snapshot()
			if len(us) == 0 {
				return false
			}
			id, _ := strconv.ParseInt(strings.Split(us[len(us)-1].row, ",")[0], 10, 64)
			return id >= after
		})
		recoveries = append(recoveries, time.Since(t1))
		t.Logf("restart %d (-m %s): server back after %v, stream delivered new rows %v later", i+1, mode, up.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	l.waitRows(t, 1000)
	l.end()
	check := connect(t, d.dsn)
	var endText string
	if err := check.QueryRow(t.Context(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&endText); err != nil {
		t.Fatal(err)
	}
	end, _ := frontier.ParseLSN(endText)
	waitFor(t, "progress past the last write", func() bool { r.failIfDone(t); return sink.upper() >= end })
	r.failIfDone(t)

	rows, err := check.Query(t.Context(), "SELECT id, w FROM r")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id, w int64
		if err := rows.Scan(&id, &w); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("public.r %d,%d x1", id, w))
	}
	sort.Strings(want)
	us := sink.snapshot()
	if got := consolidate(us); !slices.Equal(got, want) {
		t.Errorf("consolidated stream has %d rows, the table %d", len(got), len(want))
	}
	if len(us) != len(want) {
		t.Errorf("%d updates for %d rows: duplicates", len(us), len(want))
	}
	for i := 1; i < len(us); i++ {
		if us[i].time <= us[i-1].time {
			t.Errorf("update %d (%s) at %s, not after update %d (%s) at %s", i, us[i].row, us[i].time, i-1, us[i-1].row, us[i-1].time)
			break
		}
	}
	if len(sink.late) > 0 {
		t.Errorf("updates below reported progress: %q", sink.late)
	}
	out := logs.String()
	retries := strings.Count(out, "replicate postgres: transient failure; retrying")
	if retries < 4 {
		t.Errorf("%d retries logged for 4 restarts:\n%s", retries, out)
	}
	if strings.Contains(out, pg.Password) {
		t.Errorf("the log holds the password")
	}
	t.Logf("4 restarts survived; %d rows checked (%d failed writes while down); %d retries logged; recoveries %v", len(want), l.failed.Load(), retries, recoveries)
}

// TestReplicateMySQLRestart kills MariaDB (SIGKILL) twice and stops it
// cleanly once under a write load while StreamMySQL runs: the stream
// rides through, logs its retries, and holds every committed row exactly
// once, at increasing GTIDs.
func TestReplicateMySQLRestart(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBOptions{})
	t.Cleanup(func() { _ = testenv.StopMariaDBDir(context.Background(), filepath.Dir(m.DataDir)) })
	db := m.CreateDatabase(t)
	setup := myConn(t, m)
	myRun(t, setup, fmt.Sprintf("CREATE TABLE %s.r (id bigint PRIMARY KEY, w bigint)", db))
	var logs logBuffer
	sink := newMySink()
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		errc <- replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".r"},
			MaxBackoff: 300 * time.Millisecond, RetryFor: time.Minute, Logger: logs.logger()}, sink)
	}()
	failIfDone := func() {
		select {
		case err := <-errc:
			errc <- err
			t.Fatalf("StreamMySQL returned: %v", err)
		default:
		}
	}
	myWaitFor(t, "first progress", func() bool { return sink.last().Domain() != "" })

	var conn *client.Conn
	l := startLoad(t, func(ctx context.Context, id int64) error {
		_, err := conn.Execute(fmt.Sprintf("INSERT IGNORE INTO %s.r VALUES (%d, %d)", db, id, id))
		return err
	}, func(ctx context.Context) error {
		if conn != nil {
			conn.Close()
		}
		var err error
		conn, err = m.Connect(ctx, "")
		return err
	})
	coll := db + ".r"
	count := func() int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.seen)
	}
	var recoveries []time.Duration
	for i, mode := range []string{"kill", "clean", "kill"} {
		l.waitRows(t, int64(200*(i+1)))
		rctx, rcancel := context.WithTimeout(context.Background(), 90*time.Second)
		t0 := time.Now()
		if err := m.Restart(rctx, testenv.RestartOptions{Mode: mode, Down: 200 * time.Millisecond}); err != nil {
			rcancel()
			t.Fatalf("restart %d (%s): %v", i+1, mode, err)
		}
		rcancel()
		up := time.Since(t0)
		n0 := count()
		t1 := time.Now()
		myWaitFor(t, fmt.Sprintf("the stream after restart %d (%s)", i+1, mode), func() bool { failIfDone(); return count() > n0+5 })
		recoveries = append(recoveries, time.Since(t1))
		t.Logf("restart %d (%s): server back after %v, stream delivered new rows %v later", i+1, mode, up.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	l.waitRows(t, 800)
	l.end()
	check := myConn(t, m)
	_, upstream, err := replicate.ParsePosition(true, myString(t, check, "SELECT @@global.gtid_binlog_pos"))
	if err != nil {
		t.Fatal(err)
	}
	myWaitFor(t, "progress to the upstream position", func() bool { failIfDone(); return sink.last().Covers(upstream) })
	failIfDone()

	res, err := check.Execute(fmt.Sprintf("SELECT id, w FROM %s.r ORDER BY id", db))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i := 0; i < res.RowNumber(); i++ {
		id, _ := res.GetInt(i, 0)
		w, _ := res.GetInt(i, 1)
		want[fmt.Sprintf("%d|%d", id, w)] = 1
	}
	sink.mu.Lock()
	got := sink.rows[coll]
	seen := slices.Clone(sink.seen)
	sink.mu.Unlock()
	if len(got) != len(want) {
		t.Errorf("stream holds %d rows, the table %d", len(got), len(want))
	}
	for row, n := range want {
		if got[row] != n {
			t.Errorf("row %s: diff %d in the stream, want 1", row, got[row])
			break
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d updates for %d rows: duplicates", len(seen), len(want))
	}
	last := map[string]uint64{}
	for _, s := range seen {
		at := s[strings.LastIndex(s, "@")+1:]
		part, pos, _ := strings.Cut(at, "/")
		p, _ := strconv.ParseUint(pos, 10, 64)
		if p <= last[part] {
			t.Errorf("update %q not after seq %d of domain %s", s, last[part], part)
			break
		}
		last[part] = p
	}
	out := logs.String()
	retries := strings.Count(out, "replicate mysql: transient failure; retrying")
	if retries < 3 {
		t.Errorf("%d retries logged for 3 restarts:\n%s", retries, out)
	}
	if strings.Contains(out, m.Password) {
		t.Errorf("the log holds the password")
	}
	t.Logf("3 restarts survived; %d rows checked (%d failed writes while down); %d retries logged; recoveries %v", len(want), l.failed.Load(), retries, recoveries)
}

// TestReplicatePGReconnectHeldProgress: while the sink's Limit holds
// progress back (an ingest waiting for a publication poll), the
// transactions beyond it have still been handed over; a reconnect must
// resume after them, not at the held progress, or the server sends them
// again and the store holds them twice.
func TestReplicatePGReconnectHeldProgress(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, "CREATE TABLE h (id bigint PRIMARY KEY); ALTER TABLE h REPLICA IDENTITY FULL;")
	held := d.insertLSN(t)
	cfg := d.cfg()
	cfg.Limit = func(frontier.LSN) (frontier.LSN, error) { return held, nil }
	cfg.MaxBackoff = 100 * time.Millisecond
	sink := newRecSink()
	r := start(t, cfg, sink)
	for i := 1; i <= 10; i++ {
		d.exec(t, fmt.Sprintf("INSERT INTO h VALUES (%d)", i))
	}
	waitFor(t, "10 inserts", func() bool { r.failIfDone(t); return len(sink.snapshot()) >= 10 })
	if up := sink.upper(); up > held {
		t.Fatalf("progress %s beyond the limit %s", up, held)
	}
	var pid int
	if err := d.conn.QueryRow(t.Context(), "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", d.slot).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	d.exec(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
	d.exec(t, "INSERT INTO h VALUES (11)")
	waitFor(t, "the insert after the reconnect", func() bool {
		r.failIfDone(t)
		for _, u := range sink.snapshot() {
			if u.row == "11" {
				return true
			}
		}
		return false
	})
	time.Sleep(200 * time.Millisecond) // anything sent again would be here by now
	if us := sink.snapshot(); len(us) != 11 {
		t.Errorf("%d updates for 11 inserts after a reconnect with progress held at %s: %v", len(us), held, us)
	}
}
