package ingest

import (
	"context"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// Source is an upstream as the ingest driver (Run) needs it. PostgreSQL
// (PG), MySQL/MariaDB (MySQL) and Kafka (Kafka) implement it; a source
// with a definite snapshot, state of its own or a way to hurry its
// progress also implements Snapshotter, Resumer or Nudger. Everything
// else (locks, ownership, reclocking, commits, acknowledgement, recency,
// metrics, compaction, retries, shutdown) is the driver's, written once.
//
// The driver calls Open once per attempt, then at most Snapshot and
// Resume, then Stream, then Close; all from one goroutine except Nudge.
type Source interface {
	// Open connects to the upstream and says what this run ingests: one
	// or more timelines. It may read what earlier runs recorded in st (a
	// slot name); it writes nothing.
	Open(ctx context.Context, st *store.Store) ([]Timeline, error)
	// Stream reads the change stream of every timeline from where r says
	// and hands it to r.Sink until ctx ends or a definite error.
	Stream(ctx context.Context, r StreamRequest) error
	// Close releases what Open acquired.
	Close() error
}

// StreamRequest is what Source.Stream is asked.
type StreamRequest struct {
	// Start is each timeline's start (an upper: nothing below it is sent
	// again), by timeline id.
	Start map[string]frontier.Frontier
	// Sink takes the stream in source time: Data and Error by collection,
	// Progress by collection or, for a timeline whose collections all
	// progress together, with collection "".
	Sink pipe.Sink
	// Ack: anything that lets the upstream forget data (a slot's confirmed
	// position, a consumer group's offsets) moves only up to what it
	// reports durable.
	Ack Ack
	// RetryFor bounds how long transient upstream failures are retried
	// in a row inside the stream (0: for ever); past it the stream fails.
	RetryFor time.Duration
	// Schema returns a collection's user columns as the store holds them
	// at its last readable time (the generation in force just below its
	// upper: one committed at the upper by a re-snapshot killed before its
	// contents were is not), nil when it has no shard: a source whose
	// upstream may have changed a table while it was not followed checks
	// its first description of it against this.
	Schema func(collection string) *arrow.Schema
	// Add registers a collection a source finds while it streams (a
	// table added to a PostgreSQL publication) before any of it is handed
	// over: its ownership is checked and its shard created; from its
	// first reset on (its snapshot) it is committed, acknowledged and
	// waited for with the others, and until then nothing more is durable
	// for the timeline (wait-recent does not answer past it). Adding a
	// collection the run has is a no-op.
	Add func(timeline string, c Collection) error
}

// Ack reports, for the timeline with id, the source frontier below which
// every collection the upstream position serves is durable in the store.
type Ack func(ctx context.Context, timeline string) (frontier.Frontier, error)

// Timeline is one source clock in the store: a source id with its own
// bindings, lock and recency, and the collections whose updates it
// times. PostgreSQL and MySQL have one per run; Kafka one per topic.
type Timeline struct {
	// ID is the source id in the store.
	ID string
	// Kind is the source kind recorded in the store (pg, mysql, mariadb,
	// kafka).
	Kind string
	// Domain is the time domain of the source's positions.
	Domain frontier.Domain
	// Collections are the collections this run ingests.
	Collections []Collection
	// Upstream describes the upstream for the store's source info, without
	// secrets (a masked DSN, the publication and slot, the brokers...).
	Upstream map[string]string
	// Prober reads the upstream frontier for recency and lag metrics; nil
	// when there is none. The driver closes it.
	Prober probe.Prober
	// AckAlso names collections of this source that this run does not
	// ingest but whose upstream position it shares (a PostgreSQL slot
	// that also serves them): acknowledgement never passes them.
	AckAlso []string
}

// Collection is one collection a timeline writes.
type Collection struct {
	// Name is the collection's name in the store.
	Name string
	// Schema is the collection's columns (without _time and _diff) and
	// the metadata its shard records.
	Schema *arrow.Schema
	// Check, when set, is called with an existing shard's schema; an error
	// refuses the run (e.g. a Kafka topic ingested with other formats).
	Check func(existing *arrow.Schema) error
}

// Snapshotter is a Source whose collections begin with a definite snapshot
// at source time 0.
type Snapshotter interface {
	// Snapshot hands sink a definite snapshot of collections of timeline
	// at time 0 (diff +1, then any rewound changes), then Progress for each
	// collection. start is the frontier of the timeline's first binding,
	// which time 0 stands for; empty when there is none yet (then the
	// source picks it, and reports it as the progress of the snapshot).
	Snapshot(ctx context.Context, timeline string, collections []string, start frontier.Frontier, sink pipe.Sink) error
}

// Resumer is a Source with state of its own that is rebuilt from the store
// before Stream (Kafka's upsert state).
type Resumer interface {
	Resume(ctx context.Context, r Resume) error
}

// Resume is what the store says about a timeline when its stream resumes.
type Resume struct {
	Timeline string
	// Shards are the timeline's collections.
	Shards map[string]*store.Shard
	// Durable is the system upper below which every collection is
	// durable; Start is the source frontier that stands for it.
	Durable uint64
	Start   frontier.Frontier
	// Bindings are the timeline's durable bindings.
	Bindings []frontier.Binding
	// Errored are the collections with a definite error: they get no more
	// data whatever the source sends.
	Errored map[string]bool
}

// Nudger is a Source that can be asked to report its progress at once
// (a PostgreSQL standby status update with reply requested); recency
// waiters use it. Nudge must not block.
type Nudger interface {
	Nudge(timeline string)
}
