package kafkafmt

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// BenchmarkProtobufUpsert: the upsert decoder over protobuf keys and
// values (BenchmarkKafkaIngestAvro/protobuf's records, 10k keys), no
// Kafka and no store, against proto.Unmarshal of the same bytes into
// dynamicpb messages (the raw consumer's decoding).
//
//	go test ./pkg/kafkafmt -run '^$' -bench BenchmarkProtobufUpsert
func BenchmarkProtobufUpsert(b *testing.B) {
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	kp := reg.ProtoSerde(b, "t-key", `syntax = "proto3"; package bench; message Key { string id = 1; }`)
	vp := reg.ProtoSerde(b, "t-value", `syntax = "proto3"; package bench; message Item { int64 n = 1; repeated string tags = 2; optional int64 price_cents = 3; }`)
	const n = 100_000
	keys, vals := make([][]byte, n), make([][]byte, n)
	for i := range n {
		km := kp.New(b, "Key")
		km.Set(km.Descriptor().Fields().ByName("id"), protoreflect.ValueOfString(fmt.Sprintf("key-%06d", i%10_000)))
		vm := vp.New(b, "Item")
		fs := vm.Descriptor().Fields()
		vm.Set(fs.ByName("n"), protoreflect.ValueOfInt64(int64(i)))
		tags := vm.Mutable(fs.ByName("tags")).List()
		tags.Append(protoreflect.ValueOfString("alpha"))
		tags.Append(protoreflect.ValueOfString("beta"))
		vm.Set(fs.ByName("price_cents"), protoreflect.ValueOfInt64(int64(i%100000)))
		keys[i], vals[i] = kp.Encode(b, km), vp.Encode(b, vm)
	}
	b.Run("raw+dynamicpb", func(b *testing.B) {
		kd, vd := kp.File.Messages().Get(0), vp.File.Messages().Get(0)
		for range b.N {
			for i := range n {
				if proto.Unmarshal(keys[i][6:], dynamicpb.NewMessage(kd)) != nil || proto.Unmarshal(vals[i][6:], dynamicpb.NewMessage(vd)) != nil {
					b.Fatal("unmarshal")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
	b.Run("upsert", func(b *testing.B) {
		for range b.N {
			d, err := NewDecoder(Config{Envelope: "upsert", Key: newProtoTest(b, reg, "t-key", 0), Value: newProtoTest(b, reg, "t-value", 0), Collection: "t", Source: "kafka.t"})
			if err != nil {
				b.Fatal(err)
			}
			r := &kgo.Record{Topic: "t"}
			for i := range n {
				r.Offset, r.Key, r.Value = int64(i), keys[i], vals[i]
				if err := d.Add(r); err != nil {
					b.Fatal(err)
				}
				if d.Rows() >= 4096 {
					d.Flush().Release()
				}
			}
			if rec := d.Flush(); rec != nil {
				rec.Release()
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
}
