package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

const (
	avroKey     = `{"type":"record","name":"Key","fields":[{"name":"id","type":"string"}]}`
	avroValueV1 = `{"type":"record","name":"Item","fields":[{"name":"n","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}}]}`
	// v2 adds a field with a default, as a producer upgrading would.
	avroValueV2 = `{"type":"record","name":"Item","fields":[{"name":"n","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}},{"name":"price","type":["null",{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}],"default":null}]}`
)

func avroRegistry(t testing.TB, reg *testenv.Registry) *kafkafmt.Registry {
	t.Helper()
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestKafkaIngestAvroUpsert: Avro keys and values, values written with
// two schema versions, through 4 cancel/restart rounds (each restart
// rebuilds the upsert state from the store, re-encoding the stored
// structs): every binding equals the offset-order model, where v1 values
// read with v2's default.
func TestKafkaIngestAvroUpsert(t *testing.T) {
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	createTopic(t, k.Brokers, "items", 2)
	keys := reg.Serde(t, "items-key", avroKey)
	v1 := reg.Serde(t, "items-value", avroValueV1)
	v2 := reg.Serde(t, "items-value", avroValueV2)
	cl := producer(t, k.Brokers)
	st := openStore(t)
	shown := map[*kgo.Record][2]string{}
	var log []*kgo.Record
	rnd := uint64(7)
	next := func(n uint64) uint64 { rnd = rnd*6364136223846793005 + 1442695040888963407; return (rnd >> 33) % n }
	var mu sync.Mutex
	restarts := 0
	for round := 0; round < 4; round++ {
		run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"items"}, Envelope: "upsert",
			KeyFormat: "avro", ValueFormat: "avro", Registry: avroRegistry(t, reg),
			OnStart: func(topic string, p int32, off int64) {
				mu.Lock()
				if off > 0 {
					restarts++
				}
				mu.Unlock()
			}})
		for i := 0; i < 50; i++ {
			kn := next(6)
			id := fmt.Sprintf("k%d", kn)
			r := &kgo.Record{Topic: "items", Partition: int32(kn % 2), Key: keys.Encode(t, map[string]any{"id": id})}
			show := [2]string{fmt.Sprintf(`{"id":%q}`, id)}
			n := int64(round*100 + i)
			switch next(4) {
			case 0: // tombstone
			case 1:
				r.Value = v1.Encode(t, map[string]any{"n": n, "tags": []any{"a", id}})
				show[1] = fmt.Sprintf(`{"n":%d,"price":null,"tags":["a","%s"]}`, n, id)
			default:
				r.Value = v2.Encode(t, map[string]any{"n": n, "tags": []any{}, "price": map[string]any{"bytes.decimal": ratOf(n, 100)}})
				// As Arrow prints a decimal(9, 2).
				price := new(big.Float).SetPrec(128).Quo(new(big.Float).SetInt64(n), big.NewFloat(100)).Text('g', 9)
				show[1] = fmt.Sprintf(`{"n":%d,"price":"%s","tags":[]}`, n, price)
			}
			produce(t, cl, r)
			log = append(log, r)
			shown[r] = show
			if i%10 == 9 {
				time.Sleep(25 * time.Millisecond) // a few bindings a round, whatever the load
			}
		}
		if round < 3 {
			time.Sleep(time.Duration(next(150)) * time.Millisecond)
			// Stopped while the registry was asked for the reader
			// schemas (Open), the ingest returns the cancellation.
			if err := run.stop(t); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: %v", round, err)
			}
			continue
		}
		waitCaughtUp(t, st, k.Brokers, "", "items", 20*time.Second)
		if err := run.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if restarts == 0 {
		t.Error("no restart resumed past offset 0 (the state was never rebuilt from the store)")
	}
	checkUpsertModelAs(t, st, "kafka.items", "items", log, func(r *kgo.Record) (string, string) { s := shown[r]; return s[0], s[1] })

	// A restart after the subject got a new latest version reads on with
	// the collection's reader (version 2): no record needs version 3 yet.
	_ = reg.Serde(t, "items-value", strings.Replace(avroValueV2, `"default":null}]`, `"default":null},{"name":"x","type":"int","default":0}]`, 1))
	started := make(chan struct{}, 2)
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"items"}, Envelope: "upsert",
		KeyFormat: "avro", ValueFormat: "avro", Registry: avroRegistry(t, reg), OnStart: func(string, int32, int64) { started <- struct{}{} }})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the restart with a new latest version did not start consuming")
	}
	if err := run.stop(t); err != nil {
		t.Fatalf("restart with a new latest version: %v", err)
	}
	if md, _ := shardOf(t, st, "items").Schema().Metadata().GetValue(mdKafkaValueSchema); !strings.Contains(md, "version 2") {
		t.Fatalf("after a restart with a new latest version the reader is %q, want version 2", md)
	}
}

// TestKafkaIngestAvroDecodeErrors: under skip, records that are not
// Avro are dropped and counted in rtr_kafka_decode_errors_total; the
// others are ingested.
func TestKafkaIngestAvroDecodeErrors(t *testing.T) {
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	createTopic(t, k.Brokers, "mixed", 1)
	v1 := reg.Serde(t, "mixed-value", avroValueV1)
	cl := producer(t, k.Brokers)
	produce(t, cl,
		&kgo.Record{Topic: "mixed", Value: v1.Encode(t, map[string]any{"n": int64(1), "tags": []any{}})},
		&kgo.Record{Topic: "mixed", Value: []byte(`{"n":2}`)},
		&kgo.Record{Topic: "mixed", Value: []byte{0, 0, 0, 0x30, 0x39, 1}},
		&kgo.Record{Topic: "mixed", Value: v1.Encode(t, map[string]any{"n": int64(4), "tags": []any{"z"}})},
	)
	st := openStore(t)
	m := NewMetrics()
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"mixed"}, ValueFormat: "avro", Registry: avroRegistry(t, reg),
		OnDecodeError: kafkafmt.PolicySkip}, Options{Metrics: m})
	at, _ := waitCaughtUp(t, st, k.Brokers, "", "mixed", 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "skip", readAt(t, st, "mixed", at, "timestamp", "header_keys", "header_values", "key"), []string{
		`partition=0 offset=0 value={"n":1,"tags":[]}`,
		`partition=0 offset=3 value={"n":4,"tags":["z"]}`,
	})
	if n := testutil.ToFloat64(m.kafkaDecodeErrors.WithLabelValues("mixed", "skip")); n != 2 {
		t.Fatalf("rtr_kafka_decode_errors_total{topic=mixed,policy=skip} = %v, want 2", n)
	}
}

// BenchmarkKafkaIngestAvro: upsert ingest of Avro keys and values (1M
// records, 100k keys) against a raw franz-go consumer that decodes the
// same records with hamba/avro (schemas by id from the registry, cached),
// same broker, same run; and (json-schema/...) the same for JSON Schema
// keys and values against a raw consumer that parses and validates them
// with santhosh-tekuri/jsonschema, as the json-schema format does; and (protobuf) the same for Protobuf
// records built with dynamicpb and proto.Marshal, the raw consumer
// decoding them with dynamicpb and descriptors compiled from the
// registry's schema.
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngestAvro -benchtime 3x
func BenchmarkKafkaIngestAvro(b *testing.B) {
	k := testenv.StartKafka(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	srcl, _ := sr.NewClient(sr.URLs(reg.URL))
	ctx := context.Background()
	kp := reg.Serde(b, "avro-key", avroKey)
	vp := reg.Serde(b, "avro-value", avroValueV2)
	produceKeyed(b, k.Brokers, "avro", func(i, kn int) *kgo.Record {
		return &kgo.Record{Key: kp.Encode(b, map[string]any{"id": fmt.Sprintf("key-%06d", kn)}),
			Value: vp.Encode(b, map[string]any{"n": int64(i), "tags": []any{"alpha", "beta"}, "price": map[string]any{"bytes.decimal": ratOf(int64(i%100000), 100)}})}
	})
	benchRegistryIngest(b, k.Brokers, reg, "avro", "avro", "raw+hamba", hambaDecode(b, srcl))
	b.Run("json-schema", func(b *testing.B) {
		const topic = "jsonschema"
		kp := reg.JSONSerde(b, topic+"-key", `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)
		vp := reg.JSONSerde(b, topic+"-value", `{"type":"object","properties":{"n":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}},"price":{"type":["number","null"]}},"required":["n","tags"]}`)
		produceKeyed(b, k.Brokers, topic, func(i, kn int) *kgo.Record {
			return &kgo.Record{Key: kp.Encode(b, map[string]any{"id": fmt.Sprintf("key-%06d", kn)}),
				Value: vp.Encode(b, map[string]any{"n": i, "tags": []any{"alpha", "beta"}, "price": float64(i%100000) / 100})}
		})
		schemas := map[int]*jsonschema.Schema{}
		benchRegistryIngest(b, k.Brokers, reg, topic, "json-schema", "raw+jsonschema", func(id int, payload []byte) {
			s, ok := schemas[id]
			if !ok {
				ss, err := srcl.SchemaByID(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				doc, err := jsonschema.UnmarshalJSON(strings.NewReader(ss.Schema))
				if err != nil {
					b.Fatal(err)
				}
				c := jsonschema.NewCompiler()
				c.DefaultDraft(jsonschema.Draft7)
				c.AssertFormat()
				c.AssertContent()
				if err := c.AddResource("urn:bench", doc); err != nil {
					b.Fatal(err)
				}
				if s, err = c.Compile("urn:bench"); err != nil {
					b.Fatal(err)
				}
				schemas[id] = s
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Validate(v); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("protobuf", func(b *testing.B) { benchProtobufIngest(b, k, reg) })
}

// hambaDecode is a raw consumer's decoding of an Avro payload written
// with schema id: hamba/avro's generic values, each writer schema fetched
// from the registry once.
func hambaDecode(b *testing.B, srcl *sr.Client) func(id int, payload []byte) {
	schemas := map[int]avro.Schema{}
	return func(id int, payload []byte) {
		s, ok := schemas[id]
		if !ok {
			ss, err := srcl.SchemaByID(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			if s, err = testenv.ParseAvro(ss.Schema); err != nil {
				b.Fatal(err)
			}
			schemas[id] = s
		}
		var v any
		if err := avro.Unmarshal(s, payload, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// unframe is decode of Confluent-framed data (magic byte, schema id).
func unframe(b *testing.B, decode func(id int, payload []byte)) func(data []byte) {
	return func(data []byte) {
		var h sr.ConfluentHeader
		id, payload, err := h.DecodeID(data)
		if err != nil {
			b.Fatal(err)
		}
		decode(id, payload)
	}
}

// The registry benchmarks' topics: records, keys, partitions.
const benchRecords, benchKeys, benchPartitions = 1_000_000, 100_000, 4

// produceKeyed creates topic and produces benchRecords records of
// benchKeys pseudo-random keys (record(i, key number)), each key in one
// partition.
func produceKeyed(b *testing.B, brokers []string, topic string, record func(i, kn int) *kgo.Record) {
	b.Helper()
	createTopic(b, brokers, topic, benchPartitions)
	cl := producer(b, brokers, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(50_000))
	ctx := context.Background()
	rnd := uint64(1)
	for i := 0; i < benchRecords; i++ {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		kn := int((rnd >> 33) % benchKeys)
		r := record(i, kn)
		r.Topic, r.Partition = topic, int32(kn%benchPartitions)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchRegistryIngest runs two sub-benchmarks on topic, whose keys and
// values are in format (avro or json-schema): rawName, a raw franz-go consumer
// that hands every key and value (schema id and payload) to decode, and
// upsert, rtrctl's upsert ingest of the topic, with its ratio to raw.
func benchRegistryIngest(b *testing.B, brokers []string, reg *testenv.Registry, topic, format, rawName string, decode func(id int, payload []byte)) {
	ctx := context.Background()
	var raw float64
	b.Run(rawName, func(b *testing.B) {
		var took time.Duration
		n := 0
		for i := 0; i < b.N; i++ {
			start := time.Now()
			decode1 := unframe(b, decode)
			offs := map[int32]kgo.Offset{}
			for p := int32(0); p < benchPartitions; p++ {
				offs[p] = kgo.NewOffset().AtStart()
			}
			c, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for got < benchRecords {
				c.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got++; decode1(r.Key); decode1(r.Value) })
			}
			took += time.Since(start)
			n += got
			c.Close()
		}
		raw = float64(n) / took.Seconds()
		b.ReportMetric(raw, "records/s")
	})
	b.Run("upsert", func(b *testing.B) {
		var took time.Duration
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		for i := 0; i < b.N; i++ {
			st := openStore(b)
			start := time.Now()
			run := startIngest(b, st, KafkaConfig{Upstream: upstream.ParseKafka(strings.Join(brokers, ",")), Topics: []string{topic}, Envelope: "upsert",
				KeyFormat: format, ValueFormat: format, Registry: avroRegistry(b, reg), Logger: quiet}, Options{Interval: 100 * time.Millisecond, Logger: quiet})
			waitCaughtUp(b, st, brokers, "", topic, 5*time.Minute)
			took += time.Since(start)
			if err := run.stop(b); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(st.Dir()); err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(benchRecords*b.N) / took.Seconds()
		b.ReportMetric(rate, "records/s")
		if raw > 0 {
			b.ReportMetric(rate/raw, "x-raw")
		}
	})
}

// ratOf is n/d as the value of an Avro decimal for hamba/avro.
func ratOf(n, d int64) *big.Rat { return big.NewRat(n, d) }
