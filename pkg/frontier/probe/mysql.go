package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// MySQL probes @@global.gtid_executed (MySQL) or @@global.gtid_binlog_pos
// (MariaDB); the flavor is detected from the server version.
type MySQL struct {
	dsn dsn.MySQL

	mu      sync.Mutex
	conn    *client.Conn
	mariadb bool
}

// NewMySQL parses dsnStr (user:pass@tcp(host:port)/db or
// mysql://user:pass@host:port/db) without connecting.
func NewMySQL(dsnStr string) (*MySQL, error) {
	d, err := dsn.ParseMySQL(dsnStr)
	if err != nil {
		return nil, hint.Wrap(err, "use user:pass@tcp(host:3306)/db or mysql://user:pass@host:3306/db (or set RTR_MYSQL_DSN)")
	}
	return &MySQL{dsn: d}, nil
}

// ConnectMySQL connects and turns the usual failures into errors with hints.
func ConnectMySQL(ctx context.Context, d dsn.MySQL) (*client.Conn, error) {
	conn, err := client.ConnectWithContext(ctx, d.Addr(), d.User, d.Password, d.Database, 10*time.Second)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("connect to %s: %w", d, ctx.Err())
	}
	var myErr *mysql.MyError
	if errors.As(err, &myErr) && myErr.Code == mysql.ER_ACCESS_DENIED_ERROR {
		return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: access denied for user %q", d, errAuth, d.User), err, d.Password),
			"check the user and password in --dsn (or RTR_MYSQL_DSN)")
	}
	// The cause stays in the chain, scrubbed of the password: callers
	// retry a refused connection or a server shutting down.
	return nil, hint.Wrap(fmt.Errorf("connect to %s: %w: %w", d, errConnect, dsn.ScrubError(err, d.Password)),
		fmt.Sprintf("is the MySQL/MariaDB server running and reachable at %s? check --dsn (or RTR_MYSQL_DSN)", d.Addr()))
}

// Execute runs one statement, honouring ctx by closing the connection when
// ctx ends first (the client library has no context support for queries).
func Execute(ctx context.Context, conn *client.Conn, query string, args ...any) (*mysql.Result, error) {
	type out struct {
		r   *mysql.Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		r, err := conn.Execute(query, args...)
		ch <- out{r, err}
	}()
	select {
	case o := <-ch:
		return o.r, o.err
	case <-ctx.Done():
		conn.Close()
		<-ch
		return nil, ctx.Err()
	}
}

// IsMariaDB reports whether conn is a MariaDB server.
func IsMariaDB(ctx context.Context, conn *client.Conn) (bool, error) {
	r, err := Execute(ctx, conn, "SELECT VERSION()")
	if err != nil {
		return false, fmt.Errorf("read server version: %w", err)
	}
	v, err := r.GetString(0, 0)
	if err != nil {
		return false, fmt.Errorf("read server version: %w", err)
	}
	return strings.Contains(strings.ToLower(v), "mariadb"), nil
}

// Probe returns the upstream GTID frontier.
func (m *MySQL) Probe(ctx context.Context) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		conn, err := ConnectMySQL(ctx, m.dsn)
		if err != nil {
			return Result{}, fmt.Errorf("probe mysql: %w", err)
		}
		maria, err := IsMariaDB(ctx, conn)
		if err != nil {
			conn.Close()
			return Result{}, fmt.Errorf("probe mysql %s: %w", m.dsn, err)
		}
		m.conn, m.mariadb = conn, maria
	}
	res, err := m.probe(ctx)
	if err != nil && hint.Of(err) == "" {
		// A broken connection: reconnect next time.
		m.conn.Close()
		m.conn = nil
	}
	return res, err
}

func (m *MySQL) probe(ctx context.Context) (Result, error) {
	if m.mariadb {
		r, err := Execute(ctx, m.conn, "SELECT @@global.log_bin, @@global.gtid_binlog_pos")
		if err != nil {
			return Result{}, fmt.Errorf("probe mariadb %s: %w", m.dsn, err)
		}
		logBin, _ := r.GetInt(0, 0)
		if logBin == 0 {
			return Result{}, hint.Wrap(fmt.Errorf("probe mariadb %s: the binary log is off (log_bin=0), so there are no GTIDs to follow", m.dsn),
				"start mariadbd with --log-bin --binlog-format=ROW --binlog-row-image=FULL and a --server-id (or set them in my.cnf) and restart")
		}
		s, _ := r.GetString(0, 1)
		pos, err := frontier.ParseMariaDBPos(s)
		if err != nil {
			return Result{}, fmt.Errorf("probe mariadb %s: %w", m.dsn, err)
		}
		return Result{Frontier: pos.Upper(), Native: pos.String(), Flavor: "mariadb"}, nil
	}
	r, err := Execute(ctx, m.conn, "SELECT @@global.log_bin, @@global.gtid_mode, @@global.gtid_executed")
	if err != nil {
		return Result{}, fmt.Errorf("probe mysql %s: %w", m.dsn, err)
	}
	logBin, _ := r.GetInt(0, 0)
	if logBin == 0 {
		return Result{}, hint.Wrap(fmt.Errorf("probe mysql %s: the binary log is off (log_bin=0)", m.dsn),
			"start mysqld with --log-bin --binlog-format=ROW --binlog-row-image=FULL --gtid-mode=ON --enforce-gtid-consistency=ON")
	}
	mode, _ := r.GetString(0, 1)
	if !strings.EqualFold(mode, "ON") {
		return Result{}, hint.Wrap(fmt.Errorf("probe mysql %s: gtid_mode is %s, but rtrctl needs GTIDs", m.dsn, mode),
			"run SET GLOBAL enforce_gtid_consistency=ON and step SET GLOBAL gtid_mode through OFF_PERMISSIVE, ON_PERMISSIVE to ON (or start with --gtid-mode=ON --enforce-gtid-consistency=ON)")
	}
	s, _ := r.GetString(0, 2)
	set, err := frontier.ParseGTIDSet(s)
	if err != nil {
		return Result{}, fmt.Errorf("probe mysql %s: %w", m.dsn, err)
	}
	return Result{Frontier: set.Upper(), Native: set.String(), Flavor: "mysql"}, nil
}

// Close closes the connection, if any.
func (m *MySQL) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		err := m.conn.Close()
		m.conn = nil
		return err
	}
	return nil
}
