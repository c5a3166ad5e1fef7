package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Postgres probes pg_current_wal_insert_lsn().
type Postgres struct {
	cfg    *pgx.ConnConfig
	masked string

	mu   sync.Mutex
	conn *pgx.Conn
	// block and seg are the server's wal_block_size and wal_segment_size.
	block, seg uint64
}

// WAL page header sizes (PostgreSQL's SizeOfXLogShortPHD and
// SizeOfXLogLongPHD on 64-bit builds).
const (
	shortPageHeader = 24
	longPageHeader  = 40
)

// VisibleInsertLSN maps pg_current_wal_insert_lsn() to the end of the last
// record inserted. When the insert position sits at the start of a page,
// the server reports it past the page header that the next record will
// follow; no record ends inside a header, and replication progress stops
// at the page boundary, so an upper there would wait for WAL that may never
// come on an idle server.
func VisibleInsertLSN(l frontier.LSN, block, seg uint64) frontier.LSN {
	v := uint64(l)
	switch {
	case seg > 0 && v%seg == longPageHeader:
		return frontier.LSN(v - longPageHeader)
	case block > 0 && v%block == shortPageHeader && (seg == 0 || v%seg != shortPageHeader):
		return frontier.LSN(v - shortPageHeader)
	}
	return l
}

// NewPostgres parses dsn (URL or key=value; empty means the PG* environment
// variables) without connecting.
func NewPostgres(dsnStr string) (*Postgres, error) {
	cfg, err := ParsePostgresDSN(dsnStr)
	if err != nil {
		return nil, err
	}
	return &Postgres{cfg: cfg, masked: MaskedPostgres(cfg)}, nil
}

// ParsePostgresDSN parses a PostgreSQL DSN; errors never contain the password.
func ParsePostgresDSN(dsnStr string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsnStr)
	if err != nil {
		// pgx's parse errors quote the DSN with the password redacted, but
		// say nothing useful beyond the reason; keep our own wording.
		reason := err.Error()
		if i := strings.LastIndex(reason, "`: "); strings.HasPrefix(reason, "cannot parse `") && i > 0 {
			reason = reason[i+3:]
		}
		return nil, hint.Wrap(
			fmt.Errorf("parse postgres dsn %q: %s: %w", dsn.MaskPG(dsnStr), dsn.Scrub(reason, passwordOf(dsnStr)), dsn.ErrMalformed),
			"use postgres://user:pass@host:5432/db or \"host=... port=... user=... dbname=...\"")
	}
	return cfg, nil
}

func passwordOf(dsnStr string) string {
	if cfg, err := pgx.ParseConfig(dsnStr); err == nil {
		return cfg.Password
	}
	return ""
}

// MaskedPostgres prints a connection config as a URL without its password.
func MaskedPostgres(cfg *pgx.ConnConfig) string {
	s := "postgres://"
	if cfg.User != "" {
		s += cfg.User
		if cfg.Password != "" {
			s += ":xxxxx"
		}
		s += "@"
	}
	return s + net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) + "/" + cfg.Database
}

// ConnectPostgres connects with cfg and turns the usual failures into
// errors with hints. It checks nothing about the server's settings.
func ConnectPostgres(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	masked := MaskedPostgres(cfg)
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
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w for user %q (%s)", masked, errAuth, cfg.User, pgErr.Code), err, cfg.Password),
				"check the user and password in --dsn (or PGUSER/PGPASSWORD)")
		case "3D000":
			return nil, hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: database %q does not exist", masked, errConnect, cfg.Database), err, cfg.Password),
				"check the database name in --dsn (or PGDATABASE)")
		}
	}
	return nil, hint.Wrap(fmt.Errorf("connect to %s: %w: %w", masked, errConnect, cause),
		fmt.Sprintf("is PostgreSQL running and reachable at %s? check --dsn (or PGHOST/PGPORT)", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))))
}

var (
	errConnect = errors.New("cannot connect")
	errAuth    = errors.New("authentication failed")
)

// CheckLogical fails with a hint when the server's wal_level is not logical.
func CheckLogical(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return hint.Wrap(fmt.Errorf("postgres wal_level is %q, but logical replication needs wal_level=logical", level),
			"run: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")
	}
	return nil
}

// Probe returns pg_current_wal_insert_lsn().
func (p *Postgres) Probe(ctx context.Context) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		conn, err := ConnectPostgres(ctx, p.cfg)
		if err != nil {
			return Result{}, fmt.Errorf("probe postgres: %w", err)
		}
		if err := CheckLogical(ctx, conn); err != nil {
			conn.Close(context.Background())
			return Result{}, fmt.Errorf("probe postgres: %w", err)
		}
		if err := conn.QueryRow(ctx, "SELECT current_setting('wal_block_size')::bigint, pg_size_bytes(current_setting('wal_segment_size'))").Scan(&p.block, &p.seg); err != nil {
			conn.Close(context.Background())
			return Result{}, fmt.Errorf("probe postgres: read wal_block_size: %w", err)
		}
		p.conn = conn
	}
	var text string
	if err := p.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
		p.conn.Close(context.Background())
		p.conn = nil
		return Result{}, fmt.Errorf("probe postgres %s: %w", p.masked, err)
	}
	lsn, err := frontier.ParseLSN(text)
	if err != nil {
		return Result{}, fmt.Errorf("probe postgres: %w", err)
	}
	lsn = VisibleInsertLSN(lsn, p.block, p.seg)
	return Result{Frontier: frontier.Single(frontier.DomainLSN, uint64(lsn)), Native: lsn.String(), Flavor: "postgres"}, nil
}

// Close closes the connection, if any.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		err := p.conn.Close(context.Background())
		p.conn = nil
		return err
	}
	return nil
}
