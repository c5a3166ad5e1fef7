package main

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
)

// avroDebezium writes tb's records as Debezium with Confluent's
// AvroConverter does (a debeziumWriter): key and value schemas
// registered as subjects <topic>-key and <topic>-value, each record
// framed with its schema id. When tb gains a column, the next record
// registers its new schemas, as Debezium does after an ADD COLUMN.
type avroDebezium struct {
	reg    *testenv.Registry
	topic  string
	tb     *testenv.DebeziumTable
	cols   int
	ks, vs *testenv.AvroSerde
}

func (a *avroDebezium) serdes(t testing.TB) (ks, vs *testenv.AvroSerde) {
	if a.vs == nil || len(a.tb.Columns) != a.cols {
		a.ks, a.vs = a.reg.Serde(t, a.topic+"-key", a.tb.AvroKeySchema()), a.reg.Serde(t, a.topic+"-value", a.tb.AvroValueSchema())
		a.cols = len(a.tb.Columns)
	}
	return a.ks, a.vs
}

func (a *avroDebezium) Key(t testing.TB, r testenv.Row) []byte {
	ks, _ := a.serdes(t)
	return ks.Encode(t, a.tb.AvroKey(r))
}

func (a *avroDebezium) Event(t testing.TB, op string, before, after testenv.Row, pos, tsMs int64) []byte {
	_, vs := a.serdes(t)
	return vs.Encode(t, a.tb.AvroEvent(op, before, after, pos, tsMs))
}

func (a *avroDebezium) Truncate(t testing.TB, pos, tsMs int64) []byte {
	_, vs := a.serdes(t)
	return vs.Encode(t, a.tb.AvroEvent("t", nil, nil, pos, tsMs))
}

// TestKafkaDebeziumAvroSIGKILL is TestKafkaDebeziumSIGKILL over
// AvroConverter's records (--key-format avro --value-format avro
// --schema-registry), with an upstream ADD COLUMN in the middle: after
// 200 records the table gains an optional phone column, so a second value
// schema version is registered and every later event is written with it.
// Every readable binding equals the offset-order model: without phone
// before the first record with it, with it (null in the rows set before)
// from it on.
func TestKafkaDebeziumAvroSIGKILL(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	tb := testenv.DebeziumCustomers("postgresql")
	debeziumSIGKILL(t, &avroDebezium{reg: reg, topic: "dbz", tb: tb}, tb, "avro", []string{"--schema-registry", reg.URL}, 13, 200)
}

// TestKafkaRecencyDebeziumAvro is TestKafkaRecencyDebezium over
// AvroConverter's records.
func TestKafkaRecencyDebeziumAvro(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	tb := testenv.DebeziumCustomers("mysql")
	codecs := map[string]*avroDebezium{"fast": {reg: reg, topic: "fast", tb: tb}, "slow": {reg: reg, topic: "slow", tb: tb}}
	for _, c := range codecs {
		c.serdes(t) // registered before the producers run
	}
	kafkaRecency(t, ingest.KafkaConfig{Envelope: "debezium", KeyFormat: "avro", ValueFormat: "avro", Registry: r}, func(t *testing.T, cl *kgo.Client, from, to int) {
		produceTxnOf(t, cl, from, to, func(i int) *kgo.Record {
			row := testenv.Row{"id": i, "first_name": "Anne", "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", i)}
			c := codecs[cl.OptValue(kgo.DefaultProduceTopic).(string)]
			return &kgo.Record{Key: c.Key(t, row), Value: c.Event(t, "c", nil, row, int64(i), 1559033904863)}
		})
	})
}
