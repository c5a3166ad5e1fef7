package snapshot

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// Sink receives a snapshot. PG calls it from one goroutine at a time, in
// this order: Data for every batch of copied rows (diff +1) and then of
// rewound changes (diff -1 or +1, the negation of the change), all at time
// 0; then Progress once per collection. A Sink must not keep rec after the
// call returns without retaining it.
type Sink interface {
	// Data receives updates of collection (schema.table): the table's
	// columns followed by _time (uint64, always 0 here) and _diff (int64).
	Data(collection string, rec arrow.Record) error
	// Progress says that collection is complete below upper.
	Progress(collection string, upper frontier.Frontier) error
}

// PipeSink writes a snapshot in the pipe format (docs/format-pipe.md).
type PipeSink struct {
	// W is the pipe to write to.
	W *pipe.Writer
	// Source is written as rtr.source when not empty (e.g. "pg").
	Source string
}

// Data writes rec as a batch of a data stream of collection in the lsn
// domain.
func (s *PipeSink) Data(collection string, rec arrow.Record) error {
	h := pipe.Header{Kind: pipe.KindData, Collection: collection, Source: s.Source, Domain: frontier.DomainLSN}
	if err := s.W.WriteRecord(h, rec); err != nil {
		return fmt.Errorf("write snapshot of %s: %w", collection, err)
	}
	return nil
}

// Progress writes a progress stream of collection.
func (s *PipeSink) Progress(collection string, upper frontier.Frontier) error {
	if err := s.W.WriteProgress(collection, s.Source, upper); err != nil {
		return fmt.Errorf("write snapshot progress of %s: %w", collection, err)
	}
	return nil
}
