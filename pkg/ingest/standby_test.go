package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestStandbyLocal: on a local store (flock), a second ingest of the
// source with Standby waits, logging so, while the first runs, and takes
// over when the first stops: everything produced before and after ends
// in the store once. Without Standby the second fails at once.
func TestStandbyLocal(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "sb", 1)
	cl := producer(t, k.Brokers)
	ctx := context.Background()
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			r := &kgo.Record{Topic: "sb", Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := openStore(t)
	cfg := KafkaConfig{Upstream: upstream.ParseKafka(strings.Join(k.Brokers, ",")), Topics: []string{"sb"}, Envelope: "upsert", StateDir: t.TempDir()}
	produce(0, 50)
	first := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", "sb", 30*time.Second)

	// A second store handle is another process's open of the directory.
	st2, err := store.Open(ctx, st.Dir(), store.Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, NewKafka(cfg), st2, Options{Interval: 20 * time.Millisecond, CompactEvery: -1, RetryFor: -1, Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "another rtrctl ingest is writing this source") {
		t.Fatalf("a second ingest without standby: %v, want the source locked", err)
	}
	log := &testenv.LogBuffer{}
	second := startIngest(t, st2, cfg, Options{Standby: true, Logger: slog.New(slog.NewTextHandler(log, nil))})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "standby: another ingest holds the source"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not log its wait:\n%s", log.String())
		}
	}
	produce(50, 100)
	waitCaughtUp(t, st, k.Brokers, "", "sb", 30*time.Second)
	if strings.Contains(log.String(), "msg=resume") {
		t.Fatalf("the standby resumed while the first ingest held the source:\n%s", log.String())
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	produce(100, 150)
	waitCaughtUp(t, st2, k.Brokers, "", "sb", 30*time.Second)
	if !strings.Contains(log.String(), "standby: the source is free; taking over") || !strings.Contains(log.String(), "msg=resume") {
		t.Fatalf("the standby did not take over:\n%s", log.String())
	}
	if err := second.stop(t); err != nil {
		t.Fatal(err)
	}
	sh, err := st2.Shard(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, st2, "sb", sh.Upper()-1); len(got) != 150 {
		t.Errorf("the store holds %d keys after 150 distinct ones were produced across the takeover", len(got))
	}
}
