// Package probe fetches the upstream (visible) frontier of each source kind:
// everything visible upstream at the moment of the call lies below it.
//
//   - PostgreSQL: pg_current_wal_insert_lsn(). Not pg_current_wal_lsn(): with
//     synchronous_commit=off a commit is visible before the WAL write
//     position passes it, so the write position can make recency stale.
//   - MySQL: @@global.gtid_executed (next = highest transaction number + 1
//     per server UUID).
//   - MariaDB: @@global.gtid_binlog_pos (next = seq + 1 per domain).
//   - Kafka: per partition, the last stable offset (read_committed).
//
// A Prober keeps its connection open between probes so a daemon serving
// many waiters does not open one connection per probe; it reconnects after
// an error.
package probe

import (
	"context"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Result is one probe's answer.
type Result struct {
	// Frontier is the upstream frontier, an upper.
	Frontier frontier.Frontier
	// Native is the position as the source prints it (an LSN, a GTID set, a
	// MariaDB GTID position, per-partition offsets).
	Native string
	// Flavor names the server kind ("postgres", "mysql", "mariadb", "kafka").
	Flavor string
}

// Prober fetches the upstream frontier of one source.
type Prober interface {
	// Probe returns the frontier visible upstream now.
	Probe(ctx context.Context) (Result, error)
	// Close releases the connection.
	Close() error
}

// Warmer is a Prober that can open its connection ahead of the first
// Probe (a daemon warms its prober at start, so that the first wait-recent
// costs what later ones do).
type Warmer interface {
	Warm(ctx context.Context)
}
