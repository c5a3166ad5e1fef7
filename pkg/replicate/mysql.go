package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// MySQLConfig configures StreamMySQL.
type MySQLConfig struct {
	// Upstream is the server (upstream.ParseMySQL).
	Upstream *upstream.MySQL
	// Tables to stream (db.table). Empty means every table in the binlog
	// outside the system schemas, described when first seen (unless the
	// sink is a TableAdder: then it says which).
	Tables []string
	// Known schemas (by collection) to check the binlog against, e.g. the
	// ones a snapshot read; the others are read from information_schema
	// at start (or when first seen).
	Known map[string]*myarrow.Table
	// Expect, when set, gives the columns a collection is known with (its
	// schema in the store), or nil: a table whose description differs
	// from it changed while nobody followed it, and its collection gets a
	// definite error at its first change instead of data it cannot take.
	Expect func(collection string) *arrow.Schema
	// Start is the position to start after, in the server's notation: a
	// MariaDB GTID position ("0-1-42") or a MySQL GTID set ("uuid:1-42").
	// When empty, StartFrontier is used; when that is unset too, the
	// server's current position.
	Start string
	// StartFrontier is where to start as an upper (what the store's
	// bindings record): everything below it is skipped.
	StartFrontier frontier.Frontier
	// StopAt, when set, ends the stream (nil error) once progress covers
	// it: every transaction below it has been emitted.
	StopAt frontier.Frontier
	// Source is rtr.source on the records (default "mysql").
	Source string
	// ServerID identifies this replica to the server; 0 picks a random one.
	ServerID uint32
	// HeartbeatPeriod asks the server for a heartbeat after this much
	// silence (default 1s); heartbeats move progress on an idle server.
	HeartbeatPeriod time.Duration
	// Nudge, when a value arrives, makes the stream check the server's
	// GTID position at once (real-time recency waiters use it).
	Nudge <-chan struct{}
	// FlushRows bounds the rows held before records go to the sink
	// (default 8192); a transaction is never held whole.
	FlushRows int
	// MaxBackoff caps the wait between reconnects (default 10s).
	MaxBackoff time.Duration
	// RetryFor bounds how long a run of transient failures (the server
	// restarting or killed, the network) may last before StreamMySQL gives
	// up with a *retry.GaveUpError; 0 means forever. The first connection
	// is retried too; permanent errors (access denied, a purged binlog,
	// binlog settings) fail at once.
	RetryFor time.Duration
	// OnSession, if set, is called with the replication connection's id
	// each time one starts (tests use it to kill it).
	OnSession func(connID uint32)
	// Limit, when set, is asked with the stream's progress each time it
	// would report it, and progress is reported no further than the
	// answer (the per-partition minimum of the two): an ingest holds it
	// while it re-snapshots a collection in the stream.
	Limit func(progress frontier.Frontier) (frontier.Frontier, error)
	// KeyState, when set, lets a table with a primary key take row events
	// whose images are not FULL (binlog_row_image MINIMAL or NOBLOB for
	// the session that wrote them): it is asked, at the first such event,
	// for the table's rows by key as of where the stream started
	// (NewMySQLKeyState, filled from a store), which the stream keeps in
	// step from then on. nil (and no error) stops the collection; an
	// error ends the stream. Without KeyState such an event stops the
	// collection.
	KeyState func(t *myarrow.Table) (*KeyState, error)
	// States are the key states (by collection) of tables whose events
	// were not FULL before, as of where the stream starts: each is kept
	// in step from the start, FULL events included.
	States map[string]*KeyState
	// Mem and Logger; nil means the defaults.
	Mem    memory.Allocator
	Logger *slog.Logger
}

// Errors of StreamMySQL that callers can test for.
var (
	// ErrBinlogSettings: the server's binary log cannot be replicated.
	ErrBinlogSettings = errors.New("binary log settings do not allow row replication")
	// ErrPurged: the binlog holding the start position is gone.
	ErrPurged = errors.New("binlog needed to resume has been purged")
)

// CheckBinlogSettings checks the server variables rtrctl needs: log_bin,
// binlog_format=ROW, binlog_row_image=FULL and, on MySQL, gtid_mode=ON.
// vars holds the lowercase variable names. It is pure, for tests.
func CheckBinlogSettings(mariadb bool, vars map[string]string) error {
	mycnf := "[mysqld]\nlog_bin = mysql-bin\nserver_id = 1\nbinlog_format = ROW\nbinlog_row_image = FULL"
	if !mariadb {
		mycnf += "\ngtid_mode = ON\nenforce_gtid_consistency = ON"
	}
	if v := vars["log_bin"]; v != "1" && !strings.EqualFold(v, "ON") {
		return hint.Wrap(fmt.Errorf("%w: the binary log is off (log_bin=%s)", ErrBinlogSettings, v),
			"log_bin cannot be set at run time: add to my.cnf\n"+mycnf+"\nand restart the server")
	}
	if v := vars["binlog_format"]; !strings.EqualFold(v, "ROW") {
		return hint.Wrap(fmt.Errorf("%w: binlog_format is %s, rtrctl needs ROW", ErrBinlogSettings, v),
			"run: SET GLOBAL binlog_format = 'ROW'; (sessions started before keep the old format: reconnect them) and set binlog_format = ROW in my.cnf")
	}
	if v := vars["binlog_row_image"]; !strings.EqualFold(v, "FULL") {
		return hint.Wrap(fmt.Errorf("%w: binlog_row_image is %s, rtrctl needs FULL (updates and deletes must carry the whole old row)", ErrBinlogSettings, v),
			"run: SET GLOBAL binlog_row_image = 'FULL'; (sessions started before keep the old setting: reconnect them) and set binlog_row_image = FULL in my.cnf")
	}
	if !mariadb {
		if v := vars["gtid_mode"]; !strings.EqualFold(v, "ON") {
			return hint.Wrap(fmt.Errorf("%w: gtid_mode is %s, rtrctl needs GTIDs (gtid_mode=ON)", ErrBinlogSettings, v),
				"run: SET GLOBAL enforce_gtid_consistency = ON; then SET GLOBAL gtid_mode = OFF_PERMISSIVE; SET GLOBAL gtid_mode = ON_PERMISSIVE; (wait for anonymous transactions to end) SET GLOBAL gtid_mode = ON; and set gtid_mode = ON, enforce_gtid_consistency = ON in my.cnf")
		}
	}
	return nil
}

// readBinlogSettings reads the variables CheckBinlogSettings needs.
func readBinlogSettings(ctx context.Context, conn *client.Conn, mariadb bool) (map[string]string, error) {
	q := "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image"
	if !mariadb {
		q += ", @@global.gtid_mode"
	}
	r, err := upstream.Execute(ctx, conn, q)
	if err != nil {
		return nil, fmt.Errorf("read binlog settings: %w", err)
	}
	vars := map[string]string{}
	for i, k := range []string{"log_bin", "binlog_format", "binlog_row_image", "gtid_mode"} {
		if i < r.ColumnNumber() {
			vars[k], _ = r.GetString(0, i)
		}
	}
	return vars, nil
}

// Server is what StreamMySQL (and the MySQL snapshot) know about a server.
type Server struct {
	Conn     *client.Conn
	Upstream *upstream.MySQL
	MariaDB  bool
	UUID     string // MySQL @@server_uuid, lowercase
}

// Domain is the time domain of the server's GTIDs.
func (s *Server) Domain() frontier.Domain {
	if s.MariaDB {
		return frontier.DomainMariaDB
	}
	return frontier.DomainMySQL
}

// OpenServer connects to u, detects the flavor and checks the binlog
// settings.
func OpenServer(ctx context.Context, u *upstream.MySQL) (*Server, error) {
	if u == nil {
		return nil, errors.New("no mysql upstream given")
	}
	conn, err := u.Connect(ctx)
	if err != nil {
		return nil, err
	}
	s := &Server{Conn: conn, Upstream: u}
	if s.MariaDB, err = upstream.IsMariaDB(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	vars, err := readBinlogSettings(ctx, conn, s.MariaDB)
	if err == nil {
		err = CheckBinlogSettings(s.MariaDB, vars)
	}
	if err == nil && !s.MariaDB {
		var r *mysql.Result
		if r, err = upstream.Execute(ctx, conn, "SELECT @@server_uuid"); err == nil {
			u, _ := r.GetString(0, 0)
			s.UUID = strings.ToLower(u)
		}
	}
	// utf8mb4 results whatever the server's default character set
	// (information_schema, ENUM labels): what the snapshot reads too.
	for _, q := range []string{"SET NAMES utf8mb4", "SET time_zone = '+00:00'"} {
		if err == nil {
			_, err = upstream.Execute(ctx, conn, q)
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Position reads the server's current GTID position: MariaDB
// @@gtid_binlog_pos, MySQL @@gtid_executed.
func (s *Server) Position(ctx context.Context) (string, frontier.Frontier, error) {
	q := "SELECT @@global.gtid_executed"
	if s.MariaDB {
		q = "SELECT @@global.gtid_binlog_pos"
	}
	r, err := upstream.Execute(ctx, s.Conn, q)
	if err != nil {
		return "", frontier.Frontier{}, fmt.Errorf("read gtid position: %w", err)
	}
	v, _ := r.GetString(0, 0)
	return ParsePosition(s.MariaDB, v)
}

// ParsePosition reads a native position and returns it canonically with
// its frontier (MariaDB: seq+1 per domain; MySQL: the GTID set's prefix per
// server, i.e. the first transaction not yet applied).
func ParsePosition(mariadb bool, v string) (string, frontier.Frontier, error) {
	if mariadb {
		p, err := frontier.ParseMariaDBPos(v)
		if err != nil {
			return "", frontier.Frontier{}, err
		}
		return p.String(), p.Upper(), nil
	}
	set, err := frontier.ParseGTIDSet(v)
	if err != nil {
		return "", frontier.Frontier{}, err
	}
	return set.String(), set.Prefix(), nil
}

// PositionOf turns an upper back into a native start position. MariaDB
// GTIDs carry the server id of the transaction, which a frontier lacks: it
// is looked up in @@gtid_binlog_state (the last GTID of every
// domain-server pair), taking the server whose last sequence number is the
// smallest one at or beyond the position's (with one writer per domain,
// the usual case, that is exact). A domain at 1 (nothing complete) is left
// out, so the server sends it from its first transaction in the binlog.
func (s *Server) PositionOf(ctx context.Context, f frontier.Frontier) (string, error) {
	if !s.MariaDB {
		return frontier.GTIDSetOf(f).String(), nil
	}
	r, err := upstream.Execute(ctx, s.Conn, "SELECT @@global.gtid_binlog_state")
	if err != nil {
		return "", fmt.Errorf("read gtid_binlog_state: %w", err)
	}
	st, _ := r.GetString(0, 0)
	return MariaDBStartPos(f, st)
}

// MariaDBStartPos is PositionOf for MariaDB given @@gtid_binlog_state.
func MariaDBStartPos(f frontier.Frontier, binlogState string) (string, error) {
	type last struct {
		server uint32
		seq    uint64
	}
	lasts := map[uint32][]last{}
	for _, item := range strings.Split(binlogState, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p := strings.Split(item, "-")
		if len(p) != 3 {
			return "", fmt.Errorf("read gtid_binlog_state: %q is not domain-server-seq", item)
		}
		d, e1 := strconv.ParseUint(p[0], 10, 32)
		sv, e2 := strconv.ParseUint(p[1], 10, 32)
		sq, e3 := strconv.ParseUint(p[2], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil {
			return "", fmt.Errorf("read gtid_binlog_state: %q is not domain-server-seq", item)
		}
		lasts[uint32(d)] = append(lasts[uint32(d)], last{uint32(sv), sq})
	}
	var out []string
	for _, p := range f.Partitions() {
		next := f.Get(p)
		if next <= 1 {
			continue
		}
		d, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return "", fmt.Errorf("mariadb start position: bad domain %q", p)
		}
		seq := next - 1
		var best *last
		for i, l := range lasts[uint32(d)] {
			if l.seq >= seq && (best == nil || l.seq < best.seq) {
				best = &lasts[uint32(d)][i]
			}
		}
		if best == nil {
			var top uint64
			for _, l := range lasts[uint32(d)] {
				top = max(top, l.seq)
			}
			return "", hint.Wrap(fmt.Errorf("mariadb start position: domain %d is at %d on the server, below %d where rtrctl resumes: %w", d, top, seq, ErrPurged),
				"the server's binlog was reset or is behind the store (another server?): re-snapshot into a new store")
		}
		out = append(out, fmt.Sprintf("%d-%d-%d", d, best.server, seq))
	}
	return strings.Join(out, ","), nil
}

// StreamMySQL streams row changes from the binary log of a MySQL or
// MariaDB server to sink (docs/mysql.md). Every change of a transaction is
// at its GTID; progress follows each commit, and on an idle server the
// server's GTID position once the stream has read the binlog up to where
// that position ended (heartbeats and nudges). It returns nil once StopAt
// is covered, ctx's error when ctx ends, else a definite error. Transient
// failures (internal/retry.Transient), the first connection's included,
// are retried from the last complete transaction for at most
// cfg.RetryFor in a row.
func StreamMySQL(ctx context.Context, cfg MySQLConfig, sink pipe.Sink) error {
	if cfg.Source == "" {
		cfg.Source = "mysql"
	}
	if cfg.HeartbeatPeriod <= 0 {
		cfg.HeartbeatPeriod = time.Second
	}
	if cfg.FlushRows <= 0 {
		cfg.FlushRows = 8192
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
	if cfg.ServerID == 0 {
		cfg.ServerID = 1<<30 + rand.Uint32N(1<<30)
	}
	if cfg.Upstream == nil {
		return errors.New("replicate mysql: no upstream given")
	}
	s := &myStreamer{cfg: cfg, sink: sink, password: cfg.Upstream.Password()}
	defer s.release()
	defer func() {
		if s.srv != nil {
			s.srv.Conn.Close()
		}
	}()
	return s.run(ctx)
}

// setup connects, reads the tables and the start position and reports
// the first progress. On an error it leaves no connection behind and can
// be called again.
func (s *myStreamer) setup(ctx context.Context) (err error) {
	cfg := s.cfg
	srv, err := OpenServer(ctx, cfg.Upstream)
	if err != nil {
		return fmt.Errorf("replicate mysql: %w", err)
	}
	defer func() {
		if err != nil {
			srv.Conn.Close()
			s.srv = nil
		}
	}()
	s.srv, s.domain = srv, srv.Domain()
	s.release()
	_, adder := s.sink.(TableAdder)
	s.tables, s.all = map[string]*myTable{}, len(cfg.Tables) == 0 && !adder
	for _, name := range cfg.Tables {
		db, tb, err := myarrow.ParseName(name)
		if err != nil {
			return fmt.Errorf("replicate mysql: %w", err)
		}
		t := cfg.Known[myarrow.CollectionName(db, tb)]
		if t == nil {
			if t, err = myarrow.LoadTable(ctx, srv.Conn, db, tb); err != nil {
				return fmt.Errorf("replicate mysql: %w", err)
			}
		}
		s.tables[t.QualifiedName()] = &myTable{t: t, state: s.startState(t)}
	}
	if d := cfg.StopAt.Domain(); d != "" && d != s.domain {
		return hint.Wrap(fmt.Errorf("replicate mysql: the stop position is in domain %s, the server's GTIDs in %s", d, s.domain),
			"take the stop position from 'rtrctl frontier --source mysql' against this server")
	}
	// Where to start.
	startText := cfg.Start
	if startText == "" && cfg.StartFrontier.Domain() != "" {
		if cfg.StartFrontier.Domain() != s.domain {
			return fmt.Errorf("replicate mysql: start frontier is in domain %s, the server's GTIDs in %s", cfg.StartFrontier.Domain(), s.domain)
		}
		if startText, err = srv.PositionOf(ctx, cfg.StartFrontier); err != nil {
			return fmt.Errorf("replicate mysql: %w", err)
		}
	} else if startText == "" {
		if startText, _, err = srv.Position(ctx); err != nil {
			return fmt.Errorf("replicate mysql: %w", err)
		}
	}
	_, startF, err := ParsePosition(srv.MariaDB, startText)
	if err != nil {
		return hint.Wrap(fmt.Errorf("replicate mysql: start position: %w", err), "MariaDB positions look like 0-1-42, MySQL GTID sets like uuid:1-42")
	}
	if s.resume, err = parseGoGTID(srv.MariaDB, startText); err != nil {
		return fmt.Errorf("replicate mysql: start position: %w", err)
	}
	s.progress = startF
	if cfg.StartFrontier.Domain() == s.domain {
		if j, err := frontier.Join(s.progress, cfg.StartFrontier); err == nil {
			s.progress = j
		}
	}
	return s.report()
}

// report hands the progress over, no further than cfg.Limit allows and
// only when it moved.
func (s *myStreamer) report() error {
	out := s.progress
	if s.cfg.Limit != nil {
		lim, err := s.cfg.Limit(s.progress)
		if err != nil {
			return sinkErr(err)
		}
		if lim.Domain() == out.Domain() {
			if out, err = frontier.Meet(out, lim); err != nil {
				return err
			}
		}
	}
	if err := s.takeStates(); err != nil {
		return err
	}
	if s.reported.Domain() != "" {
		if s.reported.Covers(out) {
			return nil
		}
		var err error
		if out, err = frontier.Join(out, s.reported); err != nil {
			return err
		}
	}
	s.reported = out
	return sinkErr(s.sink.Progress("", out))
}

// parseGoGTID reads a native position into go-mysql's GTID set.
func parseGoGTID(mariadb bool, s string) (mysql.GTIDSet, error) {
	if mariadb {
		return mysql.ParseMariadbGTIDSet(s)
	}
	return mysql.ParseMysqlGTIDSet(s)
}

type myTable struct {
	t       *myarrow.Table
	rb      *myarrow.RowBuilder
	failed  bool // a definite error stopped it
	checked *replication.TableMapEvent
	// state holds the current row by primary key once an event of the
	// table was not FULL (mykeyed.go).
	state *KeyState
	// restating: a sink re-snapshots the table and rebuilds its state
	// (StateTaker); its changes meanwhile are held as the binlog has
	// them, those of the open transaction in rawTxn.
	restating bool
	raw       []rawRows
	rawTxn    []rawRows
}

// TableChanger is implemented by a pipe.Sink that re-snapshots a MySQL or
// MariaDB collection when an ALTER TABLE changes its columns in the
// binlog: StreamMySQL hands over what came before the statement, then
// asks TableChanged with the table's new description t, the statement's
// time at and the stream's progress before it. true: the sink resets the
// collection at at (pipe.Sink.Reset with its new contents) and the
// stream goes on with t; false: the collection stops with a definite
// error, as without the interface.
type TableChanger interface {
	TableChanged(t *myarrow.Table, at frontier.Time, before frontier.Frontier, change string) (bool, error)
}

// TableAdder is implemented by a pipe.Sink that takes tables into the
// stream as they appear in it (a --tables pattern such as db.*): at a
// CREATE TABLE, or at the first TABLE_MAP of a table not streamed yet
// (renamed into the pattern), StreamMySQL asks Wants and, if it does,
// describes the table and calls TableAdded with the statement's (or the
// transaction's) time at and the stream's progress before it, then
// streams the table's changes from there on. TableAdded is expected to
// snapshot the table at at (a reset).
type TableAdder interface {
	Wants(db, table string) bool
	TableAdded(t *myarrow.Table, at frontier.Time, before frontier.Frontier, why string) error
}

// TxnBeginner is implemented by a pipe.Sink that wants to know where
// each transaction of the stream begins: its time and the stream's
// progress before it.
type TxnBeginner interface {
	TxnBegin(at frontier.Time, before frontier.Frontier) error
}

// myStreamer is one StreamMySQL call.
type myStreamer struct {
	cfg      MySQLConfig
	password string // of cfg.Upstream, kept out of logs
	ready    bool   // setup done
	srv      *Server
	sink     pipe.Sink
	domain   frontier.Domain
	tables   map[string]*myTable
	all      bool

	progress frontier.Frontier
	reported frontier.Frontier // the last progress handed over (Limit)
	resume   mysql.GTIDSet     // the start set plus every committed transaction

	// position in the binlog of the last event received
	file string
	pos  uint32
	// idle: a GTID position read from the server and the binlog end that
	// followed it; once the stream reaches that end, progress may join it.
	idle *idleMark

	// the open transaction
	inTxn      bool
	standalone bool
	sawBegin   bool
	txn        frontier.Time
	txnGTID    string
	touched    []*myTable
	handed     int // updates of the open transaction handed to the sink
	skip       int // updates to drop after a reconnect (handed before it)
	skipGTID   string
	emittedTxn int // updates of the open transaction produced so far

	// undo takes the key states back to what was handed over when the
	// connection is lost; row and key are scratch.
	undo     undoLog
	row, key []byte
}

type idleMark struct {
	f    frontier.Frontier
	file string
	pos  uint32
}

// myEvent is a binlog event copied out of the syncer goroutine.
type myEvent struct {
	ev   *replication.BinlogEvent
	gtid mysql.MariadbGTID // copied: go-mysql mutates its GTID events later
}

func (s *myStreamer) stopped() bool {
	return s.cfg.StopAt.Domain() != "" && s.progress.Covers(s.cfg.StopAt)
}

func (s *myStreamer) release() {
	for _, mt := range s.tables {
		if mt.rb != nil {
			mt.rb.Release()
			mt.rb = nil
		}
	}
}

// errStopAt ends a session when StopAt is reached.
var errStopAt = errors.New("stop position reached")

func (s *myStreamer) run(ctx context.Context) error {
	policy := retry.Policy{
		For: s.cfg.RetryFor, Max: s.cfg.MaxBackoff, Healthy: healthySession,
		Logger: s.cfg.Logger, What: "replicate mysql", Secrets: []string{s.password},
	}
	err := retry.Do(ctx, policy, func(ctx context.Context) error {
		if !s.ready {
			if err := s.setup(ctx); err != nil {
				// Transient failures (the server is down) are retried;
				// anything else of the setup is definite.
				return s.classify(err)
			}
			s.ready = true
			if s.stopped() {
				return nil
			}
		} else if err := s.reconnectControl(ctx); err != nil {
			return s.classify(err)
		}
		started, err := s.session(ctx)
		if errors.Is(err, errStopAt) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.interrupted()
		err = s.classify(err)
		if !retry.Transient(err) && !retry.IsPermanent(err) {
			// Neither known transient nor known permanent: a server error
			// before the stream started is definite; a stream that broke
			// in some other way is reconnected, as it always was.
			if _, ok := errors.AsType[*mysql.MyError](err); ok && !started {
				return fmt.Errorf("replicate mysql %s: %w", s.srv.Upstream, err)
			}
			return retry.MarkTransient(err)
		}
		return err
	})
	if se, ok := errors.AsType[*sinkError](err); ok {
		return se.err
	}
	return err
}

// classify marks the definite errors of MySQL replication Permanent and
// leaves the rest to internal/retry.
func (s *myStreamer) classify(err error) error {
	if _, ok := errors.AsType[*sinkError](err); ok {
		return retry.Permanent(err)
	}
	if my, ok := errors.AsType[*mysql.MyError](err); ok && my.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return retry.Permanent(s.fatal(my))
	}
	if errors.Is(err, ErrBinlogSettings) || errors.Is(err, ErrPurged) {
		return retry.Permanent(err)
	}
	if my, ok := errors.AsType[*mysql.MyError](err); ok && (my.Code == mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR || my.Code == mysql.ER_ACCESS_DENIED_ERROR) && hint.Of(err) == "" {
		// The binlog dump needs privileges a plain SELECT user lacks.
		user := s.srv.Upstream.User()
		return retry.Permanent(hint.Wrap(fmt.Errorf("replicate mysql: the binlog stream was refused: %w", err),
			fmt.Sprintf("run as an administrator: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '%s'@'%%' (MariaDB 10.5+: also BINLOG MONITOR; MySQL 8: REPLICATION SLAVE, REPLICATION CLIENT)", user)))
	}
	return err
}

// reconnectControl replaces the control connection when it died (with the
// server, typically) since the last session.
func (s *myStreamer) reconnectControl(ctx context.Context) error {
	if _, err := upstream.Execute(ctx, s.srv.Conn, "SELECT 1"); err == nil {
		return nil
	}
	c, err := s.srv.Upstream.Connect(ctx)
	if err != nil {
		return fmt.Errorf("replicate mysql: reconnect: %w", err)
	}
	// As OpenServer: the tables an ALTER makes it describe again are read
	// in utf8mb4.
	for _, q := range []string{"SET NAMES utf8mb4", "SET time_zone = '+00:00'"} {
		if _, err := upstream.Execute(ctx, c, q); err != nil {
			c.Close()
			return fmt.Errorf("replicate mysql: reconnect: %w", err)
		}
	}
	s.srv.Conn.Close()
	s.srv.Conn = c
	return nil
}

// fatal explains error 1236 (the server cannot send the binlog asked for).
func (s *myStreamer) fatal(my *mysql.MyError) error {
	msg := my.Message
	low := strings.ToLower(msg)
	if strings.Contains(low, "purged") || strings.Contains(low, "could not find gtid state") || strings.Contains(low, "missing the gtid") {
		return hint.Wrap(dsn.WithCause(fmt.Errorf("replicate mysql %s: %w: resuming after %s: %s", s.srv.Upstream, ErrPurged, s.resume.String(), msg), my),
			"the changes since the store's last durable position are gone from the server: ingest into a new store (a fresh snapshot), and keep binlogs longer (binlog_expire_logs_seconds / expire_logs_days) than an ingest may be down")
	}
	return dsn.WithCause(fmt.Errorf("replicate mysql %s: the server cannot send the binlog from %s: %s", s.srv.Upstream, s.resume.String(), msg), my)
}

// interrupted forgets the open transaction; its handed updates are
// skipped when the server sends it again.
func (s *myStreamer) interrupted() {
	if s.inTxn && s.handed > 0 {
		s.skip, s.skipGTID = s.handed, s.txnGTID
	}
	s.inTxn, s.handed, s.emittedTxn, s.touched = false, 0, 0, nil
	s.idle = nil
	s.undo.rollback()
	for _, mt := range s.tables {
		mt.rawTxn = nil // sent again
		if mt.rb != nil {
			mt.rb.Release()
			mt.rb = nil
		}
		mt.checked = nil
	}
}

// session runs one replication connection until an error.
func (s *myStreamer) session(ctx context.Context) (started bool, err error) {
	events := make(chan myEvent, 256)
	done := make(chan struct{})
	flavor := mysql.MySQLFlavor
	if s.srv.MariaDB {
		flavor = mysql.MariaDBFlavor
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: s.cfg.ServerID, Flavor: flavor,
		Host: s.srv.Upstream.Host(), Port: uint16(s.srv.Upstream.Port()), User: s.srv.Upstream.User(), Password: s.srv.Upstream.Password(),
		TLSConfig:       s.srv.Upstream.BinlogTLS(s.srv.Conn),
		HeartbeatPeriod: s.cfg.HeartbeatPeriod, DisableRetrySync: true, TimestampStringLocation: time.UTC,
		Logger: quiet, DiscardGTIDSet: true,
		SynchronousEventHandler: handlerFunc(func(e *replication.BinlogEvent) error {
			me := myEvent{ev: e}
			if g, ok := e.Event.(*replication.MariadbGTIDEvent); ok {
				me.gtid = g.GTID
			}
			select {
			case events <- me:
				return nil
			case <-done:
				return errors.New("stream closed")
			}
		}),
	})
	// Release a handler blocked on a full channel before Close waits for
	// the syncer's goroutine.
	defer func() {
		close(done)
		syncer.Close()
	}()
	start, err := parseGoGTID(s.srv.MariaDB, s.resume.String())
	if err != nil {
		return false, err
	}
	streamer, err := syncer.StartSyncGTID(start)
	if err != nil {
		return false, fmt.Errorf("start binlog stream: %w", err)
	}
	if s.cfg.OnSession != nil {
		s.cfg.OnSession(syncer.LastConnectionID())
	}
	streamErr := make(chan error, 1)
	go func() {
		_, err := streamer.GetEvent(ctx) // only errors arrive here
		streamErr <- err
	}()
	for {
		select {
		case <-ctx.Done():
			return started, ctx.Err()
		case err := <-streamErr:
			if err == nil {
				err = errors.New("binlog stream ended")
			}
			// Events sent before the error are still queued.
			for {
				select {
				case me := <-events:
					if perr := s.handle(ctx, me); perr != nil {
						return started, perr
					}
					continue
				default:
				}
				break
			}
			return started, err
		case me := <-events:
			if !started {
				started = true
				retry.Progress(ctx)
			}
			if err := s.handle(ctx, me); err != nil {
				return started, err
			}
		case <-s.cfg.Nudge:
			// Not while an idle mark is pending: the stream reports progress
			// when it gets there, and a check is two queries on the control
			// connection that stop the stream meanwhile (a waiter behind a
			// busy server nudges every 20 ms; on a slow link the stream
			// then did nothing else).
			if s.idle != nil {
				continue
			}
			if err := s.checkIdle(ctx); err != nil {
				return started, err
			}
		}
	}
}

type handlerFunc func(e *replication.BinlogEvent) error

func (f handlerFunc) HandleEvent(e *replication.BinlogEvent) error { return f(e) }

var ddlRE = regexp.MustCompile("(?is)^\\s*(?:/\\*.*?\\*/\\s*)*(TRUNCATE|DROP|RENAME|ALTER(?:\\s+ONLINE)?(?:\\s+IGNORE)?\\s+TABLE)\\s+(?:TABLE\\s+)?(?:IF\\s+EXISTS\\s+)?(.*)$")

// handle processes one event.
func (s *myStreamer) handle(ctx context.Context, me myEvent) error {
	e := me.ev
	h := e.Header
	if h.LogPos > 0 && h.Flags&replication.LOG_EVENT_ARTIFICIAL_F == 0 {
		s.pos = h.LogPos
	}
	switch ev := e.Event.(type) {
	case *replication.RotateEvent:
		s.file, s.pos = string(ev.NextLogName), uint32(ev.Position)
	case *replication.GenericEvent:
		if h.EventType == replication.HEARTBEAT_EVENT || h.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
			if len(ev.Data) > 0 && h.EventType == replication.HEARTBEAT_EVENT {
				s.file = string(ev.Data)
			}
			if h.LogPos > 0 {
				s.pos = h.LogPos
			}
			if s.idle == nil {
				if err := s.checkIdle(ctx); err != nil {
					return err
				}
			}
		}
	case *replication.MariadbGTIDEvent:
		g := me.gtid
		if err := s.begin(frontier.Time{Partition: strconv.FormatUint(uint64(g.DomainID), 10), Pos: g.SequenceNumber}, g.String()); err != nil {
			return err
		}
		s.standalone = ev.IsStandalone()
	case *replication.GTIDEvent:
		u, err := uuid.FromBytes(ev.SID)
		if err != nil {
			return fmt.Errorf("read gtid event: %w", err)
		}
		id := strings.ToLower(u.String())
		if err := s.begin(frontier.Time{Partition: id, Pos: uint64(ev.GNO)}, fmt.Sprintf("%s:%d", id, ev.GNO)); err != nil {
			return err
		}
	case *replication.QueryEvent:
		q := strings.TrimSpace(string(ev.Query))
		switch {
		case strings.EqualFold(q, "BEGIN"):
			s.sawBegin = true
		case strings.EqualFold(q, "COMMIT"):
			if err := s.commit(); err != nil {
				return err
			}
		default:
			if err := s.ddl(ctx, string(ev.Schema), q); err != nil {
				return err
			}
			if s.inTxn && (s.standalone || (!s.srv.MariaDB && !s.sawBegin)) {
				if err := s.commit(); err != nil {
					return err
				}
			}
		}
	case *replication.XIDEvent:
		if err := s.commit(); err != nil {
			return err
		}
	case *replication.TableMapEvent:
		if err := s.tableMap(ctx, ev); err != nil {
			return err
		}
	case *replication.RowsEvent:
		if err := s.rows(h.EventType, ev); err != nil {
			return err
		}
	}
	if s.idle != nil && !s.inTxn {
		return s.reachIdle()
	}
	return nil
}

func (s *myStreamer) begin(t frontier.Time, gtid string) error {
	s.inTxn, s.standalone, s.sawBegin = true, false, false
	s.txn, s.txnGTID = t, gtid
	s.handed, s.emittedTxn, s.touched = 0, 0, nil
	if s.skip > 0 && s.skipGTID != gtid {
		s.skip = 0 // not the interrupted transaction: nothing to drop
	}
	if tb, ok := s.sink.(TxnBeginner); ok && !s.progress.Beyond(t) {
		return sinkErr(tb.TxnBegin(t, s.progress))
	}
	return nil
}

// ddl turns TRUNCATE of a streamed table into a reset of its collection,
// an ALTER TABLE that changes its columns into a re-snapshot (alter),
// and DROP and RENAME into an error of it: their effect is not in row
// events.
func (s *myStreamer) ddl(ctx context.Context, schema, q string) error {
	if !s.inTxn {
		return nil
	}
	if m := createRE.FindStringSubmatch(q); m != nil {
		if names := myarrow.LeadingNames(m[1]); len(names) > 0 {
			if names[0][0] == "" {
				names[0][0] = schema
			}
			return s.adopt(ctx, names[0][0], names[0][1], "created")
		}
		return nil
	}
	m := ddlRE.FindStringSubmatch(q)
	if m == nil {
		return nil
	}
	verb := strings.ToUpper(strings.Fields(m[1])[0])
	names := myarrow.LeadingNames(m[2])
	if verb == "ALTER" && len(names) > 1 {
		names = names[:1] // ALTER TABLE names one table
	}
	for _, name := range names {
		if name[0] == "" {
			name[0] = schema
		}
		n := myarrow.CollectionName(name[0], name[1])
		mt := s.tables[n]
		if mt == nil {
			continue
		}
		if verb == "ALTER" {
			if err := s.alter(ctx, mt); err != nil {
				return err
			}
			continue
		}
		if mt.failed {
			continue
		}
		var msg string
		switch verb {
		case "TRUNCATE":
			// The table is empty from the statement's transaction on.
			if err := sinkErr(s.sink.Reset(mt.t.QualifiedName(), s.txn, nil)); err != nil {
				return err
			}
			if mt.state != nil {
				s.undo.truncate(mt.state)
			}
			if mt.restating {
				// The sink gave up the re-snapshot for the reset: the
				// table is empty, and so is its state.
				mt.raw, mt.rawTxn, mt.restating = nil, nil, false
				st, err := NewMySQLKeyState(mt.t)
				if err != nil {
					return s.fail(mt, fmt.Sprintf("%s was truncated at %s: %v", n, s.txnGTID, err))
				}
				mt.state = st
			}
			continue
		case "DROP":
			msg = fmt.Sprintf("%s was dropped at %s; the collection stops here", n, s.txnGTID)
		default:
			msg = fmt.Sprintf("%s was renamed at %s; the collection stops here: re-snapshot it under its new name", n, s.txnGTID)
		}
		if err := s.fail(mt, msg); err != nil {
			return err
		}
	}
	return nil
}

var createRE = regexp.MustCompile("(?is)^\\s*(?:/\\*.*?\\*/\\s*)*CREATE\\s+(?:OR\\s+REPLACE\\s+)?TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?(.*)$")

// adopt starts streaming db.table, created (or first seen) at the open
// transaction, when a TableAdder sink wants it and it is not streamed
// already (or was stopped: dropped, then created again).
func (s *myStreamer) adopt(ctx context.Context, db, table, why string) error {
	ta, ok := s.sink.(TableAdder)
	n := myarrow.CollectionName(db, table)
	if mt := s.tables[n]; !ok || mt != nil && !mt.failed || !ta.Wants(db, table) {
		return nil
	}
	t, err := myarrow.LoadTable(ctx, s.srv.Conn, db, table)
	if errors.Is(err, myarrow.ErrNoTable) {
		return nil // gone again: its DROP or RENAME is further on
	}
	if err != nil {
		return fmt.Errorf("replicate mysql: table %s %s at %s: %w", n, why, s.txnGTID, err)
	}
	had := s.tables[n] != nil && s.tables[n].state != nil
	if err := sinkErr(ta.TableAdded(t, s.txn, s.progress, fmt.Sprintf("%s %s at %s", n, why, s.txnGTID))); err != nil {
		return err
	}
	mt := &myTable{t: t}
	s.tables[n] = mt
	if had {
		return s.restate(mt)
	}
	return nil
}

// alter follows an ALTER TABLE of a streamed table at the open
// transaction: the table is described again (the statement holds its
// metadata lock until it is in the binlog, so the description has it,
// and any later change of the table is further on in the binlog); if
// its columns changed, a TableChanger sink is offered to re-snapshot it
// there and the stream goes on with the new description; without one (or
// when it declines), or when the table is gone (ALTER ... RENAME TO),
// the collection stops with a definite error.
func (s *myStreamer) alter(ctx context.Context, mt *myTable) error {
	n := mt.t.QualifiedName()
	tc, changer := s.sink.(TableChanger)
	if mt.failed && !changer {
		return nil
	}
	t, err := myarrow.LoadTable(ctx, s.srv.Conn, mt.t.Schema, mt.t.Name)
	if errors.Is(err, myarrow.ErrNoTable) {
		if mt.failed {
			return nil
		}
		return s.fail(mt, fmt.Sprintf("%s was renamed (or dropped) at %s; the collection stops here: ingest the table under its new name (a new --tables entry)", n, s.txnGTID))
	}
	if err != nil {
		return fmt.Errorf("replicate mysql: after ALTER TABLE at %s: %w", s.txnGTID, err)
	}
	change := TableChange(mt.t, t)
	if change == "" && mt.state != nil && !slices.Equal(mt.t.PrimaryKey, t.PrimaryKey) {
		// Its rows by key are keyed by the old primary key.
		change = "its primary key changed"
	}
	if change == "" && !mt.failed {
		mt.t = t // an index, a comment, ...: the same columns
		return nil
	}
	if change == "" {
		change = "altered"
	}
	if changer {
		ok, err := tc.TableChanged(t, s.txn, s.progress, fmt.Sprintf("%s at %s: %s", n, s.txnGTID, change))
		if err != nil {
			return sinkErr(err)
		}
		if ok {
			if mt.rb != nil {
				mt.rb.Release()
				mt.rb = nil
			}
			mt.t, mt.failed, mt.checked = t, false, nil
			return s.restate(mt)
		}
	}
	if mt.failed {
		return nil
	}
	return s.fail(mt, fmt.Sprintf("%s was altered at %s (%s); the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", n, s.txnGTID, change, n))
}

// TableChange says how the columns of b differ from those of a (names,
// order, types, nullability, character sets), or "" when they do not.
func TableChange(a, b *myarrow.Table) string {
	if d := arrowutil.FieldsChange(a.Fields(), b.Fields()); d != "" {
		return d
	}
	for i, c := range a.Columns {
		o := b.Columns[i]
		switch {
		case c.ColumnType != o.ColumnType:
			return fmt.Sprintf("column %s is %s, was %s", c.Name, o.ColumnType, c.ColumnType)
		case c.Nullable != o.Nullable:
			return fmt.Sprintf("column %s changed nullability", c.Name)
		case (c.Charset == nil) != (o.Charset == nil) || c.Charset != nil && c.Charset.Name != o.Charset.Name:
			return fmt.Sprintf("column %s changed its character set", c.Name)
		}
	}
	return ""
}

func (s *myStreamer) fail(mt *myTable, msg string) error {
	mt.failed = true
	if mt.rb != nil {
		mt.rb.Release()
		mt.rb = nil
	}
	return sinkErr(s.sink.Error(mt.t.QualifiedName(), s.txn, msg))
}

var systemSchemas = map[string]bool{"mysql": true, "information_schema": true, "performance_schema": true, "sys": true}

// tableMap checks a TABLE_MAP against the schema the collection was first
// read with.
func (s *myStreamer) tableMap(ctx context.Context, ev *replication.TableMapEvent) error {
	name := myarrow.CollectionName(string(ev.Schema), string(ev.Table))
	mt := s.tables[name]
	if mt == nil && !s.all {
		// A table renamed into what the sink wants (TableAdder).
		if err := s.adopt(ctx, string(ev.Schema), string(ev.Table), "first seen in the binlog"); err != nil {
			return err
		}
		if mt = s.tables[name]; mt == nil {
			return nil
		}
	}
	if mt == nil {
		if systemSchemas[strings.ToLower(string(ev.Schema))] {
			return nil
		}
		t := s.cfg.Known[name]
		if t == nil {
			var err error
			t, err = myarrow.LoadTable(ctx, s.srv.Conn, string(ev.Schema), string(ev.Table))
			if err != nil {
				s.cfg.Logger.Warn("replicate mysql: cannot describe a table of the binlog; skipping it", "table", name, "error", err)
				s.tables[name] = &myTable{t: &myarrow.Table{Schema: string(ev.Schema), Name: string(ev.Table)}, failed: true}
				return nil
			}
		}
		mt = &myTable{t: t, state: s.startState(t)}
		s.tables[name] = mt
	}
	if mt.failed || mt.checked == ev {
		return nil
	}
	if mt.checked == nil && s.cfg.Expect != nil {
		if exp := s.cfg.Expect(name); exp != nil {
			if diff := arrowutil.FieldsChange(exp.Fields(), mt.t.Fields()); diff != "" {
				return s.fail(mt, fmt.Sprintf("the columns of %s changed while it was not followed (%s), seen at %s; the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", name, diff, s.txnGTID, name))
			}
		}
	}
	var names []string
	if len(ev.ColumnName) > 0 {
		names = ev.ColumnNameString()
	}
	if diff := mt.t.CheckBinlogColumns(ev.ColumnType, ev.ColumnMeta, names); diff != "" {
		return s.fail(mt, fmt.Sprintf("%s was altered at %s (%s); the collection stops here: re-snapshot it (rtrctl ingest --resnapshot %s)", name, s.txnGTID, diff, name))
	}
	mt.checked = ev
	return nil
}

// rows converts a rows event into updates at the transaction's time.
func (s *myStreamer) rows(et replication.EventType, ev *replication.RowsEvent) error {
	if ev.Table == nil {
		return nil
	}
	name := myarrow.CollectionName(string(ev.Table.Schema), string(ev.Table.Table))
	mt := s.tables[name]
	if mt == nil || mt.failed || !s.inTxn {
		return nil
	}
	if mt.restating {
		mt.rawTxn = append(mt.rawTxn, holdRows(s.txn, s.txnGTID, ev))
		return nil
	}
	if mt.state == nil && notFull(ev) {
		if ok, err := s.keyState(mt, ev); !ok || err != nil {
			return err
		}
	}
	if mt.rb == nil {
		mt.rb = myarrow.NewRowBuilder(s.cfg.Mem, mt.t, s.domain, s.cfg.Source)
	}
	var diffs []int64
	switch ev.Type() {
	case replication.EnumRowsEventTypeInsert:
		diffs = []int64{1}
	case replication.EnumRowsEventTypeDelete:
		diffs = []int64{-1}
	case replication.EnumRowsEventTypeUpdate:
		diffs = []int64{-1, 1}
	default:
		return nil
	}
	touched := false
	for _, t := range s.touched {
		if t == mt {
			touched = true
		}
	}
	if !touched {
		s.touched = append(s.touched, mt)
	}
	if mt.state != nil {
		return s.rowsKeyed(mt, ev)
	}
	for i, row := range ev.Rows {
		s.emittedTxn++
		if s.skip > 0 && s.emittedTxn <= s.skip {
			continue
		}
		d := diffs[i%len(diffs)]
		if err := mt.rb.AppendBinlog(row, s.txn.Pos, d, s.txn.Partition); err != nil {
			return s.fail(mt, fmt.Sprintf("cannot convert a row of %s at %s: %v", name, s.txnGTID, err))
		}
		if mt.rb.Rows() >= s.cfg.FlushRows {
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush hands every buffered record of the open transaction to the sink,
// so that the handed updates are always the transaction's first ones.
func (s *myStreamer) flush() error {
	for _, mt := range s.touched {
		if mt.rb == nil || mt.rb.Rows() == 0 {
			continue
		}
		n := mt.rb.Rows()
		rec := mt.rb.NewRecord()
		err := s.sink.Data(mt.t.QualifiedName(), rec)
		rec.Release()
		if err != nil {
			return sinkErr(err)
		}
		s.handed += n
	}
	if s.skip > 0 && s.emittedTxn > s.skip {
		s.handed += s.skip
		s.skip = 0
	}
	// Handed over: skipped when the server sends it again.
	return s.undo.forget()
}

// commit ends the open transaction: its records, then progress.
func (s *myStreamer) commit() error {
	if !s.inTxn {
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	s.inTxn, s.skip, s.touched = false, 0, nil
	for _, mt := range s.tables {
		if len(mt.rawTxn) > 0 {
			mt.raw, mt.rawTxn = append(mt.raw, mt.rawTxn...), nil
		}
	}
	next := s.txn.Pos + 1
	if s.progress.Get(s.txn.Partition) < next {
		s.progress = s.progress.With(s.txn.Partition, next)
	}
	if s.srv.MariaDB {
		g, err := mysql.ParseMariadbGTID(s.txnGTID)
		if err == nil {
			err = s.resume.(*mysql.MariadbGTIDSet).AddSet(g)
		}
		if err != nil {
			return fmt.Errorf("track gtid %s: %w", s.txnGTID, err)
		}
	} else if err := s.resume.Update(s.txnGTID); err != nil {
		return fmt.Errorf("track gtid %s: %w", s.txnGTID, err)
	}
	if err := s.report(); err != nil {
		return err
	}
	if s.stopped() {
		return errStopAt
	}
	return nil
}

// checkIdle reads the server's GTID position G and then its binlog end P.
// Every transaction in G lies before P; once the stream has read up to P,
// all of them have been received, so progress may join G.
func (s *myStreamer) checkIdle(ctx context.Context) error {
	var g frontier.Frontier
	if s.srv.MariaDB {
		var err error
		if _, g, err = s.srv.Position(ctx); err != nil {
			return err
		}
	} else {
		// Upper, not Prefix: the probe (and so recency) uses the upper.
		r, err := upstream.Execute(ctx, s.srv.Conn, "SELECT @@global.gtid_executed")
		if err != nil {
			return fmt.Errorf("read gtid position: %w", err)
		}
		v, _ := r.GetString(0, 0)
		set, err := frontier.ParseGTIDSet(v)
		if err != nil {
			return err
		}
		g = set.Upper()
	}
	file, pos, err := s.binlogEnd(ctx)
	if err != nil {
		return err
	}
	s.idle = &idleMark{f: g, file: file, pos: pos}
	if !s.inTxn {
		return s.reachIdle()
	}
	return nil
}

func (s *myStreamer) binlogEnd(ctx context.Context) (string, uint32, error) {
	r, err := upstream.Execute(ctx, s.srv.Conn, "SHOW MASTER STATUS")
	if err != nil {
		// MySQL 8.4 renamed it.
		var err2 error
		if r, err2 = upstream.Execute(ctx, s.srv.Conn, "SHOW BINARY LOG STATUS"); err2 != nil {
			return "", 0, fmt.Errorf("read binlog position: %w", err)
		}
	}
	if r.RowNumber() == 0 {
		return "", 0, fmt.Errorf("read binlog position: %w: SHOW MASTER STATUS is empty", ErrBinlogSettings)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	return file, uint32(pos), nil
}

// reachIdle joins the idle mark into progress once the stream is there.
func (s *myStreamer) reachIdle() error {
	m := s.idle
	if s.file == "" || !PosAtLeast(s.file, s.pos, m.file, m.pos) {
		return nil
	}
	s.idle = nil
	j, err := frontier.Join(s.progress, m.f)
	if err != nil {
		return err
	}
	s.progress = j
	// Also when it did not move: a re-snapshot that finished meanwhile
	// is handed over (cfg.Limit).
	if err := s.report(); err != nil {
		return err
	}
	if s.stopped() {
		return errStopAt
	}
	return nil
}

// PosAtLeast compares binlog coordinates: file names by their numeric
// extension (mysql-bin.000012), then positions.
func PosAtLeast(file string, pos uint32, wantFile string, wantPos uint32) bool {
	a, b := binlogIndex(file), binlogIndex(wantFile)
	if a != b {
		return a > b
	}
	return pos >= wantPos
}

func binlogIndex(f string) uint64 {
	i := strings.LastIndexByte(f, '.')
	n, err := strconv.ParseUint(f[i+1:], 10, 64)
	if err != nil {
		return 0
	}
	return n
}
