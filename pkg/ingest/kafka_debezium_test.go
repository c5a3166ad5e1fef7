package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
)

// TestKafkaIngestDebezium ingests the Debezium documentation's customers
// change events (PostgreSQL connector shape) written by an independent
// producer: snapshot reads, a create, an update without before, a delete
// with its tombstone; then restarts (columns and state from the store),
// truncates, and meets a record that does not decode, which is a definite
// error of the collection at its offset.
func TestKafkaIngestDebezium(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "customers", 1)
	cl := producer(t, k.Brokers)
	tb := testenv.DebeziumCustomers("postgresql")
	person := func(id int, first string) testenv.Row {
		return testenv.Row{"id": id, "first_name": first, "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", id)}
	}
	pos := int64(0)
	event := func(op string, before, after testenv.Row) *kgo.Record {
		pos++
		key := after
		if key == nil {
			key = before
		}
		return &kgo.Record{Topic: "customers", Key: tb.KeyOf(key), Value: tb.Event(op, before, after, pos, 1559033904863+pos)}
	}
	produce(t, cl, event("r", nil, person(1001, "Sally")), event("r", nil, person(1002, "George")),
		event("c", nil, person(1004, "Anne")), event("u", nil, person(1004, "Anne Marie")),
		event("d", testenv.Row{"id": 1002}, nil), &kgo.Record{Topic: "customers", Key: tb.KeyOf(person(1002, "")), Value: nil})
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{"customers"}, Envelope: "debezium", KeyFormat: "json", ValueFormat: "json"}
	st := openStore(t)
	bad := cfg
	bad.KeyFormat = "bytes"
	if err := Run(context.Background(), NewKafka(bad), st, Options{CompactEvery: -1}); err == nil || !strings.Contains(hint.Of(err), "--key-format json --value-format json") ||
		!strings.Contains(hint.Of(err), "both avro, both protobuf or both json-schema with --schema-registry") {
		t.Fatalf("debezium with --key-format bytes: %v (hint %q)", err, hint.Of(err))
	}
	run := startIngest(t, st, cfg)
	at, _ := waitCaughtUp(t, st, k.Brokers, "", "customers", 20*time.Second)
	sameLines(t, "after the first events", readAt(t, st, "customers", at), []string{
		"id=1001 first_name=Sally last_name=Kretchmar email=1001@noanswer.org",
		"id=1004 first_name=Anne Marie last_name=Kretchmar email=1004@noanswer.org",
	})
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	produce(t, cl, event("u", nil, person(1001, "Sal")))
	run = startIngest(t, st, cfg)
	at, _ = waitCaughtUp(t, st, k.Brokers, "", "customers", 20*time.Second)
	sameLines(t, "after a restart", readAt(t, st, "customers", at), []string{
		"id=1001 first_name=Sal last_name=Kretchmar email=1001@noanswer.org",
		"id=1004 first_name=Anne Marie last_name=Kretchmar email=1004@noanswer.org",
	})
	produce(t, cl, &kgo.Record{Topic: "customers", Value: tb.Truncate(pos+1, 1559033999000)}, event("c", nil, person(1005, "Bob")))
	at, _ = waitCaughtUp(t, st, k.Brokers, "", "customers", 20*time.Second)
	sameLines(t, "after a truncate", readAt(t, st, "customers", at), []string{
		"id=1005 first_name=Bob last_name=Kretchmar email=1005@noanswer.org",
	})

	// Offsets: 6 records, then 1 (offset 6), then the truncate (7) and
	// Bob (8): the bad record is offset 9.
	produce(t, cl, &kgo.Record{Topic: "customers", Key: tb.KeyOf(person(1006, "")), Value: []byte(`{"schema": {"type": "struct"}, "payload": {"op": `)})
	deadline := time.Now().Add(20 * time.Second)
	for {
		sh, err := st.Shard(context.Background(), "customers")
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		rec, err := sh.ReadAsOf(context.Background(), sh.Upper()-1)
		if err != nil {
			if !strings.Contains(err.Error(), "partition 0 offset 9: value (format json): malformed JSON") {
				t.Fatalf("read: %v, want the record's decode error", err)
			}
			break
		}
		rec.Release()
		if time.Now().After(deadline) {
			t.Fatal("the record that does not decode did not become a definite error")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkKafkaIngestDebezium: a topic of 100,000 Debezium change events
// (the PostgreSQL connector's shape through JsonConverter with schemas,
// about 2.4 KB each; creates and updates over 10,000 customers, each id
// always in the same one of 4 partitions) ingested with --envelope
// debezium, against a raw franz-go consumer that JSON-decodes every key
// and value (encoding/json into map[string]any), as benchKafkaIngest
// measures (json/raw, json/debezium; count/raw is a consumer that only
// counts them).
func BenchmarkKafkaIngestDebezium(b *testing.B) {
	k := testenv.StartKafka(b)
	tb := testenv.DebeziumCustomers("postgresql")
	const records, partitions = dbzBenchRecords, dbzBenchPartitions
	produceDebezium(b, k.Brokers, "dbz", tb.KeyOf, func(op string, r testenv.Row, i int) []byte { return tb.Event(op, nil, r, int64(i), 1559033904863) })
	decode := func(r *kgo.Record) {
		var key, value map[string]any
		if json.Unmarshal(r.Key, &key) != nil || json.Unmarshal(r.Value, &value) != nil {
			b.Fatal("raw consumer: a record does not decode")
		}
	}
	// For scale, a raw consumer that only counts the records.
	b.Run("count", func(b *testing.B) { benchKafkaIngest(b, k.Brokers, "dbz", records, partitions, nil) })
	b.Run("json", func(b *testing.B) {
		benchKafkaIngest(b, k.Brokers, "dbz", records, partitions, decode, KafkaConfig{Envelope: "debezium", KeyFormat: "json", ValueFormat: "json"})
	})
}

// The Debezium benchmarks' topics: records over keys customers, in
// partitions.
const dbzBenchRecords, dbzBenchKeys, dbzBenchPartitions = 100_000, 10_000, 4

// produceDebezium creates topic and writes dbzBenchRecords change events
// of the customers table: snapshot reads of dbzBenchKeys ids, then
// updates of pseudo-random ones, each id always in the same partition;
// key and event encode them.
func produceDebezium(b *testing.B, brokers []string, topic string, key func(testenv.Row) []byte, event func(op string, r testenv.Row, i int) []byte) {
	b.Helper()
	createTopic(b, brokers, topic, dbzBenchPartitions)
	cl := producer(b, brokers, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(20_000))
	ctx := context.Background()
	rnd := uint64(1)
	for i := range dbzBenchRecords {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		id := int((rnd >> 33) % dbzBenchKeys)
		op := "u"
		if i < dbzBenchKeys {
			id, op = i, "r"
		}
		r := testenv.Row{"id": id, "first_name": fmt.Sprint("name ", i), "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", id)}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(id % dbzBenchPartitions), Key: key(r), Value: event(op, r, i)},
			func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
			})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkKafkaIngestDebeziumAvro is BenchmarkKafkaIngestDebezium over
// AvroConverter's records (about 165 bytes a value, 7 a key): --envelope debezium
// --key-format avro --value-format avro against a raw franz-go consumer
// that decodes every key and value with hamba/avro (generic values, the
// writer schemas fetched once by id).
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngestDebeziumAvro -benchtime 3x
func BenchmarkKafkaIngestDebeziumAvro(b *testing.B) {
	k := testenv.StartKafka(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	tb := testenv.DebeziumCustomers("postgresql")
	ks, vs := reg.Serde(b, "dbza-key", tb.AvroKeySchema()), reg.Serde(b, "dbza-value", tb.AvroValueSchema())
	produceDebezium(b, k.Brokers, "dbza", func(r testenv.Row) []byte { return ks.Encode(b, tb.AvroKey(r)) },
		func(op string, r testenv.Row, i int) []byte {
			return vs.Encode(b, tb.AvroEvent(op, nil, r, int64(i), 1559033904863))
		})
	srcl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		b.Fatal(err)
	}
	decode1 := unframe(b, hambaDecode(b, srcl))
	benchKafkaIngest(b, k.Brokers, "dbza", dbzBenchRecords, dbzBenchPartitions, func(r *kgo.Record) { decode1(r.Key); decode1(r.Value) },
		KafkaConfig{Envelope: "debezium", KeyFormat: "avro", ValueFormat: "avro", Registry: avroRegistry(b, reg)})
}

// TestKafkaIngestDebeziumAvroRegistryAway: when the registry does not
// answer for the topic's first change event, the start fails with the
// registry's error (the ingest retries it) instead of passing the record
// over and taking the collection's columns from a later one.
func TestKafkaIngestDebeziumAvroRegistryAway(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "customers", 1)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	tb := testenv.DebeziumCustomers("postgresql")
	ks, vs := reg.Serde(t, "customers-key", tb.AvroKeySchema()), reg.Serde(t, "customers-value", tb.AvroValueSchema())
	r := testenv.Row{"id": 1, "first_name": "Anne", "last_name": "K", "email": "a@x.org"}
	produce(t, producer(t, k.Brokers), &kgo.Record{Topic: "customers", Key: ks.Encode(t, tb.AvroKey(r)), Value: vs.Encode(t, tb.AvroEvent("c", nil, r, 1, 1))})
	away, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL, RetryFor: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{"customers"}, Envelope: "debezium", KeyFormat: "avro", ValueFormat: "avro", Registry: away}
	err = Run(ctx, NewKafka(cfg), openStore(t), Options{RetryFor: -1, CompactEvery: -1})
	if err == nil || !strings.Contains(err.Error(), "schema registry") || ctx.Err() != nil {
		t.Fatalf("ingest with the registry away: %v (context %v), want the registry's error", err, ctx.Err())
	}
}
