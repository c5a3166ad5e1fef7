package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// The probe queries. A walsender sends only flushed WAL, and a
// transaction that has written WAL and stays open leaves the insert
// position beyond the flushed one until something flushes it: another
// commit, or the next running-transactions record (about every 15 s).
// When the insert position is beyond the flush position, flushingProbe
// makes its own statement's transaction commit synchronously (it takes a
// transaction id, and synchronous_commit is on for it whatever the
// server's setting), which flushes WAL past the position it returns, so
// the stream can reach that position at once. On an idle or caught-up
// server it writes nothing. The CTE is materialized so the position
// compared is the one returned.
const (
	plainProbe    = "SELECT pg_current_wal_insert_lsn()::text"
	flushingProbe = `WITH p AS MATERIALIZED (SELECT pg_current_wal_insert_lsn() AS l, pg_current_wal_flush_lsn() AS f)
SELECT CASE WHEN f < l THEN l::text || left(set_config('synchronous_commit', 'on', true) || pg_current_xact_id()::text, 0) ELSE l::text END FROM p`
	// readOnlyTransaction is SQLSTATE read_only_sql_transaction.
	readOnlyTransaction = "25006"
)

// Postgres probes pg_current_wal_insert_lsn(), flushing WAL when it is
// beyond the flushed position (see flushingProbe).
type Postgres struct {
	up *upstream.Postgres
	// noFlush is set once the server refused flushingProbe's transaction
	// id (a read-only session).
	noFlush bool

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
	return CheckWALLevel(level)
}

// CheckWALLevel is CheckLogical for a wal_level read already.
func CheckWALLevel(level string) error {
	if level != "logical" {
		return hint.Wrap(fmt.Errorf("postgres wal_level is %q, but logical replication needs wal_level=logical", level),
			"run: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")
	}
	return nil
}

// Probe returns pg_current_wal_insert_lsn() (see flushingProbe).
func (p *Postgres) Probe(ctx context.Context) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(ctx); err != nil {
		return Result{}, err
	}
	query := flushingProbe
	if p.noFlush {
		query = plainProbe
	}
	var text string
	err := p.conn.QueryRow(ctx, query).Scan(&text)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && !p.noFlush && pgErr.Code == readOnlyTransaction {
		// A read-only session cannot commit a transaction id; probe as
		// before, at the price of waiting for unflushed WAL.
		p.noFlush = true
		err = p.conn.QueryRow(ctx, plainProbe).Scan(&text)
	}
	if err != nil {
		p.drop()
		return Result{}, fmt.Errorf("probe postgres %s: %w", p.up, err)
	}
	lsn, err := frontier.ParseLSN(text)
	if err != nil {
		return Result{}, fmt.Errorf("probe postgres: %w", err)
	}
	lsn = VisibleInsertLSN(lsn, p.block, p.seg)
	return Result{Frontier: frontier.Single(frontier.DomainLSN, uint64(lsn)), Native: lsn.String(), Flavor: "postgres"}, nil
}

// connect opens the connection unless it is open; p.mu is held.
func (p *Postgres) connect(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	conn, err := p.up.Connect(ctx)
	if err != nil {
		return fmt.Errorf("probe postgres: %w", err)
	}
	var level string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_level'), current_setting('wal_block_size')::bigint, pg_size_bytes(current_setting('wal_segment_size'))").Scan(&level, &p.block, &p.seg); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("probe postgres: read wal_level and wal_block_size: %w", err)
	}
	if err := CheckWALLevel(level); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("probe postgres: %w", err)
	}
	p.conn = conn
	return nil
}

// Warm implements Warmer: it opens the connection now, so that the first
// Probe costs one round trip like the others. A failure is left for the
// next Probe to retry and report.
func (p *Postgres) Warm(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.connect(ctx)
}

// drop closes a connection that failed, to reconnect next time.
func (p *Postgres) drop() {
	p.conn.Close(context.Background())
	p.conn = nil
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
