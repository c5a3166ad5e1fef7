package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// PGConfig configures StreamPG.
type PGConfig struct {
	// Upstream is the database (upstream.ParsePostgres). A
	// replication=database parameter in it is allowed but not needed.
	Upstream *upstream.Postgres
	// Publication and Slot name the publication and the logical
	// replication slot (plugin pgoutput) to read. Both must exist.
	Publication, Slot string
	// StartLSN is where to start; 0 means the slot's confirmed_flush_lsn.
	// It must not be below the slot's confirmed_flush_lsn (those changes
	// are gone).
	StartLSN frontier.LSN
	// StopAt, when not 0, ends the stream (StreamPG returns nil) once every
	// transaction with a commit LSN <= StopAt has been emitted: at the
	// first commit beyond it, or when progress passes it.
	StopAt frontier.LSN
	// NoAck never advances the slot.
	NoAck bool
	// Ack, when set (and NoAck is not), returns the LSN up to which the
	// caller has made the stream durable (an upper: everything below it is
	// stored). The slot is confirmed up to min(Ack(), last progress).
	// With Ack nil the slot is never advanced either.
	Ack func(ctx context.Context) (frontier.LSN, error)
	// StatusInterval is how often a standby status update (with reply
	// requested) goes to the server; 0 means 1s. The server answers each
	// with a keepalive, which moves progress while nothing is published.
	StatusInterval time.Duration
	// FlushRows and FlushBytes bound the rows (default 8192) and text bytes
	// (default 16 MiB) held before a data record is handed to the sink;
	// a transaction is never held whole.
	FlushRows, FlushBytes int
	// MaxBackoff caps the wait between reconnects; 0 means 10s.
	MaxBackoff time.Duration
	// RetryFor bounds how long a run of transient failures (the server
	// restarting, a failover, the network) may last before StreamPG gives
	// up with a *retry.GaveUpError; 0 means forever. Transient failures are
	// retried at any point, the first connection included; permanent ones
	// (authentication, a missing slot or publication...) fail at once.
	RetryFor time.Duration
	// Nudge, when set, makes the stream send a standby status update with
	// reply requested as soon as a value arrives, so the server reports
	// its progress at once (real-time recency waiters use it).
	Nudge <-chan struct{}
	// Expect, when set, gives the columns a collection is known with (its
	// schema in the store), or nil: a relation whose first RELATION
	// message of this stream has other column names or types changed
	// while nobody followed it, and gets a definite error at once instead
	// of data the collection cannot take.
	Expect func(collection string) *arrow.Schema
	// Limit, when set, is asked with the stream's position each time it
	// could report progress (after a commit, on a keepalive) and returns
	// how far progress may go now: the stream reports the smaller, and
	// asks again later (the ingest holds progress while it re-snapshots a
	// collection, and before a change of the publication it has not read
	// yet). It is called from the goroutine that calls the sink, which it
	// may call too.
	Limit func(position frontier.LSN) (frontier.LSN, error)
	// KeyState, when set, lets tables whose replica identity is DEFAULT
	// (the primary key) or USING INDEX be streamed: it is asked for the
	// key state of every relation the stream introduces (t.ReplicaIdentity
	// says which identity it has now) and returns the state the stream
	// keeps its rows in, or nil for none (then a table that is not FULL
	// stops with a definite error); an error ends the stream. A state
	// must hold the collection as of the stream's start and is changed by
	// the stream only. Without KeyState every table must be FULL.
	KeyState func(t *pgarrow.Table) (*KeyState, error)
	// Catalog and Replication, when set, are connections to the upstream
	// that the first session uses instead of opening its own (a caller
	// that has them open already saves their round trips): Catalog an
	// ordinary one with pgarrow.SessionParams, for catalog reads,
	// Replication a replication=database one, for START_REPLICATION.
	// StreamPG owns them: it closes them when done with them.
	Catalog     *pgx.Conn
	Replication *pgconn.PgConn
	// Mem allocates Arrow buffers; nil means memory.DefaultAllocator.
	Mem memory.Allocator
	// Logger logs reconnects; nil means slog.Default().
	Logger *slog.Logger
}

var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// StreamPG streams the changes of cfg.Publication from cfg.Slot to sink.
// It returns nil once cfg.StopAt is reached, ctx's error when ctx ends,
// and otherwise a definite error (with a hint where one helps). Transient
// failures (internal/retry.Transient), the first connection's included,
// are retried with exponential backoff from the last position, without
// losing or repeating changes, for at most cfg.RetryFor in a row.
func StreamPG(ctx context.Context, cfg PGConfig, sink pipe.Sink) error {
	if cfg.Publication == "" {
		return hint.Wrap(errors.New("replicate postgres: no publication given"), "name one with --publication; create it with: CREATE PUBLICATION rtr FOR TABLE public.orders")
	}
	if !slotNameRE.MatchString(cfg.Slot) {
		return hint.Wrap(fmt.Errorf("replicate postgres: bad slot name %q", cfg.Slot), "slot names are 1-63 characters of a-z, 0-9 and _")
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Second
	}
	if cfg.FlushRows <= 0 {
		cfg.FlushRows = 8192
	}
	if cfg.FlushBytes <= 0 {
		cfg.FlushBytes = 16 << 20
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Mem == nil {
		cfg.Mem = memory.DefaultAllocator
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Upstream == nil {
		return errors.New("replicate postgres: no upstream given")
	}
	// The catalog connection is an ordinary one with the session settings
	// the decoders rely on.
	pg := cfg.Upstream.With(func(c *pgx.ConnConfig) {
		pgarrow.ConfigureSession(c)
		delete(c.RuntimeParams, "replication")
	})
	s := &pgStreamer{cfg: cfg, pg: pg, repl: cfg.Replication}
	if cfg.Catalog != nil {
		s.catalog, s.types = cfg.Catalog, pgarrow.NewTypeResolver(cfg.Catalog)
	}
	s.dec = newDecoder(sink, cfg.Mem, s.resolve, cfg.KeyState, cfg.FlushRows, cfg.FlushBytes, cfg.StopAt)
	s.dec.expect, s.dec.limit = cfg.Expect, cfg.Limit
	defer s.dec.release()
	defer s.closeCatalog()
	defer func() {
		if s.repl != nil {
			s.repl.Close(context.Background())
		}
	}()
	return s.run(ctx)
}

// pgStreamer runs one StreamPG call: connections and retries around a
// decoder.
type pgStreamer struct {
	cfg PGConfig
	pg  *upstream.Postgres // the catalog connection's
	dec *decoder

	catalog *pgx.Conn      // for catalog lookups
	repl    *pgconn.PgConn // PGConfig.Replication, until a session takes it
	// activePID is the walsender that the check found reading the slot.
	activePID *int32
	types     *pgarrow.TypeResolver
	confirm0  frontier.LSN // the slot's confirmed_flush_lsn when first read
	walEnd    frontier.LSN // highest WAL end seen from the server
	acked     frontier.LSN // last flush position sent
}

// healthySession is how long a replication session must have lasted for
// its loss to start the reconnect backoff afresh.
const healthySession = 30 * time.Second

// slotInUseGraceAtStart is how long StreamPG waits for a slot held by
// another walsender before the first session: a previous reader that just
// exited may still hold it for a moment.
const slotInUseGraceAtStart = 5 * time.Second

func (s *pgStreamer) run(ctx context.Context) error {
	started := false
	var inUseSince time.Time
	policy := retry.Policy{
		For: s.cfg.RetryFor, Max: s.cfg.MaxBackoff, Healthy: healthySession,
		Logger: s.cfg.Logger.With("slot", s.cfg.Slot), What: "replicate postgres", Secrets: []string{s.pg.Password()},
	}
	err := retry.Do(ctx, policy, func(ctx context.Context) error {
		err := s.session(ctx, !started, &started)
		if err == nil || s.dec.done {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Whatever comes next starts from the last position again.
		s.dec.interrupted()
		s.closeCatalog()
		if _, ok := errors.AsType[*sinkError](err); ok {
			return retry.Permanent(err)
		}
		// A slot still held by a walsender that is going away (ours, after
		// a reconnect; the previous reader's, right after it exited) shows
		// as in use for a moment; give it a while before calling it
		// definite: 30 s once streaming, 5 s at start.
		if !errors.Is(err, errSlotInUse) {
			inUseSince = time.Time{}
			return err // retry.Transient decides
		}
		grace := 30 * time.Second
		if !started {
			grace = slotInUseGraceAtStart
		}
		if inUseSince.IsZero() {
			inUseSince = time.Now()
		} else if time.Since(inUseSince) > grace {
			return retry.Permanent(err)
		}
		return retry.Soon(err, time.Second)
	})
	if s.dec.done {
		return nil
	}
	if se, ok := errors.AsType[*sinkError](err); ok {
		return se // as the sink returned it, without the retry marker
	}
	return err
}

func (s *pgStreamer) closeCatalog() {
	if s.catalog != nil {
		s.catalog.Close(context.Background())
		s.catalog, s.types = nil, nil
	}
}

// session connects, checks, starts replication and streams until an error.
// Errors keep their causes so that internal/retry can classify them.
//
// The replication connection is opened and replication started while the
// catalog is read and checked, in parallel: a failed check closes the
// stream before anything of it is used (no standby status is sent, so the
// slot is untouched); START_REPLICATION from 0 starts where the check
// finds the slot (its confirmed_flush_lsn, which nothing else moves: the
// slot is not active).
func (s *pgStreamer) session(ctx context.Context, first bool, started *bool) error {
	start := s.cfg.StartLSN
	if !first {
		start = max(s.dec.upper, s.dec.resume)
	}
	type replStart struct {
		conn    *pgconn.PgConn
		err     error // connecting
		errRepl error // START_REPLICATION
	}
	rs := make(chan replStart, 1)
	repl := s.repl
	s.repl = nil
	rc := s.pg.ConnConfig().Config.Copy()
	rc.RuntimeParams["replication"] = "database"
	pub := "'" + strings.ReplaceAll(s.cfg.Publication, "'", "''") + "'"
	go func(start frontier.LSN) {
		conn := repl
		if conn == nil {
			c, err := pgconn.ConnectConfig(ctx, rc)
			if err != nil {
				err = fmt.Errorf("replicate postgres: connect to %s for replication: %w: %w", s.pg, dsn.ScrubError(err, s.pg.Password()), errConnect)
				if h := upstream.PrivilegeHint(err, rc.User, rc.Database); h != "" {
					err = hint.Wrap(err, h)
				}
				rs <- replStart{err: err}
				return
			}
			conn = c
		}
		err := pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names " + pub},
		})
		if err != nil {
			conn.Close(context.Background())
			rs <- replStart{errRepl: err}
			return
		}
		rs <- replStart{conn: conn}
	}(start)
	got := false
	defer func() {
		if !got { // a failed check: the stream is closed once it is open
			go func() {
				if r := <-rs; r.conn != nil {
					r.conn.Close(context.Background())
				}
			}()
		}
	}()
	if s.catalog == nil {
		c, err := s.pg.Connect(ctx)
		if err != nil {
			return fmt.Errorf("replicate postgres: %w", err)
		}
		s.catalog, s.types = c, pgarrow.NewTypeResolver(c)
	}
	if err := s.check(ctx, first, &start); err != nil {
		return err
	}
	r := <-rs
	got = true
	switch {
	case r.err != nil:
		return r.err
	case r.errRepl != nil && s.activePID != nil:
		return dsn.WithCause(s.inUse(s.activePID), r.errRepl) // the check saw who
	case r.errRepl != nil:
		return s.startError(r.errRepl)
	}
	conn := r.conn
	defer conn.Close(context.Background())
	if pid := s.activePID; pid != nil && uint32(*pid) != conn.PID() {
		return s.inUse(pid)
	}
	if first {
		if err := s.dec.progress(start); err != nil {
			return err
		}
		if s.dec.done {
			return nil
		}
	}
	*started = true
	retry.Progress(ctx)
	return s.stream(ctx, conn)
}

var errConnect = errors.New("cannot connect")

// Errors of the slot. They carry hints.
var (
	errSlotMissing     = errors.New("replication slot does not exist")
	errSlotInUse       = errors.New("replication slot is in use")
	errSlotInvalidated = errors.New("replication slot has been invalidated")
	errPublication     = errors.New("publication does not exist")
	errReplicaIdentity = errors.New("replica identity is not FULL")
	errSlotAhead       = errors.New("replication slot is past the start position")
)

// check verifies the server, publication and slot before replication
// starts; *start becomes the effective start position.
func (s *pgStreamer) check(ctx context.Context, first bool, start *frontier.LSN) error {
	// One round trip: the server, the publication, the tables' identities
	// (the first time) and the slot.
	b := &pgx.Batch{}
	var level string
	b.Queue("SHOW wal_level").QueryRow(func(r pgx.Row) error { return r.Scan(&level) })
	var n int
	b.Queue(`SELECT count(*) FROM pg_catalog.pg_publication WHERE pubname = $1`, s.cfg.Publication).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
	var ids *[]Identity
	if first {
		ids = QueueIdentities(b, s.cfg.Publication)
	}
	var plugin, db, walStatus *string
	var active, found bool
	var pid *int32
	var confirmed *string
	b.Queue(`SELECT plugin, database, active, active_pid, confirmed_flush_lsn::text, wal_status
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&plugin, &db, &active, &pid, &confirmed, &walStatus); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := s.catalog.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("replicate postgres: read the server's settings, publication %s and slot %s: %w", s.cfg.Publication, s.cfg.Slot, err)
	}
	if err := probe.CheckWALLevel(level); err != nil {
		return fmt.Errorf("replicate postgres: %w", err)
	}
	if n == 0 {
		return hint.Wrap(fmt.Errorf("replicate postgres: publication %q: %w in database %q", s.cfg.Publication, errPublication, s.pg.Database()),
			fmt.Sprintf("create it: CREATE PUBLICATION %s FOR TABLE public.orders, ...; (or FOR ALL TABLES)", pgarrow.QuoteIdent(s.cfg.Publication)))
	}
	if first {
		if err := CheckIdentities(*ids, s.cfg.KeyState != nil, s.cfg.Publication); err != nil {
			return fmt.Errorf("replicate postgres: %w", err)
		}
	}
	if !found {
		return hint.Wrap(fmt.Errorf("replicate postgres: %w: %q", errSlotMissing, s.cfg.Slot),
			fmt.Sprintf("run 'rtrctl snapshot' (it creates the slot), or create it: SELECT pg_create_logical_replication_slot('%s', 'pgoutput');", s.cfg.Slot))
	}
	if plugin == nil || *plugin != "pgoutput" {
		return hint.Wrap(fmt.Errorf("replicate postgres: slot %q is not a logical slot of plugin pgoutput (plugin %v)", s.cfg.Slot, deref(plugin)),
			"use a slot created with: SELECT pg_create_logical_replication_slot('NAME', 'pgoutput');")
	}
	if db != nil && *db != s.pg.Database() {
		return hint.Wrap(fmt.Errorf("replicate postgres: slot %q belongs to database %q, not %q", s.cfg.Slot, *db, s.pg.Database()),
			"connect to the slot's database in --dsn, or use another --slot")
	}
	if walStatus != nil && *walStatus == "lost" {
		return hint.Wrap(fmt.Errorf("replicate postgres: %w: %q (wal_status lost): the WAL it needed was removed", errSlotInvalidated, s.cfg.Slot),
			fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s');) and re-snapshot with 'rtrctl snapshot'; raise max_slot_wal_keep_size to keep it from happening again", s.cfg.Slot))
	}
	// An active slot is in use unless the walsender reading it is this
	// session's own (session decides, once its stream has started).
	s.activePID = nil
	if active {
		s.activePID = pid
		if pid == nil {
			return s.inUse(pid)
		}
	}
	var conf frontier.LSN
	if confirmed != nil {
		var err error
		if conf, err = frontier.ParseLSN(*confirmed); err != nil {
			return fmt.Errorf("replicate postgres: slot %s: %w", s.cfg.Slot, err)
		}
	}
	if first {
		s.confirm0 = conf
		s.acked = conf
	}
	if *start == 0 {
		*start = conf
	}
	if *start < conf {
		return hint.Wrap(fmt.Errorf("replicate postgres: %w: slot %q has confirmed up to %s, but the stream was asked to start at %s: the changes in between are gone",
			errSlotAhead, s.cfg.Slot, conf, *start), "re-snapshot the tables ('rtrctl snapshot'), or start at or after "+conf.String())
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return "none"
	}
	return *p
}

func (s *pgStreamer) inUse(pid *int32) error {
	who := "another connection"
	if pid != nil {
		who = fmt.Sprintf("another connection (pid %d)", *pid)
	}
	return hint.Wrap(fmt.Errorf("replicate postgres: %w: %q is read by %s", errSlotInUse, s.cfg.Slot, who),
		"stop the other reader (see pg_stat_replication), or use another --slot")
}

// startError maps START_REPLICATION failures to hinted errors.
func (s *pgStreamer) startError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "55006": // object_in_use
			// Our own old walsender may still hold it: run retries it
			// for a while.
			return dsn.WithCause(s.inUse(nil), err)
		case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "slot"):
			return hint.Wrap(dsn.WithCause(fmt.Errorf("replicate postgres: %w: %q", errSlotMissing, s.cfg.Slot), err),
				fmt.Sprintf("run 'rtrctl snapshot' (it creates the slot), or create it: SELECT pg_create_logical_replication_slot('%s', 'pgoutput');", s.cfg.Slot))
		case pgErr.Code == "55000" && (strings.Contains(pgErr.Message, "invalidated") || strings.Contains(pgErr.Detail, "invalidated")):
			return hint.Wrap(dsn.WithCause(fmt.Errorf("replicate postgres: %w: %q: %s", errSlotInvalidated, s.cfg.Slot, pgErr.Message), err),
				fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s');) and re-snapshot with 'rtrctl snapshot'", s.cfg.Slot))
		}
	}
	return fmt.Errorf("replicate postgres: start replication from slot %s: %w", s.cfg.Slot, err)
}

// resolve builds a table from a Relation message, with type names from the
// catalog and NOT NULL as the catalog says now.
func (s *pgStreamer) resolve(ctx context.Context, m *pglogrepl.RelationMessage) (*pgarrow.Table, error) {
	t := &pgarrow.Table{Schema: m.Namespace, Name: m.RelationName, OID: m.RelationID, ReplicaIdentity: pgarrow.ReplicaIdentityName(m.ReplicaIdentity)}
	for _, c := range m.Columns {
		t.Columns = append(t.Columns, pgarrow.Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier})
	}
	if err := s.types.Resolve(ctx, t.Columns); err != nil {
		return nil, err
	}
	rows, err := s.catalog.Query(ctx, `SELECT attname, atttypid, atttypmod FROM pg_catalog.pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attnotnull`, m.RelationID)
	if err != nil {
		return nil, err
	}
	notNull := map[string]pgarrow.Column{}
	for rows.Next() {
		var c pgarrow.Column
		if err := rows.Scan(&c.Name, &c.TypeOID, &c.TypeMod); err != nil {
			rows.Close()
			return nil, err
		}
		notNull[c.Name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, c := range t.Columns {
		if nn, ok := notNull[c.Name]; ok && nn.SameType(c) {
			t.Columns[i].NotNull = true
		}
	}
	return t, nil
}

// stream receives messages until an error or StopAt.
func (s *pgStreamer) stream(ctx context.Context, conn *pgconn.PgConn) error {
	if err := s.status(ctx, conn, true); err != nil {
		return err
	}
	next := time.Now().Add(s.cfg.StatusInterval)
	// A nudge wakes the receive below (a read deadline in the past) and
	// moves the next status update to now; nudged and that deadline change
	// together under nudgeMu.
	var nudgeMu sync.Mutex
	nudged := false
	if s.cfg.Nudge != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-s.cfg.Nudge:
					nudgeMu.Lock()
					nudged = true
					conn.Conn().SetReadDeadline(time.Now())
					nudgeMu.Unlock()
				}
			}
		}()
	}
	for !s.dec.done {
		nudgeMu.Lock()
		if nudged {
			nudged, next = false, time.Now()
			conn.Conn().SetReadDeadline(time.Time{})
		}
		nudgeMu.Unlock()
		if !time.Now().Before(next) {
			if err := s.status(ctx, conn, true); err != nil {
				return err
			}
			next = time.Now().Add(s.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("replicate postgres: receive: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("replicate postgres: %w", err)
				}
				s.walEnd = max(s.walEnd, frontier.LSN(ka.ServerWALEnd))
				if err := s.dec.keepalive(frontier.LSN(ka.ServerWALEnd)); err != nil {
					return err
				}
				// The server pings whenever the WAL it has decoded passes the
				// write position we last reported, so idle progress follows
				// the WAL without waiting for the status interval. Answering
				// each ping with write = its WAL end keeps it to one ping per
				// step of WAL.
				//
				// A ping that asks for a reply gets the durable position
				// read afresh: a shutting-down server's walsender pings so
				// until the flush position reaches what it sent, and only
				// then lets the server stop (pg_ctl stop -m fast).
				if err := s.statusUpdate(ctx, conn, false, ka.ReplyRequested); err != nil {
					return err
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("replicate postgres: %w", err)
				}
				m, err := pglogrepl.Parse(xld.WALData)
				if err != nil {
					return fmt.Errorf("replicate postgres: decode pgoutput message at %s: %w", frontier.LSN(xld.WALStart), err)
				}
				if err := s.dec.handle(ctx, m); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return s.streamError(pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return retry.MarkTransient(errors.New("replicate postgres: the server ended the replication stream"))
		}
	}
	return nil
}

func (s *pgStreamer) streamError(pgErr *pgconn.PgError) error {
	if pgErr.Code == "42704" && strings.Contains(pgErr.Message, "publication") {
		return hint.Wrap(dsn.WithCause(fmt.Errorf("replicate postgres: %w: %s", errPublication, pgErr.Message), pgErr),
			fmt.Sprintf("re-create it: CREATE PUBLICATION %s FOR TABLE ...; then re-snapshot", pgarrow.QuoteIdent(s.cfg.Publication)))
	}
	return fmt.Errorf("replicate postgres: replication stream: %w", pgErr)
}

// status sends a standby status update: written = the highest WAL end
// received (for lag reports), flushed = what may be confirmed. With reply
// it asks the server to answer and reads the durable position afresh.
func (s *pgStreamer) status(ctx context.Context, conn *pgconn.PgConn, reply bool) error {
	return s.statusUpdate(ctx, conn, reply, reply)
}

// statusUpdate is status with the fresh read of the durable position
// (refresh) apart from asking for a reply.
func (s *pgStreamer) statusUpdate(ctx context.Context, conn *pgconn.PgConn, reply, refresh bool) error {
	flush := s.acked
	if !s.cfg.NoAck && s.cfg.Ack != nil && refresh {
		d, err := s.cfg.Ack(ctx)
		if err != nil {
			return fmt.Errorf("replicate postgres: read durable position: %w", err)
		}
		flush = max(s.confirm0, min(d, s.dec.upper), s.acked)
		s.acked = flush
	}
	write := max(s.walEnd, flush)
	if flush == 0 {
		write = 0 // all invalid: the server confirms nothing (pglogrepl would send write as flush)
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(write),
		WALFlushPosition: pglogrepl.LSN(flush),
		WALApplyPosition: pglogrepl.LSN(flush),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("replicate postgres: send standby status: %w", err)
	}
	return nil
}
