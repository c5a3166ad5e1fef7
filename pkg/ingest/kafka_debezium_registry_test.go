package ingest

import (
	"context"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/confluentproto"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
)

// BenchmarkKafkaIngestDebeziumProtobuf is BenchmarkKafkaIngestDebezium
// over Confluent's ProtobufConverter (testenv.DebeziumSerde; about 330
// bytes a record): --envelope debezium --key-format protobuf
// --value-format protobuf against a raw franz-go consumer that decodes
// every key and value with dynamicpb (the writer schema fetched by id
// and compiled with protocompile once).
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngestDebeziumProtobuf -benchtime 3x
func BenchmarkKafkaIngestDebeziumProtobuf(b *testing.B) {
	const records, partitions = dbzBenchRecords, dbzBenchPartitions
	k := testenv.StartKafka(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	s := reg.DebeziumSerde("protobuf", "dbz", testenv.DebeziumCustomers("postgresql"))
	produceDebezium(b, k.Brokers, "dbz", func(r testenv.Row) []byte { return s.Key(b, r) }, func(op string, r testenv.Row, i int) []byte {
		return s.Event(b, op, nil, r, int64(i), 1559033904863)
	})
	srcl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	messages := map[int]*dynamicpb.Message{}
	decode := func(data []byte) {
		var h sr.ConfluentHeader
		id, rest, err := h.DecodeID(data)
		if err != nil {
			b.Fatal(err)
		}
		index, payload, err := h.DecodeIndex(rest, 8)
		if err != nil || len(index) != 1 || index[0] != 0 {
			b.Fatalf("raw consumer: message index %v: %v", index, err)
		}
		m, ok := messages[id]
		if !ok {
			ss, err := srcl.SchemaByID(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			files := map[string]string{"s.proto": ss.Schema}
			confluentproto.AddTo(files)
			c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(files)})}
			fds, err := c.Compile(ctx, "s.proto")
			if err != nil {
				b.Fatal(err)
			}
			m = dynamicpb.NewMessage(fds[0].Messages().Get(0))
			messages[id] = m
		}
		m.Reset()
		if err := proto.Unmarshal(payload, m); err != nil {
			b.Fatal(err)
		}
	}
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf", func(b *testing.B) {
		benchKafkaIngest(b, k.Brokers, "dbz", records, partitions, func(rec *kgo.Record) { decode(rec.Key); decode(rec.Value) },
			KafkaConfig{Envelope: "debezium", KeyFormat: "protobuf", ValueFormat: "protobuf", Registry: r})
	})
}
