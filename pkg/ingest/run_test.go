package ingest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// sourceCase is one source kind with a fresh upstream holding one
// collection of rows rows.
type sourceCase struct {
	name       string
	source     func(t *testing.T, rows int) (Source, string, string) // the source, its source id, its collection
	upstreamOK func(partitions []string) bool                        // the upstream position's partition labels look right
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// everySource makes a fresh upstream per kind on the shared servers.
func everySource() []sourceCase {
	return []sourceCase{
		{name: "pg", source: func(t *testing.T, rows int) (Source, string, string) {
			dsn := testenv.SharedPostgres(t).CreateDatabase(t)
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			for _, q := range []string{
				"CREATE TABLE t (id int PRIMARY KEY, v text)", "ALTER TABLE t REPLICA IDENTITY FULL",
				"CREATE PUBLICATION p FOR TABLE t", fmt.Sprintf("INSERT INTO t SELECT g, 'x' FROM generate_series(1, %d) g", rows),
			} {
				if _, err := conn.Exec(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			slot := "rtr_run_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
			t.Cleanup(func() { dropSlot(dsn, slot) })
			return NewPG(PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "p", Slot: slot, Logger: quietLog()}), "pg", "public.t"
		}, upstreamOK: func(ps []string) bool { return slices.Equal(ps, []string{""}) }},
		{name: "mariadb", source: func(t *testing.T, rows int) (Source, string, string) {
			m, db, c := myDatabase(t)
			myQuery(t, c, "CREATE TABLE t (id int PRIMARY KEY, v varchar(10))")
			for i := 1; i <= rows; i++ {
				myQuery(t, c, fmt.Sprintf("INSERT INTO t VALUES (%d, 'x')", i))
			}
			return NewMySQL(MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{db + ".t"}, Logger: quietLog()}), "mysql", db + ".t"
		}, upstreamOK: func(ps []string) bool { return len(ps) > 0 && !slices.Contains(ps, "") }},
		{name: "kafka", source: func(t *testing.T, rows int) (Source, string, string) {
			k := testenv.SharedKafka(t)
			topic := fmt.Sprintf("run-%d", time.Now().UnixNano())
			createTopic(t, k.Brokers, topic, 2)
			cl := producer(t, k.Brokers)
			for i := 0; i < rows; i++ {
				produce(t, cl, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("x")})
			}
			return NewKafka(KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Logger: quietLog()}), KafkaSourceID("", topic), topic
		}, upstreamOK: func(ps []string) bool { return slices.Equal(ps, []string{"0", "1"}) }},
	}
}

func dropSlot(dsn, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for i := 0; i < 50; i++ {
		var n int
		if conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", slot).Scan(&n) == nil && n == 1 {
			conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runInBackground runs src into st until the test ends.
func runInBackground(t *testing.T, src Source, st *store.Store, opts Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, src, st, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingest: %v", err)
		}
	})
}

var sampleRE = regexp.MustCompile(`^(\w+)\{([^}]*)\} (\S+)$`)

// samples are the metrics text's samples of name, by their label text.
func samples(text, name string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if m := sampleRE.FindStringSubmatch(line); m != nil && m[1] == name {
			out[m[2]] = m[3]
		}
	}
	return out
}

// TestMetricsEverySource: an ingest of each source kind serves the same
// metrics, labelled by its source id: rows and commits per collection,
// the store's upper, the source's and the upstream's positions and the lag.
func TestMetricsEverySource(t *testing.T) {
	for _, sc := range everySource() {
		t.Run(sc.name, func(t *testing.T) {
			src, id, coll := sc.source(t, 5)
			m := NewMetrics()
			runInBackground(t, src, openStore(t), Options{Interval: 20 * time.Millisecond, CompactEvery: -1, Metrics: m, Logger: quietLog()})
			label := `source="` + id + `"`
			var text string
			deadline := time.Now().Add(30 * time.Second)
			for {
				text = m.text(t)
				rows := samples(text, "rtr_rows_ingested_total")[`collection="`+coll+`",`+label]
				var ups []string
				for l := range samples(text, "rtr_upstream_position") {
					if strings.Contains(l, label) {
						ups = append(ups, regexp.MustCompile(`partition="([^"]*)"`).FindStringSubmatch(l)[1])
					}
				}
				slices.Sort(ups)
				// The lag appears with the first binding after the upstream's
				// first probe: wait for every series, not only these two.
				if rows == "5" && sc.upstreamOK(ups) && len(samples(text, "rtr_lag_seconds")) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 30s: rows %q (want 5), upstream partitions %q:\n%s", rows, ups, text)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for _, name := range []string{"rtr_commits_total", "rtr_store_upper_ms", "rtr_source_position", "rtr_lag_positions", "rtr_lag_seconds"} {
				found := false
				for l := range samples(text, name) {
					found = found || strings.Contains(l, label)
				}
				if !found {
					t.Errorf("no %s{%s}:\n%s", name, label, text)
				}
			}
			// What the upstream retains: a PostgreSQL slot's WAL and
			// status (the test servers keep binlogs forever and Kafka
			// retention is not per consumer, so those have none).
			if sc.name == "pg" {
				waitMetric(t, m, "rtr_pg_slot_retained_wal_bytes", label)
				waitMetric(t, m, "rtr_pg_slot_wal_status", label+`,wal_status="reserved"} 1`)
			}
		})
	}
}

// waitMetric waits until a sample of metric name has a line containing
// want (its labels, and its value when want ends with it).
func waitMetric(t *testing.T, m *Metrics, name, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		text := m.text(t)
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s with %s after 30s:\n%s", name, want, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDefaultSlot(t *testing.T) {
	a, b := openStore(t), openStore(t)
	if a.ID() == b.ID() || len(a.ID()) != 16 {
		t.Fatalf("store ids %q and %q", a.ID(), b.ID())
	}
	slotRE := regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	for _, src := range []string{"pg", "PG-Prod.eu", strings.Repeat("x", 80)} {
		sa, sb := DefaultSlot(a, src), DefaultSlot(b, src)
		if sa == sb {
			t.Errorf("source %q: two stores share the default slot %s", src, sa)
		}
		if !slotRE.MatchString(sa) {
			t.Errorf("source %q: default slot %q is not a valid slot name", src, sa)
		}
		if sa != DefaultSlot(a, src) {
			t.Errorf("source %q: the default slot is not stable", src)
		}
	}
	if DefaultSlot(a, "pg") == DefaultSlot(a, "pg2") {
		t.Error("two sources of one store share the default slot")
	}
}

// text is the metrics as /metrics serves them.
func (m *Metrics) text(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
