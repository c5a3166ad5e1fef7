package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// debeziumColumns returns the columns and key columns of topic's debezium
// collection: the store's, when the collection exists, else those of the
// topic's first change event that carries them (DebeziumColumns), read
// from the start of the topic (waiting for one when there is none yet).
// Records that do not decode are passed over here: the stream meets them
// at their offsets and records them as definite errors.
func (k *Kafka) debeziumColumns(ctx context.Context, st *store.Store, topic string, keyF, valF kafkafmt.Format) ([]arrow.Field, []string, error) {
	if st != nil {
		sh, err := st.Shard(ctx, topic)
		if err == nil {
			s := inForce(sh)
			keys, _ := s.Metadata().GetValue(pipe.KeyKey)
			if keys == "" {
				return nil, nil, fmt.Errorf("collection %s has no key columns (%s), which a debezium collection has", topic, pipe.KeyKey)
			}
			return s.Fields(), strings.Split(keys, ","), nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	}
	cl, err := kgo.NewClient(append(k.cfg.Upstream.Opts(), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, nil, fmt.Errorf("debezium columns of %s: %w", topic, err)
	}
	defer cl.Close()
	ts, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err == nil {
		err = ts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil, hint.Wrap(fmt.Errorf("ingest kafka: topic %q does not exist on %s: %w", topic, k.cfg.Upstream.String(), err),
			"check --topics; list the topics with: kcat -L -b "+k.cfg.Upstream.Brokers[0])
	}
	if err != nil {
		return nil, nil, fmt.Errorf("debezium columns of %s: %w", topic, err)
	}
	k.log.Info("debezium: reading the topic's first change event for the collection's columns", "topic", topic)
	waiting := time.Now()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		var cols []arrow.Field
		var keys []string
		var transient error // the registry away: no record's fault
		fs.EachError(func(t string, p int32, err error) {
			k.log.Warn("debezium: fetch failed; retrying", "topic", t, "partition", p, "error", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if cols != nil || transient != nil || r.Attrs.IsControl() {
				return
			}
			c, ks, err := kafkafmt.DebeziumColumns(keyF, valF, r)
			switch {
			case err == nil:
				cols, keys = c, ks
			case errors.As(err, new(*kafkafmt.TransientError)):
				transient = err
			case !errors.Is(err, kafkafmt.ErrNoColumns):
				k.log.Warn("debezium: a record does not decode; the collection's columns come from a later one", "topic", topic,
					"partition", r.Partition, "offset", r.Offset, "error", err)
			}
		})
		if cols != nil {
			return cols, keys, nil
		}
		if transient != nil {
			return nil, nil, fmt.Errorf("debezium columns of %s: %w", topic, transient)
		}
		if time.Since(waiting) > 10*time.Second {
			k.log.Info("debezium: still waiting for a change event with the table's columns", "topic", topic)
			waiting = time.Now()
		}
	}
}
