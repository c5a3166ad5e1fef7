package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/testenv"
)

const (
	protoBenchKey = `syntax = "proto3"; package bench; message Key { string id = 1; }`
	// protoBenchValue is avroValueV2's record in Protobuf: a number, a
	// list of strings and an optional price (cents).
	protoBenchValue = `syntax = "proto3"; package bench; message Item { int64 n = 1; repeated string tags = 2; optional int64 price_cents = 3; }`
)

// benchProtobufIngest is BenchmarkKafkaIngestAvro's Protobuf case.
func benchProtobufIngest(b *testing.B, k *testenv.Kafka, reg *testenv.Registry) {
	const topic = "proto"
	kp, vp := reg.ProtoSerde(b, topic+"-key", protoBenchKey), reg.ProtoSerde(b, topic+"-value", protoBenchValue)
	kf, vf := kp.File.Messages().Get(0).Fields(), vp.File.Messages().Get(0).Fields()
	// The raw consumer's descriptors: the registry's schema by id,
	// compiled once per id.
	srcl, _ := sr.NewClient(sr.URLs(reg.URL))
	descs := map[int]protoreflect.MessageDescriptor{}
	produceKeyed(b, k.Brokers, topic, func(i, kn int) *kgo.Record {
		km := kp.New(b, "Key")
		km.Set(kf.ByName("id"), protoreflect.ValueOfString(fmt.Sprintf("key-%06d", kn)))
		vm := vp.New(b, "Item")
		vm.Set(vf.ByName("n"), protoreflect.ValueOfInt64(int64(i)))
		tags := vm.Mutable(vf.ByName("tags")).List()
		tags.Append(protoreflect.ValueOfString("alpha"))
		tags.Append(protoreflect.ValueOfString("beta"))
		vm.Set(vf.ByName("price_cents"), protoreflect.ValueOfInt64(int64(i%100000)))
		return &kgo.Record{Key: kp.Encode(b, km), Value: vp.Encode(b, vm)}
	})
	benchRegistryIngest(b, k.Brokers, reg, topic, "protobuf", "raw+dynamicpb", func(id int, rest []byte) {
		var h sr.ConfluentHeader
		_, payload, err := h.DecodeIndex(rest, 1)
		if err != nil {
			b.Fatal(err)
		}
		md, ok := descs[id]
		if !ok {
			ss, err := srcl.SchemaByID(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
				Accessor: protocompile.SourceAccessorFromMap(map[string]string{"s.proto": ss.Schema})})}
			fs, err := c.Compile(context.Background(), "s.proto")
			if err != nil {
				b.Fatal(err)
			}
			md = fs[0].Messages().Get(0)
			descs[id] = md
		}
		if err := proto.Unmarshal(payload, dynamicpb.NewMessage(md)); err != nil {
			b.Fatal(err)
		}
	})
}

// TestKafkaIngestProtobufRestart: the reader schema of a protobuf topic
// is recorded; a restart after the value subject got a new latest
// version is refused naming the version to pin, and with it pinned the
// ingest resumes and reads the new version's records as the old one.
func TestKafkaIngestProtobufRestart(t *testing.T) {
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	createTopic(t, k.Brokers, "items", 1)
	kp, v1 := reg.ProtoSerde(t, "items-key", protoBenchKey), reg.ProtoSerde(t, "items-value", protoBenchValue)
	cl := producer(t, k.Brokers)
	st := openStore(t)
	rec := func(sd *testenv.ProtoSerde, id string, n int64) *kgo.Record {
		km := kp.New(t, "Key")
		km.Set(km.Descriptor().Fields().ByName("id"), protoreflect.ValueOfString(id))
		vm := sd.New(t, "Item")
		vm.Set(vm.Descriptor().Fields().ByName("n"), protoreflect.ValueOfInt64(n))
		return &kgo.Record{Topic: "items", Key: kp.Encode(t, km), Value: sd.Encode(t, vm)}
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{"items"}, Envelope: "upsert", KeyFormat: "protobuf", ValueFormat: "protobuf", Registry: avroRegistry(t, reg)}
	var log []*kgo.Record
	put := func(r *kgo.Record) { produce(t, cl, r); log = append(log, r) }
	put(rec(v1, "a", 1))
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", "items", 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	v2 := reg.ProtoSerde(t, "items-value", strings.Replace(protoBenchValue, "}", " string note = 4; }", 1))
	err := Run(context.Background(), NewKafka(cfg), st, Options{CompactEvery: -1})
	if err == nil || !strings.Contains(err.Error(), "version 1") || !strings.Contains(fmt.Sprint(hint.Of(err)), "--value-schema-version 1") {
		t.Fatalf("restart with a new latest version: %v (hint %q), want a refusal naming --value-schema-version 1", err, hint.Of(err))
	}
	cfg.ValueSchemaVersion = 1
	run = startIngest(t, st, cfg)
	for i, id := range []string{"a", "b"} {
		put(rec(v2, id, int64(i+2)))
		waitCaughtUp(t, st, k.Brokers, "", "items", 20*time.Second)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	// The v2 records are read as v1 (note dropped).
	shown := []string{`{"n":1,"price_cents":null,"tags":[]}`, `{"n":2,"price_cents":null,"tags":[]}`, `{"n":3,"price_cents":null,"tags":[]}`}
	checkUpsertModelAs(t, st, "kafka.items", "items", log, func(r *kgo.Record) (string, string) {
		i := slices.Index(log, r)
		return fmt.Sprintf(`{"id":%q}`, []string{"a", "a", "b"}[i]), shown[i]
	})
}
