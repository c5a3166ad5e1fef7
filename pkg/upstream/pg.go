package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
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
	// ssl are the DSN's (or environment's) TLS parameters, for Recorded.
	ssl url.Values
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
	return &Postgres{cfg: cfg, ssl: sslParams(dsnStr)}, nil
}

// pgSSLParams are the TLS parameters a recorded DSN keeps (not
// sslpassword, a secret), with their environment variables.
var pgSSLParams = [][2]string{{"sslmode", "PGSSLMODE"}, {"sslrootcert", "PGSSLROOTCERT"}, {"sslcert", "PGSSLCERT"}, {"sslkey", "PGSSLKEY"}, {"sslsni", "PGSSLSNI"}}

var kvParam = regexp.MustCompile(`(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

// sslParams reads the TLS parameters of a URL or key=value DSN, else of
// the environment (as pgx does).
func sslParams(dsnStr string) url.Values {
	given := map[string]string{}
	if u, err := url.Parse(dsnStr); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		for k, v := range u.Query() {
			given[k] = v[0]
		}
	} else {
		for _, m := range kvParam.FindAllStringSubmatch(dsnStr, -1) {
			v := m[2]
			if strings.HasPrefix(v, "'") && len(v) >= 2 {
				v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v[1 : len(v)-1])
			}
			given[m[1]] = v
		}
	}
	q := url.Values{}
	for _, p := range pgSSLParams {
		v, ok := given[p[0]]
		if !ok {
			v = os.Getenv(p[1])
		}
		if v != "" {
			q.Set(p[0], v)
		}
	}
	return q
}

// Recorded is the form an ingest records in the store: String with the
// DSN's TLS parameters (sslmode, sslrootcert, sslcert, sslkey: file
// names, no secrets), so that a prober of the recorded upstream connects
// as the ingest did.
func (p *Postgres) Recorded() string {
	if len(p.ssl) == 0 {
		return p.String()
	}
	return p.String() + "?" + p.ssl.Encode()
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
	return &Postgres{cfg: cfg, ssl: p.ssl}
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
	if h := TLSHint(err, "sslrootcert in --dsn", "the host in --dsn"); h != "" {
		return nil, hint.Wrap(fmt.Errorf("connect to %s: %w: TLS: %w", masked, ErrConnect, cause), h)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "28000" && strings.Contains(pgErr.Message, "no encryption") {
		// pg_hba.conf has only hostssl lines for this client.
		return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: the server accepts only TLS connections here", masked, ErrConnect), err, cfg.Password),
			"connect with TLS: add sslmode=verify-full&sslrootcert=/path/ca.pem (and sslcert/sslkey if the server wants a client certificate) to --dsn")
	}
	if errors.As(err, &pgErr) && pgErr.Code == "28000" && (strings.Contains(pgErr.Message, "client certificate") || strings.Contains(pgErr.Message, "certificate authentication")) {
		return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: the server wants a valid client certificate for user %q: %s", masked, ErrAuth, cfg.User, pgErr.Message), err, cfg.Password),
			"add sslcert=/path/client.pem&sslkey=/path/client-key.pem to --dsn: a certificate signed by the server's ssl_ca_file CA, whose common name is the user")
	}
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w for user %q (%s)", masked, ErrAuth, cfg.User, pgErr.Code), err, cfg.Password),
				"check the user and password in --dsn (or PGUSER/PGPASSWORD)")
		case "3D000":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: database %q does not exist", masked, ErrConnect, cfg.Database), err, cfg.Password),
				"check the database name in --dsn (or PGDATABASE)")
		case "42501":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: user %q may not connect: %s", masked, ErrPrivilege, cfg.User, pgErr.Message), err, cfg.Password),
				PrivilegeHint(err, cfg.User, cfg.Database))
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
	// ErrPrivilege marks a user the server knows that lacks a privilege.
	ErrPrivilege = errors.New("missing privilege")
)

// PrivilegeHint says what to grant for a PostgreSQL insufficient_privilege
// error (42501) of user on database, or "" for another error: a
// replication connection needs the REPLICATION attribute, a connection
// the CONNECT privilege.
func PrivilegeHint(err error, user, database string) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return ""
	}
	role := pgx.Identifier{user}.Sanitize()
	switch msg := strings.ToLower(pgErr.Message); {
	case strings.Contains(msg, "replication") || strings.Contains(msg, "wal sender") || strings.Contains(msg, "walsender"):
		return fmt.Sprintf("logical replication needs the REPLICATION attribute: run as a superuser: ALTER ROLE %s REPLICATION", role)
	case strings.Contains(msg, "database"):
		return fmt.Sprintf("run as the database owner: GRANT CONNECT ON DATABASE %s TO %s", pgx.Identifier{database}.Sanitize(), role)
	}
	return fmt.Sprintf("grant user %s what the message names (docs/operations.md lists the privileges rtrctl needs)", role)
}
