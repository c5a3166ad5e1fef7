package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
)

// Metrics are an ingest's Prometheus metrics: the same names for every
// source kind, labelled by source id. Positions are in the source's own
// units: WAL bytes (PostgreSQL), transactions (MySQL/MariaDB GTIDs),
// records (Kafka offsets).
type Metrics struct {
	reg        *prometheus.Registry
	rows       *prometheus.CounterVec
	commits    *prometheus.CounterVec
	upper      *prometheus.GaugeVec
	position   *prometheus.GaugeVec
	upstream   *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	lagSeconds *prometheus.GaugeVec
	lastError  *prometheus.GaugeVec
	retries    *prometheus.CounterVec
	// Kafka records that do not decode, by topic and policy.
	kafkaDecodeErrors *prometheus.CounterVec
	// What the upstream retains for the source (probe.Retention).
	slotRetained  *prometheus.GaugeVec
	slotSafe      *prometheus.GaugeVec
	slotStatus    *prometheus.GaugeVec
	binlogKeep    *prometheus.GaugeVec
	binlogHeadway *prometheus.GaugeVec

	mu      sync.Mutex
	sources map[string]*sourceMetrics
}

// NewMetrics makes the metrics of one ingest process.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg:           prometheus.NewRegistry(),
		rows:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_rows_ingested_total", Help: "Rows (updates) committed to the store."}, []string{"source", "collection"}),
		commits:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_commits_total", Help: "Commits (compare-and-append) per collection."}, []string{"source", "collection"}),
		upper:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_store_upper_ms", Help: "Durable upper of each collection, system milliseconds."}, []string{"source", "collection"}),
		position:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_source_position", Help: "Source progress (an upper) per partition, in the source's units (LSN bytes, GTID sequence, offset)."}, []string{"source", "partition"}),
		upstream:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_upstream_position", Help: "Upstream visible frontier per partition, in the source's units."}, []string{"source", "partition"}),
		lag:           prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_lag_positions", Help: "Upstream frontier minus source progress, summed over partitions (WAL bytes, transactions or records)."}, []string{"source"}),
		lagSeconds:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_lag_seconds", Help: "Seconds since source progress last reached the upstream frontier (since the ingest started, until it first does)."}, []string{"source"}),
		lastError:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_last_error_timestamp_seconds", Help: "Unix time of the last error, by kind."}, []string{"source", "kind"}),
		retries:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_upstream_retries_total", Help: "Attempts restarted after a transient upstream failure."}, []string{"source"}),
		slotRetained:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_pg_slot_retained_wal_bytes", Help: "WAL the replication slot holds back on the server: current WAL position minus the slot's restart_lsn."}, []string{"source", "slot"}),
		slotSafe:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_pg_slot_safe_wal_size_bytes", Help: "WAL that can still be written before the slot may be lost (safe_wal_size); absent when max_slot_wal_keep_size is unlimited."}, []string{"source", "slot"}),
		slotStatus:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_pg_slot_wal_status", Help: "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others."}, []string{"source", "slot", "wal_status"}),
		binlogKeep:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_binlog_retention_seconds", Help: "How long the MySQL/MariaDB server keeps a binary log after its last write; absent when binlogs never expire."}, []string{"source"}),
		binlogHeadway: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_binlog_headroom_seconds", Help: "Binlog retention minus rtr_lag_seconds: about how long the ingest may stay behind before the server may purge a binlog it still needs."}, []string{"source"}),
		kafkaDecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_kafka_decode_errors_total",
			Help: "Kafka records whose key or value does not decode, by topic and --on-decode-error policy (fail: the collection's definite error; skip: dropped; inline: kept with the error)."}, []string{"topic", "policy"}),
		sources: map[string]*sourceMetrics{},
	}
	m.reg.MustRegister(m.rows, m.commits, m.upper, m.position, m.upstream, m.lag, m.lagSeconds, m.lastError, m.retries,
		m.slotRetained, m.slotSafe, m.slotStatus, m.binlogKeep, m.binlogHeadway, m.kafkaDecodeErrors)
	return m
}

func (m *Metrics) kafkaDecodeError(topic, policy string) {
	m.kafkaDecodeErrors.WithLabelValues(topic, policy).Inc()
}

// MetricsUser is implemented by sources that update metrics of their own
// (Kafka's decode errors); Run hands them Options.Metrics.
type MetricsUser interface {
	UseMetrics(m *Metrics)
}

// sourceMetrics are the metrics of one source id.
type sourceMetrics struct {
	m  *Metrics
	id string

	mu       sync.Mutex
	progress frontier.Frontier
	// lastCaughtUp is when progress last reached the upstream frontier;
	// until it first does, the time the source's metrics began.
	lastCaughtUp time.Time
}

func (m *Metrics) source(id string) *sourceMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sources[id]
	if s == nil {
		s = &sourceMetrics{m: m, id: id, lastCaughtUp: time.Now()}
		m.sources[id] = s
	}
	return s
}

func (s *sourceMetrics) committed(collection string, rows int64, upper uint64) {
	s.m.rows.WithLabelValues(s.id, collection).Add(float64(rows))
	s.m.commits.WithLabelValues(s.id, collection).Inc()
	s.m.upper.WithLabelValues(s.id, collection).Set(float64(upper))
}

func (s *sourceMetrics) sourceProgress(f frontier.Frontier) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, err := frontier.Join(s.progress, f); err == nil || s.progress.Domain() == "" {
		if err != nil {
			j = f
		}
		s.progress = j
	}
	for _, p := range f.Partitions() {
		s.m.position.WithLabelValues(s.id, p).Set(float64(s.progress.Get(p)))
	}
}

// probeLag probes the upstream every interval until ctx ends and updates
// the lag metrics and, when p is a probe.Retainer, the retention metrics
// of the source whose upstream info describes.
func (s *sourceMetrics) probeLag(ctx context.Context, p probe.Prober, info map[string]string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			res, err := p.Probe(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.Error("probe")
				}
				continue
			}
			s.upstreamAt(res.Frontier, time.Now())
			if r, ok := p.(probe.Retainer); ok {
				if ret, err := r.Retention(ctx, info); err != nil {
					if ctx.Err() == nil {
						s.Error("retention")
					}
				} else {
					s.retention(ret)
				}
			}
		}
	}
}

// wal statuses of pg_replication_slots.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// retention records what the upstream retains for the source.
func (s *sourceMetrics) retention(r probe.Retention) {
	if r.Slot != "" {
		if r.RetainedBytes != nil {
			s.m.slotRetained.WithLabelValues(s.id, r.Slot).Set(float64(*r.RetainedBytes))
		}
		if r.SafeWALSize != nil {
			s.m.slotSafe.WithLabelValues(s.id, r.Slot).Set(float64(*r.SafeWALSize))
		} else {
			s.m.slotSafe.DeleteLabelValues(s.id, r.Slot)
		}
		for _, st := range walStatuses {
			v := 0.0
			if st == r.WALStatus {
				v = 1
			}
			s.m.slotStatus.WithLabelValues(s.id, r.Slot, st).Set(v)
		}
	}
	if r.BinlogRetentionSeconds == nil {
		s.m.binlogKeep.DeleteLabelValues(s.id)
		s.m.binlogHeadway.DeleteLabelValues(s.id)
		return
	}
	s.m.binlogKeep.WithLabelValues(s.id).Set(*r.BinlogRetentionSeconds)
	s.mu.Lock()
	behind := time.Since(s.lastCaughtUp).Seconds()
	s.mu.Unlock()
	s.m.binlogHeadway.WithLabelValues(s.id).Set(*r.BinlogRetentionSeconds - behind)
}

// upstreamAt records a probe of the upstream frontier and updates the lag.
func (s *sourceMetrics) upstreamAt(up frontier.Frontier, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range up.Partitions() {
		s.m.upstream.WithLabelValues(s.id, p).Set(float64(up.Get(p)))
	}
	lag, err := frontier.Lag(up, s.progress)
	if err != nil {
		// No progress yet: nothing of up is ingested.
		lag, _ = frontier.Lag(up, frontier.Empty(up.Domain()))
	}
	s.m.lag.WithLabelValues(s.id).Set(float64(lag))
	if lag == 0 {
		s.lastCaughtUp = now
		s.m.lagSeconds.WithLabelValues(s.id).Set(0)
	} else {
		s.m.lagSeconds.WithLabelValues(s.id).Set(now.Sub(s.lastCaughtUp).Seconds())
	}
}

// Error records an error of a kind ("probe", "definite", "retry", ...).
func (s *sourceMetrics) Error(kind string) {
	s.m.lastError.WithLabelValues(s.id, kind).Set(float64(time.Now().Unix()))
}

// retried counts an attempt restarted after a transient failure, for
// every source of the run.
func (m *Metrics) retried() {
	m.mu.Lock()
	srcs := make([]*sourceMetrics, 0, len(m.sources))
	for _, s := range m.sources {
		srcs = append(srcs, s)
	}
	m.mu.Unlock()
	for _, s := range srcs {
		m.retries.WithLabelValues(s.id).Inc()
		s.Error("retry")
	}
}

// Serve serves /metrics on addr until ctx ends. addr must be a loopback
// address unless allowRemote.
func (m *Metrics) Serve(ctx context.Context, addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("serve metrics: bad address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); !allowRemote && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("serve metrics: %s is not a loopback address; metrics listen on loopback unless --metrics-remote is given", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	slog.Info("metrics", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics: %w", err)
	}
	return nil
}
