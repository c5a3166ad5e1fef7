package probe

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Postgres probes pg_current_wal_insert_lsn().
type Postgres struct {
	up *upstream.Postgres

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

// NewPostgres probes the upstream u without connecting yet.
func NewPostgres(u *upstream.Postgres) *Postgres {
	return &Postgres{up: u}
}

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
		conn, err := p.up.Connect(ctx)
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
		return Result{}, fmt.Errorf("probe postgres %s: %w", p.up, err)
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
