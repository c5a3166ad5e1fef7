package kafkafmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// newDebezium returns a debezium decoder for the collection whose first
// record is first, and the columns it found.
func newDebezium(t *testing.T, first *kgo.Record) Decoder {
	t.Helper()
	cols, keys, err := DebeziumColumns(jsonFormat{}, jsonFormat{}, first)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(Config{Envelope: "debezium", Key: jsonFormat{}, Value: jsonFormat{}, Collection: "t", Source: "kafka.t", Columns: cols, KeyColumns: keys})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sortedRows(t *testing.T, r arrow.Record) []string {
	t.Helper()
	out := rows(t, r)
	sort.Strings(out)
	if r != nil {
		r.Release()
	}
	return out
}

// TestDebeziumEvents feeds the change events of the Debezium
// documentation's customers examples, in the PostgreSQL connector's shape
// (updates and deletes under REPLICA IDENTITY DEFAULT: no before on
// updates, only the key in before on deletes) and the MySQL connector's
// (full before), and checks the rows of each step.
func TestDebeziumEvents(t *testing.T) {
	for _, conn := range []string{"postgresql", "mysql"} {
		t.Run(conn, func(t *testing.T) {
			tb := testenv.DebeziumCustomers(conn)
			sally := testenv.Row{"id": 1001, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
			anne := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
			anneMarie := testenv.Row{"id": 1004, "first_name": "Anne Marie", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
			var updBefore, delBefore testenv.Row
			if conn == "mysql" {
				updBefore, delBefore = anne, anneMarie
			} else {
				delBefore = testenv.Row{"id": 1004, "first_name": nil, "last_name": nil, "email": nil}
			}
			off := int64(0)
			add := func(d Decoder, key, value []byte) {
				t.Helper()
				if err := d.Add(rec(0, off, key, value)); err != nil {
					t.Fatalf("offset %d: %v", off, err)
				}
				off++
			}
			first := rec(0, 0, tb.KeyOf(sally), tb.Event("r", nil, sally, 0, 1559033904863))
			d := newDebezium(t, first)
			if md, _ := d.Schema().Metadata().GetValue(pipe.KeyKey); md != "id" {
				t.Errorf("rtr.key = %q, want id", md)
			}
			var history []arrow.Record
			step := func(want ...string) {
				t.Helper()
				r := d.Flush()
				if r != nil {
					r.Retain()
					history = append(history, r)
				}
				if got := sortedRows(t, r); !slices.Equal(got, want) {
					t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			add(d, first.Key, first.Value)
			add(d, tb.KeyOf(anne), tb.Event("c", nil, anne, 1, 1559033904900))
			add(d, tb.KeyOf(anne), tb.Event("u", updBefore, anneMarie, 2, 1559033905000))
			step("1001 Sally Thomas sally.thomas@acme.com @0:0 +1",
				"1004 Anne Kretchmar annek@noanswer.org @0:1 +1",
				"1004 Anne Kretchmar annek@noanswer.org @0:2 -1",
				"1004 Anne Marie Kretchmar annek@noanswer.org @0:2 +1")
			add(d, tb.KeyOf(anne), tb.Event("d", delBefore, nil, 3, 1559033906000))
			add(d, tb.KeyOf(anne), nil) // the tombstone
			step("1004 Anne Marie Kretchmar annek@noanswer.org @0:3 -1")
			add(d, tb.KeyOf(anne), nil) // a tombstone alone changes nothing
			step()
			bob := testenv.Row{"id": 1005, "first_name": "Bob", "last_name": "Jones", "email": "bob@example.com"}
			add(d, tb.KeyOf(bob), tb.Event("c", nil, bob, 6, 1559033907000))
			add(d, nil, tb.Truncate(7, 1559033908000)) // truncate: no key
			step("1001 Sally Thomas sally.thomas@acme.com @0:7 -1",
				"1005 Bob Jones bob@example.com @0:6 +1",
				"1005 Bob Jones bob@example.com @0:7 -1")
			add(d, tb.KeyOf(anne), tb.Event("c", nil, anne, 9, 1559033909000))
			step("1004 Anne Kretchmar annek@noanswer.org @0:8 +1")

			// The state rebuilt from the whole output is the decoder's.
			fresh := newDebezium(t, first)
			if err := loadState(fresh, history...); err != nil {
				t.Fatal(err)
			}
			if n := fresh.(Stateful).StateSize(); n != 1 {
				t.Fatalf("rebuilt state has %d keys, want 1", n)
			}
			if err := fresh.Add(rec(0, 20, tb.KeyOf(anne), tb.Event("d", nil, nil, 20, 1559033910000))); err != nil {
				t.Fatal(err)
			}
			if got := sortedRows(t, fresh.Flush()); !slices.Equal(got, []string{"1004 Anne Kretchmar annek@noanswer.org @0:20 -1"}) {
				t.Fatalf("delete after a rebuild: %v", got)
			}
			for _, r := range history {
				r.Release()
			}
		})
	}
}

// typesTable has a column of every Connect and logical type the json
// format maps.
func typesTable() *testenv.DebeziumTable {
	s := func(typ string, kv ...any) map[string]any {
		m := map[string]any{"type": typ, "optional": true}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	col := func(name string, schema map[string]any) testenv.DebeziumColumn {
		return testenv.DebeziumColumn{Name: name, Schema: schema}
	}
	return &testenv.DebeziumTable{Connector: "postgresql", Server: "pg", DB: "postgres", Schema: "public", Table: "types", Key: []string{"id"},
		Columns: []testenv.DebeziumColumn{
			col("id", map[string]any{"type": "int32", "optional": false}),
			col("i8", s("int8")), col("i16", s("int16")), col("i64", s("int64")),
			col("f32", s("float")), col("f64", s("double")), col("b", s("boolean")), col("s", s("string")), col("by", s("bytes")),
			col("d", s("int32", "name", "io.debezium.time.Date")),
			col("t", s("int32", "name", "io.debezium.time.Time")),
			col("mt", s("int64", "name", "io.debezium.time.MicroTime")),
			col("nt", s("int64", "name", "io.debezium.time.NanoTime")),
			col("ts", s("int64", "name", "io.debezium.time.Timestamp")),
			col("mts", s("int64", "name", "io.debezium.time.MicroTimestamp")),
			col("nts", s("int64", "name", "io.debezium.time.NanoTimestamp")),
			col("zts", s("string", "name", "io.debezium.time.ZonedTimestamp")),
			col("cd", s("int32", "name", "org.apache.kafka.connect.data.Date")),
			col("ct", s("int32", "name", "org.apache.kafka.connect.data.Time")),
			col("cts", s("int64", "name", "org.apache.kafka.connect.data.Timestamp")),
			col("dec", s("bytes", "name", "org.apache.kafka.connect.data.Decimal", "parameters", map[string]any{"scale": "2", "connect.decimal.precision": "10"})),
			col("vsd", s("struct", "name", "io.debezium.data.VariableScaleDecimal", "fields", []any{
				map[string]any{"type": "int32", "optional": false, "field": "scale"},
				map[string]any{"type": "bytes", "optional": false, "field": "value"}})),
			col("u", s("string", "name", "io.debezium.data.Uuid")),
			col("js", s("string", "name", "io.debezium.data.Json")),
			col("arr", s("array", "items", map[string]any{"type": "int32", "optional": true})),
			col("m", s("map", "keys", map[string]any{"type": "string", "optional": false}, "values", map[string]any{"type": "int64", "optional": true})),
			col("geo", s("struct", "fields", []any{
				map[string]any{"type": "double", "optional": false, "field": "x"},
				map[string]any{"type": "double", "optional": false, "field": "y"}})),
		}}
}

// typesRows are rows of typesTable: every column set, only the key, and
// negative and empty values.
func typesRows() []testenv.Row {
	full := testenv.Row{"id": 1, "i8": -8, "i16": -1600, "i64": int64(-9007199254740993), "f32": 1.5, "f64": -2.25, "b": true,
		"s": "héllo \"q\"\n", "by": "AAEC/w==", "d": 19000, "t": 3723004, "mt": int64(3723004005), "nt": int64(3723004005006),
		"ts": int64(1614834367123), "mts": int64(1614834367123456), "nts": int64(1614834367123456789), "zts": "2021-03-04T06:06:07.123456+01:00",
		"cd": -1, "ct": 1000, "cts": int64(1614834367000), "dec": "MDk=", "vsd": map[string]any{"scale": 3, "value": "AeJA"},
		"u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "js": `{"a": [1, 2]}`, "arr": []any{1, nil, 3},
		"m": map[string]any{"b": 2, "a": nil}, "geo": map[string]any{"x": 1.25, "y": -3}}
	nulls := testenv.Row{"id": 2}
	neg := testenv.Row{"id": 3, "dec": "/w==", "vsd": map[string]any{"scale": 0, "value": "/g=="}, "arr": []any{}, "m": map[string]any{}}
	return []testenv.Row{full, nulls, neg}
}

// TestDebeziumTypes: every mapped type decodes to its Arrow type and
// value, and round-trips through the store's form: a state rebuilt from
// the decoded rows finds the same row again equal (no change) and
// retracts exactly it.
func TestDebeziumTypes(t *testing.T) {
	tb := typesTable()
	rs := typesRows()
	full, nulls, neg := rs[0], rs[1], rs[2]
	first := rec(0, 0, tb.KeyOf(full), tb.Event("r", nil, full, 0, 1))
	d := newDebezium(t, first)
	wantTypes := map[string]string{"id": "int32", "i8": "int8", "i16": "int16", "i64": "int64", "f32": "float32", "f64": "float64",
		"b": "bool", "s": "utf8", "by": "binary", "d": "date32", "t": "time32[ms]", "mt": "time64[us]", "nt": "time64[ns]",
		"ts": "timestamp[ms]", "mts": "timestamp[us]", "nts": "timestamp[ns]", "zts": "timestamp[us, tz=UTC]",
		"cd": "date32", "ct": "time32[ms]", "cts": "timestamp[ms, tz=UTC]", "dec": "decimal(10, 2)", "vsd": "utf8",
		"u": "fixed_size_binary[16]", "js": "utf8", "arr": "list<item: int32, nullable>",
		"m.keys": "list<item: utf8, nullable>", "m.values": "list<item: int64, nullable>", "geo.x": "float64", "geo.y": "float64"}
	var names []string
	for _, f := range d.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			continue
		}
		names = append(names, f.Name)
		if want := wantTypes[f.Name]; want != f.Type.String() {
			t.Errorf("column %s: type %s, want %s", f.Name, f.Type, want)
		}
	}
	if len(names) != len(wantTypes) {
		t.Errorf("columns %v, want %d of them", names, len(wantTypes))
	}
	for i, r := range []testenv.Row{full, nulls, neg} {
		if err := d.Add(rec(0, int64(i), tb.KeyOf(r), tb.Event("c", nil, r, int64(i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	out := d.Flush()
	defer out.Release()
	got := map[string][]string{}
	ucols, _, _, _ := pipe.SplitData(out)
	for j, c := range ucols {
		for i := 0; i < c.Len(); i++ {
			got[names[j]] = append(got[names[j]], c.ValueStr(i))
		}
	}
	want := map[string][]string{
		"id": {"1", "2", "3"}, "i8": {"-8", "(null)", "(null)"}, "i16": {"-1600", "(null)", "(null)"},
		"i64": {"-9007199254740993", "(null)", "(null)"}, "f32": {"1.5", "(null)", "(null)"}, "f64": {"-2.25", "(null)", "(null)"},
		"b": {"true", "(null)", "(null)"}, "s": {"héllo \"q\"\n", "(null)", "(null)"}, "by": {"AAEC/w==", "(null)", "(null)"},
		"d": {"2022-01-08", "(null)", "(null)"}, "t": {"01:02:03.004", "(null)", "(null)"},
		"mt": {"01:02:03.004005", "(null)", "(null)"}, "nt": {"01:02:03.004005006", "(null)", "(null)"},
		"ts": {"2021-03-04 05:06:07.123Z", "(null)", "(null)"}, "mts": {"2021-03-04 05:06:07.123456Z", "(null)", "(null)"},
		"nts": {"2021-03-04 05:06:07.123456789Z", "(null)", "(null)"},
		"zts": {"2021-03-04 05:06:07.123456Z", "(null)", "(null)"},
		"cd":  {"1969-12-31", "(null)", "(null)"}, "ct": {"00:00:01.000", "(null)", "(null)"}, "cts": {"2021-03-04 05:06:07Z", "(null)", "(null)"},
		"dec": {"123.45", "(null)", "-0.01"}, "vsd": {"123.456", "(null)", "-2"},
		"u": {"oO68mZwLTvi7bWu5vTgKEQ==", "(null)", "(null)"}, "js": {`{"a": [1, 2]}`, "(null)", "(null)"},
		"arr":    {"[1,null,3]", "(null)", "[]"},
		"m.keys": {`["a","b"]`, "(null)", "[]"}, "m.values": {"[null,2]", "(null)", "[]"},
		"geo.x": {"1.25", "(null)", "(null)"}, "geo.y": {"-3", "(null)", "(null)"},
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("column %s: %q, want %q", name, got[name], w)
		}
	}

	// Round trip through the store's form.
	again := newDebezium(t, first)
	if err := loadState(again, out); err != nil {
		t.Fatal(err)
	}
	for i, r := range []testenv.Row{full, nulls, neg} {
		if err := again.Add(rec(0, int64(10+i), tb.KeyOf(r), tb.Event("u", nil, r, int64(10+i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	if r := again.Flush(); r != nil {
		t.Fatalf("the same rows again after a rebuild changed the collection: %v", sortedRows(t, r))
	}
	for i, r := range []testenv.Row{full, nulls, neg} {
		if err := again.Add(rec(0, int64(20+i), tb.KeyOf(r), tb.Event("d", r, nil, int64(20+i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	del := again.Flush()
	defer del.Release()
	dcols, _, diffs, _ := pipe.SplitData(del)
	for j, c := range dcols {
		for i := 0; i < c.Len(); i++ {
			if diffs.Value(i) != -1 || c.ValueStr(i) != got[names[j]][i] {
				t.Errorf("delete row %d column %s: %s %+d, want %s -1", i, names[j], c.ValueStr(i), diffs.Value(i), got[names[j]][i])
			}
		}
	}
}

// TestDebeziumDecodeErrors: records that do not decode are a DecodeError
// at their offset, and add nothing.
func TestDebeziumDecodeErrors(t *testing.T) {
	tb := testenv.DebeziumCustomers("postgresql")
	anne := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
	// A column dropped (one added is a switch of columns: Evolver).
	altered := testenv.DebeziumCustomers("postgresql")
	altered.Columns = altered.Columns[:3]
	other := testenv.Row{"id": 1005, "first_name": "A", "last_name": "B", "email": "c"}
	cases := []struct {
		name       string
		key, value []byte
		want       string
	}{
		{"malformed", tb.KeyOf(anne), []byte(`{"schema": `), "malformed JSON"},
		{"no schemas", tb.KeyOf(anne), []byte(`{"before": null, "after": {"id": 1}, "op": "c"}`), "schemas.enable=true"},
		{"altered", altered.KeyOf(anne), altered.Event("c", nil, testenv.Row{"id": 1004, "first_name": "A", "last_name": "B"}, 1, 1), "cannot follow (column email is gone)"},
		{"null key", nil, tb.Event("c", nil, anne, 1, 1), "null key"},
		{"key mismatch", tb.KeyOf(other), tb.Event("c", nil, anne, 1, 1), "does not match"},
		{"bad op", tb.KeyOf(anne), []byte(strings.Replace(string(tb.Event("c", nil, anne, 1, 1)), `"op":"c"`, `"op":"x"`, 1)), `op "x"`},
		{"bad int", tb.KeyOf(anne), []byte(strings.Replace(string(tb.Event("c", nil, anne, 1, 1)), `"id":1004`, `"id":"x"`, 1)), "want an int32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDebezium(t, rec(0, 0, tb.KeyOf(anne), tb.Event("c", nil, anne, 0, 1)))
			err := d.Add(rec(2, 17, c.key, c.value))
			var de *DecodeError
			if !errors.As(err, &de) || de.Partition != 2 || de.Offset != 17 || !strings.Contains(de.Msg, c.want) {
				t.Fatalf("error %v, want a DecodeError at 2/17 containing %q", err, c.want)
			}
			if d.Rows() != 0 {
				t.Fatalf("%d rows added", d.Rows())
			}
		})
	}
}

// TestDebeziumNetting: netted batches equal record by record decoding
// once consolidated, over random creates, updates, deletes, tombstones
// and truncates.
func TestDebeziumNetting(t *testing.T) {
	tb := testenv.DebeziumCustomers("mysql")
	row := func(id, v int) testenv.Row {
		return testenv.Row{"id": id, "first_name": fmt.Sprint("f", v), "last_name": "l", "email": "e"}
	}
	first := rec(0, 0, tb.KeyOf(row(1, 0)), tb.Event("c", nil, row(1, 0), 0, 1))
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		plain, netted := newDebezium(t, first), newDebezium(t, first)
		from := int64(rng.IntN(40))
		netted.(Netting).NetFrom(map[int32]int64{0: from})
		sum := func(r arrow.Record) map[string]int64 {
			s := map[string]int64{}
			for _, l := range rows(t, r) {
				var diff int64
				fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &diff)
				s[l[:strings.Index(l, " @")]] += diff
			}
			for k, v := range s {
				if v == 0 {
					delete(s, k)
				}
			}
			if r != nil {
				r.Release()
			}
			return s
		}
		for off := int64(0); off < 200; off++ {
			id := 1 + rng.IntN(4)
			var r *kgo.Record
			switch x := rng.IntN(20); {
			case x == 0:
				r = rec(0, off, nil, tb.Truncate(off, 1))
			case x < 4:
				r = rec(0, off, tb.KeyOf(row(id, 0)), tb.Event("d", nil, nil, off, 1))
			case x < 6:
				r = rec(0, off, tb.KeyOf(row(id, 0)), nil)
			default:
				r = rec(0, off, tb.KeyOf(row(id, 0)), tb.Event("u", nil, row(id, rng.IntN(3)), off, 1))
			}
			for _, d := range []Decoder{plain, netted} {
				if err := d.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(8) != 0 && off != 199 {
				continue
			}
			if a, b := sum(plain.Flush()), sum(netted.Flush()); fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("seed %d offset %d: netted %v, record by record %v", seed, off, b, a)
			}
			if p, n := plain.(Stateful).StateSize(), netted.(Stateful).StateSize(); p != n {
				t.Fatalf("seed %d: %d keys record by record, %d netted", seed, p, n)
			}
		}
	}
}

// BenchmarkDecodeDebezium decodes Debezium JSON change events of the
// customers table (updates over 1,000 ids), netted, flushing every 10,000.
func BenchmarkDecodeDebezium(b *testing.B) {
	tb := testenv.DebeziumCustomers("postgresql")
	var recs []*kgo.Record
	for i := range 10_000 {
		r := testenv.Row{"id": i % 1000, "first_name": fmt.Sprint("name ", i), "last_name": "Kretchmar", "email": "annek@noanswer.org"}
		recs = append(recs, rec(0, int64(i), tb.KeyOf(r), tb.Event("u", nil, r, int64(i), 1)))
	}
	benchDebeziumDecode(b, jsonFormat{}, recs)
}

// benchDebeziumDecode decodes recs with f in a loop, netted, flushing
// after each pass.
func benchDebeziumDecode(b *testing.B, f Format, recs []*kgo.Record) {
	cols, keys, err := DebeziumColumns(f, f, recs[0])
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDecoder(Config{Envelope: "debezium", Key: f, Value: f, Columns: cols, KeyColumns: keys})
	if err != nil {
		b.Fatal(err)
	}
	d.(Netting).NetFrom(nil)
	i := 0
	for ; b.Loop(); i++ {
		if err := d.Add(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%len(recs) == len(recs)-1 {
			if r := d.Flush(); r != nil { // nil: the cycle repeated the last one's values
				r.Release()
			}
		}
	}
}

// TestDebeziumReservedColumn: a table column named like a reserved pipe
// column is refused with the fix named.
func TestDebeziumReservedColumn(t *testing.T) {
	tb := testenv.DebeziumCustomers("mysql")
	tb.Columns = append(tb.Columns, testenv.DebeziumColumn{Name: "_diff", Schema: map[string]any{"type": "int32", "optional": true}})
	r := testenv.Row{"id": 1, "first_name": "a", "last_name": "b", "email": "c", "_diff": 3}
	_, _, err := DebeziumColumns(jsonFormat{}, jsonFormat{}, rec(0, 0, tb.KeyOf(r), tb.Event("c", nil, r, 0, 1)))
	if err == nil || !strings.Contains(err.Error(), "reserves") {
		t.Fatalf("a column _diff: %v", err)
	}
}

// TestDebeziumJSONSplit: records in JsonConverter's field order (schema
// first) and with keys sorted (payload first) decode alike, the second of
// a schema through the shortcut (splitSeen); a record that only looks like
// one to the shortcut (a field after the payload) decodes through the full
// parse, and a payload that is not JSON is still an error.
func TestDebeziumJSONSplit(t *testing.T) {
	tb := testenv.DebeziumCustomers("postgresql")
	anne := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
	var sorted map[string]json.RawMessage
	if err := json.Unmarshal(tb.Event("c", nil, anne, 1, 1), &sorted); err != nil {
		t.Fatal(err)
	}
	schemaFirst := []byte(`{"schema":` + string(sorted["schema"]) + `,"payload":` + string(sorted["payload"]) + `}`)
	extra := []byte(`{"schema":` + string(sorted["schema"]) + `,"payload":` + string(sorted["payload"]) + `,"extra":{"a":1}}`)
	broken := []byte(`{"schema":` + string(sorted["schema"]) + `,"payload":{"after": {"id": 1}, "op": "c"` + `}`)
	key := tb.KeyOf(anne)
	want := []string{"1004 Anne Kretchmar annek@noanswer.org @0:0 +1"}
	for _, v := range [][]byte{schemaFirst, schemaFirst, tb.Event("c", nil, anne, 1, 1), tb.Event("c", nil, anne, 1, 1), extra} {
		d := newDebezium(t, rec(0, 0, key, v))
		if err := d.Add(rec(0, 0, key, v)); err != nil {
			t.Fatalf("%.60s...: %v", v, err)
		}
		if got := sortedRows(t, d.Flush()); !slices.Equal(got, want) {
			t.Fatalf("%.60s...: rows %v, want %v", v, got, want)
		}
	}
	for _, v := range [][]byte{schemaFirst, tb.Event("c", nil, anne, 1, 1), extra} {
		if _, _, ok := splitSeen(1, v); !ok {
			t.Errorf("%.60s... is not split by the last schemas", v)
		}
	}
	d := newDebezium(t, rec(0, 0, key, schemaFirst))
	if err := d.Add(rec(0, 5, key, broken)); err == nil || !strings.Contains(err.Error(), "offset 5") {
		t.Fatalf("a broken payload: %v", err)
	}
}

// TestDebeziumAddColumn: an event whose table gained a column in the
// middle (MySQL's ADD COLUMN ... AFTER) is a *SwitchError; Evolve
// re-encodes the state in the new columns (null in the new one), emits
// every key at the record's position after the reset, and the record then
// adds in them, retracting the key's re-expressed row.
func TestDebeziumAddColumn(t *testing.T) {
	tb := testenv.DebeziumCustomers("mysql")
	row := func(id int, first string) testenv.Row {
		return testenv.Row{"id": id, "first_name": first, "last_name": "L", "email": "e"}
	}
	d := newDebezium(t, rec(0, 0, tb.KeyOf(row(1, "a")), tb.Event("c", nil, row(1, "a"), 0, 1)))
	for i, r := range []testenv.Row{row(1, "a"), row(2, "b"), row(3, "c")} {
		if err := d.Add(rec(0, int64(i), tb.KeyOf(r), tb.Event("c", nil, r, int64(i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	d.Flush().Release()
	altered := testenv.DebeziumCustomers("mysql")
	altered.Columns = slices.Insert(altered.Columns, 2, testenv.DebeziumColumn{Name: "nick", Schema: map[string]any{"type": "string", "optional": true}})
	bob := row(2, "bob")
	bob["nick"] = "B"
	r := rec(0, 3, altered.KeyOf(bob), altered.Event("u", nil, bob, 3, 1))
	checkNickSwitch(t, d, r)
}
