package main

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// slowKafka is a kfake cluster whose fetch responses are delayed by lag:
// Kafka clients follow the broker's advertised address, so a TCP proxy in
// front of the bootstrap address would be bypassed; the request-control
// hook slows ingestion instead.
func slowKafka(t *testing.T, topic string, lag time.Duration) (*testenv.Kafka, *kgo.Client) {
	t.Helper()
	k := testenv.StartKafka(t)
	k.Cluster.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		k.Cluster.SleepControl(func() { time.Sleep(lag) })
		return nil, nil, false // then let the cluster answer the fetch
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("rtr-"+topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(ctxT(t), 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	return k, cl
}

// produceTxn writes records from..to (values "from".."to") in one
// committed transaction, so every partition ends in a commit marker.
func produceTxn(t *testing.T, cl *kgo.Client, from, to int) {
	t.Helper()
	produceTxnOf(t, cl, from, to, func(i int) *kgo.Record {
		return &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	})
}

// produceTxnOf writes the records of from..to in one committed
// transaction.
func produceTxnOf(t *testing.T, cl *kgo.Client, from, to int, record func(i int) *kgo.Record) {
	t.Helper()
	ctx := ctxT(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := from; i <= to; i++ {
		if err := cl.ProduceSync(ctx, record(i)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// countRows reads collection (as of asOf, or the latest time) and returns
// how many rows it has.
func countRows(t *testing.T, dir, collection string, asOf uint64) int {
	t.Helper()
	args := []string{"read", dir, collection, "--format", "csv"}
	if asOf != 0 {
		args = append(args, "--as-of", strconv.FormatUint(asOf, 10))
	}
	out, stderr, code := runCLI(t, "", args...)
	if code != exitOK {
		t.Fatalf("read %s: exit %d: %s", collection, code, stderr)
	}
	return strings.Count(out, "\n") - 1
}

// recencyStore is a new store for a recency test, and its directory.
func recencyStore(t *testing.T) (string, *store.Store) {
	t.Helper()
	dir := t.TempDir() + "/store"
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// waitRecentTime runs 'rtrctl wait-recent' for source and returns the time
// it printed.
func waitRecentTime(t *testing.T, dir, source string) uint64 {
	t.Helper()
	out, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--source-id", source, "--timeout", "30s", "--wait-for-ingest")
	if code != exitOK {
		t.Fatalf("wait-recent %s: exit %d: %s", source, code, stderr)
	}
	ts, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("wait-recent printed %q", out)
	}
	return ts
}

// TestKafkaRecency is the recency seed scenario for Kafka: two topics with
// different ingestion lag, written by a transactional producer (every
// partition ends in a commit marker, which progress must step over or
// wait-recent could never return); a plain read right after producing
// misses the records, a read as of wait-recent's time sees exactly all.
func TestKafkaRecency(t *testing.T) {
	kafkaRecency(t, ingest.KafkaConfig{ValueFormat: "text"}, produceTxn)
}

// kafkaRecency runs the recency seed scenario with ingests of cfg (its
// upstream and topic set here) and a produce that writes records
// from..to, each a new row, in one committed transaction.
func kafkaRecency(t *testing.T, cfg ingest.KafkaConfig, produce func(t *testing.T, cl *kgo.Client, from, to int)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, st := recencyStore(t)
	type topicRun struct {
		name   string
		lag    time.Duration
		cl     *kgo.Client
		n      int
		missed int // rounds in which a plain read right after producing missed the records
	}
	runs := []*topicRun{{name: "fast", lag: 150 * time.Millisecond}, {name: "slow", lag: 500 * time.Millisecond}}
	var wg sync.WaitGroup
	for _, r := range runs {
		k, cl := slowKafka(t, r.name, r.lag)
		r.cl = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := cfg
			cfg.Upstream, cfg.Topics = k.Upstream(), []string{r.name}
			err := ingest.Run(ctx, ingest.NewKafka(cfg), st, ingest.Options{})
			if err != nil && ctx.Err() == nil {
				t.Errorf("ingest %s: %v", r.name, err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	waitRecent := func(r *topicRun) uint64 { return waitRecentTime(t, dir, "kafka."+r.name) }
	for _, r := range runs { // warm up: the ingest is up and bound
		produce(t, r.cl, 1, 2)
		r.n = 2
		if got := countRows(t, dir, r.name, waitRecent(r)); got != r.n {
			t.Fatalf("%s warm-up: %d rows, want %d", r.name, got, r.n)
		}
	}
	for round := range 5 {
		for _, r := range runs {
			produce(t, r.cl, r.n+1, r.n+4)
			r.n += 4
			// A fetch that was already under way when the records landed
			// can deliver them at once, so a plain read may rarely see
			// them; most rounds must miss them (checked below).
			if got := countRows(t, dir, r.name, 0); got < r.n {
				r.missed++
			}
		}
		for _, r := range runs {
			start := time.Now()
			ts := waitRecent(r)
			if got := countRows(t, dir, r.name, ts); got != r.n {
				t.Fatalf("round %d %s: read as of %d has %d rows, want exactly %d", round, r.name, ts, got, r.n)
			}
			if testing.Verbose() {
				t.Logf("round %d %s (lag %v): wait-recent %v", round, r.name, r.lag, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	for _, r := range runs {
		if r.missed < 4 {
			t.Errorf("%s: a plain read right after producing missed the records in only %d of 5 rounds; ingestion is not slowed enough to show recency", r.name, r.missed)
		}
	}
}
