package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Kafka defaults.
const (
	DefaultKeyCardinality = 100_000
	DefaultValueSize      = 100
	DefaultPartitions     = 4
	DefaultTopic          = "bench"
)

// KafkaConfig configures RunKafka.
type KafkaConfig struct {
	Common
	// RecordsPerSecond is the producer's rate.
	RecordsPerSecond float64
	// KeyCardinality: keys are drawn uniformly from this many.
	KeyCardinality int
	// ValueSize in bytes.
	ValueSize int
	// Envelope of the ingest: none or upsert.
	Envelope string
	// Partitions of the topic created for the run.
	Partitions int
	// Upstream is an existing cluster (with its TLS and SASL); no brokers
	// starts an in-process kfake broker for the run.
	Upstream upstream.Kafka
	// Topic to create (DefaultTopic); it must not exist yet.
	Topic string
	// PreloadKeys, when positive, are produced once each (keys 0 to
	// PreloadKeys-1 of the key space, in order, as fast as the broker
	// takes them) and made durable before the timed run, so an upsert
	// state holds them all from its start; at most KeyCardinality.
	PreloadKeys int
}

// RunKafka runs the Kafka benchmark.
func RunKafka(ctx context.Context, cfg KafkaConfig) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("bench kafka: %w", err)
	}
	if cfg.RecordsPerSecond <= 0 {
		return nil, errors.New("bench kafka: the rate must be positive")
	}
	if cfg.KeyCardinality <= 0 {
		cfg.KeyCardinality = DefaultKeyCardinality
	}
	if cfg.ValueSize < 0 {
		return nil, errors.New("bench kafka: negative value size")
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	if cfg.PreloadKeys < 0 || cfg.PreloadKeys > cfg.KeyCardinality {
		return nil, fmt.Errorf("bench kafka: --preload-keys %d is outside 0 to --key-cardinality (%d): the preload writes keys of the run's key space once each", cfg.PreloadKeys, cfg.KeyCardinality)
	}
	switch cfg.Envelope {
	case "":
		cfg.Envelope = "none"
	case "none", "upsert":
	default:
		return nil, fmt.Errorf("bench kafka: bad envelope %q (none or upsert)", cfg.Envelope)
	}
	up := cfg.Upstream
	if len(up.Brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0),
			kfake.SeedTopics(int32(cfg.Partitions), cfg.Topic))
		if err != nil {
			return nil, fmt.Errorf("bench kafka: start embedded broker: %w", err)
		}
		defer cluster.Close()
		up = upstream.ParseKafka(strings.Join(cluster.ListenAddrs(), ","))
	} else if err := createTopic(ctx, up, cfg.Topic, cfg.Partitions); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(up.Opts(), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(1<<20), kgo.ProducerLinger(2*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return nil, fmt.Errorf("bench kafka: producer: %w", err)
	}
	defer cl.Close()
	w := &kafkaLoad{cfg: cfg, up: up, cl: cl, parts: make([]partAcks, cfg.Partitions)}
	res := &Result{Source: "kafka", Envelope: cfg.Envelope, TargetRate: cfg.RecordsPerSecond}
	if err := execute(ctx, cfg.Common, w, res); err != nil {
		return nil, fmt.Errorf("bench kafka: %w", err)
	}
	if res.Ingested != res.Sent {
		return res, fmt.Errorf("bench kafka: sent %d records but ingested %d", res.Sent, res.Ingested)
	}
	return res, nil
}

// createTopic creates topic on an external cluster; it must not exist.
func createTopic(ctx context.Context, up upstream.Kafka, topic string, partitions int) error {
	cl, err := kgo.NewClient(up.Opts()...)
	if err != nil {
		return fmt.Errorf("bench kafka: create topic: %w", err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("bench kafka: topic %q already exists on %s: the benchmark starts from an empty topic; pass another --topic or delete it", topic, up)
	}
	if err != nil {
		return fmt.Errorf("bench kafka: create topic %q: %w", topic, up.Explain(err))
	}
	return nil
}

// partAcks is what the broker acknowledged of one partition: the next
// offset, and a timeline of (acknowledgement time, next offset), at most
// one entry per millisecond.
type partAcks struct {
	next     int64
	timeline []ackPoint
}

type ackPoint struct {
	at   time.Time
	next int64
}

type kafkaLoad struct {
	cfg KafkaConfig
	up  upstream.Kafka
	cl  *kgo.Client

	mu    sync.Mutex
	parts []partAcks
	sent  int64
	err   error
}

func (k *kafkaLoad) source() string                  { return ingest.KafkaSourceID("", k.cfg.Topic) }
func (k *kafkaLoad) units() string                   { return "records" }
func (k *kafkaLoad) what() string                    { return "records" }
func (k *kafkaLoad) nudge(ctx context.Context) error { return nil }

func (k *kafkaLoad) ingestArgs(dir string) ([]string, []string) {
	upArgs, env := k.up.Args()
	return append(append([]string{"ingest", "--source", "kafka"}, upArgs...), "--topics", k.cfg.Topic,
		"--store", dir, "--envelope", k.cfg.Envelope), env
}

// resumeRecords sums a Kafka frontier's offsets.
func (k *kafkaLoad) resumeRecords(from string) int64 {
	f, err := frontier.Parse(frontier.DomainKafka, from)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range f.Partitions() {
		n += int64(f.Get(p))
	}
	return n
}

func (k *kafkaLoad) ack(r *kgo.Record, err error) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		if k.err == nil {
			k.err = err
		}
		return
	}
	if int(r.Partition) >= len(k.parts) {
		if k.err == nil {
			k.err = fmt.Errorf("record acknowledged on partition %d of a %d-partition topic", r.Partition, len(k.parts))
		}
		return
	}
	p := &k.parts[r.Partition]
	k.sent++
	if r.Offset+1 <= p.next {
		return
	}
	p.next = r.Offset + 1
	if n := len(p.timeline); n > 0 && now.Sub(p.timeline[n-1].at) < time.Millisecond {
		p.timeline[n-1].next = p.next
	} else {
		p.timeline = append(p.timeline, ackPoint{now, p.next})
	}
}

// gen returns the key space and a pool of random bytes that values are
// windows of, so consecutive values of a key differ (upsert does real
// work); the pool is never written again, so records can share it.
func (k *kafkaLoad) gen(rng *rand.Rand) (keys [][]byte, pool []byte) {
	keys = make([][]byte, k.cfg.KeyCardinality)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%09d", i))
	}
	pool = make([]byte, 1<<20+k.cfg.ValueSize)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	return keys, pool
}

// preload implements preloader: keys 0 to PreloadKeys-1 once each.
func (k *kafkaLoad) preload(ctx context.Context) (int64, error) {
	if k.cfg.PreloadKeys == 0 {
		return 0, nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	keys, pool := k.gen(rng)
	for _, key := range keys[:k.cfg.PreloadKeys] {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		off := rng.IntN(len(pool) - k.cfg.ValueSize + 1)
		k.cl.Produce(ctx, &kgo.Record{Key: key, Value: pool[off : off+k.cfg.ValueSize : off+k.cfg.ValueSize]}, k.ack)
	}
	if err := k.cl.Flush(ctx); err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return int64(k.cfg.PreloadKeys), k.err
}

// produce sends records on a wall-clock schedule: by time t since the
// start, R*t records are due.
func (k *kafkaLoad) produce(ctx context.Context, d time.Duration) (time.Duration, error) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	keys, pool := k.gen(rng)
	total := int64(k.cfg.RecordsPerSecond * d.Seconds())
	start := time.Now()
	var produced int64
	var behind time.Duration
	send := func(n int64) {
		for ; produced < n; produced++ {
			off := rng.IntN(len(pool) - k.cfg.ValueSize + 1)
			rec := &kgo.Record{Key: keys[rng.IntN(len(keys))], Value: pool[off : off+k.cfg.ValueSize : off+k.cfg.ValueSize]}
			k.cl.Produce(ctx, rec, k.ack)
		}
	}
	for produced < total {
		if err := ctx.Err(); err != nil {
			return behind, err
		}
		el := time.Since(start)
		due := min(total, int64(k.cfg.RecordsPerSecond*el.Seconds()))
		// How late the oldest record still to produce is.
		if due > produced {
			late := el - time.Duration(float64(produced+1)/k.cfg.RecordsPerSecond*float64(time.Second))
			behind = max(behind, late)
		}
		send(due)
		if produced >= total {
			break
		}
		// Sleep until the next record is due (at least 1 ms).
		next := time.Duration(float64(produced+1) / k.cfg.RecordsPerSecond * float64(time.Second))
		time.Sleep(max(time.Millisecond, next-time.Since(start)))
	}
	if err := k.cl.Flush(ctx); err != nil {
		return behind, err
	}
	k.mu.Lock()
	err := k.err
	k.mu.Unlock()
	return behind, err
}

func (k *kafkaLoad) observe(ctx context.Context, st *store.Store, now time.Time) (observation, error) {
	f, err := st.DurableFrontier(ctx, k.source())
	if err != nil {
		return observation{}, fmt.Errorf("read durable frontier: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return observation{}, fmt.Errorf("produce: %w", k.err)
	}
	o := observation{sent: k.sent, caughtUp: true}
	for i := range k.parts {
		p := &k.parts[i]
		fp := int64(f.Get(strconv.Itoa(i)))
		o.ingested += fp
		o.position += fp
		if fp >= p.next {
			continue
		}
		o.caughtUp = false
		o.lagUnits += p.next - fp
		// The oldest record not durable is offset fp: when was it acked?
		j := sort.Search(len(p.timeline), func(j int) bool { return p.timeline[j].next > fp })
		if j < len(p.timeline) {
			o.lagSeconds = max(o.lagSeconds, now.Sub(p.timeline[j].at).Seconds())
		}
	}
	return o, nil
}
