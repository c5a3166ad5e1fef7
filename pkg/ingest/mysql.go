package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// MySQLConfig configures an ingest of MySQL or MariaDB tables.
type MySQLConfig struct {
	DSN string
	// Tables to ingest, db.table (required).
	Tables []string
	// Parallel snapshot connections.
	Parallel int
	// Store and Source: where to write, and the source id in the store
	// (default "mysql").
	Store  *store.Store
	Source string
	// Interval is the least time between bindings (reclock.DefaultInterval).
	Interval time.Duration
	// CompactEvery runs store compaction this often (0: 1 minute; negative:
	// never).
	CompactEvery time.Duration
	// HeartbeatPeriod of the binlog stream (default 1s).
	HeartbeatPeriod time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// AfterCommit is a test hook called after each collection commit.
	AfterCommit func(collection string, upper uint64)
	// OnSession is a test hook: the replication connection's id.
	OnSession func(connID uint32)
}

// RunMySQL ingests MySQL/MariaDB tables until ctx ends (then it returns nil
// after committing what is complete) or a definite error stops it. It is
// RunPG's pipeline over the binlog: time 0 is defined by the first
// binding's frontier (the snapshot's GTID position), so a re-snapshot of a
// collection after a restart is rewound to it and lands identically.
func RunMySQL(ctx context.Context, cfg MySQLConfig) error {
	if cfg.Source == "" {
		cfg.Source = "mysql"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CompactEvery == 0 {
		cfg.CompactEvery = time.Minute
	}
	if len(cfg.Tables) == 0 {
		return hint.Wrap(fmt.Errorf("ingest %s: no tables given", cfg.Source), "name them with --tables db.t1,db.t2")
	}
	log := cfg.Logger.With("source", cfg.Source)
	st := cfg.Store

	lock, err := st.LockSource(cfg.Source)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("ingest %s: another rtrctl ingest is writing this source to %s: %w; stop it first, or ingest into another store or --source id", cfg.Source, st.Dir(), err)
		}
		return fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	defer lock.Unlock()

	srv, err := replicate.ConnectMySQL(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	domain := srv.Domain()
	kind := "mysql"
	if srv.MariaDB {
		kind = "mariadb"
	}
	schemas := map[string]*myarrow.Table{}
	var tables []string
	for _, name := range cfg.Tables {
		db, tn, err := myarrow.ParseName(name)
		if err == nil {
			var t *myarrow.Table
			if t, err = myarrow.LoadTable(ctx, srv.Conn, db, tn); err == nil {
				if schemas[t.QualifiedName()] == nil {
					schemas[t.QualifiedName()] = t
					tables = append(tables, t.QualifiedName())
				}
			}
		}
		if err != nil {
			srv.Conn.Close()
			return fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
	}
	srv.Conn.Close()
	for _, name := range tables {
		t := schemas[name]
		if _, err := st.Shard(ctx, name); errors.Is(err, store.ErrNotFound) {
			h := pipe.Header{Kind: pipe.KindData, Collection: name, Source: cfg.Source, Domain: frontier.DomainSystem}
			md := h.Metadata()
			if _, err := st.CreateShard(ctx, name, arrow.NewSchema(t.Fields(), &md)); err != nil {
				return fmt.Errorf("ingest %s: %w", cfg.Source, err)
			}
		} else if err != nil {
			return fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
	}
	info := store.SourceInfo{
		Source: cfg.Source, Kind: kind, DSN: srv.DSN.String(), Collections: tables,
		PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339),
		Socket: recency.SocketPath(st.Dir(), cfg.Source),
	}
	if err := st.WriteSourceInfo(info); err != nil {
		return err
	}

	w := newStoreWriter(st, cfg.Source, tables)
	defer w.Close()
	w.afterCommit = cfg.AfterCommit
	rc, err := reclock.New(ctx, st, cfg.Source, domain, w, reclock.Options{Interval: cfg.Interval})
	if err != nil {
		return err
	}
	defer rc.Close()
	var mu sync.Mutex // guards rc

	nudge := make(chan struct{}, 1)
	if p, err := probe.New(probe.Config{Source: "mysql", DSN: cfg.DSN}); err == nil {
		if rsrv := serveRecency(ctx, st, cfg.Source, info.Socket, p, &mu, rc, w, nudge, log); rsrv != nil {
			defer rsrv.Close()
		}
	}

	// 1. Snapshots of the collections whose time-0 contents are not
	// durable, rewound to the first binding's frontier when there is one.
	need, err := needSnapshot(ctx, st, rc.Bindings(), tables)
	if err != nil {
		return err
	}
	if len(need) > 0 {
		var start frontier.Frontier
		if bs := rc.Bindings(); len(bs) > 0 {
			start = bs[0].Frontier
		}
		log.Info("snapshot", "tables", need, "start", start)
		sink := &reclockSink{ctx: ctx, rc: rc, mu: &mu}
		res, err := snapshot.MySQL(ctx, snapshot.MySQLConfig{
			DSN: cfg.DSN, Tables: need, Start: start, Parallel: cfg.Parallel, Source: cfg.Source, Logger: log,
		}, sink)
		if err != nil {
			return fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
		if err := bindSnapshot(ctx, &mu, rc, w); err != nil {
			return err
		}
		log.Info("snapshot done", "rows", res.Rows(), "rewound", res.Rewound(), "start", res.StartPos, "snapshot", res.SnapshotPos)
	}

	// 2. Where replication resumes: the frontier below which every
	// collection is durable.
	durable, err := w.Durable(ctx)
	if err != nil {
		return err
	}
	start := durableFrontier(rc.Bindings(), durable, domain)
	if len(rc.Bindings()) == 0 {
		return fmt.Errorf("ingest %s: no binding after the snapshot", cfg.Source)
	}
	log.Info("replicate", "from", start, "durable_upper", durable)

	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	bg := startBackground(streamCtx, stopStream, cfg.Interval, cfg.CompactEvery, func(ctx context.Context) error {
		return tickIngest(ctx, &mu, rc, w)
	}, st, log)

	sink := &myReclockSink{&reclockSink{ctx: streamCtx, rc: rc, mu: &mu}}
	err = replicate.StreamMySQL(streamCtx, replicate.MySQLConfig{
		DSN: cfg.DSN, Tables: tables, Known: schemas, StartFrontier: start, Source: cfg.Source,
		HeartbeatPeriod: cfg.HeartbeatPeriod, Nudge: nudge, Logger: log, OnSession: cfg.OnSession,
	}, sink)
	stopStream()
	if terr := bg.wait(); terr != nil {
		return terr
	}
	if ctx.Err() != nil {
		if err := finishIngest(&mu, rc, w); err != nil {
			return err
		}
		log.Info("stopped", "durable_upper", w.DurableUpper())
		return nil
	}
	if err != nil {
		return fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	return nil
}

// myReclockSink is reclockSink as a replicate.MySQLSink.
type myReclockSink struct{ *reclockSink }

// Relation implements replicate.MySQLSink.
func (s *myReclockSink) Relation(*myarrow.Table) error { return nil }

// Progress implements replicate.MySQLSink.
func (s *myReclockSink) Progress(upper frontier.Frontier) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.SourceProgress(s.ctx, upper)
}

// Error implements replicate.MySQLSink.
func (s *myReclockSink) Error(collection string, at frontier.Time, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.Error(s.ctx, collection, at, msg)
}
