package main

import (
	"fmt"
	"strconv"
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
	tb := testenv.DebeziumCustomers("postgresql")
	debeziumSIGKILL(t, jsonDebezium{tb}, tb, "json", nil, 11, 0)
}

// jsonDebezium writes a table's records as JsonConverter does.
type jsonDebezium struct{ tb *testenv.DebeziumTable }

func (j jsonDebezium) Key(_ testing.TB, r testenv.Row) []byte { return j.tb.KeyOf(r) }
func (j jsonDebezium) Event(_ testing.TB, op string, before, after testenv.Row, pos, tsMs int64) []byte {
	return j.tb.Event(op, before, after, pos, tsMs)
}
func (j jsonDebezium) Truncate(_ testing.TB, pos, tsMs int64) []byte { return j.tb.Truncate(pos, tsMs) }

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
