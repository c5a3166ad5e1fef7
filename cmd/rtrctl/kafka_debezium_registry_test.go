package main

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
)

// TestKafkaDebeziumProtobufSIGKILL is TestKafkaDebeziumSIGKILL over
// Confluent's ProtobufConverter (testenv.DebeziumSerde) with a schema
// registry, with an ADD COLUMN mid-stream.
func TestKafkaDebeziumProtobufSIGKILL(t *testing.T) { debeziumRegistrySIGKILL(t, "protobuf") }

// TestKafkaDebeziumJSONSchemaSIGKILL is TestKafkaDebeziumSIGKILL over
// Confluent's JsonSchemaConverter, with an ADD COLUMN mid-stream.
func TestKafkaDebeziumJSONSchemaSIGKILL(t *testing.T) { debeziumRegistrySIGKILL(t, "json-schema") }

// debeziumRegistrySIGKILL is debeziumSIGKILL of records in format
// (protobuf or json-schema) through a schema registry, with phone added
// after 300 records.
func debeziumRegistrySIGKILL(t *testing.T, format string) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	tb := testenv.DebeziumCustomers("postgresql")
	debeziumSIGKILL(t, reg.DebeziumSerde(format, "dbz", tb), tb, format, []string{"--schema-registry", reg.URL}, 13, 300)
}

// debeziumWriter writes a table's Debezium records in a format.
type debeziumWriter interface {
	Key(t testing.TB, row testenv.Row) []byte
	Event(t testing.TB, op string, before, after testenv.Row, pos, tsMs int64) []byte
	Truncate(t testing.TB, pos, tsMs int64) []byte
}

// debeziumSIGKILL: `rtrctl ingest --envelope debezium` of Debezium change
// events of tb (the documentation's customers table, PostgreSQL connector
// shape) written by w in format is SIGKILLed 5 times at random moments
// (kafkaSIGKILL) while a producer writes snapshot reads, creates, updates
// without before, deletes with their tombstones and truncates: every
// readable binding equals the offset-order model. With phoneAfter > 0,
// after that many records the table gains an optional column phone (for
// a registry format: a new registered value version), which later
// records carry: bindings before the first of them are without the
// column, from it on with it, null in the rows set before. The topic has
// one partition: Debezium's documentation warns that a truncate (a
// record without a key) has no order against the events of other
// partitions.
func debeziumSIGKILL(t *testing.T, w debeziumWriter, tb *testenv.DebeziumTable, format string, args []string, seed int64, phoneAfter int) {
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, "dbz", 1)
	rnd := rand.New(rand.NewSource(seed))
	var log []debeziumChange
	var phoneAt *kgo.Record // the first record with phone
	live := map[int]bool{}
	pos := int64(0)
	row := func(id int) testenv.Row {
		r := testenv.Row{"id": id, "first_name": fmt.Sprint("n", len(log)), "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", id)}
		if phoneAt != nil {
			r["phone"] = fmt.Sprint("555-", id)
		}
		return r
	}
	add := func(op string, c debeziumChange) {
		pos++
		c.op = op
		c.rec.Topic = "dbz"
		if err := cl.ProduceSync(context.Background(), c.rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		log = append(log, c)
	}
	set := func(op string, id int) {
		if phoneAt == nil && phoneAfter > 0 && len(log) >= phoneAfter {
			tb.Columns = append(tb.Columns, testenv.DebeziumColumn{Name: "phone", Schema: map[string]any{"type": "string", "optional": true}})
			phoneAt = &kgo.Record{}
		}
		r := row(id)
		phone, _ := r["phone"].(string)
		c := debeziumChange{rec: &kgo.Record{Key: w.Key(t, r), Value: w.Event(t, op, nil, r, pos, 1559033904863+pos)},
			id: strconv.Itoa(id), row: fmt.Sprintf("%s,%s,%s|%s", r["first_name"], r["last_name"], r["email"], phone)}
		if phoneAt != nil && phoneAt.Value == nil {
			phoneAt = c.rec
		}
		add("set", c)
		live[id] = true
	}
	for id := 1; id <= 12; id++ { // the snapshot
		set("r", id)
	}
	produce := func(n int) {
		for range n {
			id := 1 + rnd.Intn(12)
			switch x := rnd.Intn(40); {
			case x == 0:
				add("truncate", debeziumChange{rec: &kgo.Record{Value: w.Truncate(t, pos, 1559033904863+pos)}})
				clear(live)
			case x < 8 && live[id]:
				key := w.Key(t, testenv.Row{"id": id})
				add("del", debeziumChange{rec: &kgo.Record{Key: key, Value: w.Event(t, "d", testenv.Row{"id": id}, nil, pos, 1559033904863+pos)}, id: strconv.Itoa(id)})
				add("none", debeziumChange{rec: &kgo.Record{Key: key}})
				delete(live, id)
			case live[id]:
				set("u", id)
			default:
				set("c", id)
			}
		}
	}
	kafkaSIGKILL(t, rnd, kafkaKill{
		brokers: strings.Join(k.Brokers, ","), topic: "dbz",
		args:    append([]string{"--envelope", "debezium", "--key-format", format, "--value-format", format}, args...),
		produce: produce,
		model: func(f frontier.Frontier) map[string]string {
			switched := phoneAt != nil && phoneAt.Value != nil &&
				f.Beyond(frontier.Time{Partition: strconv.Itoa(int(phoneAt.Partition)), Pos: uint64(phoneAt.Offset)})
			m := debeziumModel(log, f)
			for id, r := range m {
				if switched {
					m[id] = strings.Replace(r, "|", ",", 1)
				} else {
					m[id] = r[:strings.IndexByte(r, '|')]
				}
			}
			return m
		},
		read: readCustomersPhone,
	})
	if phoneAfter > 0 && (phoneAt == nil || phoneAt.Value == nil) {
		t.Fatalf("only %d records: the column was never added", len(log))
	}
	if phoneAt != nil {
		t.Logf("%d records, phone from offset %d", len(log), phoneAt.Offset)
	} else {
		t.Logf("%d records", len(log))
	}
}

// readCustomersPhone is readCustomers with the phone column appended
// (null as empty) when the collection has it.
func readCustomersPhone(rec arrow.Record) (map[string]string, []string) {
	got, multi := readCustomers(rec)
	idx := rec.Schema().FieldIndices("phone")
	if len(idx) == 0 {
		return got, multi
	}
	ids, phones := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int32), rec.Column(idx[0]).(*array.String)
	for i := range int(rec.NumRows()) {
		id := strconv.Itoa(int(ids.Value(i)))
		got[id] += "," + phones.Value(i) // "" when null
	}
	return got, multi
}

// TestKafkaRecencyDebeziumProtobuf: the recency seed scenario over
// Debezium creates through Confluent's ProtobufConverter: a read as of
// wait-recent's time has exactly every customer produced.
func TestKafkaRecencyDebeziumProtobuf(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	tb := testenv.DebeziumCustomers("mysql")
	customer := func(i int) testenv.Row {
		return testenv.Row{"id": i, "first_name": "Anne", "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", i)}
	}
	// kafkaRecency's topics fast and slow: the same schemas (ids) under
	// the subjects of both.
	s := reg.DebeziumSerde("protobuf", "fast", tb)
	for _, topic := range []*testenv.DebeziumSerde{s, reg.DebeziumSerde("protobuf", "slow", tb)} {
		topic.Key(t, customer(0))
		topic.Event(t, "c", nil, customer(0), 0, 1)
	}
	kafkaRecency(t, ingest.KafkaConfig{Envelope: "debezium", KeyFormat: "protobuf", ValueFormat: "protobuf", Registry: r}, func(t *testing.T, cl *kgo.Client, from, to int) {
		produceTxnOf(t, cl, from, to, func(i int) *kgo.Record {
			return &kgo.Record{Key: s.Key(t, customer(i)), Value: s.Event(t, "c", nil, customer(i), int64(i), 1559033904863)}
		})
	})
}
