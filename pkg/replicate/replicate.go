// Package replicate reads change streams from upstream sources and hands
// them to a pipe.Sink as updates (row, time, diff) with progress (uppers) and
// definite per-collection errors.
//
// PostgreSQL (StreamPG) reads a logical replication slot with the pgoutput
// plugin (protocol version 1). Every change of a transaction is emitted at
// the transaction's commit LSN; progress after a commit is the commit
// record's end LSN, and between transactions the server's keepalives move
// progress past WAL that holds nothing for the publication. The slot is
// confirmed only up to what the caller reports durable (PGConfig.Ack).
// docs/replicate.md describes the semantics and the errors.
package replicate

import (
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// RelationSink is implemented by a pipe.Sink that wants the schema of
// each PostgreSQL relation before its first change (and again when it is
// replaced by one with other columns). StreamPG checks for it once per
// relation; most sinks do not need it.
type RelationSink interface {
	Relation(t *pgarrow.Table) error
}
