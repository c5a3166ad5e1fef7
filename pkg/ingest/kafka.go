package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
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
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
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
	// Brokers are the bootstrap brokers, host:port.
	Brokers []string
	// Topics to ingest; each becomes the collection of the same name and
	// its own source (KafkaSourceID).
	Topics []string
	// KeyFormat and ValueFormat: bytes (default), text or json.
	KeyFormat, ValueFormat string
	// Envelope: none (default, append-only) or upsert.
	Envelope string
	// Store is where to write.
	Store *store.Store
	// Source is the prefix of the source ids (default "kafka"): topic T
	// is the source Source + "." + T.
	Source string
	// Group, when set, is a consumer group whose committed offsets follow
	// what is durable in the store (for monitoring only; ingest resumes
	// from the store).
	Group string
	// Interval is the least time between bindings (reclock.DefaultInterval).
	Interval time.Duration
	// CompactEvery runs store compaction this often (0: 1 minute; negative:
	// never).
	CompactEvery time.Duration
	// MaxRecordBytes bounds one record (replicate.DefaultMaxRecordBytes).
	MaxRecordBytes int
	// CheckInterval: how often topic metadata is checked (new partitions,
	// recreated topics, compacted tails); 0 means 5s.
	CheckInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// AfterCommit is a test hook called after each collection commit.
	AfterCommit func(collection string, upper uint64)
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

// kafkaRun is the pipeline of one topic: its source's lock, reclocker and
// store writer.
type kafkaRun struct {
	topic, source string
	lock          *store.Lock
	mu            sync.Mutex // guards rc and errored
	rc            *reclock.Reclocker
	w             *storeWriter
	dec           kafkafmt.Decoder
	start         frontier.Frontier
	// errored: the collection has a definite error; it gets no more data.
	errored bool
	srv     *recency.Server // serves wait-recent for this source
}

// RunKafka ingests the topics until ctx ends (then it returns nil after
// committing what is complete) or a definite error stops it. Every topic
// is one source (KafkaSourceID) with its own writer lock, bindings and
// collection; one consumer reads them all. It resumes from the store: each
// topic from the frontier of its last binding below the collection's
// durable upper, and an upsert collection's state (key -> value) is read
// back from the store rather than from the topic.
func RunKafka(ctx context.Context, cfg KafkaConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CompactEvery == 0 {
		cfg.CompactEvery = time.Minute
	}
	if cfg.Envelope == "" {
		cfg.Envelope = "none"
	}
	if len(cfg.Topics) == 0 {
		return hint.Wrap(errors.New("ingest kafka: no topics given"), "pass --topics NAME[,NAME...]")
	}
	keyF, err := kafkafmt.ParseFormat(cfg.KeyFormat)
	if err != nil {
		return hint.Wrap(fmt.Errorf("ingest kafka: --key-format: %w", err), "use --key-format bytes, text or json")
	}
	valF, err := kafkafmt.ParseFormat(cfg.ValueFormat)
	if err != nil {
		return hint.Wrap(fmt.Errorf("ingest kafka: --value-format: %w", err), "use --value-format bytes, text or json")
	}
	st := cfg.Store
	log := cfg.Logger.With("source", KafkaSourceID(cfg.Source, "*"))

	runs := map[string]*kafkaRun{}
	var order []*kafkaRun
	defer func() {
		for _, r := range order {
			if r.rc != nil {
				r.rc.Close()
			}
			if r.dec != nil {
				r.dec.Release()
			}
			if r.srv != nil {
				r.srv.Close()
			}
			if r.w != nil {
				r.w.Close()
			}
			r.lock.Unlock()
		}
	}()
	var topics []replicate.KafkaTopic
	for _, topic := range cfg.Topics {
		if _, dup := runs[topic]; dup {
			return hint.Wrap(fmt.Errorf("ingest kafka: topic %q given twice", topic), "name each topic once in --topics")
		}
		r, err := startKafkaRun(ctx, cfg, topic, keyF, valF)
		if r != nil {
			runs[topic] = r
			order = append(order, r)
		}
		if err != nil {
			return err
		}
		topics = append(topics, replicate.KafkaTopic{Name: topic, Start: r.start, Decoder: r.dec})
	}

	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	bg := startBackground(streamCtx, stopStream, cfg.Interval, cfg.CompactEvery, func(ctx context.Context) error {
		for _, r := range order {
			if err := tickIngest(ctx, &r.mu, r.rc, r.w); err != nil {
				return err
			}
		}
		return nil
	}, st, log)

	if cfg.Group != "" {
		bg.wg.Add(1)
		go func() {
			defer bg.wg.Done()
			commitGroup(streamCtx, cfg, order, log)
		}()
	}

	var partBytes int32
	if cfg.Envelope == "upsert" {
		// The decoder nets each partition chunk of a fetch per key, so
		// larger chunks write fewer rows: with 100k keys, 8 MiB chunks
		// take BenchmarkKafkaIngest/upsert from 0.26x to 0.39x of a raw
		// consumer. Append-only chunks gain nothing (docs/kafka.md).
		partBytes = 8 << 20
	}
	err = replicate.StreamKafka(streamCtx, replicate.KafkaConfig{
		Brokers: cfg.Brokers, Topics: topics, MaxRecordBytes: cfg.MaxRecordBytes,
		CheckInterval: cfg.CheckInterval, Logger: log, OnStart: cfg.OnStart,
		// Whole partition chunks of a fetch per record: the reclocker
		// holds them anyway, and an upsert decoder nets over a record.
		FlushRows:           1 << 20,
		FetchPartitionBytes: partBytes,
	}, &kafkaSink{ctx: streamCtx, runs: runs})
	stopStream()
	if terr := bg.wait(); terr != nil {
		return terr
	}
	if ctx.Err() != nil {
		// Interrupted: bind and commit what the topics completed.
		for _, r := range order {
			if err := finishIngest(&r.mu, r.rc, r.w); err != nil {
				return err
			}
			log.Info("stopped", "topic", r.topic, "durable_upper", r.w.DurableUpper())
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("ingest kafka: %w", err)
	}
	return nil
}

// startKafkaRun locks topic's source, records its info, creates its
// collection and reclocker and works out where to resume.
func startKafkaRun(ctx context.Context, cfg KafkaConfig, topic string, keyF, valF kafkafmt.Format) (*kafkaRun, error) {
	st := cfg.Store
	source := KafkaSourceID(cfg.Source, topic)
	lock, err := st.LockSource(source)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("ingest %s: another rtrctl ingest is writing this source to %s: %w; stop it first, or ingest into another store or --source-id prefix", source, st.Dir(), err)
		}
		return nil, fmt.Errorf("ingest %s: %w", source, err)
	}
	r := &kafkaRun{topic: topic, source: source, lock: lock}
	dec, err := kafkafmt.NewDecoder(kafkafmt.Config{Envelope: cfg.Envelope, Key: keyF, Value: valF, Collection: topic, Source: source})
	if err != nil {
		return r, hint.Wrap(fmt.Errorf("ingest %s: %w", source, err), "use --envelope none or --envelope upsert")
	}
	r.dec = dec

	// The collection, with its schema and how it was decoded.
	var fields []arrow.Field
	for _, f := range dec.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		}
		fields = append(fields, f)
	}
	h, _ := pipe.ParseHeader(dec.Schema().Metadata())
	h.Domain = frontier.DomainSystem
	md := h.Metadata()
	keys := append(md.Keys(), mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat)
	vals := append(md.Values(), cfg.Envelope, keyF.Name(), valF.Name())
	md = arrow.NewMetadata(keys, vals)
	sh, err := st.Shard(ctx, topic)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if sh, err = st.CreateShard(ctx, topic, arrow.NewSchema(fields, &md)); err != nil {
			return r, fmt.Errorf("ingest %s: %w", source, err)
		}
	case err != nil:
		return r, fmt.Errorf("ingest %s: %w", source, err)
	default:
		have := sh.Schema().Metadata()
		if src, _ := have.GetValue(pipe.KeySource); src != source {
			return r, hint.Wrap(fmt.Errorf("ingest %s: collection %s in %s belongs to source %q", source, topic, st.Dir(), src),
				"ingest this topic into another store, or use the --source-id prefix it was ingested with")
		}
		for i, k := range []string{mdKafkaEnvelope, mdKafkaKeyFormat, mdKafkaValueFormat} {
			want := []string{cfg.Envelope, keyF.Name(), valF.Name()}[i]
			if got, ok := have.GetValue(k); ok && got != want {
				flag := map[string]string{mdKafkaEnvelope: "--envelope", mdKafkaKeyFormat: "--key-format", mdKafkaValueFormat: "--value-format"}[k]
				return r, hint.Wrap(fmt.Errorf("ingest %s: collection %s was ingested with %s %s, not %s", source, topic, flag, got, want),
					fmt.Sprintf("pass %s %s, or ingest into another store", flag, got))
			}
		}
	}
	info := store.SourceInfo{
		Source: source, Kind: "kafka", Brokers: cfg.Brokers, Topics: []string{topic}, Collections: []string{topic},
		PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339),
		Socket: recency.SocketPath(st.Dir(), source),
	}
	if err := st.WriteSourceInfo(info); err != nil {
		return r, err
	}

	r.w = newStoreWriter(st, source, []string{topic})
	r.w.afterCommit = cfg.AfterCommit
	rc, err := reclock.New(ctx, st, source, frontier.DomainKafka, r.w, reclock.Options{Interval: cfg.Interval})
	if err != nil {
		return r, err
	}
	r.rc = rc

	// Real-time recency: serve wait-recent for this topic's source. Kafka
	// reports progress with every fetch, so the nudge has nothing to do.
	if p, err := probe.NewKafka(cfg.Brokers, []string{topic}); err == nil {
		r.srv = serveRecency(ctx, st, source, info.Socket, p, &r.mu, r.rc, r.w, nil, cfg.Logger)
	}

	// Resume: the frontier of the last binding below the durable upper.
	durable, err := r.w.Durable(ctx)
	if err != nil {
		return r, err
	}
	r.w.setDurable(durable)
	r.start = durableFrontier(rc.Bindings(), durable, frontier.DomainKafka)
	if err := sh.Refresh(ctx); err != nil {
		return r, err
	}
	info2, err := sh.Info(ctx)
	if err != nil {
		return r, err
	}
	if len(info2.Errors) > 0 {
		r.errored = true
		cfg.Logger.Warn("collection has a definite error; it gets no more data", "source", source, "collection", topic, "error", info2.Errors[0].Message)
	} else if s, ok := dec.(kafkafmt.Stateful); ok && durable > 0 {
		// Upsert: the state is the collection as of its last durable time,
		// folded in a batch at a time (memory: the state and one batch).
		err := sh.ScanAsOf(ctx, durable-1, s.ResetState, s.AddState)
		if err == nil {
			err = s.EndState()
		}
		if err != nil {
			return r, fmt.Errorf("ingest %s: rebuild upsert state: %w", source, err)
		}
		cfg.Logger.Info("upsert state rebuilt from the store", "source", source, "keys", s.StateSize(), "as_of", durable-1)
	}
	// Upsert: net each batch's records per key (one retraction and one
	// insertion per key instead of per record). The stream reports
	// progress only between batches, so one binding covers a batch, except
	// that bindings made before this run may split the records below the
	// last one's frontier: those stay record by record.
	if n, ok := dec.(kafkafmt.Netting); ok {
		from := map[int32]int64{}
		if bs := rc.Bindings(); len(bs) > 0 {
			last := bs[len(bs)-1].Frontier
			for _, p := range last.Partitions() {
				pn, err := parsePartitionNumber(p)
				if err != nil {
					return r, fmt.Errorf("ingest %s: binding partition %q: %w", source, p, err)
				}
				from[pn] = int64(last.Get(p))
			}
		}
		n.NetFrom(from)
	}
	cfg.Logger.Info("resume", "source", source, "from", r.start.String(), "durable_upper", durable)
	return r, nil
}

// commitGroup commits, for monitoring, the durable frontier of every topic
// as the offsets of cfg.Group, every few seconds.
func commitGroup(ctx context.Context, cfg KafkaConfig, runs []*kafkaRun, log *slog.Logger) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DialTimeout(5*time.Second))
	if err != nil {
		log.Warn("consumer group offsets will not be committed", "group", cfg.Group, "error", err)
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
		for _, r := range runs {
			u, err := r.w.Durable(ctx)
			if err != nil {
				continue
			}
			r.mu.Lock()
			f := durableFrontier(r.rc.Bindings(), u, frontier.DomainKafka)
			r.mu.Unlock()
			if last[r.topic] == f.String() {
				continue
			}
			for _, p := range f.Partitions() {
				n, err := parsePartitionNumber(p)
				if err != nil {
					continue
				}
				offs.Add(kadm.Offset{Topic: r.topic, Partition: n, At: int64(f.Get(p)), LeaderEpoch: -1})
			}
			last[r.topic] = f.String()
		}
		if len(offs) == 0 {
			continue
		}
		resp, err := adm.CommitOffsets(ctx, cfg.Group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("commit consumer group offsets failed; will retry", "group", cfg.Group, "error", err)
			clear(last)
		}
	}
}

func parsePartitionNumber(p string) (int32, error) {
	var n int32
	_, err := fmt.Sscan(p, &n)
	return n, err
}

// kafkaSink feeds the change stream into the topics' reclockers.
type kafkaSink struct {
	ctx  context.Context
	runs map[string]*kafkaRun
}

func (s *kafkaSink) run(topic string) (*kafkaRun, error) {
	r := s.runs[topic]
	if r == nil {
		return nil, fmt.Errorf("ingest kafka: records of unknown topic %q", topic)
	}
	return r, nil
}

// Data implements replicate.KafkaSink.
func (s *kafkaSink) Data(topic string, rec arrow.Record) error {
	r, err := s.run(topic)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errored {
		return nil
	}
	return r.rc.Data(s.ctx, topic, rec)
}

// Progress implements replicate.KafkaSink.
func (s *kafkaSink) Progress(topic string, upper frontier.Frontier) error {
	r, err := s.run(topic)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rc.SourceProgress(s.ctx, upper)
}

// Error implements replicate.KafkaSink.
func (s *kafkaSink) Error(topic string, at frontier.Time, msg string) error {
	r, err := s.run(topic)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errored {
		return nil
	}
	r.errored = true
	return r.rc.Error(s.ctx, topic, at, strings.TrimSpace(msg))
}
