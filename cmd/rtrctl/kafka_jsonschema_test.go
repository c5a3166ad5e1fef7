package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
)

const (
	jsUpsKey = `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`
	jsUpsV1  = `{"type":"object","properties":{"v":{"type":"string"}},"required":["v"]}`
	// v2 adds an optional property: v1 documents read with n = null.
	jsUpsV2 = `{"type":"object","properties":{"v":{"type":"string"},"n":{"type":"integer"}},"required":["v"]}`
)

// TestKafkaJSONSchemaUpsertSIGKILL is TestKafkaUpsertSIGKILL with JSON
// Schema keys and values (values alternating between two schema
// versions, read with the latest; keys spelled two ways), produced with
// encoding/json and franz-go's sr framing: every readable binding equals
// the offset-order model after 5 SIGKILLs.
func TestKafkaJSONSchemaUpsertSIGKILL(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	ks := reg.JSONSerde(t, "ups-key", jsUpsKey)
	v1, v2 := reg.JSONSerde(t, "ups-value", jsUpsV1), reg.JSONSerde(t, "ups-value", jsUpsV2)
	n, spelled := 0, 0
	upsertSIGKILL(t, upsertCodec{
		args: []string{"--key-format", "json-schema", "--value-format", "json-schema", "--schema-registry", reg.URL},
		key: func(k string) ([]byte, string) {
			show := fmt.Sprintf(`{"id":%q}`, k)
			if spelled++; spelled%2 == 0 {
				return testenv.FrameJSON(ks.ID, fmt.Sprintf(` { "id" : %q } `, k)), show
			}
			return ks.Encode(t, map[string]any{"id": k}), show
		},
		value: func(v string) ([]byte, string) {
			if n++; n%2 == 0 {
				return v1.Encode(t, map[string]any{"v": v}), fmt.Sprintf(`{"n":null,"v":%q}`, v)
			}
			return v2.Encode(t, map[string]any{"v": v, "n": n}), fmt.Sprintf(`{"n":%d,"v":%q}`, n, v)
		},
	})
}

// TestKafkaJSONSchemaRecency is the recency seed scenario on a JSON
// Schema upsert topic (registryRecency).
func TestKafkaJSONSchemaRecency(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	const topic = "jsrec"
	ks, vs := reg.JSONSerde(t, topic+"-key", jsUpsKey), reg.JSONSerde(t, topic+"-value", jsUpsV2)
	registryRecency(t, reg, topic, "json-schema", func(i int) *kgo.Record {
		id := strconv.Itoa(i)
		return &kgo.Record{Key: ks.Encode(t, map[string]any{"id": id}), Value: vs.Encode(t, map[string]any{"v": id, "n": i})}
	})
}

// registryRecency is the recency seed scenario (TestKafkaRecency) for an
// upsert topic whose keys and values are format (read through reg):
// fetches are delayed, so a plain read right after producing misses the
// records, and a read as of wait-recent's time has exactly all of them.
func registryRecency(t *testing.T, reg *testenv.Registry, topic, format string, record func(i int) *kgo.Record) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, st := recencyStore(t)
	k, cl := slowKafka(t, topic, 300*time.Millisecond)
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := ingest.Run(ctx, ingest.NewKafka(ingest.KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert",
			KeyFormat: format, ValueFormat: format, Registry: r}), st, ingest.Options{})
		if err != nil && ctx.Err() == nil {
			t.Errorf("ingest: %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	produce := func(from, to int) {
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
	waitRecent := func() uint64 { return waitRecentTime(t, dir, "kafka."+topic) }
	produce(1, 2)
	n := 2
	if got := countRows(t, dir, topic, waitRecent()); got != n {
		t.Fatalf("warm-up: %d rows, want %d", got, n)
	}
	missed := 0
	for round := range 5 {
		produce(n+1, n+4)
		n += 4
		if got := countRows(t, dir, topic, 0); got < n {
			missed++
		}
		if got := countRows(t, dir, topic, waitRecent()); got != n {
			t.Fatalf("round %d: read as of wait-recent has %d rows, want exactly %d", round, got, n)
		}
	}
	if missed < 4 {
		t.Errorf("a plain read right after producing missed the records in only %d of 5 rounds; ingestion is not slowed enough to show recency", missed)
	}
}

// TestKafkaJSONSchemaFlags: json-schema without a registry is a usage
// error naming the flag; a reader subject that is not JSON Schema fails
// naming the format to use.
func TestKafkaJSONSchemaFlags(t *testing.T) {
	base := []string{"ingest", "--source", "kafka", "--brokers", "127.0.0.1:1", "--topics", "t", "--store", t.TempDir()}
	_, stderr, code := runCLI(t, "", append(base, "--key-format", "json-schema")...)
	if code != exitUsage || !strings.Contains(stderr, "--schema-registry") || !strings.Contains(stderr, "json-schema") {
		t.Fatalf("exit %d, stderr %s; want exit %d naming --schema-registry", code, stderr, exitUsage)
	}
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	reg.Register(t, "t-value", avroUpsV1)
	_, stderr, code = runCLI(t, "", append(base, "--value-format", "json-schema", "--schema-registry", reg.URL)...)
	if code == 0 || !strings.Contains(stderr, "not JSON Schema (use --value-format avro)") {
		t.Fatalf("exit %d, stderr %s; want a failure naming --value-format avro", code, stderr)
	}
}
