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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// PGConfig configures an ingest of PostgreSQL tables.
type PGConfig struct {
	// Upstream is the database (upstream.ParsePostgres).
	Upstream    *upstream.Postgres
	Publication string
	// Slot is the permanent logical replication slot; default: the slot
	// the store recorded for Source, else DefaultSlot(Store, Source).
	Slot string
	// Tables to ingest, as pgarrow.ParseTableName reads them (orders,
	// public.orders, public."RelMix"); empty means every table of the
	// publication.
	Tables []string
	// Parallel snapshot connections.
	Parallel int
	// Source is the source id in the store (default "pg").
	Source string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// PG is the PostgreSQL source: a definite snapshot (snapshot.PG), then
// the publication's changes from the slot (replicate.StreamPG).
type PG struct {
	cfg   PGConfig
	log   *slog.Logger
	nudge chan struct{}
	// tables are the collections this run ingests: the slot also streams
	// the publication's other tables, which a --tables subset drops.
	tables map[string]bool
}

// NewPG returns the PostgreSQL source of cfg.
func NewPG(cfg PGConfig) *PG {
	if cfg.Source == "" {
		cfg.Source = "pg"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &PG{cfg: cfg, log: log, nudge: make(chan struct{}, 1)}
}

// DefaultSlot is the slot name of source in st when none is given: unique
// per store and source, so two stores never consume one slot:
// rtr_<source>_<store id>, with a hash of the source id in it when the id
// is not all lower-case letters, digits and _ or is long.
func DefaultSlot(st *store.Store, source string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(source) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name != source || len(name) > 30 {
		sum := sha256.Sum256([]byte(source))
		name = name[:min(len(name), 21)] + "_" + hex.EncodeToString(sum[:4])
	}
	return "rtr_" + name + "_" + st.ID()
}

// Open implements Source.
func (p *PG) Open(ctx context.Context, st *store.Store) ([]Timeline, error) {
	cfg := p.cfg
	if cfg.Slot == "" {
		if info, err := st.ReadSourceInfo(cfg.Source); err == nil && info.Upstream["slot"] != "" {
			cfg.Slot = info.Upstream["slot"]
		} else {
			cfg.Slot = DefaultSlot(st, cfg.Source)
		}
		p.cfg.Slot = cfg.Slot
	}
	if cfg.Publication == "" {
		return nil, hint.Wrap(fmt.Errorf("ingest %s: no publication given", cfg.Source), "pass --publication NAME (CREATE PUBLICATION rtr FOR TABLE ...)")
	}
	if cfg.Upstream == nil {
		return nil, fmt.Errorf("ingest %s: no upstream given", cfg.Source)
	}
	tabs, err := resolveTables(ctx, cfg.Upstream, cfg.Publication, cfg.Tables)
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	tl := Timeline{ID: cfg.Source, Kind: "pg", Domain: frontier.DomainLSN,
		Upstream: map[string]string{"dsn": cfg.Upstream.String(), "publication": cfg.Publication, "slot": cfg.Slot}}
	p.tables = map[string]bool{}
	for _, t := range tabs {
		tl.Collections = append(tl.Collections, Collection{Name: t.QualifiedName(), Schema: arrow.NewSchema(t.Fields(), nil)})
		p.tables[t.QualifiedName()] = true
	}
	tl.Prober = probe.NewPostgres(cfg.Upstream)
	return []Timeline{tl}, nil
}

// Snapshot implements Snapshotter: PostgreSQL's time 0 is the slot's
// start, whatever start says (the slot is acknowledged only past what
// every collection has made durable, so it is still there).
func (p *PG) Snapshot(ctx context.Context, _ string, collections []string, _ frontier.Frontier, sink pipe.Sink) error {
	res, err := snapshot.PG(ctx, snapshot.Config{
		Upstream: p.cfg.Upstream, Publication: p.cfg.Publication, Slot: p.cfg.Slot, Tables: collections, Parallel: p.cfg.Parallel, Logger: p.log,
	}, sink)
	if err != nil {
		return err
	}
	p.log.Info("snapshot rewound", "source", p.cfg.Source, "rows", res.Rows(), "rewound", res.Rewound(), "slot_lsn", res.SlotLSN, "snapshot_lsn", res.SnapshotLSN)
	return nil
}

// Stream implements Source.
func (p *PG) Stream(ctx context.Context, r StreamRequest) error {
	id := p.cfg.Source
	startLSN := frontier.LSN(r.Start[id].Pos())
	if startLSN <= 1 {
		// Only snapshots are durable: they hold the tables as of the slot's
		// start, so replication starts where the slot does.
		startLSN = 0
	}
	return replicate.StreamPG(ctx, replicate.PGConfig{
		Upstream: p.cfg.Upstream, Publication: p.cfg.Publication, Slot: p.cfg.Slot,
		StartLSN: startLSN, Nudge: p.nudge, RetryFor: r.RetryFor, Expect: r.Schema,
		Ack: func(ctx context.Context) (frontier.LSN, error) {
			f, err := r.Ack(ctx, id)
			return frontier.LSN(f.Pos()), err
		},
		Logger: p.log,
	}, onlySink{r.Sink, p.tables})
}

// onlySink passes on the data and errors of the collections in keep, and
// all progress.
type onlySink struct {
	pipe.Sink
	keep map[string]bool
}

func (s onlySink) Data(collection string, rec arrow.Record) error {
	if !s.keep[collection] {
		return nil
	}
	return s.Sink.Data(collection, rec)
}

func (s onlySink) Error(collection string, at frontier.Time, msg string) error {
	if !s.keep[collection] {
		return nil
	}
	return s.Sink.Error(collection, at, msg)
}

func (s onlySink) Reset(collection string, at frontier.Time, schema *arrow.Schema) error {
	if !s.keep[collection] {
		return nil
	}
	return s.Sink.Reset(collection, at, schema)
}

// Nudge implements Nudger: a standby status update with reply requested.
func (p *PG) Nudge(string) {
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// Close implements Source.
func (p *PG) Close() error { return nil }

// resolveTables loads the tables to ingest: those named (as
// pgarrow.ParseTableName reads them), or every table of the publication,
// by its exact schema and name. A table named twice is loaded once.
func resolveTables(ctx context.Context, up *upstream.Postgres, publication string, tables []string) ([]*pgarrow.Table, error) {
	conn, err := up.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var names []pgarrow.TableName
	if len(tables) == 0 {
		rows, err := conn.Query(ctx, "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2", publication)
		if err != nil {
			return nil, fmt.Errorf("list tables of publication %s: %w", publication, err)
		}
		names, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (n pgarrow.TableName, err error) {
			err = r.Scan(&n.Schema, &n.Name)
			return n, err
		})
		if err != nil {
			return nil, fmt.Errorf("list tables of publication %s: %w", publication, err)
		}
		if len(names) == 0 {
			return nil, hint.Wrap(fmt.Errorf("publication %q has no tables, or does not exist", publication),
				fmt.Sprintf("create it with: CREATE PUBLICATION %s FOR TABLE schema.table, ...", pgarrow.QuoteIdent(publication)))
		}
	}
	for _, t := range tables {
		n, err := pgarrow.ParseTableName(t)
		if err != nil {
			return nil, fmt.Errorf("resolve tables: %w", err)
		}
		names = append(names, n)
	}
	var out []*pgarrow.Table
	seen := map[uint32]bool{}
	for _, n := range names {
		tab, err := pgarrow.LoadTableByName(ctx, conn, n)
		if err != nil {
			return nil, err
		}
		if !seen[tab.OID] {
			seen[tab.OID] = true
			out = append(out, tab)
		}
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
