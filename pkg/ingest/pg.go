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
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
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
	// Resnapshot names collections to snapshot again where the stream
	// resumes, without stopping the others (a collection with a definite
	// error gets its contents back): each is reset there and given a
	// fresh copy rewound to that position (pgSink).
	Resnapshot []string
	// ProgressInterval is the least time between two progress lines of
	// the initial snapshot (default 5s).
	ProgressInterval time.Duration
	// SnapshotChunkPages is about how many heap pages a chunk of the
	// resumable initial snapshot has (snapshot.Resume.ChunkPages; 0:
	// automatic).
	SnapshotChunkPages int64
	// StateDir and StateCache place and bound the on-disk key states of
	// tables whose replica identity is not FULL (rowStates): default
	// STORE/state, and keystate.DefaultCacheBytes per table.
	StateDir   string
	StateCache int64
	// CopyMemory is how many bytes of a re-snapshot's copied rows are
	// held in memory before they are staged in the store as one more run
	// (copystage.go); 0 or less: reclock.DefaultMemoryBudget.
	CopyMemory int64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// PG is the PostgreSQL source: a definite snapshot (snapshot.PG), then
// the publication's changes from the slot (replicate.StreamPG).
type PG struct {
	cfg   PGConfig
	st    *store.Store // Open's (kept copies: keptcopy.go)
	log   *slog.Logger
	nudge chan struct{}
	// pollNow asks the stream's sink to read the publication's tables at
	// its next progress (a recency waiter nudged it).
	pollNow atomic.Bool
	// tables are the collections this run ingests: the slot also streams
	// the publication's other tables, which a --tables subset drops.
	tables map[string]bool
	tabs   map[string]*pgarrow.Table // by collection, as Open read them

	// Key states of the collections whose replica identity is not FULL
	// (replicate.KeyState), rebuilt from the store by Resume.
	states  map[string]*replicate.KeyState
	keys    rowStates // on disk behind them
	errored map[string]bool
	// later are the states to build when the stream describes their
	// tables (streamCtx is the stream's context).
	later     map[string]laterState
	streamCtx context.Context
	// needState are collections that a stream found not FULL while they
	// had no key state (the identity changed after Resume): the next
	// Resume builds theirs whatever the catalog says.
	needState map[string]bool
	// skip is, per collection ahead of the stream's start (Resume), the
	// source time below which its updates are durable already.
	skip map[string]frontier.LSN

	// Connections opened early and handed on, so that start-up pays for
	// as few connections (each several round trips) as it can: catalog is
	// Open's, used by the snapshot and then by the stream; repl is the
	// replication connection that created the slot, for the stream; poll
	// is the publication poller's, opened in the background at Open.
	catalog *pgx.Conn
	repl    *pgconn.PgConn
	poll    *upstream.Dial
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
	return &PG{cfg: cfg, log: log, nudge: make(chan struct{}, 1), needState: map[string]bool{}, keys: rowStates{dir: cfg.StateDir, cache: cfg.StateCache}}
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
	p.st = st
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
	p.closeConns()
	p.poll = cfg.Upstream.ConnectLater(ctx)
	conn, err := p.catalogUpstream().Connect(ctx)
	if err != nil {
		p.closeConns() // the driver closes a source that opened
		return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	p.catalog = conn
	tabs, err := resolveTables(ctx, conn, cfg.Publication, cfg.Tables)
	if err != nil {
		p.closeConns()
		return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
	}
	tl := Timeline{ID: cfg.Source, Kind: "pg", Domain: frontier.DomainLSN,
		Upstream: map[string]string{"dsn": cfg.Upstream.Recorded(), "publication": cfg.Publication, "slot": cfg.Slot}}
	p.tables = map[string]bool{}
	p.tabs = map[string]*pgarrow.Table{}
	p.states, p.errored = nil, nil
	for _, t := range tabs {
		tl.Collections = append(tl.Collections, Collection{Name: t.QualifiedName(), Schema: arrow.NewSchema(t.Fields(), nil)})
		p.tables[t.QualifiedName()] = true
		p.tabs[t.QualifiedName()] = t
	}
	tl.Prober = probe.NewPostgres(cfg.Upstream)
	return []Timeline{tl}, nil
}

// Snapshot implements Snapshotter: PostgreSQL's time 0 is the slot's
// start, whatever start says (the slot is acknowledged only past what
// every collection has made durable, so it is still there). Tables whose
// replica identity is DEFAULT or USING INDEX are accepted (Resume and
// Stream keep their rows by key); while no binding holds the slot's
// start (start is empty), a snapshot of such tables creates the slot
// afresh with the copy's snapshot, so that no change to an older row
// needs rewinding.
func (p *PG) Snapshot(ctx context.Context, _ string, collections []string, start frontier.Frontier, sink pipe.Sink) error {
	conn := p.catalog
	if conn != nil && conn.IsClosed() {
		conn = nil
	}
	cfg := snapshot.Config{
		Upstream: p.cfg.Upstream, Publication: p.cfg.Publication, Slot: p.cfg.Slot, Tables: collections, Parallel: p.cfg.Parallel, Logger: p.log,
		KeyedIdentity: true, Recreate: start.IsEmpty(), Conn: conn, KeepReplication: true,
	}
	// The copy is staged in the store chunk by chunk and resumed from the
	// chunks an earlier attempt finished (snapstage.go).
	schemas := map[string]*arrow.Schema{}
	for _, c := range collections {
		if t := p.tabs[c]; t != nil {
			schemas[c] = dataSchemaLSN(t.Fields())
		}
	}
	sg, resume := newSnapStager(ctx, p.st, p.cfg.Source, sink, schemas, p.cfg.ProgressInterval, p.log)
	if sg != nil {
		defer sg.release()
		resume.ChunkPages = p.cfg.SnapshotChunkPages
		cfg.Resume, sink = resume, sg
	}
	res, err := snapshot.PG(ctx, cfg, sink)
	// Resumed chunks of a table that is not FULL could not be rewound (a
	// change to a row older than the slot): start anew.
	if err = sg.anew(err, func(err error) bool { return errors.Is(err, snapshot.ErrRewind) }); err != nil {
		return err
	}
	if res.Replication != nil {
		if p.repl != nil {
			p.repl.Close(context.Background())
		}
		p.repl = res.Replication
	}
	p.log.Info("snapshot rewound", "source", p.cfg.Source, "rows", res.Rows(), "rewound", res.Rewound(), "slot_lsn", res.SlotLSN, "snapshot_lsn", res.SnapshotLSN)
	return nil
}

// snapshotCommitted implements snapshotCommitter: the snapshot's staged
// files and record are no longer needed.
func (p *PG) snapshotCommitted(string) error { return removeStagedSnapshot(p.st, p.cfg.Source) }

// Stream implements Source.
func (p *PG) Stream(ctx context.Context, r StreamRequest) error {
	id := p.cfg.Source
	startLSN := frontier.LSN(r.Start[id].Pos())
	if startLSN <= 1 {
		// Only snapshots are durable: they hold the tables as of the slot's
		// start, so replication starts where the slot does.
		startLSN = 0
	}
	// Kept copies of re-snapshots below the start are never asked for again.
	if err := sweepKept(p.st, id, func(at string) bool { l, err := frontier.ParseLSN(at); return err != nil || l < startLSN }); err != nil {
		return err
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	sink := &pgSink{Sink: r.Sink, p: p, ctx: ctx, keep: p.tables, skip: p.skip, add: r.Add, subset: len(p.cfg.Tables) > 0, removed: map[string]bool{},
		poller: newPubPoller(pollCtx, p)}
	defer sink.close()
	for _, c := range p.cfg.Resnapshot {
		if n, err := pgarrow.ParseTableName(c); err == nil {
			if n.Schema == "" {
				n.Schema = "public"
			}
			c = n.String()
		}
		t := p.tabs[c]
		switch {
		case t == nil:
			return hint.Wrap(fmt.Errorf("ingest %s: --resnapshot %s: this run does not ingest it", id, c), "name a collection of the run (see rtrctl status)")
		case t.ReplicaIdentity != "full":
			return hint.Wrap(fmt.Errorf("ingest %s: --resnapshot %s: its replica identity is %s; a re-snapshot in the stream needs FULL", id, c, strings.ToUpper(t.ReplicaIdentity)),
				"snapshot it into a new store, or ALTER TABLE "+t.QuotedName()+" REPLICA IDENTITY FULL first")
		case startLSN == 0:
			p.log.Info("re-snapshot: the collection was just snapshotted", "source", id, "collection", c)
			continue
		}
		sink.start(c, max(startLSN, p.skip[c]), t, "--resnapshot")
	}
	p.cfg.Resnapshot = nil // once per run, not once per attempt
	p.streamCtx = ctx
	catalog, repl := p.catalog, p.repl // StreamPG's from now on
	p.catalog, p.repl = nil, nil
	if repl != nil && startLSN != 0 {
		// It created the slot for a stream from the slot's start.
		repl.Close(context.Background())
		repl = nil
	}
	err := replicate.StreamPG(ctx, replicate.PGConfig{
		Upstream: p.cfg.Upstream, Publication: p.cfg.Publication, Slot: p.cfg.Slot,
		Catalog: catalog, Replication: repl,
		StartLSN: startLSN, Nudge: p.nudge, RetryFor: r.RetryFor, Expect: r.Schema,
		Ack: func(ctx context.Context) (frontier.LSN, error) {
			f, err := r.Ack(ctx, id)
			return frontier.LSN(f.Pos()), err
		},
		KeyState: p.keyState, Limit: sink.limit,
		Logger: p.log,
	}, sink)
	if ne, ok := errors.AsType[*needStateError](err); ok {
		// Resume again, with this collection's rows read from the store.
		p.needState[ne.collection] = true
		return retry.Soon(err, 0)
	}
	return err
}

// needStateError: a collection without a key state turned out not to be
// FULL in the stream.
type needStateError struct {
	collection string
	identity   string
}

func (e *needStateError) Error() string {
	return fmt.Sprintf("the replica identity of %s is %s in the stream, and its rows by key were not read from the store (it was FULL): resuming again to read them",
		e.collection, strings.ToUpper(e.identity))
}

// keyState is the stream's replicate.PGConfig.KeyState.
func (p *PG) keyState(t *pgarrow.Table) (*replicate.KeyState, error) {
	name := t.QualifiedName()
	if l, ok := p.later[name]; ok {
		// In the columns the stream has the table in.
		delete(p.later, name)
		st, err := l.build(p.streamCtx, p, t)
		if err != nil {
			return nil, err
		}
		p.states[name] = st
	}
	if st := p.states[name]; st != nil || !p.tables[name] || p.errored[name] || t.ReplicaIdentity == "full" {
		return st, nil
	}
	if p.needState[name] {
		return nil, nil // asked already: the stream stops the collection
	}
	return nil, &needStateError{collection: name, identity: t.ReplicaIdentity}
}

// Resume implements Resumer: the key state of every collection whose
// table's replica identity is not FULL (the primary key's or the USING
// INDEX index's columns) is the collection as of the last time every
// collection is durable at (the stream starts again from there), folded
// a batch at a time.
func (p *PG) Resume(ctx context.Context, r Resume) error {
	p.states, p.errored, p.later = map[string]*replicate.KeyState{}, r.Errored, map[string]laterState{}
	p.keys.close()
	// A collection committed beyond the common start (a crash between
	// two collections' commits) replays nothing: its updates below its
	// own durable frontier are dropped rather than verified, so that a
	// re-snapshot it went through (not in the WAL) is not replayed as
	// plain changes.
	p.skip = map[string]frontier.LSN{}
	for name, sh := range r.Shards {
		if err := sh.Refresh(ctx); err != nil {
			return fmt.Errorf("resume %s: %w", name, err)
		}
		if u := sh.Upper(); u > r.Durable {
			p.skip[name] = frontier.LSN(durableFrontier(r.Bindings, u, frontier.DomainLSN).Pos())
		}
	}
	keyed := len(p.needState) > 0
	for _, t := range p.tabs {
		keyed = keyed || t.ReplicaIdentity != "full"
	}
	if !keyed {
		return nil // FULL only (as Open read them): no state
	}
	conn := p.catalog
	if conn == nil || conn.IsClosed() {
		c, err := p.cfg.Upstream.Connect(ctx)
		if err != nil {
			return fmt.Errorf("rebuild key states: %w", err)
		}
		defer c.Close(context.Background())
		conn = c
	}
	ids, err := replicate.LoadIdentities(ctx, conn, p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("rebuild key states: %w", err)
	}
	byName := map[string]replicate.Identity{}
	for _, id := range ids {
		byName[id.QualifiedName()] = id
	}
	names := slices.Sorted(maps.Keys(r.Shards))
	for _, name := range names {
		sh, t := r.Shards[name], p.tabs[name]
		id, ok := byName[name]
		full := !ok || id.Kind == "full"
		if r.Errored[name] || t == nil || full && !p.needState[name] {
			continue
		}
		key := id.Key
		if len(key) == 0 {
			if !full {
				continue // no key: the stream stops it
			}
			for _, c := range t.Columns {
				key = append(key, c.Name)
			}
		}
		l := laterState{timeline: r.Timeline, name: name, sh: sh, durable: r.Durable, kind: id.Kind, key: key}
		if sc := sh.SchemaAt(max(r.Durable, 1) - 1); sc != nil && arrowutil.FieldsChange(sc.Fields(), t.Fields()) != "" {
			// The store has it in other columns there (killed while it
			// was re-snapshotted): built when the stream describes it.
			p.later[name] = l
			continue
		}
		st, err := l.build(ctx, p, t)
		if err != nil {
			return err
		}
		p.states[name] = st
	}
	return nil
}

// laterState is what rebuilding a key state from the store takes.
type laterState struct {
	timeline, name string
	sh             *store.Shard
	durable        uint64
	kind           string
	key            []string
}

// build reads the state of l's collection as of l.durable-1, its table
// described as t.
func (l laterState) build(ctx context.Context, p *PG, t *pgarrow.Table) (*replicate.KeyState, error) {
	st, err := replicate.NewKeyState(t, l.key)
	if err != nil {
		return nil, fmt.Errorf("rebuild key states: %w", err)
	}
	if err := p.keys.build(ctx, p.log, p.st, l.timeline, l.name, l.sh, l.durable, st, "identity", l.kind, "key", strings.Join(l.key, ",")); err != nil {
		return nil, hint.Wrap(fmt.Errorf("rebuild key states: %s as of %d: %w", l.name, max(l.durable, 1)-1, err),
			fmt.Sprintf("the key state of %s (replica identity %s) is read from the store; if the table's columns changed while the ingest was not running, snapshot it again in a new store", l.name, strings.ToUpper(l.kind)))
	}
	return st, nil
}

// Nudge implements Nudger: a standby status update with reply requested.
func (p *PG) Nudge(string) {
	p.pollNow.Store(true)
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// Close implements Source.
func (p *PG) Close() error {
	p.closeConns()
	p.keys.close()
	return nil
}

// closeConns closes the connections opened early that nothing took.
func (p *PG) closeConns() {
	if p.catalog != nil {
		p.catalog.Close(context.Background())
		p.catalog = nil
	}
	if p.repl != nil {
		p.repl.Close(context.Background())
		p.repl = nil
	}
	if p.poll != nil {
		p.poll.Close()
		p.poll = nil
	}
}

// catalogUpstream is the upstream of the catalog connection: an ordinary
// connection with the session settings the stream's decoders rely on
// (replicate.PGConfig.Catalog).
func (p *PG) catalogUpstream() *upstream.Postgres {
	return p.cfg.Upstream.With(func(c *pgx.ConnConfig) {
		pgarrow.ConfigureSession(c)
		delete(c.RuntimeParams, "replication")
	})
}

// resolveTables loads the tables to ingest: those named (as
// pgarrow.ParseTableName reads them), or every table of the publication,
// by its exact schema and name. A table named twice is loaded once.
func resolveTables(ctx context.Context, conn *pgx.Conn, publication string, tables []string) ([]*pgarrow.Table, error) {
	if len(tables) == 0 {
		tabs, err := pgarrow.LoadPublicationTables(ctx, conn, publication)
		if err != nil {
			return nil, err
		}
		if len(tabs) == 0 {
			return nil, hint.Wrap(fmt.Errorf("publication %q has no tables, or does not exist", publication),
				fmt.Sprintf("create it with: CREATE PUBLICATION %s FOR TABLE schema.table, ...", pgarrow.QuoteIdent(publication)))
		}
		return tabs, nil
	}
	var names []pgarrow.TableName
	for _, t := range tables {
		n, err := pgarrow.ParseTableName(t)
		if err != nil {
			return nil, fmt.Errorf("resolve tables: %w", err)
		}
		names = append(names, n)
	}
	loaded, err := pgarrow.LoadTables(ctx, conn, names)
	if err != nil {
		return nil, err
	}
	var out []*pgarrow.Table
	seen := map[uint32]bool{}
	for _, tab := range loaded {
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
