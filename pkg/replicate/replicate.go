// Package replicate reads change streams from upstream sources and hands
// them to a Sink as updates (row, time, diff) with progress (uppers) and
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
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Sink receives a change stream. It is implemented by the caller; StreamPG
// calls it from one goroutine. An error returned by any method ends the
// stream with that error.
type Sink interface {
	// Relation gives the schema of a collection before its first change
	// (and again if it ever changes without being an error).
	Relation(t *pgarrow.Table) error
	// Change hands over a data record of collection: the table's columns,
	// then _time (uint64, the transaction's commit LSN) and _diff (int64,
	// +1 or -1). A transaction may arrive in many records. rec is released
	// after Change returns: Retain it to keep it.
	Change(collection string, rec arrow.Record) error
	// Progress says that every update at a time below upper has been
	// handed over (to every collection).
	Progress(upper frontier.LSN) error
	// Error reports a definite error of one collection from time at on
	// (a TRUNCATE, a column change, a value that cannot be converted).
	// The collection gets no further changes; the others go on.
	Error(collection string, at frontier.LSN, msg string) error
}

// PipeSink returns a Sink that writes the pipe format to w: a data stream
// per collection and batch run, a source-wide progress stream after each
// step of progress, and an error stream per definite error, all in the
// time domain "lsn" with rtr.source = source.
func PipeSink(w *pipe.Writer, source string) Sink { return &pipeSink{w: w, source: source} }

type pipeSink struct {
	w      *pipe.Writer
	source string
}

func (s *pipeSink) Relation(*pgarrow.Table) error { return nil }

func (s *pipeSink) Change(collection string, rec arrow.Record) error {
	h := pipe.Header{Kind: pipe.KindData, Collection: collection, Source: s.source, Domain: frontier.DomainLSN}
	if err := s.w.WriteRecord(h, rec); err != nil {
		return fmt.Errorf("write changes of %s: %w", collection, err)
	}
	return nil
}

func (s *pipeSink) Progress(upper frontier.LSN) error {
	if upper == 0 {
		return nil
	}
	if err := s.w.WriteProgress("", s.source, frontier.Single(frontier.DomainLSN, uint64(upper))); err != nil {
		return fmt.Errorf("write progress %s: %w", upper, err)
	}
	return nil
}

func (s *pipeSink) Error(collection string, at frontier.LSN, msg string) error {
	if err := s.w.WriteError(collection, frontier.DomainLSN, uint64(at), msg); err != nil {
		return fmt.Errorf("write error of %s: %w", collection, err)
	}
	return nil
}
