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
)

// debeziumChange is a produced Debezium record and what it does to the
// model: set the id's row, delete it, nothing (a tombstone), or clear
// everything (a truncate).
type debeziumChange struct {
	rec *kgo.Record
	op  string // "set", "del", "none", "truncate"
	id  string
	row string
}

// debeziumModel is the customers table after the changes below f, applied
// in offset order.
func debeziumModel(log []debeziumChange, f frontier.Frontier) map[string]string {
	model := map[string]string{}
	for _, c := range log {
		if !f.Beyond(frontier.Time{Partition: strconv.Itoa(int(c.rec.Partition)), Pos: uint64(c.rec.Offset)}) {
			continue
		}
		switch c.op {
		case "set":
			model[c.id] = c.row
		case "del":
			delete(model, c.id)
		case "truncate":
			clear(model)
		}
	}
	return model
}

// readCustomers renders a read of the customers collection as
// debeziumModel does.
func readCustomers(rec arrow.Record) (map[string]string, []string) {
	got := map[string]string{}
	var multi []string
	s := rec.Schema()
	col := func(name string) arrow.Array { return rec.Column(s.FieldIndices(name)[0]) }
	ids, diffs := col("id").(*array.Int32), col("_diff").(*array.Int64)
	first, last, email := col("first_name").(*array.String), col("last_name").(*array.String), col("email").(*array.String)
	for i := 0; i < int(rec.NumRows()); i++ {
		id := strconv.Itoa(int(ids.Value(i)))
		if diffs.Value(i) != 1 {
			multi = append(multi, fmt.Sprintf("id %s has multiplicity %d", id, diffs.Value(i)))
		}
		got[id] = first.Value(i) + "," + last.Value(i) + "," + email.Value(i)
	}
	return got, multi
}

// TestKafkaDebeziumSIGKILL: `rtrctl ingest --envelope debezium` of
// Debezium change events (PostgreSQL connector shape, the documentation's
// customers table) is SIGKILLed 5 times at random moments while a
// producer writes snapshot reads, creates, updates without before,
// deletes with their tombstones and truncates (kafkaSIGKILL): every
// readable binding equals the offset-order model. The topic has one
// partition: Debezium's documentation warns that a truncate (a record
// without a key) has no order against the events of other partitions.
func TestKafkaDebeziumSIGKILL(t *testing.T) {
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, "dbz", 1)
	tb := testenv.DebeziumCustomers("postgresql")
	rnd := rand.New(rand.NewSource(11))
	var log []debeziumChange
	live := map[int]bool{}
	pos := int64(0)
	row := func(id int) testenv.Row {
		return testenv.Row{"id": id, "first_name": fmt.Sprint("n", len(log)), "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", id)}
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
		r := row(id)
		add("set", debeziumChange{rec: &kgo.Record{Key: tb.KeyOf(r), Value: tb.Event(op, nil, r, pos, 1559033904863+pos)},
			id: strconv.Itoa(id), row: fmt.Sprintf("%s,%s,%s", r["first_name"], r["last_name"], r["email"])})
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
				add("truncate", debeziumChange{rec: &kgo.Record{Value: tb.Truncate(pos, 1559033904863+pos)}})
				clear(live)
			case x < 8 && live[id]:
				key := tb.KeyOf(testenv.Row{"id": id})
				add("del", debeziumChange{rec: &kgo.Record{Key: key, Value: tb.Event("d", testenv.Row{"id": id}, nil, pos, 1559033904863+pos)}, id: strconv.Itoa(id)})
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
		args:    []string{"--envelope", "debezium", "--key-format", "json", "--value-format", "json"},
		produce: produce,
		model:   func(f frontier.Frontier) map[string]string { return debeziumModel(log, f) },
		read:    readCustomers,
	})
	t.Logf("%d records", len(log))
}

// TestKafkaRecencyDebezium: the recency seed scenario over Debezium
// change events (creates of new customers): a read as of wait-recent's
// time has exactly every customer produced.
func TestKafkaRecencyDebezium(t *testing.T) {
	tb := testenv.DebeziumCustomers("mysql")
	kafkaRecency(t, ingest.KafkaConfig{Envelope: "debezium", KeyFormat: "json", ValueFormat: "json"}, func(t *testing.T, cl *kgo.Client, from, to int) {
		produceTxnOf(t, cl, from, to, func(i int) *kgo.Record {
			r := testenv.Row{"id": i, "first_name": "Anne", "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", i)}
			return &kgo.Record{Key: tb.KeyOf(r), Value: tb.Event("c", nil, r, int64(i), 1559033904863)}
		})
	})
}
