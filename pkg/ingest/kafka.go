package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Schema metadata keys a Kafka collection records, so that a restart with
// other formats or another envelope fails instead of mixing them.
const (
	mdKafkaEnvelope    = "kafka.envelope"
	mdKafkaKeyFormat   = "kafka.key_format"
	mdKafkaValueFormat = "kafka.value_format"
)

// KafkaConfig configures an ingest of Kafka topics.
type KafkaConfig struct {
	// Upstream is the cluster: its bootstrap brokers, TLS and SASL.
	Upstream upstream.Kafka
	// Topics to ingest; each becomes the collection of the same name and
	// its own source (KafkaSourceID).
	Topics []string
	// KeyFormat and ValueFormat: bytes (default), text or json.
	KeyFormat, ValueFormat string
	// Envelope: none (default, append-only), upsert or debezium.
	Envelope string
	// Source is the prefix of the source ids (default "kafka"): topic T
	// is the source Source + "." + T.
	Source string
	// Group, when set, is a consumer group whose committed offsets follow
	// what is durable in the store (for monitoring only; ingest resumes
	// from the store).
	Group string
	// MaxRecordBytes bounds one record (replicate.DefaultMaxRecordBytes).
	MaxRecordBytes int
	// CheckInterval: how often topic metadata is checked (new partitions,
	// recreated topics, compacted tails); 0 means 5s.
	CheckInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// OnStart is a test hook: where each partition's consumption starts.
	OnStart func(topic string, partition int32, offset int64)
}

// KafkaSourceID is the source id of topic in the store: prefix + "." +
// topic (prefix "kafka" when empty).
func KafkaSourceID(prefix, topic string) string {
	if prefix == "" {
		prefix = "kafka"
	}
	return prefix + "." + topic
}

// Kafka is the Kafka source: every topic is a timeline of its own (source
// KafkaSourceID) with one collection; one consumer reads them all with
// isolation level read_committed. An upsert collection's state (key ->
// value) is read back from the store when the stream resumes, not from
// the topic.
type Kafka struct {
	cfg        KafkaConfig
	log        *slog.Logger
	keyF, valF kafkafmt.Format
	decs       map[string]kafkafmt.Decoder // by topic
}

// NewKafka returns the Kafka source of cfg.
func NewKafka(cfg KafkaConfig) *Kafka {
	if cfg.Envelope == "" {
		cfg.Envelope = "none"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Kafka{cfg: cfg, log: log}
}

// Open implements Source: it makes each topic's decoder and collection.
func (k *Kafka) Open(ctx context.Context, st *store.Store) ([]Timeline, error) {
	cfg := k.cfg
	if len(cfg.Topics) == 0 {
		return nil, hint.Wrap(errors.New("ingest kafka: no topics given"), "pass --topics NAME[,NAME...]")
	}
	var err error
	if k.keyF, err = kafkafmt.ParseFormat(cfg.KeyFormat); err != nil {
		return nil, hint.Wrap(fmt.Errorf("ingest kafka: --key-format: %w", err), "use --key-format bytes, text or json")
	}
	if k.valF, err = kafkafmt.ParseFormat(cfg.ValueFormat); err != nil {
		return nil, hint.Wrap(fmt.Errorf("ingest kafka: --value-format: %w", err), "use --value-format bytes, text or json")
	}
	k.Close()
	k.decs = map[string]kafkafmt.Decoder{}
	var tls []Timeline
	for _, topic := range cfg.Topics {
		if k.decs[topic] != nil {
			return nil, hint.Wrap(fmt.Errorf("ingest kafka: topic %q given twice", topic), "name each topic once in --topics")
		}
		source := KafkaSourceID(cfg.Source, topic)
		dcfg := kafkafmt.Config{Envelope: cfg.Envelope, Key: k.keyF, Value: k.valF, Collection: topic, Source: source}
		if cfg.Envelope == "debezium" {
			_, keyOK := k.keyF.(kafkafmt.ChangeFormat)
			if _, ok := k.valF.(kafkafmt.ChangeFormat); !ok || !keyOK {
				return nil, hint.Wrap(fmt.Errorf("ingest %s: the debezium envelope needs Debezium keys and values, not --key-format %s --value-format %s", source, k.keyF.Name(), k.valF.Name()),
					"pass --key-format json --value-format json (Kafka Connect's JsonConverter)")
			}
			if dcfg.Columns, dcfg.KeyColumns, err = k.debeziumColumns(ctx, st, topic); err != nil {
				return nil, fmt.Errorf("ingest %s: %w", source, err)
			}
		}
		dec, err := kafkafmt.NewDecoder(dcfg)
		if err != nil {
			return nil, hint.Wrap(fmt.Errorf("ingest %s: %w", source, err), "use --envelope none, upsert or debezium")
		}
		k.decs[topic] = dec
		tl := Timeline{ID: source, Kind: "kafka", Domain: frontier.DomainKafka,
			Upstream:    kafkaRecorded(cfg.Upstream, topic),
			Collections: []Collection{k.collection(topic, dec)}}
		if pr, err := probe.NewKafka(cfg.Upstream, []string{topic}); err == nil {
			tl.Prober = pr
		}
		tls = append(tls, tl)
	}
	return tls, nil
}

// kafkaRecorded is what the store records of topic's upstream: the
// cluster (brokers and security settings, no password) and the topic.
func kafkaRecorded(up upstream.Kafka, topic string) map[string]string {
	r := up.Recorded()
	r["topic"] = topic
	return r
}

// collection is topic's collection: the decoder's columns and how they
// were decoded, which a later run must match.
func (k *Kafka) collection(topic string, dec kafkafmt.Decoder) Collection {
	var fields []arrow.Field
	for _, f := range dec.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		}
		fields = append(fields, f)
	}
	md := dec.Schema().Metadata()
	want := map[string]string{mdKafkaEnvelope: k.cfg.Envelope, mdKafkaKeyFormat: k.keyF.Name(), mdKafkaValueFormat: k.valF.Name()}
	md = arrow.NewMetadata(append(md.Keys(), mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat),
		append(md.Values(), want[mdKafkaEnvelope], want[mdKafkaKeyFormat], want[mdKafkaValueFormat]))
	flags := map[string]string{mdKafkaEnvelope: "--envelope", mdKafkaKeyFormat: "--key-format", mdKafkaValueFormat: "--value-format"}
	return Collection{Name: topic, Schema: arrow.NewSchema(fields, &md), Check: func(existing *arrow.Schema) error {
		have := existing.Metadata()
		for _, key := range []string{mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat} {
			if got, ok := have.GetValue(key); ok && got != want[key] {
				return hint.Wrap(fmt.Errorf("ingested with %s %s, not %s", flags[key], got, want[key]),
					fmt.Sprintf("pass %s %s, or ingest into another store", flags[key], got))
			}
		}
		return nil
	}}
}

// Resume implements Resumer: an upsert decoder's state is the collection
// as of its last durable time, folded in a batch at a time (memory: the
// state and one batch); netting starts past the last binding.
func (k *Kafka) Resume(ctx context.Context, r Resume) error {
	for topic, sh := range r.Shards {
		dec := k.decs[topic]
		if s, ok := dec.(kafkafmt.Stateful); ok && r.Durable > 0 && !r.Errored[topic] {
			err := sh.ScanAsOf(ctx, r.Durable-1, s.ResetState, s.AddState)
			if err == nil {
				err = s.EndState()
			}
			if err != nil {
				return fmt.Errorf("rebuild upsert state: %w", err)
			}
			k.log.Info("upsert state rebuilt from the store", "source", r.Timeline, "keys", s.StateSize(), "as_of", r.Durable-1)
		}
		// Upsert: net each batch's records per key (one retraction and one
		// insertion per key instead of per record). The stream reports
		// progress only between batches, so one binding covers a batch,
		// except that bindings made before this run may split the records
		// below the last one's frontier: those stay record by record.
		if n, ok := dec.(kafkafmt.Netting); ok {
			from := map[int32]int64{}
			if bs := r.Bindings; len(bs) > 0 {
				last := bs[len(bs)-1].Frontier
				for _, p := range last.Partitions() {
					pn, err := parsePartitionNumber(p)
					if err != nil {
						return fmt.Errorf("binding partition %q: %w", p, err)
					}
					from[pn] = int64(last.Get(p))
				}
			}
			n.NetFrom(from)
		}
	}
	return nil
}

// Stream implements Source.
func (k *Kafka) Stream(ctx context.Context, r StreamRequest) error {
	var topics []replicate.KafkaTopic
	for _, topic := range k.cfg.Topics {
		topics = append(topics, replicate.KafkaTopic{Name: topic, Start: r.Start[KafkaSourceID(k.cfg.Source, topic)], Decoder: k.decs[topic]})
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	if k.cfg.Group != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.commitGroup(gctx, r.Ack)
		}()
	}
	var partBytes int32
	if k.cfg.Envelope == "upsert" || k.cfg.Envelope == "debezium" {
		// The decoder nets each partition chunk of a fetch per key, so
		// larger chunks write fewer rows: with 100k keys, 8 MiB chunks
		// take BenchmarkKafkaIngest/upsert from 0.26x to 0.39x of a raw
		// consumer. Append-only chunks gain nothing (docs/kafka.md).
		partBytes = 8 << 20
	}
	return replicate.StreamKafka(ctx, replicate.KafkaConfig{
		Upstream: k.cfg.Upstream, Topics: topics, MaxRecordBytes: k.cfg.MaxRecordBytes,
		CheckInterval: k.cfg.CheckInterval, Logger: k.log, OnStart: k.cfg.OnStart,
		// Whole partition chunks of a fetch per record: the reclocker
		// holds them anyway, and an upsert decoder nets over a record.
		FlushRows:           1 << 20,
		FetchPartitionBytes: partBytes, RetryFor: r.RetryFor,
	}, r.Sink)
}

// Close implements Source.
func (k *Kafka) Close() error {
	for _, d := range k.decs {
		d.Release()
	}
	k.decs = nil
	return nil
}

// commitGroup commits, for monitoring, the durable frontier of every topic
// as the offsets of the consumer group, every few seconds.
func (k *Kafka) commitGroup(ctx context.Context, ack Ack) {
	log := k.log
	cl, err := kgo.NewClient(append(k.cfg.Upstream.Opts(), kgo.DialTimeout(5*time.Second))...)
	if err != nil {
		log.Warn("consumer group offsets will not be committed", "group", k.cfg.Group, "error", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	last := map[string]string{}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		offs := kadm.Offsets{}
		for _, topic := range k.cfg.Topics {
			f, err := ack(ctx, KafkaSourceID(k.cfg.Source, topic))
			if err != nil || last[topic] == f.String() {
				continue
			}
			for _, p := range f.Partitions() {
				n, err := parsePartitionNumber(p)
				if err != nil {
					continue
				}
				offs.Add(kadm.Offset{Topic: topic, Partition: n, At: int64(f.Get(p)), LeaderEpoch: -1})
			}
			last[topic] = f.String()
		}
		if len(offs) == 0 {
			continue
		}
		resp, err := adm.CommitOffsets(ctx, k.cfg.Group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("commit consumer group offsets failed; will retry", "group", k.cfg.Group, "error", err)
			clear(last)
		}
	}
}

func parsePartitionNumber(p string) (int32, error) {
	var n int32
	_, err := fmt.Sscan(p, &n)
	return n, err
}
