package kafkafmt

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// dbzAvro produces a DebeziumTable's change events as AvroConverter
// does: the key and value schemas registered, records framed by franz-go's
// sr.Serde around hamba/avro's encoding.
type dbzAvro struct {
	tb         *testenv.DebeziumTable
	key, value *testenv.AvroSerde
}

func newDbzAvro(t testing.TB, reg *testenv.Registry, tb *testenv.DebeziumTable, topic string) *dbzAvro {
	t.Helper()
	return &dbzAvro{tb: tb, key: reg.Serde(t, topic+"-key", tb.AvroKeySchema()), value: reg.Serde(t, topic+"-value", tb.AvroValueSchema())}
}

func (p *dbzAvro) event(t testing.TB, part int32, off int64, op string, before, after testenv.Row) *kgo.Record {
	t.Helper()
	r := after
	if r == nil {
		r = before
	}
	var key []byte
	if r != nil {
		key = p.key.Encode(t, p.tb.AvroKey(r))
	}
	return rec(part, off, key, p.value.Encode(t, p.tb.AvroEvent(op, before, after, off, 1)))
}

// avroChanges is the avro format of the debezium envelope.
func avroChanges(t testing.TB, reg *testenv.Registry) Format {
	t.Helper()
	f, err := NewAvro(context.Background(), AvroConfig{Registry: testRegistry(t, reg), Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// newDebeziumWith is a debezium decoder of key format kf and value format
// vf, its columns from first, with the decode-error policy.
func newDebeziumWith(t *testing.T, kf, vf Format, first *kgo.Record, policy string) Decoder {
	t.Helper()
	cols, keys, err := DebeziumColumns(kf, vf, first)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(Config{Envelope: "debezium", Key: kf, Value: vf, Collection: "t", Source: "kafka.t", Columns: cols, KeyColumns: keys, OnDecodeError: policy})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// avroTypesTable is typesTable with a map of int32 keys (AvroConverter's
// array of MapEntry records; JsonConverter's [[k, v], ...]).
func avroTypesTable() (*testenv.DebeziumTable, []testenv.Row) {
	tb := typesTable()
	tb.Columns = append(tb.Columns, testenv.DebeziumColumn{Name: "mi", Schema: map[string]any{"type": "map", "optional": true,
		"keys": map[string]any{"type": "int32", "optional": false}, "values": map[string]any{"type": "string", "optional": true}}})
	rs := typesRows()
	rs[0]["mi"] = []any{[]any{2, "b"}, []any{1, nil}}
	rs[2]["mi"] = []any{}
	return tb, rs
}

// TestDebeziumAvroTypes: the types table's columns through AvroConverter's
// Avro get the same Arrow types and the same values as through
// JsonConverter's JSON, and the same encoded rows: a state rebuilt from
// the JSON path's output sees the Avro rows as unchanged and retracts
// exactly them.
func TestDebeziumAvroTypes(t *testing.T) {
	tb, rs := avroTypesTable()
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	p := newDbzAvro(t, reg, tb, "types")
	f := avroChanges(t, reg)
	jd := newDebeziumWith(t, jsonFormat{}, jsonFormat{}, rec(0, 0, tb.KeyOf(rs[0]), tb.Event("r", nil, rs[0], 0, 1)), "")
	ad := newDebeziumWith(t, f, f, p.event(t, 0, 0, "r", nil, rs[0]), "")
	if !jd.Schema().Equal(ad.Schema()) {
		t.Fatalf("avro columns\n%s\nwant the json ones\n%s", ad.Schema(), jd.Schema())
	}
	for i, r := range rs {
		if err := jd.Add(rec(0, int64(i), tb.KeyOf(r), tb.Event("c", nil, r, int64(i), 1))); err != nil {
			t.Fatal(err)
		}
		if err := ad.Add(p.event(t, 0, int64(i), "c", nil, r)); err != nil {
			t.Fatal(err)
		}
	}
	jout, aout := jd.Flush(), ad.Flush()
	defer jout.Release()
	defer aout.Release()
	jrows, arows := rows(t, jout), rows(t, aout)
	if !slices.Equal(jrows, arows) || len(arows) != len(rs) {
		t.Fatalf("avro rows\n%q\nwant the json ones\n%q", arows, jrows)
	}
	if !strings.Contains(arows[0], "123.456") || !strings.Contains(arows[0], "[2,1]") {
		t.Fatalf("row %s lacks the decimal or the map's keys in order", arows[0])
	}

	again := newDebeziumWith(t, f, f, p.event(t, 0, 0, "r", nil, rs[0]), "")
	if err := loadState(again, jout); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if err := again.Add(p.event(t, 0, int64(10+i), "u", nil, r)); err != nil {
			t.Fatal(err)
		}
	}
	if r := again.Flush(); r != nil {
		t.Fatalf("the avro rows changed a state rebuilt from the json rows: %v", sortedRows(t, r))
	}
	for i, r := range rs {
		if err := again.Add(p.event(t, 0, int64(20+i), "d", r, nil)); err != nil {
			t.Fatal(err)
		}
	}
	del := again.Flush()
	defer del.Release()
	if _, _, diffs, _ := pipe.SplitData(del); del.NumRows() != int64(len(rs)) || diffs.Value(0) != -1 {
		t.Fatalf("deletes: %q", rows(t, del))
	}
}

// TestDebeziumAvroLogicalTypes: Avro's own logical types (a writer that
// is not AvroConverter) map as their Connect and Debezium equivalents.
func TestDebeziumAvroLogicalTypes(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	row := `{"type":"record","name":"Value","namespace":"x","fields":[
		{"name":"id","type":"int"},
		{"name":"d","type":["null",{"type":"int","logicalType":"date"}]},
		{"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
		{"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
		{"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"ltm","type":{"type":"long","logicalType":"local-timestamp-millis"}},
		{"name":"ltu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
		{"name":"u","type":{"type":"string","logicalType":"uuid"}},
		{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}},
		{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
		{"name":"fx","type":{"type":"fixed","name":"F","size":2}}]}`
	value := `{"type":"record","name":"Envelope","namespace":"x","fields":[
		{"name":"before","type":["null",` + row + `],"default":null},
		{"name":"after","type":["null","x.Value"],"default":null},
		{"name":"op","type":"string"}]}`
	key := `{"type":"record","name":"Key","namespace":"x","fields":[{"name":"id","type":"int"}]}`
	kid, vid := reg.Register(t, "x-key", key), reg.Register(t, "x-value", value)
	var serde sr.Serde
	serde.Register(kid, map[string]any{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(avro.MustParse(key), v) }))
	serde.Register(vid, []any{}, sr.EncodeFn(func(v any) ([]byte, error) {
		return avro.Marshal(must1(testenv.ParseAvro(value)), v.([]any)[0])
	}))
	k, _ := serde.Encode(map[string]any{"id": 1})
	v, err := serde.Encode([]any{map[string]any{"before": nil, "op": "c", "after": map[string]any{"x.Value": map[string]any{
		"id": 1, "d": nil, "tm": int(1000), "tu": int64(2000), "tsm": int64(1614834367123), "tsu": int64(1614834367123456),
		"ltm": int64(1614834367123), "ltu": int64(1614834367123456), "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"dec": big.NewRat(-3, 2), "e": "B", "fx": [2]byte{1, 2}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cols, _, err := DebeziumColumns(avroChanges(t, reg), avroChanges(t, reg), rec(0, 0, k, v))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"id int32", "d date32", "tm time32[ms]", "tu time64[us]", "tsm timestamp[ms, tz=UTC]", "tsu timestamp[us, tz=UTC]",
		"ltm timestamp[ms]", "ltu timestamp[us]", "u fixed_size_binary[16]", "dec decimal(9, 3)", "e utf8", "fx binary"}
	var got []string
	for _, c := range cols {
		got = append(got, c.Name+" "+c.Type.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("columns %q, want %q", got, want)
	}
	d := newDebeziumWith(t, avroChanges(t, reg), avroChanges(t, reg), rec(0, 0, k, v), "")
	if err := d.Add(rec(0, 0, k, v)); err != nil {
		t.Fatal(err)
	}
	out := d.Flush()
	defer out.Release()
	if r := rows(t, out); len(r) != 1 || !strings.Contains(r[0], " -1.5 B ") {
		t.Fatalf("rows %q", r)
	}
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestDebeziumAvroDecodeErrors: records that do not decode follow the
// policy at their offset (fail: a DecodeError; skip: nothing added),
// never a crash; a table that gains a column is a switch, one that loses
// one a definite error.
func TestDebeziumAvroDecodeErrors(t *testing.T) {
	tb := testenv.DebeziumCustomers("postgresql")
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	p := newDbzAvro(t, reg, tb, "customers")
	anne := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
	good := p.event(t, 0, 0, "c", nil, anne)
	altered := testenv.DebeziumCustomers("postgresql")
	altered.Columns = altered.Columns[:3]
	pa := newDbzAvro(t, reg, altered, "altered")
	added := testenv.DebeziumCustomers("postgresql")
	added.Columns = append(added.Columns, testenv.DebeziumColumn{Name: "phone", Schema: map[string]any{"type": "string", "optional": true}})
	pb := newDbzAvro(t, reg, added, "added")
	unknown := slices.Clone(good.Value)
	unknown[4] = 99
	badOp := p.value.Encode(t, tb.AvroEvent("x", nil, anne, 1, 1))
	cases := []struct {
		name       string
		key, value []byte
		want       string
	}{
		{"unknown id", good.Key, unknown, "unknown schema id 99"},
		{"bad magic", good.Key, append([]byte{1}, good.Value[1:]...), "bad magic byte 0x01"},
		{"short header", good.Key, good.Value[:3], "truncated: 3 bytes"},
		{"truncated", good.Key, good.Value[:len(good.Value)-3], "truncated"},
		{"trailing bytes", good.Key, append(slices.Clone(good.Value), 0, 0), "2 bytes after the record"},
		{"truncated key", good.Key[:6], good.Value, "key (format avro)"},
		{"key schema as value", good.Key, good.Key, "no op field"},
		{"bad op", good.Key, badOp, `op "x"`},
		{"altered", pa.key.Encode(t, altered.AvroKey(anne)), pa.value.Encode(t, altered.AvroEvent("c", nil, testenv.Row{"id": 1004, "first_name": "A", "last_name": "B"}, 1, 1)),
			"cannot follow (column email is gone)"},
	}
	for _, c := range cases {
		for _, policy := range []string{PolicyFail, PolicySkip} {
			t.Run(c.name+"/"+policy, func(t *testing.T) {
				var seen []*DecodeError
				f := avroChanges(t, reg)
				cols, keys, err := DebeziumColumns(f, f, good)
				if err != nil {
					t.Fatal(err)
				}
				d, err := NewDecoder(Config{Envelope: "debezium", Key: f, Value: f, Collection: "t", Source: "kafka.t", Columns: cols, KeyColumns: keys,
					OnDecodeError: policy, DecodeErrors: func(de *DecodeError, _ string) { seen = append(seen, de) }})
				if err != nil {
					t.Fatal(err)
				}
				err = d.Add(rec(2, 17, c.key, c.value))
				if len(seen) != 1 || seen[0].Partition != 2 || seen[0].Offset != 17 || !strings.Contains(seen[0].Msg, c.want) {
					t.Fatalf("decode errors %v, want one at 2/17 containing %q", seen, c.want)
				}
				var de *DecodeError
				if policy == PolicyFail && !errors.As(err, &de) || policy == PolicySkip && err != nil {
					t.Fatalf("%s: error %v", policy, err)
				}
				if d.Rows() != 0 {
					t.Fatalf("%d rows added", d.Rows())
				}
				if err := d.Add(rec(2, 18, good.Key, good.Value)); err != nil || d.Rows() != 1 {
					t.Fatalf("a good record after it: %v, %d rows", err, d.Rows())
				}
			})
		}
	}
	d := newDebeziumWith(t, avroChanges(t, reg), avroChanges(t, reg), good, "")
	phone := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org", "phone": "555"}
	err := d.Add(pb.event(t, 0, 3, "u", nil, phone))
	if sw, ok := errors.AsType[*SwitchError](err); !ok || !strings.Contains(sw.Msg, "gained columns") {
		t.Fatalf("a record with a column added: %v, want a switch", err)
	}
}

// BenchmarkDecodeDebeziumAvro is BenchmarkDecodeDebezium over
// AvroConverter's records.
func BenchmarkDecodeDebeziumAvro(b *testing.B) {
	tb := testenv.DebeziumCustomers("postgresql")
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	p := newDbzAvro(b, reg, tb, "customers")
	var recs []*kgo.Record
	for i := range 10_000 {
		r := testenv.Row{"id": i % 1000, "first_name": fmt.Sprint("name ", i), "last_name": "Kretchmar", "email": "annek@noanswer.org"}
		recs = append(recs, p.event(b, 0, int64(i), "u", nil, r))
	}
	benchDebeziumDecode(b, avroChanges(b, reg), recs)
}

// TestDebeziumAvroCorrupt: a record of the types table with each byte
// replaced by each of a few values, and cut at each length, never
// crashes the decoder: it decodes (to a row of the columns) or is
// skipped as a decode error; and a VariableScaleDecimal's scale too
// large to write out is a decode error.
func TestDebeziumAvroCorrupt(t *testing.T) {
	tb, rs := avroTypesTable()
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	p := newDbzAvro(t, reg, tb, "types")
	good := p.event(t, 0, 0, "c", nil, rs[0])
	skipped := 0
	d := newDebeziumWith(t, avroChanges(t, reg), avroChanges(t, reg), good, PolicySkip)
	try := func(v []byte) {
		before := d.Rows()
		if err := d.Add(rec(0, 1, good.Key, v)); err != nil {
			t.Fatalf("skip policy: %v", err)
		}
		if d.Rows() == before {
			skipped++
		}
		if r := d.Flush(); r != nil {
			r.Release()
		}
	}
	for i := range good.Value {
		for _, b := range []byte{0x00, 0x01, 0x7f, 0x80, 0xff} {
			v := slices.Clone(good.Value)
			v[i] = b
			try(v)
		}
		try(good.Value[:i])
	}
	if skipped == 0 {
		t.Fatal("no corrupt record was a decode error")
	}
	huge := rs[0]
	huge["vsd"] = map[string]any{"scale": 1 << 30, "value": "AeJA"}
	d = newDebeziumWith(t, avroChanges(t, reg), avroChanges(t, reg), good, "")
	if err := d.Add(p.event(t, 0, 2, "c", nil, huge)); err == nil || !strings.Contains(err.Error(), "scale 1073741824 is beyond") {
		t.Fatalf("a scale of 2^30: %v", err)
	}
}
