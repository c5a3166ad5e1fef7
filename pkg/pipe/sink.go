package pipe

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Sink receives what a stage produces, in source time: data, progress and
// definite errors. It is the one interface between every stage (snapshot,
// replicate, reclock) and whatever consumes it (a pipe, the ingest
// driver, a test). A stage calls it from one goroutine at a time; an error
// it returns ends the stage with that error.
type Sink interface {
	// Data hands over a data record of collection: the collection's
	// columns, then _time (uint64, source time), _diff (int64) and, for
	// partitioned times, _partition. rec is released after the call:
	// Retain it to keep it.
	Data(collection string, rec arrow.Record) error
	// Progress says that every update of collection at a source time upper
	// is beyond has been handed over; an empty collection means every
	// collection of the stream (a source-wide upper).
	Progress(collection string, upper frontier.Frontier) error
	// Error is a definite error of collection from source time at on; the
	// collection gets no further data, the others go on.
	Error(collection string, at frontier.Time, msg string) error
	// Reset says that from source time at on, collection holds only the
	// updates handed over after this call: the updates at earlier times,
	// and those at at handed over before it, are gone from at on. A
	// TRUNCATE is a reset followed by nothing; a re-snapshot or a schema
	// change one followed by the new contents at at. schema is the
	// collection's user schema from at on, or nil when it is unchanged.
	Reset(collection string, at frontier.Time, schema *arrow.Schema) error
}

// PipeSink is the Sink that writes the pipe format: a data stream per
// collection and run of records, a progress stream per step of progress
// (flushed, so a reader downstream sees it at once) and an error stream per
// definite error.
type PipeSink struct {
	// W is the pipe to write to.
	W *Writer
	// Source is written as rtr.source when not empty; SourceOf, when set,
	// names the source of each collection instead (Kafka: one per topic).
	Source   string
	SourceOf func(collection string) string
	// Domain is the time domain of the stream; empty means the one each
	// record names (rtr.time) or, before any record, the first progress.
	Domain frontier.Domain
}

func (s *PipeSink) source(collection string) string {
	if s.SourceOf != nil {
		return s.SourceOf(collection)
	}
	return s.Source
}

// Data implements Sink. A record that carries a whole pipe header in its
// schema metadata keeps it; otherwise the header is made from collection,
// the source and the domain.
func (s *PipeSink) Data(collection string, rec arrow.Record) error {
	md := rec.Schema().Metadata()
	h, err := ParseHeader(md)
	if err != nil || h.Kind != KindData || h.Collection != collection {
		h = Header{Kind: KindData, Collection: collection, Domain: s.Domain}
		if v, ok := md.GetValue(KeyTime); ok {
			h.Domain = frontier.Domain(v)
		}
	}
	if h.Source == "" {
		h.Source = s.source(collection)
	}
	if s.Domain == "" {
		s.Domain = h.Domain
	}
	if err := s.W.WriteRecord(h, rec); err != nil {
		return fmt.Errorf("write data of %s: %w", collection, err)
	}
	return nil
}

// Progress implements Sink. A source-wide empty frontier says nothing and
// is not written.
func (s *PipeSink) Progress(collection string, upper frontier.Frontier) error {
	if s.Domain == "" {
		s.Domain = upper.Domain()
	}
	if collection == "" && upper.IsEmpty() {
		return nil
	}
	if err := s.W.WriteProgress(collection, s.source(collection), upper); err != nil {
		return fmt.Errorf("write progress %s: %w", upper, err)
	}
	return s.W.Flush()
}

// Error implements Sink.
func (s *PipeSink) Error(collection string, at frontier.Time, msg string) error {
	if err := s.W.WriteError(collection, s.Domain, at.Pos, msg); err != nil {
		return fmt.Errorf("write error of %s: %w", collection, err)
	}
	return nil
}

// Reset implements Sink.
func (s *PipeSink) Reset(collection string, at frontier.Time, schema *arrow.Schema) error {
	if err := s.W.WriteReset(collection, s.Domain, at.Pos, schema); err != nil {
		return fmt.Errorf("write reset of %s: %w", collection, err)
	}
	return nil
}
