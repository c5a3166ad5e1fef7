package probe

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Kafka probes the last stable offset (read_committed end) of every
// partition of one topic. Its frontier's partitions are the partition
// numbers ("0", "1", ...).
type Kafka struct {
	up    upstream.Kafka
	topic string

	mu  sync.Mutex
	cl  *kgo.Client
	adm *kadm.Client
}

// NewKafka checks the arguments without connecting.
func NewKafka(up upstream.Kafka, topics []string) (*Kafka, error) {
	if len(up.Brokers) == 0 {
		return nil, hint.Wrap(errors.New("kafka probe: no brokers given"), "pass --brokers host:port (or set RTR_KAFKA_BROKERS)")
	}
	if len(topics) != 1 || topics[0] == "" {
		return nil, hint.Wrap(fmt.Errorf("kafka probe: want exactly one topic, got %d", len(topics)), "pass --topic NAME")
	}
	return &Kafka{up: up, topic: topics[0]}, nil
}

// Probe returns the per-partition last stable offsets of the topic.
func (k *Kafka) Probe(ctx context.Context) (Result, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl == nil {
		cl, err := kgo.NewClient(append(k.up.Opts(),
			kgo.DialTimeout(5*time.Second),
			kgo.RequestRetries(2),
			kgo.RetryTimeout(10*time.Second),
		)...)
		if err != nil {
			return Result{}, hint.Wrap(fmt.Errorf("probe kafka %s: %w", k.up.String(), err), "check --brokers (host:port,...)")
		}
		k.cl, k.adm = cl, kadm.NewClient(cl)
	}
	offs, err := k.adm.ListCommittedOffsets(ctx, k.topic)
	if err == nil {
		err = offsetErr(offs, k.topic)
	}
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return Result{}, hint.Wrap(fmt.Errorf("probe kafka: topic %q does not exist on %s: %w", k.topic, k.up.String(), err),
				"check the topic name (list topics with: kcat -L -b "+k.up.Brokers[0]+")")
		}
		k.closeLocked()
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("probe kafka %s: %w", k.up.String(), ctx.Err())
		}
		if err := k.up.Explain(err); hint.Of(err) != "" {
			return Result{}, fmt.Errorf("probe kafka %s: %w", k.up.String(), err)
		}
		return Result{}, hint.Wrap(fmt.Errorf("probe kafka %s: %w", k.up.String(), err),
			"is the broker running and reachable? check --brokers (or RTR_KAFKA_BROKERS)")
	}
	next := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Topic == k.topic && o.Partition >= 0 {
			next[o.Partition] = o.Offset
		}
	})
	f := frontier.KafkaOffsets(next)
	return Result{Frontier: f, Native: nativeKafka(k.topic, next), Flavor: "kafka"}, nil
}

func offsetErr(offs kadm.ListedOffsets, topic string) error {
	if _, ok := offs[topic]; !ok {
		return kerr.UnknownTopicOrPartition
	}
	return offs.Error()
}

// nativeKafka prints partition:next_offset pairs for every partition,
// including empty ones ("0:15,1:0,2:7").
func nativeKafka(topic string, next map[int32]int64) string {
	ps := make([]int32, 0, len(next))
	for p := range next {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(int(p)) + ":" + strconv.FormatInt(next[p], 10)
	}
	return strings.Join(parts, ",")
}

func (k *Kafka) closeLocked() {
	if k.cl != nil {
		k.cl.Close()
		k.cl, k.adm = nil, nil
	}
}

// Close closes the client.
func (k *Kafka) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeLocked()
	return nil
}
