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
	// The reader schemas of Avro keys and values ("subject version V id
	// I"), and the decode error policy when it shapes the columns
	// (inline).
	mdKafkaKeySchema   = "kafka.key_schema"
	mdKafkaValueSchema = "kafka.value_schema"
	mdKafkaInline      = "kafka.on_decode_error"
)

// KafkaConfig configures an ingest of Kafka topics.
type KafkaConfig struct {
	// Upstream is the cluster: its bootstrap brokers, TLS and SASL.
	Upstream upstream.Kafka
	// Topics to ingest; each becomes the collection of the same name and
	// its own source (KafkaSourceID).
	Topics []string
	// KeyFormat and ValueFormat: bytes (default), text, json, avro,
	// json-schema or protobuf.
	KeyFormat, ValueFormat string
	// Registry is the schema registry of avro, json-schema and protobuf (nil without
	// one); KeySchemaVersion and ValueSchemaVersion pin the reader
	// schemas of subjects <topic>-key and <topic>-value (0: the latest
	// at start).
	Registry                             *kafkafmt.Registry
	KeySchemaVersion, ValueSchemaVersion int
	// OnDecodeError: fail (default), skip or inline (kafkafmt.Policies).
	OnDecodeError string
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
	// StateDir is where upsert topics keep their state (a pebble
	// directory per source under it); empty means STORE/state.
	StateDir string
	// StateCache is the memory budget of each upsert topic's state (its
	// in-memory cache and pebble's): 0 means keystate.DefaultCacheBytes.
	StateCache int64

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
	cfg  KafkaConfig
	log  *slog.Logger
	decs map[string]kafkafmt.Decoder // by topic
	// formats are each topic's key and value formats.
	formats map[string][2]kafkafmt.Format
	st      *store.Store
	// states are the upsert topics' states on disk, by topic (Resume).
	states  map[string]*upsertState
	metrics *Metrics
	errLog  decodeErrorLog
	// evolving are the topics whose value reader follows the subject's
	// later versions (kafkafmt.Evolver); switches are the switches whose
	// generation the store has and whose contents it does not (Resume).
	evolving map[string]bool
	switches map[string]pendingSwitch
	replay   map[string][]frontier.Frontier
	// streamCtx is Stream's context (an append-only switch reads the
	// store in it, history).
	streamCtx context.Context
}

// pendingSwitch is a generation that starts at the store's upper (a switch
// of columns killed after its generation was committed, before its
// contents were): the stream starts by switching to its columns, at the
// binding of its start.
type pendingSwitch struct {
	gen     store.Generation
	version int // the Avro value reader's version (0 for debezium)
	binding frontier.Binding
}

// UseMetrics implements MetricsUser: decode errors are counted in m.
func (k *Kafka) UseMetrics(m *Metrics) { k.metrics = m }

// KafkaFormats returns the key and value formats of topic under cfg: an
// avro or protobuf format reads subject <topic>-key or <topic>-value
// (Confluent's TopicNameStrategy) from cfg.Registry.
func KafkaFormats(ctx context.Context, cfg KafkaConfig, topic string) (key, value kafkafmt.Format, err error) {
	return kafkaFormats(ctx, cfg, topic, nil)
}

// kafkaFormats is KafkaFormats; with evolving set, a value reader not
// pinned starts as version evolving.at of the subject (the one the
// collection's generation in force was read with; the latest when 0),
// and is switched to later versions as records need them
// (kafkafmt.Evolver).
func kafkaFormats(ctx context.Context, cfg KafkaConfig, topic string, evolving *evolution) (key, value kafkafmt.Format, err error) {
	make1 := func(name, role, flag string, version int) (kafkafmt.Format, error) {
		newFormat := kafkafmt.NewAvro
		switch name {
		case "avro":
		case "json-schema":
			newFormat = kafkafmt.NewJSONSchema
		case "protobuf":
			newFormat = func(ctx context.Context, c kafkafmt.AvroConfig) (kafkafmt.Format, error) {
				return kafkafmt.NewProtobuf(ctx, kafkafmt.ProtobufConfig(c))
			}
		default:
			f, err := kafkafmt.ParseFormat(name)
			if err != nil {
				return nil, hint.Wrap(fmt.Errorf("ingest kafka: --%s-format: %w", role, err), "use --"+role+"-format bytes, text, json, avro, json-schema or protobuf")
			}
			return f, nil
		}
		if cfg.Registry == nil {
			return nil, hint.Wrap(fmt.Errorf("ingest kafka: --%s-format %s needs a schema registry", role, name), "pass --schema-registry URL")
		}
		acfg := kafkafmt.AvroConfig{Registry: cfg.Registry, Subject: topic + "-" + role, Version: version, Flag: flag,
			Changes: cfg.Envelope == "debezium"}
		if name == "avro" && role == "value" && version == 0 && evolving != nil {
			acfg.Evolve, acfg.Start, acfg.Past = true, evolving.at, evolving.past
		}
		f, err := newFormat(ctx, acfg)
		if err != nil {
			err = fmt.Errorf("ingest kafka: topic %s: --%s-format %s: %w", topic, role, name, err)
			if re, ok := errors.AsType[*kafkafmt.RegistryError](err); ok && (re.Code == 40401 || re.Code == 40402) && hint.Of(err) == "" {
				err = hint.Wrap(err, fmt.Sprintf("register the %s schema of topic %s as subject %s-%s (TopicNameStrategy), or check %s", role, topic, topic, role, flag))
			}
			return nil, err
		}
		return f, nil
	}
	if key, err = make1(cfg.KeyFormat, "key", "--key-schema-version", cfg.KeySchemaVersion); err != nil {
		return nil, nil, err
	}
	if value, err = make1(cfg.ValueFormat, "value", "--value-schema-version", cfg.ValueSchemaVersion); err != nil {
		return nil, nil, err
	}
	return key, value, nil
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
	k.Close()
	k.st, k.decs, k.states, k.formats = st, map[string]kafkafmt.Decoder{}, map[string]*upsertState{}, map[string][2]kafkafmt.Format{}
	k.evolving, k.switches, k.replay = map[string]bool{}, map[string]pendingSwitch{}, map[string][]frontier.Frontier{}
	var tls []Timeline
	for _, topic := range cfg.Topics {
		if k.decs[topic] != nil {
			return nil, hint.Wrap(fmt.Errorf("ingest kafka: topic %q given twice", topic), "name each topic once in --topics")
		}
		source := KafkaSourceID(cfg.Source, topic)
		evolving, err := k.evolvingFrom(ctx, st, topic)
		if err != nil {
			return nil, fmt.Errorf("ingest %s: %w", source, err)
		}
		k.evolving[topic] = evolving != nil
		keyF, valF, err := kafkaFormats(ctx, cfg, topic, evolving)
		if err != nil {
			return nil, err
		}
		dcfg := kafkafmt.Config{Envelope: cfg.Envelope, Key: keyF, Value: valF, Collection: topic, Source: source,
			OnDecodeError: cfg.OnDecodeError, DecodeErrors: k.decodeError}
		if cfg.Envelope == "debezium" {
			_, keyOK := keyF.(kafkafmt.ChangeFormat)
			if _, ok := valF.(kafkafmt.ChangeFormat); !ok || !keyOK {
				return nil, hint.Wrap(fmt.Errorf("ingest %s: the debezium envelope needs Debezium keys and values, not --key-format %s --value-format %s", source, keyF.Name(), valF.Name()),
					"pass --key-format json --value-format json (Kafka Connect's JsonConverter), or both avro, both protobuf or both json-schema with --schema-registry (Confluent's AvroConverter, ProtobufConverter, JsonSchemaConverter)")
			}
			if dcfg.Columns, dcfg.KeyColumns, err = k.debeziumColumns(ctx, st, topic, keyF, valF); err != nil {
				return nil, fmt.Errorf("ingest %s: %w", source, err)
			}
		}
		dec, err := kafkafmt.NewDecoder(dcfg)
		if err != nil {
			return nil, hint.Wrap(fmt.Errorf("ingest %s: %w", source, err), "use --envelope none, upsert or debezium, --on-decode-error fail, skip or inline")
		}
		k.decs[topic], k.formats[topic] = dec, [2]kafkafmt.Format{keyF, valF}
		if h, ok := kafkafmt.As[kafkafmt.Historied](dec); ok && evolving != nil {
			h.UseHistory(k.history(topic))
		}
		tl := Timeline{ID: source, Kind: "kafka", Domain: frontier.DomainKafka,
			Upstream:    kafkaRecorded(cfg.Upstream, topic),
			Collections: []Collection{k.collection(topic, dec, keyF, valF)}}
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
func (k *Kafka) collection(topic string, dec kafkafmt.Decoder, keyF, valF kafkafmt.Format) Collection {
	var fields []arrow.Field
	for _, f := range dec.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		}
		fields = append(fields, f)
	}
	md := dec.Schema().Metadata()
	want := map[string]string{mdKafkaEnvelope: k.cfg.Envelope, mdKafkaKeyFormat: keyF.Name(), mdKafkaValueFormat: valF.Name()}
	keys := []string{mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat}
	flags := map[string]string{mdKafkaEnvelope: "--envelope", mdKafkaKeyFormat: "--key-format", mdKafkaValueFormat: "--value-format",
		mdKafkaKeySchema: "--key-schema-version", mdKafkaValueSchema: "--value-schema-version", mdKafkaInline: "--on-decode-error"}
	versions := map[string]int{}
	for _, s := range []struct {
		key string
		f   kafkafmt.Format
	}{{mdKafkaKeySchema, keyF}, {mdKafkaValueSchema, valF}} {
		if subject, v, id, ok := kafkafmt.RegistryReader(s.f); ok && k.cfg.Envelope != "debezium" {
			// (The debezium envelope reads each record with its writer
			// schema: a reader version is not what decoded it.)
			want[s.key] = fmt.Sprintf("subject %s version %d id %d", subject, v, id)
			versions[s.key] = v
			keys = append(keys, s.key)
		}
	}
	if k.cfg.OnDecodeError == kafkafmt.PolicyInline {
		// Inline changes the columns; fail and skip do not.
		want[mdKafkaInline] = kafkafmt.PolicyInline
		keys = append(keys, mdKafkaInline)
	}
	mkeys, mvals := md.Keys(), md.Values()
	for _, key := range keys {
		mkeys, mvals = append(mkeys, key), append(mvals, want[key])
	}
	md = arrow.NewMetadata(mkeys, mvals)
	evolving := k.evolving[topic]
	return Collection{Name: topic, Schema: arrow.NewSchema(fields, &md), Check: func(existing *arrow.Schema) error {
		have := existing.Metadata()
		for _, key := range []string{mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat, mdKafkaKeySchema, mdKafkaValueSchema, mdKafkaInline} {
			got, ok := have.GetValue(key)
			switch {
			case key == mdKafkaInline && got != want[key]:
				if got == "" {
					got = "fail"
				}
				return hint.Wrap(fmt.Errorf("ingested with --on-decode-error %s, not %s (inline has other columns)", got, k.cfg.OnDecodeError),
					"pass --on-decode-error "+got+", or ingest into another store")
			case !ok || got == want[key]:
			case key == mdKafkaValueSchema && evolving:
				// The reader is the collection's own (evolvingFrom).
			case key == mdKafkaKeySchema || key == mdKafkaValueSchema:
				var subject string
				var v, id int
				fmt.Sscanf(got, "subject %s version %d id %d", &subject, &v, &id)
				return hint.Wrap(fmt.Errorf("ingested with the reader schema %s, not %s (the subject has a new latest version, or another was pinned)", got, want[key]),
					fmt.Sprintf("pass %s %d to keep reading with that version, or ingest into another store or --source-id to read with version %d", flags[key], v, versions[key]))
			default:
				return hint.Wrap(fmt.Errorf("ingested with %s %s, not %s", flags[key], got, want[key]),
					fmt.Sprintf("pass %s %s, or ingest into another store", flags[key], got))
			}
		}
		return nil
	}}
}

// decodeError counts a record that does not decode and, when it is not
// a definite error (which the stream logs), logs it at most once a second.
func (k *Kafka) decodeError(de *kafkafmt.DecodeError, policy string) {
	if k.metrics != nil {
		k.metrics.kafkaDecodeError(de.Topic, policy)
	}
	if policy != kafkafmt.PolicyFail {
		k.errLog.log(k.log, de, policy)
	}
}

// decodeErrorLog logs skipped and inlined records, at most one line a
// second, with the number not logged since.
type decodeErrorLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *decodeErrorLog) log(log *slog.Logger, de *kafkafmt.DecodeError, policy string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.last) < time.Second {
		l.suppressed++
		return
	}
	what := "kafka record does not decode; skipped"
	if policy == kafkafmt.PolicyInline {
		what = "kafka record does not decode; kept inline with its error"
	}
	log.Warn(what, "topic", de.Topic, "partition", de.Partition, "offset", de.Offset, "error", de.Msg, "not_logged_since_last", l.suppressed)
	l.last, l.suppressed = time.Now(), 0
}

// Resume implements Resumer: an upsert decoder's state is the collection
// as of its last durable time, on disk (openUpsertState: reused, caught up
// or rebuilt from the store) behind a cache of bounded size; netting
// starts past the last binding.
func (k *Kafka) Resume(ctx context.Context, r Resume) error {
	for topic, sh := range r.Shards {
		dec := k.decs[topic]
		if err := k.findSwitch(r, topic, sh); err != nil {
			return err
		}
		k.replayOf(r, topic)
		b, backed := kafkafmt.As[kafkafmt.Backed](dec)
		s, stateful := kafkafmt.As[kafkafmt.Stateful](dec)
		switch {
		case r.Errored[topic]:
		case k.cfg.Envelope == "upsert" && backed:
			if k.states[topic] == nil {
				u, err := k.openUpsertState(ctx, r, topic, sh, b)
				if err != nil {
					return fmt.Errorf("upsert state: %w", err)
				}
				k.states[topic] = u
			}
		case stateful && r.Durable > 0:
			// In memory (debezium: a truncate retracts every key), read
			// from the store.
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
		if n, ok := kafkafmt.As[kafkafmt.Netting](dec); ok {
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
		topics = append(topics, replicate.KafkaTopic{Name: topic, Start: r.Start[KafkaSourceID(k.cfg.Source, topic)], Decoder: k.decs[topic],
			Replay: k.replay[topic]})
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, u := range k.states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.follow(gctx, r.Ack, k.log)
		}()
	}
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
	k.streamCtx = ctx
	sink := &evolveSink{Sink: r.Sink, ctx: ctx, k: k}
	if err := k.resumeSwitches(ctx, r, sink); err != nil {
		return err
	}
	return replicate.StreamKafka(ctx, replicate.KafkaConfig{
		Upstream: k.cfg.Upstream, Topics: topics, MaxRecordBytes: k.cfg.MaxRecordBytes,
		CheckInterval: k.cfg.CheckInterval, Logger: k.log, OnStart: k.cfg.OnStart,
		// Whole partition chunks of a fetch per record: the reclocker
		// holds them anyway, and an upsert decoder nets over a record.
		FlushRows:           1 << 20,
		FetchPartitionBytes: partBytes, RetryFor: r.RetryFor, Durable: k.durable(r.Ack),
	}, sink)
}

// Close implements Source.
func (k *Kafka) Close() error {
	for _, d := range k.decs {
		d.Release()
	}
	var err error
	for _, u := range k.states {
		if cerr := u.db.Close(); err == nil {
			err = cerr
		}
	}
	k.decs, k.states = nil, nil
	return err
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
	ticking(ctx, 2*time.Second, func() {
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
			return
		}
		resp, err := adm.CommitOffsets(ctx, k.cfg.Group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("commit consumer group offsets failed; will retry", "group", k.cfg.Group, "error", err)
			clear(last)
		}
	})
}

func parsePartitionNumber(p string) (int32, error) {
	var n int32
	_, err := fmt.Sscan(p, &n)
	return n, err
}
