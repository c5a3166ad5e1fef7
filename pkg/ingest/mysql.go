package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// MySQLConfig configures an ingest of MySQL or MariaDB tables.
type MySQLConfig struct {
	// Upstream is the server (upstream.ParseMySQL).
	Upstream *upstream.MySQL
	// Tables to ingest, db.table (required).
	Tables []string
	// Parallel snapshot connections.
	Parallel int
	// Source is the source id in the store (default "mysql").
	Source string
	// HeartbeatPeriod of the binlog stream (default 1s).
	HeartbeatPeriod time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// OnSession is a test hook: the replication connection's id.
	OnSession func(connID uint32)
}

// MySQL is the MySQL/MariaDB source: a definite snapshot at a GTID
// position (snapshot.MySQL), then the binlog (replicate.StreamMySQL). Time
// 0 is defined by the first binding's frontier (the snapshot's GTID
// position), so a re-snapshot of a collection after a restart is rewound
// to it and lands identically.
type MySQL struct {
	cfg     MySQLConfig
	log     *slog.Logger
	nudge   chan struct{}
	schemas map[string]*myarrow.Table
	tables  []string
}

// NewMySQL returns the MySQL/MariaDB source of cfg.
func NewMySQL(cfg MySQLConfig) *MySQL {
	if cfg.Source == "" {
		cfg.Source = "mysql"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &MySQL{cfg: cfg, log: log, nudge: make(chan struct{}, 1)}
}

// Open implements Source.
func (m *MySQL) Open(ctx context.Context, _ *store.Store) ([]Timeline, error) {
	cfg := m.cfg
	if len(cfg.Tables) == 0 {
		return nil, hint.Wrap(fmt.Errorf("ingest %s: no tables given", cfg.Source), "name them with --tables db.t1,db.t2")
	}
	srv, err := replicate.OpenServer(ctx, cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	defer srv.Conn.Close()
	kind := "mysql"
	if srv.MariaDB {
		kind = "mariadb"
	}
	m.schemas, m.tables = map[string]*myarrow.Table{}, nil
	tl := Timeline{ID: cfg.Source, Kind: kind, Domain: srv.Domain(), Upstream: map[string]string{"dsn": srv.Upstream.Recorded()}}
	for _, name := range cfg.Tables {
		db, tn, err := myarrow.ParseName(name)
		if err != nil {
			return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
		t, err := myarrow.LoadTable(ctx, srv.Conn, db, tn)
		if err != nil {
			return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
		if m.schemas[t.QualifiedName()] != nil {
			continue
		}
		m.schemas[t.QualifiedName()] = t
		m.tables = append(m.tables, t.QualifiedName())
		tl.Collections = append(tl.Collections, Collection{Name: t.QualifiedName(), Schema: arrow.NewSchema(t.Fields(), nil)})
	}
	tl.Prober = probe.NewMySQL(cfg.Upstream)
	return []Timeline{tl}, nil
}

// Snapshot implements Snapshotter.
func (m *MySQL) Snapshot(ctx context.Context, _ string, collections []string, start frontier.Frontier, sink pipe.Sink) error {
	if start.IsEmpty() {
		start = frontier.Frontier{} // the snapshot picks time 0's position
	}
	res, err := snapshot.MySQL(ctx, snapshot.MySQLConfig{
		Upstream: m.cfg.Upstream, Tables: collections, Start: start, Parallel: m.cfg.Parallel, Source: m.cfg.Source, Logger: m.log,
	}, sink)
	if err != nil {
		return err
	}
	m.log.Info("snapshot rewound", "source", m.cfg.Source, "rows", res.Rows(), "rewound", res.Rewound(), "start", res.StartPos, "snapshot", res.SnapshotPos)
	return nil
}

// Stream implements Source. The binlog's position is acknowledged to no
// one: the server keeps binlogs by its own retention.
func (m *MySQL) Stream(ctx context.Context, r StreamRequest) error {
	return replicate.StreamMySQL(ctx, replicate.MySQLConfig{
		Upstream: m.cfg.Upstream, Tables: m.tables, Known: m.schemas, Expect: r.Schema, StartFrontier: r.Start[m.cfg.Source], Source: m.cfg.Source,
		HeartbeatPeriod: m.cfg.HeartbeatPeriod, Nudge: m.nudge, Logger: m.log, OnSession: m.cfg.OnSession, RetryFor: r.RetryFor,
	}, r.Sink)
}

// Nudge implements Nudger: check the server's GTID position at once.
func (m *MySQL) Nudge(string) {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Close implements Source.
func (m *MySQL) Close() error { return nil }
