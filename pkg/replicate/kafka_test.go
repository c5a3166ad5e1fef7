package replicate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// kafkaCollect is a KafkaSink that remembers everything.
type kafkaCollect struct {
	mu       sync.Mutex
	rows     []string // "partition:offset value diff"
	progress map[string]frontier.Frontier
	errs     []string
	stopAt   frontier.Frontier // cancel once progress covers it
	cancel   context.CancelFunc
}

func (c *kafkaCollect) Data(topic string, rec arrow.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cols, times, diffs, parts := pipe.SplitData(rec)
	for i := 0; i < int(rec.NumRows()); i++ {
		c.rows = append(c.rows, fmt.Sprintf("%s/%s:%d %s %+d", topic, parts.Value(i), times.Value(i), cols[rec.Schema().FieldIndices("value")[0]].ValueStr(i), diffs.Value(i)))
	}
	return nil
}

func (c *kafkaCollect) Progress(topic string, f frontier.Frontier) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.progress == nil {
		c.progress = map[string]frontier.Frontier{}
	}
	c.progress[topic] = f
	if c.cancel != nil && c.stopAt.Domain() != "" && f.Covers(c.stopAt) {
		c.cancel()
	}
	return nil
}

func (c *kafkaCollect) Error(topic string, at frontier.Time, msg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf("%s@%s:%d %s", topic, at.Partition, at.Pos, msg))
	return nil
}

func (c *kafkaCollect) Reset(topic string, at frontier.Time, _ *arrow.Schema) error {
	return fmt.Errorf("kafka: unexpected reset of %s at %s:%d", topic, at.Partition, at.Pos)
}

func (c *kafkaCollect) get(topic string) frontier.Frontier {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progress[topic]
}

func kafkaClient(t *testing.T, brokers []string, opts ...kgo.Opt) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func textDecoder(t *testing.T, topic string) kafkafmt.Decoder {
	t.Helper()
	v, _ := kafkafmt.ParseFormat("text")
	d, err := kafkafmt.NewDecoder(kafkafmt.Config{Value: v, Collection: topic, Source: "kafka." + topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Release)
	return d
}

func streamAsync(t *testing.T, cfg KafkaConfig, sink *kafkaCollect) (context.CancelFunc, chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	sink.cancel = cancel
	done := make(chan error, 1)
	go func() { done <- StreamKafka(ctx, cfg, sink) }()
	t.Cleanup(func() { cancel(); <-done })
	return cancel, done
}

func waitProgress(t *testing.T, c *kafkaCollect, topic string, want frontier.Frontier) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !c.get(topic).Covers(want) {
		if time.Now().After(deadline) {
			t.Fatalf("progress of %s is %s, want %s", topic, c.get(topic), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStreamKafkaPartitionsAndRecreation: partitions added while running
// are picked up; restarting from offsets the recreated topic does not
// have is a definite error, as is a partition that disappeared.
func TestStreamKafkaPartitionsAndRecreation(t *testing.T) {
	k := testenv.StartKafka(t)
	cl, adm := kafkaClient(t, k.Brokers, kgo.MetadataMinAge(20*time.Millisecond))
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "grow"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "grow", Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sink := &kafkaCollect{}
	var mu sync.Mutex
	starts := map[int32]int64{}
	cancel, done := streamAsync(t, KafkaConfig{Upstream: k.Upstream(), CheckInterval: 100 * time.Millisecond,
		Topics:  []KafkaTopic{{Name: "grow", Decoder: textDecoder(t, "grow")}},
		OnStart: func(_ string, p int32, off int64) { mu.Lock(); starts[p] = off; mu.Unlock() }}, sink)
	waitProgress(t, sink, "grow", frontier.KafkaOffsets(map[int32]int64{0: 1}))
	if _, err := adm.CreatePartitions(ctx, 2, "grow"); err != nil {
		t.Fatal(err)
	}
	// The producer learns of the new partitions at its next metadata load.
	for i := 0; ; i++ {
		cl.ForceMetadataRefresh()
		time.Sleep(50 * time.Millisecond)
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: "grow", Partition: 2, Value: []byte("c")}).FirstErr()
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "grow", Partition: 1, Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, sink, "grow", frontier.KafkaOffsets(map[int32]int64{0: 1, 1: 1, 2: 1}))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v, want context.Canceled", err)
	}
	done <- nil
	if got := strings.Join(sink.rows, ","); got != "grow/0:0 a +1,grow/2:0 c +1,grow/1:0 b +1" && got != "grow/0:0 a +1,grow/1:0 b +1,grow/2:0 c +1" {
		t.Errorf("rows %s", got)
	}
	if len(starts) != 3 {
		t.Errorf("partitions started: %v", starts)
	}

	// The topic is deleted and recreated with one partition and no
	// records: resuming at 0:1,1:1,2:1 must fail, not silently re-read.
	if _, err := adm.DeleteTopics(ctx, "grow"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "grow"); err != nil {
		t.Fatal(err)
	}
	start := frontier.KafkaOffsets(map[int32]int64{0: 1, 1: 1, 2: 1})
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	err := StreamKafka(cctx, KafkaConfig{Upstream: k.Upstream(), Topics: []KafkaTopic{{Name: "grow", Start: start, Decoder: textDecoder(t, "grow")}}}, &kafkaCollect{})
	if err == nil || !strings.Contains(err.Error(), "offsets went backwards") || !strings.Contains(hint.Of(err), "recreated") {
		t.Fatalf("resume on a recreated topic: %v (hint %q)", err, hint.Of(err))
	}
	start = frontier.KafkaOffsets(map[int32]int64{5: 1})
	err = StreamKafka(cctx, KafkaConfig{Upstream: k.Upstream(), Topics: []KafkaTopic{{Name: "grow", Start: start, Decoder: textDecoder(t, "grow")}}}, &kafkaCollect{})
	if err == nil || !strings.Contains(err.Error(), "partition 5 was consumed before") {
		t.Fatalf("resume with a partition that is gone: %v", err)
	}
}

// TestStreamKafkaLimits: a record larger than MaxRecordBytes and brokers
// that cannot be reached.
func TestStreamKafkaLimits(t *testing.T) {
	k := testenv.SharedKafka(t)
	cl, adm := kafkaClient(t, k.Brokers)
	ctx := context.Background()
	topic := fmt.Sprintf("big-%d", time.Now().UnixNano()) // the shared broker outlives a test
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte("x"), 100)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := StreamKafka(cctx, KafkaConfig{Upstream: k.Upstream(), MaxRecordBytes: 50, Topics: []KafkaTopic{{Name: topic, Decoder: textDecoder(t, topic)}}}, &kafkaCollect{})
	if err == nil || !strings.Contains(err.Error(), "larger than the limit of 50 bytes") || !strings.Contains(hint.Of(err), "--max-record-bytes") {
		t.Fatalf("big record: %v (hint %q)", err, hint.Of(err))
	}

	var logs bytes.Buffer
	var lmu sync.Mutex
	lw := writerFunc(func(p []byte) (int, error) { lmu.Lock(); defer lmu.Unlock(); return logs.Write(p) })
	uctx, ucancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer ucancel()
	err = StreamKafka(uctx, KafkaConfig{Upstream: upstream.ParseKafka("127.0.0.1:1"), MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(lw, nil)),
		Topics: []KafkaTopic{{Name: topic, Decoder: textDecoder(t, topic)}}}, &kafkaCollect{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unreachable brokers: %v, want the context's deadline", err)
	}
	lmu.Lock()
	defer lmu.Unlock()
	if n := strings.Count(logs.String(), "replicate kafka: transient failure; retrying"); n < 2 {
		t.Errorf("%d retries logged, want at least 2:\n%s", n, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestStreamKafkaTailProbe: the direct read that lets progress step over
// records missing at the end of a partition sees transaction markers (so
// it never skips what the consumer will deliver) and reports the end of
// the partition where nothing is left.
func TestStreamKafkaTailProbe(t *testing.T) {
	k := testenv.SharedKafka(t)
	topic := fmt.Sprintf("tailp-%d", time.Now().UnixNano()) // the shared broker outlives a test
	cl, adm := kafkaClient(t, k.Brokers, kgo.TransactionalID("rtr-probe-"+topic))
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}, &kgo.Record{Topic: topic, Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(false)); err != nil {
		t.Fatal(err)
	}
	// Offsets 0 and 1 are aborted data, 2 the abort marker; the end is 3.
	sink := &kafkaCollect{}
	streamAsync(t, KafkaConfig{Upstream: k.Upstream(), Topics: []KafkaTopic{{Name: topic, Decoder: textDecoder(t, topic)}}}, sink)
	waitProgress(t, sink, topic, frontier.KafkaOffsets(map[int32]int64{0: 3}))
	if len(sink.rows) != 0 {
		t.Errorf("aborted records delivered: %v", sink.rows)
	}

	admCl, _ := kafkaClient(t, k.Brokers)
	s := &kafkaStreamer{cfg: KafkaConfig{MaxRecordBytes: DefaultMaxRecordBytes}, admCl: admCl, adm: kadm.NewClient(admCl)}
	md, err := s.adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	st := &kafkaTopicState{KafkaTopic: KafkaTopic{Name: topic}, id: md.Topics[topic].ID}
	leader := md.Topics[topic].Partitions[0].Leader
	next, more, err := s.probeGap(ctx, st, 0, leader, 0, 3)
	if err != nil || !more || next != 0 {
		t.Errorf("probe at 0: next %d, more %v, err %v; want the marker seen and no step", next, more, err)
	}
	next, more, err = s.probeGap(ctx, st, 0, leader, 3, 3)
	if err != nil || more || next != 3 {
		t.Errorf("probe at the end: next %d, more %v, err %v; want 3, false", next, more, err)
	}
}

// TestStreamKafkaReplayInBindingOrder: with Replay, every record is handed
// over after every record of the replayed bindings before its own, in
// whatever order the fetches bring the partitions; the partitions held at
// a binding's frontier resume at the record they were held at.
func TestStreamKafkaReplayInBindingOrder(t *testing.T) {
	k := testenv.StartKafka(t)
	cl, adm := kafkaClient(t, k.Brokers)
	const topic = "replay"
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 90; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(fmt.Sprint(i))}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Bindings that move the partitions unevenly: one of them not at all.
	bindings := []map[int32]int64{{0: 5, 1: 1, 2: 0}, {0: 6, 1: 20, 2: 3}, {0: 29, 1: 20, 2: 10}, {0: 30, 1: 30, 2: 30}}
	var replay []frontier.Frontier
	for _, b := range bindings {
		replay = append(replay, frontier.KafkaOffsets(b))
	}
	sink := &kafkaCollect{stopAt: frontier.KafkaOffsets(map[int32]int64{0: 30, 1: 30, 2: 30})}
	streamAsync(t, KafkaConfig{Upstream: upstream.ParseKafka(strings.Join(k.Brokers, ",")), CheckInterval: 200 * time.Millisecond,
		Topics: []KafkaTopic{{Name: topic, Decoder: textDecoder(t, topic), Replay: replay}}}, sink)
	waitProgress(t, sink, topic, sink.stopAt)
	binding := func(p int32, off int64) int {
		for k, b := range bindings {
			if off < b[p] {
				return k
			}
		}
		return len(bindings)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	last, seen := -1, map[string]bool{}
	for _, row := range sink.rows {
		var p int32
		var off int64
		if _, err := fmt.Sscanf(row, topic+"/%d:%d", &p, &off); err != nil {
			t.Fatal(err)
		}
		b := binding(p, off)
		if b < last {
			t.Fatalf("record %d:%d (binding %d) handed over after one of binding %d:\n%s", p, off, b, last, strings.Join(sink.rows, "\n"))
		}
		last = b
		if seen[row] {
			t.Fatalf("%s handed over twice", row)
		}
		seen[row] = true
	}
	if len(sink.rows) != 90 {
		t.Fatalf("%d rows, want 90", len(sink.rows))
	}
}
