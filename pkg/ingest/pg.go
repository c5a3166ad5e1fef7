// Package ingest runs a whole pipeline in one process: snapshot when
// needed, replicate, reclock and commit to the store, as a long-running
// daemon that survives crashes and restarts without losing or duplicating
// a change.
//
// Resumption works from the store alone: the durable upper of every
// collection of the source, mapped through the remap shard's bindings to a
// source frontier, says where replication resumes; collections whose
// snapshot is not yet durable get it produced again (a definite snapshot
// produces identical time-0 contents, so the collections that did commit
// theirs are not doubled); appends below a collection's upper are replays,
// verified and skipped by the store. The replication slot is acknowledged
// only up to what every collection has durably committed.
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
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// PGConfig configures an ingest of PostgreSQL tables.
type PGConfig struct {
	DSN         string
	Publication string
	// Slot is the permanent logical replication slot; default "rtr_" +
	// Source.
	Slot string
	// Tables to ingest (schema.table); empty means every table of the
	// publication.
	Tables []string
	// Parallel snapshot connections.
	Parallel int
	// Store and Source: where to write, and the source id in the store
	// (default "pg").
	Store  *store.Store
	Source string
	// Interval is the least time between bindings (reclock.DefaultInterval).
	Interval time.Duration
	// CompactEvery runs store compaction this often (0: 1 minute; negative:
	// never).
	CompactEvery time.Duration
	// Metrics, when set, is updated as the ingest runs.
	Metrics *Metrics
	// RecencyAddr, when set, also serves wait-recent over HTTP on this
	// loopback address (besides the unix socket in the store).
	RecencyAddr string
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// AfterCommit is a test hook called after each collection commit.
	AfterCommit func(collection string, upper uint64)
}

// RunPG ingests until ctx ends (then it returns nil after committing what
// is complete) or a definite error stops it.
func RunPG(ctx context.Context, cfg PGConfig) error {
	if cfg.Source == "" {
		cfg.Source = "pg"
	}
	if cfg.Slot == "" {
		cfg.Slot = "rtr_" + cfg.Source
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CompactEvery == 0 {
		cfg.CompactEvery = time.Minute
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

	pgcfg, err := probe.ParsePostgresDSN(cfg.DSN)
	if err != nil {
		return err
	}
	tabs, err := resolveTables(ctx, pgcfg, cfg.Publication, cfg.Tables)
	if err != nil {
		return fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	var tables []string
	for _, t := range tabs {
		tables = append(tables, t.QualifiedName())
		// Every collection gets its shard (and schema) up front, so an
		// empty table still has an upper that follows the source.
		if _, err := st.Shard(ctx, t.QualifiedName()); errors.Is(err, store.ErrNotFound) {
			h := pipe.Header{Kind: pipe.KindData, Collection: t.QualifiedName(), Source: cfg.Source, Domain: frontier.DomainSystem}
			md := h.Metadata()
			if _, err := st.CreateShard(ctx, t.QualifiedName(), arrow.NewSchema(t.Fields(), &md)); err != nil {
				return fmt.Errorf("ingest %s: %w", cfg.Source, err)
			}
		} else if err != nil {
			return fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
	}
	info := store.SourceInfo{
		Source: cfg.Source, Kind: "pg", DSN: probe.MaskedPostgres(pgcfg), Publication: cfg.Publication,
		Slot: cfg.Slot, Collections: tables, PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339),
		Socket: recency.SocketPath(st.Dir(), cfg.Source),
	}
	if err := st.WriteSourceInfo(info); err != nil {
		return err
	}

	w := newStoreWriter(st, cfg.Source, tables)
	defer w.Close()
	w.afterCommit = cfg.AfterCommit
	if cfg.Metrics != nil {
		w.onCommit = cfg.Metrics.committed
	}
	rc, err := reclock.New(ctx, st, cfg.Source, frontier.DomainLSN, w, reclock.Options{Interval: cfg.Interval})
	if err != nil {
		return err
	}
	defer rc.Close()
	var mu sync.Mutex // guards rc

	// Real-time recency: serve wait-recent on info.Socket (pkg/recency,
	// docs/real-time-recency.md); nudge asks the stream for progress.
	nudge := make(chan struct{}, 1)
	if p, err := probe.New(probe.Config{Source: "pg", DSN: cfg.DSN}); err == nil {
		if rsrv := serveRecency(ctx, st, cfg.Source, info.Socket, p, &mu, rc, w, nudge, log); rsrv != nil {
			defer rsrv.Close()
			if cfg.RecencyAddr != "" {
				addr, err := rsrv.ListenHTTP(cfg.RecencyAddr, false)
				if err != nil {
					return fmt.Errorf("ingest %s: %w", cfg.Source, err)
				}
				info.HTTP = addr
				if err := st.WriteSourceInfo(info); err != nil {
					return err
				}
				log.Info("recency endpoint", "http", "http://"+addr+recency.HTTPPath)
			}
		}
		if cfg.Metrics != nil {
			go cfg.Metrics.probeLag(ctx, p, 2*time.Second)
		}
	}

	// 1. Snapshots of the collections whose time-0 contents are not durable.
	need, err := needSnapshot(ctx, st, rc.Bindings(), tables)
	if err != nil {
		return err
	}
	if len(need) > 0 {
		log.Info("snapshot", "tables", need)
		sink := &reclockSink{ctx: ctx, rc: rc, mu: &mu}
		res, err := snapshot.PG(ctx, snapshot.Config{
			DSN: cfg.DSN, Publication: cfg.Publication, Slot: cfg.Slot, Tables: need, Parallel: cfg.Parallel, Logger: log,
		}, sink)
		if err != nil {
			return fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
		if err := bindSnapshot(ctx, &mu, rc, w); err != nil {
			return err
		}
		log.Info("snapshot done", "rows", res.Rows(), "rewound", res.Rewound(), "slot_lsn", res.SlotLSN, "snapshot_lsn", res.SnapshotLSN)
	}

	// 2. Where replication resumes: the frontier below which every
	// collection is durable.
	durable, err := w.Durable(ctx)
	if err != nil {
		return err
	}
	start := durableFrontier(rc.Bindings(), durable, frontier.DomainLSN)
	startLSN := frontier.LSN(start.Pos())
	if startLSN <= 1 {
		// Only snapshots are durable: they hold the tables as of the slot's
		// start, so replication starts where the slot does.
		startLSN = 0
	}
	log.Info("replicate", "from", startLSN, "durable_upper", durable)

	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	bg := startBackground(streamCtx, stopStream, cfg.Interval, cfg.CompactEvery, func(ctx context.Context) error {
		return tickIngest(ctx, &mu, rc, w)
	}, st, log)

	sink := replSink{&reclockSink{ctx: streamCtx, rc: rc, mu: &mu, metrics: cfg.Metrics}}
	err = replicate.StreamPG(streamCtx, replicate.PGConfig{
		DSN: cfg.DSN, Publication: cfg.Publication, Slot: cfg.Slot,
		StartLSN: startLSN, Nudge: nudge,
		Ack: func(ctx context.Context) (frontier.LSN, error) {
			u, err := w.Durable(ctx)
			if err != nil {
				return 0, err
			}
			mu.Lock()
			f := durableFrontier(rc.Bindings(), u, frontier.DomainLSN)
			mu.Unlock()
			return frontier.LSN(f.Pos()), nil
		},
		Logger: log,
	}, sink)
	stopStream()
	if terr := bg.wait(); terr != nil {
		return terr
	}
	if ctx.Err() != nil {
		// Interrupted: bind and commit what the source completed.
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

// resolveTables loads the tables to ingest.
func resolveTables(ctx context.Context, cfg *pgx.ConnConfig, publication string, tables []string) ([]*pgarrow.Table, error) {
	conn, err := probe.ConnectPostgres(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if len(tables) == 0 {
		rows, err := conn.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1", publication)
		if err != nil {
			return nil, fmt.Errorf("list tables of publication %s: %w", publication, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("list tables of publication %s: %w", publication, err)
		}
		if len(names) == 0 {
			return nil, hint.Wrap(fmt.Errorf("publication %q has no tables, or does not exist", publication),
				fmt.Sprintf("create it with: CREATE PUBLICATION %s FOR TABLE schema.table, ...", publication))
		}
		tables = names
	}
	var out []*pgarrow.Table
	for _, t := range tables {
		tab, err := pgarrow.LoadTable(ctx, conn, t)
		if err != nil {
			return nil, err
		}
		out = append(out, tab)
	}
	return out, nil
}

// needSnapshot returns the tables whose time-0 contents are not durable:
// no shard, or a shard whose upper is not past the first binding (the one
// that binds source time 0).
func needSnapshot(ctx context.Context, st *store.Store, bs []frontier.Binding, tables []string) ([]string, error) {
	if len(bs) == 0 {
		return tables, nil
	}
	t0 := bs[0].Time
	var need []string
	for _, t := range tables {
		sh, err := st.Shard(ctx, t)
		if errors.Is(err, store.ErrNotFound) {
			need = append(need, t)
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := sh.Refresh(ctx); err != nil {
			return nil, err
		}
		if sh.Upper() <= t0 {
			need = append(need, t)
		}
	}
	return need, nil
}

// reclockSink feeds snapshot and replication output into the reclocker.
type reclockSink struct {
	ctx     context.Context
	rc      *reclock.Reclocker
	mu      *sync.Mutex
	metrics *Metrics
}

// Data implements snapshot.Sink.
func (s *reclockSink) Data(collection string, rec arrow.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.Data(s.ctx, collection, rec)
}

// Progress implements snapshot.Sink.
func (s *reclockSink) Progress(collection string, upper frontier.Frontier) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.SourceProgress(s.ctx, upper)
}

// Relation implements replicate.Sink.
func (s *reclockSink) Relation(t *pgarrow.Table) error { return nil }

// Change implements replicate.Sink.
func (s *reclockSink) Change(collection string, rec arrow.Record) error {
	return s.Data(collection, rec)
}

// Error implements replicate.Sink.
func (s *reclockSink) Error(collection string, at frontier.LSN, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.Error(s.ctx, collection, frontier.Time{Pos: uint64(at)}, msg)
}

// replSink is reclockSink as a replicate.Sink.
type replSink struct{ *reclockSink }

// Progress implements replicate.Sink.
func (s replSink) Progress(upper frontier.LSN) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metrics != nil {
		s.metrics.sourceProgress(upper)
	}
	return s.rc.SourceProgress(s.ctx, frontier.Single(frontier.DomainLSN, uint64(upper)))
}
