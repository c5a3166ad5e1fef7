package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// Schema evolution of Kafka collections (docs/kafka.md, "Schema
// evolution"): an upsert topic's Avro value reader that is not pinned
// starts as the version the collection's generation in force was read
// with, and moves to a later version of the subject at the first record
// written with it that needs it (new fields); a debezium topic takes the
// columns a table gains. The stream does the switch (replicate.StreamKafka
// with a kafkafmt.Evolver): a reset of the collection at the record, with
// the new columns, and every key's current row in them, so the store
// starts a new generation at the record's binding. Here: the reader at
// start, the metadata of the new generation, and a switch whose
// generation was committed without its contents.

// evolution is where an evolving value reader starts: version at (0:
// the latest) after versions past (the collection's earlier
// generations').
type evolution struct {
	at   int
	past []int
}

// evolvingFrom is kafkaFormats' evolving for topic: the reader versions
// of the collection's generations (none when there is no collection
// yet), or nil when its value reader does not evolve (pinned, not Avro,
// not upsert or none).
func (k *Kafka) evolvingFrom(ctx context.Context, st *store.Store, topic string) (*evolution, error) {
	cfg := k.cfg
	if (cfg.Envelope != "upsert" && cfg.Envelope != "none") || cfg.ValueFormat != "avro" || cfg.ValueSchemaVersion != 0 {
		return nil, nil
	}
	sh, err := st.Shard(ctx, topic)
	if errors.Is(err, store.ErrNotFound) {
		return &evolution{}, nil
	}
	if err != nil {
		return nil, err
	}
	e := &evolution{}
	e.at, _ = readerVersion(inForce(sh))
	for _, g := range sh.Generations() {
		if v, ok := readerVersion(g.Schema); ok && v != e.at && !slices.Contains(e.past, v) {
			e.past = append(e.past, v)
		}
	}
	return e, nil
}

// inForce is the schema of sh's generation in force below its upper (a
// generation starting at the upper has no contents yet).
func inForce(sh *store.Shard) *arrow.Schema {
	if u := sh.Upper(); u > 0 {
		return sh.SchemaAt(u - 1)
	}
	return sh.Schema()
}

// readerVersion is the version of the Avro value reader schema recorded
// in a collection's schema (mdKafkaValueSchema).
func readerVersion(s *arrow.Schema) (int, bool) {
	got, ok := s.Metadata().GetValue(mdKafkaValueSchema)
	if !ok {
		return 0, false
	}
	var subject string
	var v, id int
	if n, _ := fmt.Sscanf(got, "subject %s version %d id %d", &subject, &v, &id); n != 3 {
		return 0, false
	}
	return v, true
}

// findSwitch notes, for Stream, a generation of topic's collection that
// starts at the durable upper with other columns than the one in force
// below it: a switch committed without its contents.
func (k *Kafka) findSwitch(r Resume, topic string, sh *store.Shard) error {
	delete(k.switches, topic)
	gs := sh.Generations()
	if r.Durable == 0 || len(gs) < 2 || r.Errored[topic] {
		return nil
	}
	g := gs[len(gs)-1]
	if g.Start != r.Durable || sameColumns(g.Schema, sh.SchemaAt(r.Durable-1)) {
		return nil
	}
	ps := pendingSwitch{gen: g}
	ok := false
	for _, b := range r.Bindings {
		if b.Time == g.Start {
			ps.binding, ok = b, true
		}
	}
	if !ok {
		return fmt.Errorf("ingest %s: collection %s has a generation from time %d, which no binding of the source has",
			KafkaSourceID(k.cfg.Source, topic), topic, g.Start)
	}
	if k.evolving[topic] {
		v, ok := readerVersion(g.Schema)
		if !ok {
			return fmt.Errorf("ingest %s: the generation of %s from time %d records no reader schema (%s)", KafkaSourceID(k.cfg.Source, topic), topic, g.Start, mdKafkaValueSchema)
		}
		ps.version = v
	}
	k.switches[topic] = ps
	return nil
}

// replayOf notes, for a topic whose columns can change at a record, the
// bindings of an earlier run past the start, which the stream replays
// binding by binding (replicate.KafkaTopic.Replay): so it meets the first
// record of a new version in the binding the first run did, and the
// switch lands in the same binding whatever the partitions' interleaving.
func (k *Kafka) replayOf(r Resume, topic string) {
	delete(k.replay, topic)
	if !k.evolving[topic] && k.cfg.Envelope != "debezium" {
		return
	}
	for _, b := range r.Bindings {
		if !r.Start.Covers(b.Frontier) {
			k.replay[topic] = append(k.replay[topic], b.Frontier)
		}
	}
}

func sameColumns(a, b *arrow.Schema) bool {
	return a.Equal(b) && a.Metadata().Equal(b.Metadata())
}

// resumeSwitches does the switches findSwitch noted before the stream
// reads anything: the reset at a position whose first binding beyond it
// is the generation's (a partition that binding moved past the start),
// then every key re-expressed; every record the stream reads from the
// start on is bound at or after it, and read with the new reader.
func (k *Kafka) resumeSwitches(ctx context.Context, r StreamRequest, sink *evolveSink) error {
	for topic, ps := range k.switches {
		source := KafkaSourceID(k.cfg.Source, topic)
		ev, ok := kafkafmt.As[kafkafmt.Evolver](k.decs[topic])
		if !ok {
			return fmt.Errorf("ingest %s: collection %s has new columns from time %d, which its envelope cannot switch to", source, topic, ps.gen.Start)
		}
		start := r.Start[source]
		var at *frontier.Time
		for _, p := range ps.binding.Frontier.Partitions() {
			if ps.binding.Frontier.Get(p) > start.Get(p) {
				at = &frontier.Time{Partition: p, Pos: start.Get(p)}
				break
			}
		}
		if at == nil {
			return fmt.Errorf("ingest %s: the binding at %d is not past the start %s", source, ps.binding.Time, start)
		}
		part, err := parsePartitionNumber(at.Partition)
		if err != nil {
			return err
		}
		if err := ev.Target(ctx, ps.gen.Schema, ps.version); err != nil {
			return fmt.Errorf("ingest %s: %w", source, err)
		}
		keys := 0
		_, historied := kafkafmt.As[kafkafmt.Historied](k.decs[topic])
		data := sink.Data
		if historied {
			data = sink.SwitchData
		}
		err = ev.Evolve(part, int64(at.Pos), func(schema *arrow.Schema) error {
			return sink.Reset(topic, *at, schema)
		}, func(rec arrow.Record) error {
			defer rec.Release()
			keys += int(rec.NumRows())
			return data(topic, rec)
		})
		if err == nil && historied {
			err = sink.SwitchDone(topic, at.Partition)
		}
		if err != nil {
			return fmt.Errorf("ingest %s: finish the switch of columns at time %d: %w", source, ps.gen.Start, err)
		}
		k.log.Info("kafka: finished a switch of columns whose generation was committed before its contents", "source", source, "at", ps.gen.Start, "keys", keys)
		delete(k.switches, topic)
	}
	return nil
}

// evolveSink gives the resets of a switch of columns the collection's
// metadata, with the value reader it switched to.
type evolveSink struct {
	pipe.Sink
	ctx context.Context
	k   *Kafka
	// An append-only switch's contents (replicate.SwitchSink) being
	// staged, by collection: the stage and the records not written yet.
	stages map[string]*switchStage
}

// switchStage is the stage of a switch's contents and what is buffered
// for its next run.
type switchStage struct {
	sg     *store.Stage
	schema *arrow.Schema
	buf    []arrow.Record
	bytes  int64
}

// switchRunBytes is how much of a switch's contents is sorted and
// written as one run of its stage.
const switchRunBytes = 16 << 20

// SwitchData implements replicate.SwitchSink: the rows are staged in the
// store in runs of switchRunBytes, so that the contents of an append-only
// switch (every row the collection has) are never in memory together;
// the driver commits them from the stage's files at their binding.
func (s *evolveSink) SwitchData(collection string, rec arrow.Record) error {
	if s.stages == nil {
		s.stages = map[string]*switchStage{}
	}
	ss := s.stages[collection]
	if ss == nil {
		sg, err := s.k.st.NewStage(KafkaSourceID(s.k.cfg.Source, collection), rec.Schema())
		if err != nil {
			return err
		}
		ss = &switchStage{sg: sg, schema: rec.Schema()}
		s.stages[collection] = ss
	}
	rec.Retain()
	ss.buf = append(ss.buf, rec)
	ss.bytes += arrowutil.RecordBytes(rec)
	if ss.bytes < switchRunBytes {
		return nil
	}
	return ss.write(s.ctx)
}

func (ss *switchStage) write(ctx context.Context) error {
	err := ss.sg.Write(ctx, ss.buf...)
	for _, r := range ss.buf {
		r.Release()
	}
	ss.buf, ss.bytes = nil, 0
	if err != nil {
		return fmt.Errorf("stage a switch's contents: %w", err)
	}
	return nil
}

// SwitchDone implements replicate.SwitchSink: the stage goes to the
// driver (pipe data at the switch's position in partition).
func (s *evolveSink) SwitchDone(collection, partition string) error {
	ss := s.stages[collection]
	if ss == nil {
		return nil // no rows
	}
	delete(s.stages, collection)
	if err := ss.write(s.ctx); err != nil {
		ss.sg.Release()
		return err
	}
	st, ok := s.Sink.(stagerSink)
	if !ok {
		ss.sg.Release()
		return fmt.Errorf("switch of %s: the sink takes no staged rows", collection)
	}
	return st.DataStaged(collection, ss.schema, ss.sg, partition)
}

// Reset implements pipe.Sink.
func (s *evolveSink) Reset(collection string, at frontier.Time, schema *arrow.Schema) error {
	sh, err := s.k.st.Shard(s.ctx, collection)
	if err == nil {
		err = sh.Refresh(s.ctx)
	}
	if err != nil {
		return fmt.Errorf("reset %s: %w", collection, err)
	}
	md := sh.Schema().Metadata()
	keys, vals := slices.Clone(md.Keys()), slices.Clone(md.Values())
	if subject, v, id, ok := kafkafmt.AvroReader(s.k.formats[collection][1]); ok && s.k.cfg.Envelope != "debezium" {
		want := fmt.Sprintf("subject %s version %d id %d", subject, v, id)
		if i := md.FindKey(mdKafkaValueSchema); i >= 0 {
			vals[i] = want
		} else {
			keys, vals = append(keys, mdKafkaValueSchema), append(vals, want)
		}
	}
	nmd := arrow.NewMetadata(keys, vals)
	return s.Sink.Reset(collection, at, arrow.NewSchema(schema.Fields(), &nmd))
}

// Each lists the state's keys and values as of the DB's time
// (kafkafmt.Backing for a switch of columns).
func (u *upsertState) Each(fn func(key, value []byte) error) error { return u.db.Each(fn) }

// history is an append-only topic's kafkafmt.History: the collection's
// rows as of the time below its upper, streamed from the store (its user
// columns and _diff, a row group of each sorted run in memory, never the
// collection). A switch calls it once every row before the switching
// record is durable (replicate.KafkaConfig.Durable) or, finishing a
// switch whose generation was committed without its contents, with the
// generation at the upper.
func (k *Kafka) history(topic string) kafkafmt.History {
	return func(emit func(arrow.Record) error) error {
		ctx := k.streamCtx
		sh, err := k.st.Shard(ctx, topic)
		if err == nil {
			err = sh.Refresh(ctx)
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		up := sh.Upper()
		if up == 0 {
			return nil // nothing committed: no rows before
		}
		return sh.StreamAsOf(ctx, up-1, func(*arrow.Schema) error { return nil }, emit)
	}
}

// durable is replicate.KafkaConfig.Durable: it waits until the store's
// durable frontier of topic's timeline covers f (the next binding binds
// the progress the stream sent, then the commit makes it durable).
func (k *Kafka) durable(ack Ack) func(ctx context.Context, topic string, f frontier.Frontier) error {
	return func(ctx context.Context, topic string, f frontier.Frontier) error {
		source := KafkaSourceID(k.cfg.Source, topic)
		for {
			d, err := ack(ctx, source)
			if err != nil {
				return err
			}
			if d.Covers(f) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}
