package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
)

// MySQL is a parsed MySQL/MariaDB connection string.
type MySQL struct {
	d   dsn.MySQL
	tls mysqlTLS
}

// ParseMySQL parses either DSN form, user:pass@tcp(host:port)/db or
// mysql://user:pass@host:port/db (internal/dsn), with its TLS parameters
// (mysql_tls.go). Errors carry a hint and never contain the password.
func ParseMySQL(s string) (*MySQL, error) {
	d, err := dsn.ParseMySQL(s)
	if err != nil {
		return nil, hint.Wrap(err, "use user:pass@tcp(host:3306)/db or mysql://user:pass@host:3306/db (or set RTR_MYSQL_DSN)")
	}
	t, err := parseMySQLTLS(d)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn %s: %w", d, err)
	}
	return &MySQL{d: d, tls: t}, nil
}

// String prints the upstream in URL form with the password masked.
func (m *MySQL) String() string { return m.d.String() }

// Recorded is the form an ingest records in the store: String with the
// TLS parameters (file names and mode, no secrets), so that a prober of
// the recorded upstream connects as the ingest did.
func (m *MySQL) Recorded() string { return m.d.String() + m.tls.query() }

// Addr is host:port.
func (m *MySQL) Addr() string { return m.d.Addr() }

// Host is the server's host.
func (m *MySQL) Host() string { return m.d.Host }

// Port is the server's port.
func (m *MySQL) Port() int { return m.d.Port }

// User is the user connected as.
func (m *MySQL) User() string { return m.d.User }

// Password is the password, for scrubbing it from library errors and
// logs (and for the binlog syncer's configuration); never print it.
func (m *MySQL) Password() string { return m.d.Password }

// Database is the default database ("" for none).
func (m *MySQL) Database() string { return m.d.Database }

// Params are the DSN's parameters (a copy).
func (m *MySQL) Params() map[string]string { return maps.Clone(m.d.Params) }

// Connect opens a connection to the DSN's database and turns the usual
// failures into errors with hints; the driver's error stays in the chain,
// scrubbed of the password.
func (m *MySQL) Connect(ctx context.Context) (*client.Conn, error) {
	d := m.d
	conn, err := m.connect(ctx, m.tls.cfg)
	if err != nil && m.tls.mode == tlsPreferred && errors.Is(err, errNoServerTLS) {
		// preferred: plaintext when the server offers no TLS.
		conn, err = m.connect(ctx, nil)
	}
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("connect to %s: %w", d, ctx.Err())
	}
	if err := m.explainTLS(ctx, err); err != nil {
		return nil, err
	}
	var myErr *mysql.MyError
	if errors.As(err, &myErr) {
		switch myErr.Code {
		case mysql.ER_ACCESS_DENIED_ERROR:
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: access denied for user %q", d, ErrAuth, d.User), err, d.Password),
				"check the user and password in --dsn (or RTR_MYSQL_DSN)")
		case mysql.ER_BAD_DB_ERROR:
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: database %q does not exist", d, ErrConnect, d.Database), err, d.Password),
				"check the database name in --dsn (or RTR_MYSQL_DSN), or leave it out: --tables names db.table")
		case mysql.ER_DBACCESS_DENIED_ERROR:
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: user %q may not use database %q", d, ErrPrivilege, d.User, d.Database), err, d.Password),
				fmt.Sprintf("run as an administrator: GRANT SELECT ON `%s`.* TO '%s'@'%%'", d.Database, d.User))
		}
	}
	// The cause stays in the chain, scrubbed of the password: callers
	// retry a refused connection or a server shutting down.
	return nil, hint.Wrap(fmt.Errorf("connect to %s: %w: %w", d, ErrConnect, dsn.ScrubError(err, d.Password)),
		fmt.Sprintf("is the MySQL/MariaDB server running and reachable at %s? check --dsn (or RTR_MYSQL_DSN)", d.Addr()))
}

// connect opens a connection, with TLS when cfg is set.
func (m *MySQL) connect(ctx context.Context, cfg *tls.Config) (*client.Conn, error) {
	d := m.d
	var opts []client.Option
	if cfg != nil {
		opts = append(opts, func(c *client.Conn) error { c.SetTLSConfig(cfg.Clone()); return nil })
	}
	conn, err := client.ConnectWithContext(ctx, d.Addr(), d.User, d.Password, d.Database, 10*time.Second, opts...)
	if err != nil && cfg != nil && strings.Contains(err.Error(), "does not support TLS") {
		err = fmt.Errorf("%w: %w", errNoServerTLS, err)
	}
	return conn, err
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
