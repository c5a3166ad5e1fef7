package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
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
	// Tables to ingest, db.table (required); db.* stands for every table
	// of db, those created (or renamed into it) while the ingest runs
	// included (MySQLPattern).
	Tables []string
	// Parallel snapshot connections.
	Parallel int
	// Source is the source id in the store (default "mysql").
	Source string
	// Resnapshot names collections to snapshot again in the stream, at
	// the first transaction it receives, without stopping the others (a
	// collection with a definite error gets its contents back): each is
	// reset there and given a fresh copy rewound to it (mySink).
	Resnapshot []string
	// HeartbeatPeriod of the binlog stream (default 1s).
	HeartbeatPeriod time.Duration
	// StateDir and StateCache place and bound the on-disk key states of
	// tables whose binlog events are not FULL (rowStates): default
	// STORE/state, and keystate.DefaultCacheBytes per table.
	StateDir   string
	StateCache int64
	// CopyMemory is how many bytes of a re-snapshot's copied rows are
	// held in memory before they are staged in the store as one more run
	// (copystage.go); 0 or less: reclock.DefaultMemoryBudget.
	CopyMemory int64
	// ProgressInterval is the least time between two progress lines of
	// the initial snapshot (default 5s).
	ProgressInterval time.Duration
	// SnapshotChunkRows is about how many rows a chunk of the resumable
	// initial snapshot has (snapshot.Resume.ChunkRows; 0: automatic).
	SnapshotChunkRows int64
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
	st      *store.Store // for kept copies (keptcopy.go)
	log     *slog.Logger
	nudge   chan struct{}
	schemas map[string]*myarrow.Table
	tables  []string
	domain  frontier.Domain
	// patterns are the databases of db.* entries of --tables.
	patterns []string
	// skip is, per collection ahead of the stream's start (Resume), the
	// source frontier below which its updates are durable already.
	skip map[string]frontier.Frontier
	// Key states (replicate.KeyState) of the collections whose binlog
	// events were found not FULL (needState: the stream asked for one,
	// which the next Resume rebuilds from the store, for the rest of the
	// run), until the stream takes them; errored are the collections
	// with a definite error.
	needState map[string]bool
	states    map[string]*replicate.KeyState
	keys      rowStates // on disk behind them
	errored   map[string]bool
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
	return &MySQL{cfg: cfg, log: log, nudge: make(chan struct{}, 1), needState: map[string]bool{}, keys: rowStates{dir: cfg.StateDir, cache: cfg.StateCache}}
}

// Open implements Source.
func (m *MySQL) Open(ctx context.Context, st *store.Store) ([]Timeline, error) {
	m.st = st
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
	m.domain = srv.Domain()
	tl := Timeline{ID: cfg.Source, Kind: kind, Domain: srv.Domain(), Upstream: map[string]string{"dsn": srv.Upstream.Recorded()}}
	m.patterns = nil
	var names [][2]string
	for _, name := range cfg.Tables {
		if db, ok := MySQLPattern(name); ok {
			m.patterns = append(m.patterns, db)
			tabs, err := listTables(srv, db)
			if err != nil {
				return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
			}
			names = append(names, tabs...)
			continue
		}
		db, tn, err := myarrow.ParseName(name)
		if err != nil {
			return nil, fmt.Errorf("ingest %s: %w", cfg.Source, err)
		}
		names = append(names, [2]string{db, tn})
	}
	for _, n := range names {
		db, tn := n[0], n[1]
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
	cfg := snapshot.MySQLConfig{
		Upstream: m.cfg.Upstream, Tables: collections, Start: start, Parallel: m.cfg.Parallel, Source: m.cfg.Source, Logger: m.log,
	}
	// The copy is staged in the store chunk by chunk and resumed from the
	// chunks an earlier attempt finished (snapstage.go).
	schemas := map[string]*arrow.Schema{}
	for _, c := range collections {
		if t := m.schemas[c]; t != nil {
			schemas[c] = t.DataSchema(m.domain, m.cfg.Source)
		}
	}
	sg, resume := newSnapStager(ctx, m.st, m.cfg.Source, sink, schemas, m.cfg.ProgressInterval, m.log)
	if sg != nil {
		defer sg.release()
		resume.ChunkRows = m.cfg.SnapshotChunkRows
		cfg.Resume, sink = resume, sg
	}
	res, err := snapshot.MySQL(ctx, cfg, sink)
	// The earlier chunks' changes since cannot be rewound (a change that
	// is not FULL, a DDL in between) or are no longer in the binlog: start
	// anew, at a position of this attempt.
	if err = sg.anew(err, func(err error) bool {
		return errors.Is(err, snapshot.ErrRewind) || errors.Is(err, replicate.ErrPurged)
	}); err != nil {
		return err
	}
	m.log.Info("snapshot rewound", "source", m.cfg.Source, "rows", res.Rows(), "rewound", res.Rewound(), "start", res.StartPos, "snapshot", res.SnapshotPos)
	return nil
}

// snapshotCommitted implements snapshotCommitter.
func (m *MySQL) snapshotCommitted(string) error { return removeStagedSnapshot(m.st, m.cfg.Source) }

// Stream implements Source. The binlog's position is acknowledged to no
// one: the server keeps binlogs by its own retention. Collections named
// by --resnapshot, and those whose columns upstream differ from the
// store's (altered while the ingest was stopped), are re-snapshotted at
// the stream's first transaction (mySink).
func (m *MySQL) Stream(ctx context.Context, r StreamRequest) error {
	id := m.cfg.Source
	sink := &mySink{Sink: r.Sink, m: m, ctx: ctx, skip: m.skip, waiting: map[string]string{}, resnapped: map[string]bool{}, add: r.Add}
	defer sink.close()
	start := r.Start[id]
	// Kept copies of re-snapshots below the start are never asked for again.
	if err := sweepKept(m.st, id, func(at string) bool {
		i := strings.LastIndexByte(at, ':')
		if i < 0 {
			return true
		}
		pos, err := strconv.ParseUint(at[i+1:], 10, 64)
		return err != nil || start.Beyond(frontier.Time{Partition: at[:i], Pos: pos})
	}); err != nil {
		return err
	}
	for _, c := range m.cfg.Resnapshot {
		if db, tn, err := myarrow.ParseName(c); err == nil {
			c = myarrow.CollectionName(db, tn)
		}
		switch {
		case m.schemas[c] == nil:
			return hint.Wrap(fmt.Errorf("ingest %s: --resnapshot %s: this run does not ingest it", id, c), "name a collection of the run (see rtrctl status)")
		case start.IsEmpty():
			m.log.Info("re-snapshot: the collection was just snapshotted", "source", id, "collection", c)
			continue
		}
		sink.waiting[c] = "--resnapshot"
	}
	m.cfg.Resnapshot = nil // once per run, not once per attempt
	// A table whose columns upstream differ from the store's changed
	// while nobody followed it: the binlog from the start holds its rows
	// in the store's columns up to the ALTER (which re-snapshots it), so
	// the stream starts with the table as the store's columns describe
	// it; if they cannot describe it, it is re-snapshotted at the start.
	known := maps.Clone(m.schemas)
	for _, c := range m.tables {
		if _, ok := sink.waiting[c]; ok || r.Schema == nil {
			continue
		}
		exp := r.Schema(c)
		if exp == nil {
			continue
		}
		cur := m.schemas[c]
		if d := schemaChange(exp.Fields(), cur.Fields()); d != "" {
			old, err := myarrow.TableFromFields(cur.Schema, cur.Name, exp.Fields(), cur)
			if err == nil {
				m.log.Info("the columns changed while the ingest was stopped; following the binlog in the store's columns up to the ALTER", "source", id, "collection", c, "change", d)
				known[c] = old
				continue
			}
			m.log.Info("the columns changed while the ingest was stopped; re-snapshotting", "source", id, "collection", c, "change", d, "why", err)
			sink.waiting[c] = "columns changed while not followed: " + d
		}
	}
	// A key state is the collection where the stream starts, in the
	// columns it has there (the collection may be ahead, past an ALTER).
	for c, st := range m.states {
		known[c] = st.MySQLTable()
	}
	expect := func(c string) *arrow.Schema {
		if _, ok := sink.waiting[c]; ok || r.Schema == nil || sink.resnapped[c] || m.states[c] != nil {
			return nil // re-snapshotted: no data in the store's columns; or known from its state
		}
		return r.Schema(c)
	}
	err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{
		Upstream: m.cfg.Upstream, Tables: m.tables, Known: known, Expect: expect, StartFrontier: start, Source: id,
		HeartbeatPeriod: m.cfg.HeartbeatPeriod, Nudge: m.nudge, Logger: m.log, OnSession: m.cfg.OnSession, RetryFor: r.RetryFor,
		Limit: sink.limit, KeyState: m.keyState, States: m.states,
	}, sink)
	if ne, ok := errors.AsType[*myNeedStateError](err); ok {
		// Resume again, with this collection's rows read from the store.
		m.needState[ne.collection] = true
		return retry.Soon(err, 0)
	}
	return err
}

// myNeedStateError: an event of a collection without a key state was not
// FULL.
type myNeedStateError struct{ collection string }

func (e *myNeedStateError) Error() string {
	return fmt.Sprintf("a change of %s in the binlog does not carry every column (binlog_row_image MINIMAL or NOBLOB), and its rows by key were not read from the store: resuming again to read them", e.collection)
}

// keyState is the stream's replicate.MySQLConfig.KeyState, for a
// collection that started without a state (MySQLConfig.States has those
// Resume rebuilt): a resume to rebuild one.
func (m *MySQL) keyState(t *myarrow.Table) (*replicate.KeyState, error) {
	name := t.QualifiedName()
	if m.errored[name] || m.needState[name] || !slices.Contains(m.tables, name) {
		return nil, nil // asked already (or no shard): the stream stops the collection
	}
	return nil, &myNeedStateError{collection: name}
}

// schemaChange says how the columns got differ from want: names, types
// and the MySQL column types in the fields' metadata.
func schemaChange(want, got []arrow.Field) string {
	if d := arrowutil.FieldsChange(want, got); d != "" {
		return d
	}
	for i, f := range want {
		a, _ := f.Metadata.GetValue(myarrow.MetaType)
		b, _ := got[i].Metadata.GetValue(myarrow.MetaType)
		if a != b {
			return fmt.Sprintf("column %s is %s, was %s", f.Name, b, a)
		}
	}
	return ""
}

// Resume implements Resumer: a collection committed beyond the common
// start (a crash between two collections' commits) replays nothing, so
// that a re-snapshot it went through (not in the binlog) is not replayed
// as plain changes: its updates below its own durable frontier are
// dropped.
func (m *MySQL) Resume(ctx context.Context, r Resume) error {
	m.skip = map[string]frontier.Frontier{}
	for name, sh := range r.Shards {
		if err := sh.Refresh(ctx); err != nil {
			return fmt.Errorf("resume %s: %w", name, err)
		}
		if u := sh.Upper(); u > r.Durable {
			m.skip[name] = durableFrontier(r.Bindings, u, m.domain)
		}
	}
	// The key state of every collection whose binlog events were found
	// not FULL: the collection as of where the stream starts again, in
	// the columns the stream decodes it with from there.
	m.states, m.errored = map[string]*replicate.KeyState{}, r.Errored
	m.keys.close()
	for _, name := range slices.Sorted(maps.Keys(m.needState)) {
		sh, cur := r.Shards[name], m.schemas[name]
		if sh == nil || cur == nil || r.Errored[name] || len(cur.PrimaryKey) == 0 {
			continue // the stream stops it
		}
		t := cur
		if sc := sh.SchemaAt(max(r.Durable, 1) - 1); sc != nil && schemaChange(sc.Fields(), cur.Fields()) != "" {
			old, err := myarrow.TableFromFields(cur.Schema, cur.Name, sc.Fields(), cur)
			if err != nil {
				continue // re-snapshotted at the start: the stream stops it
			}
			t = old
		}
		st, err := replicate.NewMySQLKeyState(t)
		if err != nil {
			return fmt.Errorf("rebuild key states: %w", err)
		}
		var key []string
		for _, i := range t.PrimaryKey {
			key = append(key, t.Columns[i].Name)
		}
		if err := m.keys.build(ctx, m.log, m.st, r.Timeline, name, sh, r.Durable, st, "key", strings.Join(key, ",")); err != nil {
			return hint.Wrap(fmt.Errorf("rebuild key states: %s as of %d: %w", name, max(r.Durable, 1)-1, err),
				fmt.Sprintf("the rows of %s by primary key (its binlog events are not FULL) are read from the store; set binlog_row_image = FULL, or snapshot it again in a new store", name))
		}
		m.states[name] = st
	}
	return nil
}

// Nudge implements Nudger: check the server's GTID position at once.
func (m *MySQL) Nudge(string) {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Close implements Source.
func (m *MySQL) Close() error {
	m.keys.close()
	return nil
}

// MySQLPattern reads a --tables entry db.* (db unquoted or in
// backticks): every table of db. ok is false for a plain db.table (a
// table named * is `*`).
func MySQLPattern(s string) (db string, ok bool) {
	s = strings.TrimSpace(s)
	rest, found := strings.CutSuffix(s, "*")
	if !found {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	rest, found = strings.CutSuffix(rest, ".")
	if !found {
		return "", false
	}
	db, _, err := myarrow.ParseName(rest + ".t")
	if err != nil {
		return "", false
	}
	return db, true
}

// listTables lists the base tables of db, exactly named.
func listTables(srv *replicate.Server, db string) ([][2]string, error) {
	r, err := srv.Conn.Execute(`SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND CAST(TABLE_SCHEMA AS BINARY) = CAST(? AS BINARY)
		AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY TABLE_NAME`, db, db)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", myarrow.QuoteIdent(db), err)
	}
	var out [][2]string
	for i := range r.RowNumber() {
		n, _ := r.GetString(i, 0)
		out = append(out, [2]string{db, n})
	}
	return out, nil
}
