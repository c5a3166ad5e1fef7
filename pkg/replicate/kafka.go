package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// DefaultMaxRecordBytes is the default bound on one record's key, value
// and headers together.
const DefaultMaxRecordBytes = 16 << 20

// KafkaTopic is one topic of a Kafka change stream.
type KafkaTopic struct {
	// Name is the topic; it is also the collection name.
	Name string
	// Start is where to start, per partition (a kafka-domain frontier:
	// partition number in decimal -> next offset). A partition it does not
	// name starts at its log start.
	Start frontier.Frontier
	// Decoder turns the topic's records into updates (kafkafmt). StreamKafka
	// does not release it.
	Decoder kafkafmt.Decoder
	// Replay, when set, are the frontiers of the bindings an earlier run
	// made beyond Start, in order: the records are read binding by binding
	// (a partition that reached the frontier of the binding being replayed
	// is paused until every partition has), so that each record is handed
	// over after every record of the bindings before its own, whatever
	// the fetches' interleaving. A decoder whose columns change at a
	// record (kafkafmt.Evolver) needs it: the replay must meet the first
	// record that changes them in the binding the first run did.
	Replay []frontier.Frontier
}

// KafkaConfig configures StreamKafka.
type KafkaConfig struct {
	// Upstream is the cluster: its bootstrap brokers, TLS and SASL.
	Upstream upstream.Kafka
	// Topics to read; each is its own collection and its own progress.
	Topics []KafkaTopic
	// MaxRecordBytes bounds one record (key + value + headers); a larger
	// record stops the stream with an error naming --max-record-bytes.
	// Zero means DefaultMaxRecordBytes.
	MaxRecordBytes int
	// CheckInterval is how often the topics' metadata and offsets are
	// checked: new partitions are picked up, a recreated topic is
	// detected, and progress steps over records missing at the end of a
	// partition (compacted away). Zero means 5s.
	CheckInterval time.Duration
	// FlushRows bounds the rows of one data record (default 8192).
	FlushRows int
	// FetchPartitionBytes is the most one fetch reads of one partition
	// (0: franz-go's default, 1 MiB). A partition's records of one fetch
	// are one chunk, which an upsert decoder nets per key: larger chunks
	// net more.
	FetchPartitionBytes int32
	// MaxBackoff caps the wait between attempts to reach the brokers at
	// the start; zero means 10s. Once running, the client reconnects by
	// itself.
	MaxBackoff time.Duration
	// RetryFor bounds how long the brokers may stay unreachable (at the
	// start, and for the periodic metadata check once running) before
	// StreamKafka gives up with a *retry.GaveUpError; 0 means forever.
	// Authentication and authorization failures fail at once.
	RetryFor time.Duration
	// Logger logs retries and start positions; nil means slog.Default().
	Logger *slog.Logger
	// OnStart, when set, is called for every partition with the offset
	// its consumption starts at (before the first record of it).
	OnStart func(topic string, partition int32, offset int64)
	// ClientOpts are added to the consumer's franz-go options.
	ClientOpts []kgo.Opt
	// Durable waits until the store has every update of topic below f
	// durable. An append-only decoder's switch of columns
	// (kafkafmt.Historied) re-expresses the collection's rows, which it
	// reads from the store: the stream waits for those before the
	// switching record first. Without it such a switch fails.
	Durable func(ctx context.Context, topic string, f frontier.Frontier) error
}

// SwitchSink is a sink that takes the contents of an append-only
// topic's switch of columns (kafkafmt.Historied: every row the collection
// had, which can be many) apart from its other data: SwitchData gets them
// record by record (the callee's to stage, not to hold in memory until
// their binding), SwitchDone once all are handed over, with the
// partition of the switching record they are at.
type SwitchSink interface {
	SwitchData(collection string, rec arrow.Record) error
	SwitchDone(collection, partition string) error
}

// kafkaTopicState is what StreamKafka tracks per topic.
type kafkaTopicState struct {
	KafkaTopic
	id       kadm.TopicID
	leaders  map[int32]int32 // partition -> leader broker
	pos      map[int32]int64 // partition -> next offset (progress)
	sent     frontier.Frontier
	checked  map[int32]int64 // pos at the last check (tail-gap detection)
	errored  bool
	assigned map[int32]bool
	// replay is what is left of Replay; paused are the partitions held
	// at the replayed binding's frontier, with the offset to resume at.
	replay []frontier.Frontier
	paused map[int32]int64
	// historied: the decoder's switch re-expresses the collection's rows
	// from the store (kafkafmt.Historied). from is the frontier of the
	// last binding replayed (Start before); kept are the records handed
	// over in the binding being replayed, which a switch in it re-adds
	// with the new reader (the reset at the binding supersedes them).
	historied bool
	from      frontier.Frontier
	kept      []*kgo.Record
}

type kafkaStreamer struct {
	ctx    context.Context
	cfg    KafkaConfig
	log    *slog.Logger
	admCl  *kgo.Client
	adm    *kadm.Client
	cl     *kgo.Client
	sink   pipe.Sink
	topics map[string]*kafkaTopicState
	names  []string
	// metaAge bounds the age of cached metadata of both clients.
	metaAge kgo.Opt
}

// StreamKafka reads the topics with isolation level read_committed (records
// of aborted transactions never appear) and hands their records, decoded
// by each topic's Decoder, to sink, at source time (partition, offset).
// Progress per partition is the next offset to read; it steps over
// transaction markers (franz-go's KeepControlRecords), so a partition
// ending in a commit or abort marker reaches its end offset, and over
// records missing at the end of a partition (compacted away), which a
// periodic check finds by reading the partition up to its last stable
// offset. Partitions are assigned directly (no consumer group); new ones
// are picked up at the periodic check.
//
// It returns ctx's error when ctx ends, and otherwise a definite error: a
// missing topic, a topic that was deleted and recreated (offsets behind
// the start, a log start beyond it, fewer partitions, a new topic id), or
// a record larger than MaxRecordBytes. Brokers that cannot be reached at
// the start are retried with backoff (internal/retry) for at most
// RetryFor; later, the client reconnects by itself, and RetryFor bounds
// how long the periodic metadata check may keep failing.
func StreamKafka(ctx context.Context, cfg KafkaConfig, sink pipe.Sink) error {
	if len(cfg.Upstream.Brokers) == 0 {
		return hint.Wrap(errors.New("replicate kafka: no brokers given"), "pass --brokers host:port (or set RTR_KAFKA_BROKERS)")
	}
	if len(cfg.Topics) == 0 {
		return hint.Wrap(errors.New("replicate kafka: no topics given"), "pass --topics NAME[,NAME...]")
	}
	if cfg.MaxRecordBytes <= 0 {
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 5 * time.Second
	}
	if cfg.FlushRows <= 0 {
		cfg.FlushRows = 8192
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Metadata no older than half a check: new partitions show up in time.
	metaAge := kgo.MetadataMinAge(max(min(cfg.CheckInterval/2, 5*time.Second), 10*time.Millisecond))
	s := &kafkaStreamer{ctx: ctx, cfg: cfg, log: cfg.Logger, sink: sink, topics: map[string]*kafkaTopicState{}, metaAge: metaAge}
	for _, t := range cfg.Topics {
		if t.Name == "" || t.Decoder == nil {
			return fmt.Errorf("replicate kafka: topic %q needs a name and a decoder", t.Name)
		}
		if _, dup := s.topics[t.Name]; dup {
			return hint.Wrap(fmt.Errorf("replicate kafka: topic %q given twice", t.Name), "name each topic once in --topics")
		}
		if t.Start.Domain() == "" {
			t.Start = frontier.Empty(frontier.DomainKafka)
		}
		if t.Start.Domain() != frontier.DomainKafka {
			return fmt.Errorf("replicate kafka: start of topic %s is in domain %s, want kafka", t.Name, t.Start.Domain())
		}
		st := &kafkaTopicState{KafkaTopic: t, pos: map[int32]int64{}, checked: map[int32]int64{}, assigned: map[int32]bool{}, sent: t.Start,
			replay: t.Replay, paused: map[int32]int64{}, from: t.Start}
		_, st.historied = kafkafmt.As[kafkafmt.Historied](t.Decoder)
		for _, p := range t.Start.Partitions() {
			n, err := parsePartition(p)
			if err != nil {
				return fmt.Errorf("replicate kafka: start of topic %s: %w", t.Name, err)
			}
			st.pos[n] = int64(t.Start.Get(p))
		}
		s.topics[t.Name] = st
		s.names = append(s.names, t.Name)
	}
	sort.Strings(s.names)
	admCl, err := kgo.NewClient(append(cfg.Upstream.Opts(), kgo.DialTimeout(5*time.Second), kgo.RequestRetries(2), kgo.RetryTimeout(10*time.Second), metaAge)...)
	if err != nil {
		return hint.Wrap(fmt.Errorf("replicate kafka %s: %w", cfg.Upstream.String(), err), "check --brokers (host:port,...)")
	}
	s.admCl, s.adm = admCl, kadm.NewClient(admCl)
	defer admCl.Close()
	defer func() {
		if s.cl != nil {
			s.cl.Close()
		}
	}()
	return s.run(ctx)
}

func parsePartition(p string) (int32, error) {
	var n int32
	if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != p {
		return 0, fmt.Errorf("partition %q is not a partition number", p)
	}
	return n, nil
}

func (s *kafkaStreamer) run(ctx context.Context) error {
	// 1. Metadata and offsets, retried until the brokers answer.
	policy := retry.Policy{For: s.cfg.RetryFor, Initial: 200 * time.Millisecond, Max: s.cfg.MaxBackoff,
		Logger: s.log.With("brokers", s.cfg.Upstream.String()), What: "replicate kafka"}
	err := retry.Do(ctx, policy, func(ctx context.Context) error {
		err := s.check(ctx, true)
		if s.cfg.Upstream.PlainOnTLS(err) {
			// Not a broker going away: the listener wants TLS.
			return retry.Permanent(s.cfg.Upstream.Explain(fmt.Errorf("replicate kafka %s: %w", s.cfg.Upstream.String(), err)))
		}
		return s.classify(err)
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("replicate kafka: %w", ctx.Err())
		}
		if de, ok := errors.AsType[*definiteError](err); ok {
			// Definite whatever its cause looks like (a missing topic is
			// a retriable Kafka error code): callers must not retry it.
			return retry.Permanent(de.err)
		}
		if hint.Of(err) == "" {
			err = hint.Wrap(err, "is the broker running and reachable? check --brokers (or RTR_KAFKA_BROKERS)")
		}
		return err
	}

	// 2. The consumer, on every partition known now.
	assign := map[string]map[int32]kgo.Offset{}
	for _, name := range s.names {
		st := s.topics[name]
		assign[name] = s.newAssignments(st)
	}
	maxRead := int32(min(max(100<<20, 2*s.cfg.MaxRecordBytes+(1<<20)), 1<<30))
	opts := append(s.cfg.Upstream.Opts(),
		kgo.DialTimeout(5*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.ConsumePartitions(assign),
		kgo.BrokerMaxReadBytes(maxRead),
		kgo.FetchMaxBytes(min(maxRead, 50<<20)),
		kgo.MaxDecompressBatchBytes(int(maxRead)),
		s.metaAge,
	)
	if s.cfg.FetchPartitionBytes > 0 {
		opts = append(opts, kgo.FetchMaxPartitionBytes(s.cfg.FetchPartitionBytes))
	}
	opts = append(opts, s.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return hint.Wrap(fmt.Errorf("replicate kafka %s: %w", s.cfg.Upstream.String(), err), "check --brokers (host:port,...)")
	}
	s.cl = cl
	for _, name := range s.names {
		st := s.topics[name]
		if err := s.sink.Progress(name, st.sent); err != nil {
			return err
		}
	}

	// 3. Poll, decode, report progress; check metadata now and then.
	lastCheck := time.Now()
	var lastWarn, failingSince time.Time
	for {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.CheckInterval)
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("replicate kafka: %w", ctx.Err())
		}
		var fatal error
		fetches.EachError(func(topic string, p int32, err error) {
			if fatal != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if ferr := s.fetchError(topic, p, err); ferr != nil {
				fatal = ferr
				return
			}
			if time.Since(lastWarn) > 5*time.Second {
				lastWarn = time.Now()
				s.log.Warn("kafka fetch failed; the client retries", "topic", topic, "partition", p, "error", err)
			}
		})
		if fatal != nil {
			return fatal
		}
		touched := map[string]bool{}
		var serr error
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if serr != nil || len(ftp.Records) == 0 {
				return
			}
			st := s.topics[ftp.Topic]
			if st == nil {
				return
			}
			touched[ftp.Topic] = true
			serr = s.records(st, ftp.Partition, ftp.Records)
			if serr == nil {
				// One data record per partition chunk: each is sorted by
				// (partition, offset), which spares the store a sort.
				serr = s.flushData(st)
			}
		})
		if serr != nil {
			return serr
		}
		for _, name := range s.names {
			if touched[name] {
				if err := s.flush(s.topics[name]); err != nil {
					return err
				}
			}
		}
		if time.Since(lastCheck) >= s.cfg.CheckInterval {
			lastCheck = time.Now()
			err := s.classify(s.check(ctx, false))
			if err == nil {
				failingSince = time.Time{}
			} else {
				if de, ok := errors.AsType[*definiteError](err); ok {
					return retry.Permanent(de.err)
				}
				if ctx.Err() != nil {
					return fmt.Errorf("replicate kafka: %w", ctx.Err())
				}
				if !retry.Transient(err) {
					return err
				}
				if failingSince.IsZero() {
					failingSince = lastCheck
				}
				if s.cfg.RetryFor > 0 && time.Since(failingSince) >= s.cfg.RetryFor {
					return &retry.GaveUpError{What: "replicate kafka", For: time.Since(failingSince), Err: err}
				}
				s.log.Warn("kafka metadata check failed; will retry", "error", err, "failing_for", time.Since(failingSince).Round(time.Millisecond))
			}
		}
	}
}

// newAssignments returns the partitions of st not yet assigned, with the
// offsets to start at, and marks them assigned.
func (s *kafkaStreamer) newAssignments(st *kafkaTopicState) map[int32]kgo.Offset {
	out := map[int32]kgo.Offset{}
	ps := make([]int32, 0, len(st.leaders))
	for p := range st.leaders {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		if st.assigned[p] {
			continue
		}
		st.assigned[p] = true
		off, ok := st.pos[p]
		if ok && off > 0 {
			out[p] = kgo.NewOffset().At(off)
		} else {
			out[p] = kgo.NewOffset().AtStart()
		}
		s.log.Info("kafka consume", "topic", st.Name, "partition", p, "from", off)
		if s.cfg.OnStart != nil {
			s.cfg.OnStart(st.Name, p, off)
		}
	}
	return out
}

// records decodes the records of one partition.
func (s *kafkaStreamer) records(st *kafkaTopicState, p int32, recs []*kgo.Record) error {
	defer s.replayed(st)
	for _, r := range recs {
		if r.Offset < st.pos[p] {
			continue // already handed over
		}
		if len(st.replay) > 0 {
			if lim := int64(st.replay[0].Get(fmt.Sprint(p))); r.Offset >= lim {
				// p has no more records in the binding being replayed.
				st.pos[p] = max(st.pos[p], lim)
				s.hold(st, p, r.Offset)
				return nil
			}
		}
		st.pos[p] = r.Offset + 1
		if r.Attrs.IsControl() || st.errored {
			continue
		}
		size := len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			size += len(h.Key) + len(h.Value)
		}
		if size > s.cfg.MaxRecordBytes {
			return hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d offset %d: record of %d bytes is larger than the limit of %d bytes", r.Topic, p, r.Offset, size, s.cfg.MaxRecordBytes),
				fmt.Sprintf("raise --max-record-bytes (e.g. --max-record-bytes %d)", size))
		}
		err := st.Decoder.Add(r)
		if sw, ok := errors.AsType[*kafkafmt.SwitchError](err); ok {
			if _, ok := kafkafmt.As[kafkafmt.Evolver](st.Decoder); !ok {
				err = &kafkafmt.DecodeError{Topic: r.Topic, Partition: p, Offset: r.Offset, Msg: "value: " + sw.Error()}
			} else if err = s.evolve(st, p, r.Offset, sw); err == nil {
				err = st.Decoder.Add(r)
			} else {
				return err
			}
		}
		if err == nil && st.historied && len(st.replay) > 0 {
			st.kept = append(st.kept, r)
		}
		if err != nil {
			var de *kafkafmt.DecodeError
			if !errors.As(err, &de) {
				return fmt.Errorf("replicate kafka: %w", err)
			}
			if err := s.flushData(st); err != nil {
				return err
			}
			s.log.Error("kafka record does not decode; the collection has a definite error from here on", "topic", st.Name, "error", de.Error())
			st.errored = true
			if err := s.sink.Error(st.Name, frontier.Time{Partition: fmt.Sprint(p), Pos: uint64(r.Offset)}, de.Error()); err != nil {
				return err
			}
			continue
		}
		if st.Decoder.Rows() >= s.cfg.FlushRows {
			if err := s.flushData(st); err != nil {
				return err
			}
		}
	}
	return nil
}

// evolve switches st's decoder to the columns a record at (p, off) needs
// (kafkafmt.Evolver): the rows before it and the progress below it
// first, so that every one of them is bound no later than the reset at
// the record (released at the first binding beyond it), then the reset
// and the state in the new columns there.
func (s *kafkaStreamer) evolve(st *kafkaTopicState, p int32, off int64, sw *kafkafmt.SwitchError) error {
	ev, _ := kafkafmt.As[kafkafmt.Evolver](st.Decoder)
	if err := s.flushData(st); err != nil {
		return err
	}
	pos := maps.Clone(st.pos)
	pos[p] = off
	if f := frontier.KafkaOffsets(pos); !f.Equal(st.sent) {
		if err := s.sink.Progress(st.Name, f); err != nil {
			return err
		}
		st.sent = f
	}
	if st.historied {
		// The collection's rows before the record, from the store: in a
		// binding of its own (the stream holds, so the next binding is
		// the progress just sent), or, replaying a binding an earlier run
		// made, those of the bindings before it.
		upto := st.sent
		if len(st.replay) > 0 {
			upto = st.from
		}
		if s.cfg.Durable == nil {
			return fmt.Errorf("replicate kafka: topic %s partition %d offset %d: a switch of columns of an append-only topic needs the store's durable frontier", st.Name, p, off)
		}
		if err := s.cfg.Durable(s.ctx, st.Name, upto); err != nil {
			return fmt.Errorf("replicate kafka: topic %s: wait for the rows before a switch of columns to be durable: %w", st.Name, err)
		}
	}
	rows := 0
	data := s.sink.Data
	ss, staged := s.sink.(SwitchSink)
	if staged = staged && st.historied; staged {
		data = ss.SwitchData
	}
	err := ev.Evolve(p, off, func(schema *arrow.Schema) error {
		s.log.Info("kafka: the collection's columns change at a record; its new generation starts there, every key re-expressed in them",
			"topic", st.Name, "partition", p, "offset", off, "change", sw.What)
		return s.sink.Reset(st.Name, frontier.Time{Partition: fmt.Sprint(p), Pos: uint64(off)}, schema)
	}, func(rec arrow.Record) error {
		defer rec.Release()
		rows += int(rec.NumRows())
		return data(st.Name, rec)
	})
	if err == nil && staged {
		err = ss.SwitchDone(st.Name, fmt.Sprint(p))
	}
	if err != nil {
		return fmt.Errorf("replicate kafka: topic %s partition %d offset %d: %w", st.Name, p, off, err)
	}
	s.log.Info("kafka: state re-expressed in the new columns", "topic", st.Name, "rows", rows)
	// Records of the binding being replayed handed over before this one:
	// superseded by the reset, read again with the new reader (they are
	// no later versions: they did not switch).
	kept := st.kept
	st.kept = nil
	for _, r := range kept {
		if err := st.Decoder.Add(r); err != nil {
			return fmt.Errorf("replicate kafka: topic %s partition %d offset %d: read again after a switch of columns: %w", st.Name, r.Partition, r.Offset, err)
		}
		st.kept = append(st.kept, r)
	}
	return nil
}

// hold pauses partition p of st at offset off until the binding being
// replayed is complete (replayed).
func (s *kafkaStreamer) hold(st *kafkaTopicState, p int32, off int64) {
	if at, ok := st.paused[p]; ok && at <= off {
		return
	}
	if _, ok := st.paused[p]; !ok {
		s.cl.PauseFetchPartitions(map[string][]int32{st.Name: {p}})
	}
	st.paused[p] = off
}

// replayed moves on to the next binding to replay while every partition
// has reached the frontier of the one being replayed, and resumes the
// partitions held whose next record is in it (all of them once the
// replay is over), at the record they were held at.
func (s *kafkaStreamer) replayed(st *kafkaTopicState) {
	for len(st.replay) > 0 {
		lim := st.replay[0]
		for p, off := range st.paused {
			// No records between where p is and its next one.
			st.pos[p] = max(st.pos[p], min(off, int64(lim.Get(fmt.Sprint(p)))))
		}
		done := true
		for _, q := range lim.Partitions() {
			n, err := parsePartition(q)
			if err == nil && st.pos[n] < int64(lim.Get(q)) {
				done = false
			}
		}
		if !done {
			break
		}
		st.replay, st.from, st.kept = st.replay[1:], lim, nil
	}
	resume := map[int32]kgo.EpochOffset{}
	for p, off := range st.paused {
		if len(st.replay) == 0 || off < int64(st.replay[0].Get(fmt.Sprint(p))) {
			resume[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
			delete(st.paused, p)
		}
	}
	if len(resume) > 0 {
		ps := slices.Collect(maps.Keys(resume))
		s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{st.Name: resume})
		s.cl.ResumeFetchPartitions(map[string][]int32{st.Name: ps})
	}
}

func (s *kafkaStreamer) flushData(st *kafkaTopicState) error {
	rec := st.Decoder.Flush()
	if f, ok := kafkafmt.As[kafkafmt.Failer](st.Decoder); ok && f.Err() != nil {
		if rec != nil {
			rec.Release()
		}
		return fmt.Errorf("replicate kafka: topic %s: %w", st.Name, f.Err())
	}
	if rec == nil {
		return nil
	}
	defer rec.Release()
	return s.sink.Data(st.Name, rec)
}

// flush hands over decoded rows and the progress of st.
func (s *kafkaStreamer) flush(st *kafkaTopicState) error {
	if err := s.flushData(st); err != nil {
		return err
	}
	f := frontier.KafkaOffsets(st.pos)
	if f.Equal(st.sent) {
		return nil
	}
	st.sent = f
	return s.sink.Progress(st.Name, f)
}

// classify sorts an error of check for internal/retry: definite errors
// and authentication/authorization failures are permanent; anything else
// (the brokers not answering, however the client words it) is transient.
func (s *kafkaStreamer) classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*definiteError](err); ok {
		return retry.Permanent(err)
	}
	if retry.IsPermanent(err) || s.cfg.Upstream.AuthFailed(err) {
		if err = s.cfg.Upstream.Explain(err); hint.Of(err) == "" {
			err = hint.Wrap(err, "check the credentials and ACLs of the client (SASL options) for the topics")
		}
		return retry.Permanent(fmt.Errorf("replicate kafka %s: %w", s.cfg.Upstream.String(), err))
	}
	return retry.MarkTransient(err)
}

// definiteError marks an error that retrying does not fix.
type definiteError struct{ err error }

func (e *definiteError) Error() string { return e.err.Error() }
func (e *definiteError) Unwrap() error { return e.err }

func definite(err error) error { return &definiteError{err: err} }

const recreatedHint = "the topic was probably deleted and recreated, or its records deleted; the store's data no longer matches it: ingest it into a new store (or under a new --source id)"

// fetchError classifies an error PollFetches returned: definite errors are
// returned, the rest (which the client retries) give nil.
func (s *kafkaStreamer) fetchError(topic string, p int32, err error) error {
	var dl *kgo.ErrDataLoss
	var big *kgo.ErrDecompressTooLarge
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("replicate kafka: %w", err)
	case errors.As(err, &dl):
		return hint.Wrap(fmt.Errorf("replicate kafka: %w", err), recreatedHint)
	case errors.As(err, &big):
		return hint.Wrap(fmt.Errorf("replicate kafka: %w", err), "a record batch is larger than --max-record-bytes allows; raise --max-record-bytes")
	case errors.Is(err, kerr.OffsetOutOfRange):
		return hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d: the offset to resume at is no longer in the log: %w", topic, p, err), recreatedHint)
	case errors.Is(err, kerr.UnknownTopicID), errors.Is(err, kerr.UnknownTopicOrPartition):
		return hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d is gone: %w", topic, p, err), recreatedHint)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d: %w", topic, p, err), "raise --max-record-bytes")
	}
	return nil
}

// check loads the topics' metadata and offsets. At the start it checks
// the start positions against the log; later it picks up new partitions,
// detects recreated topics and steps progress over records missing at the
// end of a partition. Definite problems are *definiteError.
func (s *kafkaStreamer) check(ctx context.Context, first bool) error {
	md, err := s.adm.Metadata(ctx, s.names...)
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	for _, name := range s.names {
		td, ok := md.Topics[name]
		if !ok || td.Err != nil {
			terr := td.Err
			if terr == nil {
				terr = kerr.UnknownTopicOrPartition
			}
			if errors.Is(terr, kerr.UnknownTopicOrPartition) {
				if first {
					return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %q does not exist on %s: %w", name, s.cfg.Upstream.String(), terr),
						"check --topics; list the topics with: kcat -L -b "+s.cfg.Upstream.Brokers[0]))
				}
				return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %q was deleted: %w", name, terr), recreatedHint))
			}
			return fmt.Errorf("kafka metadata of %s: %w", name, terr)
		}
		st := s.topics[name]
		if first {
			st.id = td.ID
		} else if td.ID != st.id && td.ID != (kadm.TopicID{}) {
			return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %s has a new topic id (%s, was %s): it was deleted and recreated", name, td.ID, st.id), recreatedHint))
		}
		leaders := map[int32]int32{}
		for p, pd := range td.Partitions {
			leaders[p] = pd.Leader
		}
		known := st.leaders
		if first {
			known = map[int32]int32{}
			for p := range st.pos {
				known[p] = -1
			}
		}
		for p := range known {
			if _, ok := leaders[p]; !ok {
				return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %s has %d partitions, but partition %d was consumed before", name, len(leaders), p), recreatedHint))
			}
		}
		st.leaders = leaders
	}
	if !first {
		// New partitions start at their log start.
		add := map[string]map[int32]kgo.Offset{}
		for _, name := range s.names {
			if a := s.newAssignments(s.topics[name]); len(a) > 0 {
				add[name] = a
			}
		}
		if len(add) > 0 {
			s.cl.AddConsumePartitions(add)
		}
	}
	starts, err := s.adm.ListStartOffsets(ctx, s.names...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka start offsets: %w", err)
	}
	ends, err := s.adm.ListEndOffsets(ctx, s.names...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka end offsets: %w", err)
	}
	var stable kadm.ListedOffsets
	if !first {
		if stable, err = s.adm.ListCommittedOffsets(ctx, s.names...); err == nil {
			err = stable.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka last stable offsets: %w", err)
		}
	}
	for _, name := range s.names {
		st := s.topics[name]
		for p, pos := range st.pos {
			end, ok := ends.Lookup(name, p)
			if ok && pos > end.Offset {
				return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d ends at offset %d, but offsets up to %d were already consumed: offsets went backwards", name, p, end.Offset, pos), recreatedHint))
			}
			start, ok := starts.Lookup(name, p)
			if first && ok && pos < start.Offset {
				return definite(hint.Wrap(fmt.Errorf("replicate kafka: topic %s partition %d starts at offset %d, beyond the offset %d to resume at: records were deleted before they were ingested", name, p, start.Offset, pos), recreatedHint))
			}
		}
		if first {
			continue
		}
		// Records missing at the end of a partition (compacted away) are
		// never delivered, so progress would stop short of the last stable
		// offset. A partition that has not moved since the last check and
		// is behind it is read directly to find where its records resume.
		moved := false
		for p, leader := range st.leaders {
			lso, ok := stable.Lookup(name, p)
			pos := st.pos[p]
			if !ok || lso.Offset <= pos {
				st.checked[p] = pos
				continue
			}
			if last, seen := st.checked[p]; !seen || last != pos {
				st.checked[p] = pos
				continue
			}
			next, more, err := s.probeGap(ctx, st, p, leader, pos, lso.Offset)
			if err != nil {
				s.log.Debug("kafka gap probe failed", "topic", name, "partition", p, "error", err)
				continue
			}
			if !more && next > pos {
				s.log.Info("kafka progress steps over missing records", "topic", name, "partition", p, "from", pos, "to", next)
				st.pos[p] = next
				moved = true
			}
		}
		if moved {
			s.replayed(st)
			if err := s.flush(st); err != nil {
				return definite(err)
			}
		}
	}
	return nil
}

// probeGap reads partition p from pos directly (read_committed) and
// returns the offset after the last batch the broker returned, and whether
// any record (data or transaction marker) is there: if none is, every
// offset below the returned one holds nothing to hand over.
func (s *kafkaStreamer) probeGap(ctx context.Context, st *kafkaTopicState, p, leader int32, pos, lso int64) (int64, bool, error) {
	if leader < 0 {
		return pos, false, errors.New("no leader")
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = int32(min(int64(s.cfg.MaxRecordBytes)*2, 1<<30))
	req.IsolationLevel = 1
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = st.Name
	rt.TopicID = st.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p
	rp.FetchOffset = pos
	rp.PartitionMaxBytes = req.MaxBytes
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := s.admCl.Broker(int(leader)).Request(pctx, req)
	if err != nil {
		return pos, false, err
	}
	fr := resp.(*kmsg.FetchResponse)
	for i := range fr.Topics {
		t := &fr.Topics[i]
		if t.Topic != st.Name && t.TopicID != st.id {
			continue
		}
		for j := range t.Partitions {
			rpart := &t.Partitions[j]
			if rpart.Partition != p {
				continue
			}
			if rpart.ErrorCode != 0 {
				return pos, false, kerr.ErrorForCode(rpart.ErrorCode)
			}
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				KeepControlRecords: true, IsolationLevel: kgo.ReadCommitted(), Offset: pos, Topic: st.Name, Partition: p,
			}, rpart, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				return pos, false, fp.Err
			}
			if len(fp.Records) > 0 {
				return pos, true, nil
			}
			return min(next, lso), false, nil
		}
	}
	return pos, false, errors.New("partition missing from the fetch response")
}
