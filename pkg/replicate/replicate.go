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
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
)

// RelationSink is implemented by a pipe.Sink that wants the schema of
// each PostgreSQL relation before its first change (and again when it is
// replaced by one with other columns). StreamPG checks for it once per
// relation; most sinks do not need it.
type RelationSink interface {
	Relation(t *pgarrow.Table) error
}

// RelationChanger is implemented by a pipe.Sink that re-snapshots a
// PostgreSQL collection when its columns change in the stream (a column
// added, dropped or retyped; or, seen first in this stream, different
// from what the caller knows, StreamPG's PGConfig.Expect): StreamPG
// hands over what came before the change, then asks RelationChanged with
// the relation's new description t and the commit LSN of the transaction
// where the change shows. true: the sink resets the collection there
// (pipe.Sink.Reset with its new contents) and the stream goes on with the
// new columns; false: the collection stops with a definite error, as
// without the interface. Tables whose replica identity is not FULL are
// not offered.
type RelationChanger interface {
	RelationChanged(t *pgarrow.Table, at frontier.LSN, change string) (bool, error)
}

// StateTaker is implemented by a pipe.Sink that re-snapshots collections
// in the stream (a RelationChanger, a TableChanger, a TableAdder) and
// rebuilds the key state of a table that has one from the copy: the old
// state does not describe the table from the re-snapshot on (its columns
// changed), and the changes between the re-snapshot's time T and the
// copy's position have no old rows to rewind with. The stream calls
// Restate when the sink took a re-snapshot of such a table (at the
// current transaction T), with the key's columns (nil: a MySQL table's
// primary key), then holds the table's changes as they came, and asks
// TakeState each time it would report progress. Once the copy is handed
// over (the reset at T with the copy's rows as they are, at position
// from: every change from is beyond is in the copy), TakeState returns
// the state of the copy's rows and done: the stream drops the held
// changes from is beyond and hands the others over through the state,
// before that progress. No binding falls between T and from (progress is
// held before T until the copy is handed over), so the collection is
// exact at every binding time. done with a nil state: the re-snapshot
// failed (a definite error at T), and the held changes go.
type StateTaker interface {
	Restate(collection string, key []string)
	TakeState(collection string) (st *KeyState, from frontier.Frontier, done bool)
}
