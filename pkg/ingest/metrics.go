package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
)

// Metrics are an ingest's Prometheus metrics.
type Metrics struct {
	reg          *prometheus.Registry
	rows         *prometheus.CounterVec
	commits      *prometheus.CounterVec
	upper        *prometheus.GaugeVec
	sourceLSN    prometheus.Gauge
	upstreamLSN  prometheus.Gauge
	lagBytes     prometheus.Gauge
	lagSeconds   prometheus.Gauge
	lastError    *prometheus.GaugeVec
	lastProgress time.Time
	progress     atomic.Uint64 // last source progress (LSN)
}

// NewMetrics registers the metrics of one source.
func NewMetrics(source string) *Metrics {
	labels := prometheus.Labels{"source": source}
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		rows:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_rows_ingested_total", Help: "Rows (updates) committed to the store.", ConstLabels: labels}, []string{"collection"}),
		commits:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rtr_commits_total", Help: "Commits (compare-and-append) per collection.", ConstLabels: labels}, []string{"collection"}),
		upper:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_store_upper_ms", Help: "Durable upper of each collection, system milliseconds.", ConstLabels: labels}, []string{"collection"}),
		sourceLSN:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtr_source_frontier_lsn", Help: "Replication progress (upper LSN) received from the source.", ConstLabels: labels}),
		upstreamLSN: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtr_upstream_frontier_lsn", Help: "Upstream visible frontier (pg_current_wal_insert_lsn).", ConstLabels: labels}),
		lagBytes:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtr_lag_wal_bytes", Help: "Upstream frontier minus replication progress, in WAL bytes.", ConstLabels: labels}),
		lagSeconds:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "rtr_lag_seconds", Help: "Seconds since replication progress last reached the upstream frontier.", ConstLabels: labels}),
		lastError:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rtr_last_error_timestamp_seconds", Help: "Unix time of the last error, by kind.", ConstLabels: labels}, []string{"kind"}),
	}
	m.reg.MustRegister(m.rows, m.commits, m.upper, m.sourceLSN, m.upstreamLSN, m.lagBytes, m.lagSeconds, m.lastError)
	return m
}

func (m *Metrics) committed(collection string, rows int64, upper uint64) {
	m.rows.WithLabelValues(collection).Add(float64(rows))
	m.commits.WithLabelValues(collection).Inc()
	m.upper.WithLabelValues(collection).Set(float64(upper))
}

func (m *Metrics) sourceProgress(lsn frontier.LSN) {
	m.sourceLSN.Set(float64(lsn))
	m.progress.Store(uint64(lsn))
}

// probeLag probes the upstream every interval until ctx ends and updates
// the lag metrics.
func (m *Metrics) probeLag(ctx context.Context, p interface {
	Probe(context.Context) (probe.Result, error)
}, interval time.Duration) {
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
					m.Error("probe")
				}
				continue
			}
			m.Upstream(frontier.LSN(res.Frontier.Pos()), frontier.LSN(m.progress.Load()))
		}
	}
}

// Upstream records a probe of the upstream frontier and updates the lag.
func (m *Metrics) Upstream(upstream frontier.LSN, progress frontier.LSN) {
	m.upstreamLSN.Set(float64(upstream))
	if progress >= upstream {
		m.lagBytes.Set(0)
		m.lastProgress = time.Now()
		m.lagSeconds.Set(0)
		return
	}
	m.lagBytes.Set(float64(upstream - progress))
	if !m.lastProgress.IsZero() {
		m.lagSeconds.Set(time.Since(m.lastProgress).Seconds())
	}
}

// Error records an error of a kind ("replication", "commit", ...).
func (m *Metrics) Error(kind string) {
	m.lastError.WithLabelValues(kind).Set(float64(time.Now().Unix()))
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
