package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
)

// Postgres is a parsed PostgreSQL connection string. It is immutable:
// ConnConfig hands out copies and With derives a new one.
type Postgres struct {
	cfg *pgx.ConnConfig
}

// ParsePostgres parses a PostgreSQL DSN, a URL or key=value; empty means
// the PG* environment variables (and ~/.pgpass). Errors carry a hint and
// never contain the password.
func ParsePostgres(dsnStr string) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(dsnStr)
	if err != nil {
		// pgx's parse errors quote the DSN with the password redacted, but
		// say nothing useful beyond the reason; keep our own wording.
		reason := err.Error()
		if i := strings.LastIndex(reason, "`: "); strings.HasPrefix(reason, "cannot parse `") && i > 0 {
			reason = reason[i+3:]
		}
		return nil, hint.Wrap(
			fmt.Errorf("parse postgres dsn %q: %s: %w", dsn.MaskPG(dsnStr), dsn.Scrub(reason, dsn.Secrets(dsnStr)...), dsn.ErrMalformed),
			"use postgres://user:pass@host:5432/db or \"host=... port=... user=... dbname=...\"")
	}
	if strings.Contains(cfg.Host, "@") {
		// pgx splits userinfo at the first '@': the rest of a password
		// holding an unescaped '@' would be taken for the host (and shown).
		return nil, hint.Wrap(fmt.Errorf("parse postgres dsn %q: the password holds an unescaped '@': %w", dsn.MaskPG(dsnStr), dsn.ErrMalformed),
			"write '@' in a URL's password as %40 (or use the key=value form, or PGPASSWORD)")
	}
	if !strings.Contains(dsnStr, "default_query_exec_mode") {
		// One round trip per query, none to prepare it: rtrctl's queries
		// are mostly one-off catalog reads, and a server 100 ms away pays
		// for every round trip (parameters are typed by the server, as
		// when preparing; results come as text).
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return &Postgres{cfg: cfg}, nil
}

// String prints the upstream as a URL without its password (and without
// parameters): postgres://user:xxxxx@host:port/db. It is also the form an
// ingest records in the store.
func (p *Postgres) String() string {
	s := "postgres://"
	if p.cfg.User != "" {
		s += p.cfg.User
		if p.cfg.Password != "" {
			s += ":xxxxx"
		}
		s += "@"
	}
	return s + p.Addr() + "/" + p.cfg.Database
}

// Addr is host:port.
func (p *Postgres) Addr() string {
	return net.JoinHostPort(p.cfg.Host, strconv.Itoa(int(p.cfg.Port)))
}

// Database is the database connected to.
func (p *Postgres) Database() string { return p.cfg.Database }

// User is the user connected as.
func (p *Postgres) User() string { return p.cfg.User }

// Password is the password, for scrubbing it from library errors and
// logs; never print it.
func (p *Postgres) Password() string { return p.cfg.Password }

// ConnConfig returns a copy of the connection configuration, e.g. for a
// replication connection (pgconn) of the same upstream.
func (p *Postgres) ConnConfig() *pgx.ConnConfig { return p.cfg.Copy() }

// With returns the upstream with edit applied to a copy of its connection
// configuration: session settings, a replication connection. The
// original is unchanged.
func (p *Postgres) With(edit func(*pgx.ConnConfig)) *Postgres {
	cfg := p.cfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	edit(cfg)
	return &Postgres{cfg: cfg}
}

// Connect opens a connection and turns the usual failures into errors
// with hints; the driver's error stays in the chain, scrubbed of the
// password. It checks nothing about the server's settings.
func (p *Postgres) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg := p.cfg
	masked := p.String()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("connect to %s: %w", masked, ctx.Err())
	}
	// The cause stays in the chain (internal/retry classifies it: a
	// refused connection or a server starting up is worth retrying) with
	// its message scrubbed of the password.
	cause := dsn.ScrubError(err, cfg.Password)
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		// "connect: connection refused", without pgx's per-address list.
		cause = &dsn.Error{Msg: dsn.Scrub(opErr.Err.Error(), cfg.Password), Causes: []error{err}}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w for user %q (%s)", masked, ErrAuth, cfg.User, pgErr.Code), err, cfg.Password),
				"check the user and password in --dsn (or PGUSER/PGPASSWORD)")
		case "3D000":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: database %q does not exist", masked, ErrConnect, cfg.Database), err, cfg.Password),
				"check the database name in --dsn (or PGDATABASE)")
		}
	}
	return nil, hint.Wrap(fmt.Errorf("connect to %s: %w: %w", masked, ErrConnect, cause),
		fmt.Sprintf("is PostgreSQL running and reachable at %s? check --dsn (or PGHOST/PGPORT)", p.Addr()))
}

var (
	// ErrConnect marks a failed connection (the cause, in the chain, says
	// whether it is worth retrying).
	ErrConnect = errors.New("cannot connect")
	// ErrAuth marks rejected credentials.
	ErrAuth = errors.New("authentication failed")
)
