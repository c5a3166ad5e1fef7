package kafkafmt

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/hamba/avro/v2"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// allTypes has a field of every Avro type the format maps (docs/kafka.md).
const allTypes = `{"type":"record","name":"All","namespace":"t","fields":[
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"s","type":"string"},
 {"name":"by","type":"bytes"},
 {"name":"opt","type":["null","string"],"default":null},
 {"name":"u","type":["null","long","string"]},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"decf","type":{"type":"fixed","name":"DF","size":8,"logicalType":"decimal","precision":12,"scale":3}},
 {"name":"date","type":{"type":"int","logicalType":"date"}},
 {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsus","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"uuid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
 {"name":"fx","type":{"type":"fixed","name":"F4","size":4}},
 {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"arr","type":{"type":"array","items":["null","int"]}},
 {"name":"m","type":{"type":"map","values":"long"}},
 {"name":"rec","type":["null",{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"},{"name":"zip","type":["null","int"]}]}]},
 {"name":"recs","type":{"type":"array","items":"Addr"}}
]}`

func newAvroTest(t testing.TB, reg *testenv.Registry, subject string, version int) Format {
	t.Helper()
	f, err := NewAvro(context.Background(), AvroConfig{Registry: testRegistry(t, reg), Subject: subject, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// cells renders row i of a struct column field by field.
func cells(t *testing.T, arr arrow.Array, i int) map[string]string {
	t.Helper()
	sa := arr.(*array.Struct)
	out := map[string]string{}
	for k, f := range sa.DataType().(*arrow.StructType).Fields() {
		if sa.Field(k).IsNull(i) {
			out[f.Name] = "NULL"
			continue
		}
		out[f.Name] = sa.Field(k).ValueStr(i)
	}
	return out
}

func TestAvroRoundTrip(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.Serde(t, "all-value", allTypes)
	ts := time.Date(2026, 11, 30, 12, 34, 56, 789123000, time.UTC)
	full := map[string]any{
		"b": true, "i": -7, "l": int64(1) << 40, "f": float32(1.5), "d": -2.25, "s": "héllo", "by": []byte{0, 1, 255},
		"opt": "x", "u": map[string]any{"string": "s"},
		"dec": big.NewRat(-12345, 100), "decf": big.NewRat(987654321, 1000),
		"date": time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "tms": 13*time.Hour + 5*time.Millisecond, "tus": 25*time.Second + 7*time.Microsecond,
		"tsms": ts.Truncate(time.Millisecond), "tsus": ts.Truncate(time.Microsecond),
		"uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "dur": avro.LogicalDuration{Months: 1, Days: 2, Milliseconds: 3},
		"fx": [4]byte{1, 2, 3, 4}, "e": "GREEN", "arr": []any{1, nil, 3}, "m": map[string]any{"b": int64(2), "a": int64(1)},
		"rec":  map[string]any{"t.Addr": map[string]any{"city": "Oslo", "zip": map[string]any{"int": 150}}},
		"recs": []any{map[string]any{"city": "A", "zip": nil}},
	}
	empty := map[string]any{
		"b": false, "i": 0, "l": int64(0), "f": float32(0), "d": 0.0, "s": "", "by": []byte{},
		"opt": nil, "u": map[string]any{"long": int64(-1)},
		"dec": big.NewRat(0, 1), "decf": big.NewRat(-1, 1000),
		"date": time.Unix(0, 0).UTC(), "tms": time.Duration(0), "tus": time.Duration(0),
		"tsms": time.UnixMilli(-1).UTC(), "tsus": time.UnixMicro(0).UTC(),
		"uuid": "00000000-0000-0000-0000-000000000000", "dur": avro.LogicalDuration{},
		"fx": [4]byte{}, "e": "RED", "arr": []any{}, "m": map[string]any{}, "rec": nil, "recs": []any{},
	}
	want := []map[string]string{{
		"b": "true", "i": "-7", "l": "1099511627776", "f": "1.5", "d": "-2.25", "s": "héllo", "by": "AAH/",
		"opt": "x", "u": `{"long":null,"string":"s"}`, "dec": "-123.45", "decf": "987654.321",
		"date": "2026-12-01", "tms": "13:00:00.005", "tus": "00:00:25.000007",
		"tsms": "2026-11-30 12:34:56.789Z", "tsus": "2026-11-30 12:34:56.789123Z",
		"uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "dur": `{"months":1,"days":2,"nanoseconds":3000000}`,
		"fx": "AQIDBA==", "e": "GREEN", "arr": "[1,null,3]", "m": `[{"key":"a","value":1},{"key":"b","value":2}]`,
		"rec": `{"city":"Oslo","zip":150}`, "recs": `[{"city":"A","zip":null}]`,
	}, {
		"b": "false", "i": "0", "l": "0", "f": "0", "d": "0", "s": "", "by": "",
		"opt": "NULL", "u": `{"long":-1,"string":null}`, "dec": "0", "decf": "-0.001",
		"date": "1970-01-01", "tms": "00:00:00.000", "tus": "00:00:00.000000",
		"tsms": "1969-12-31 23:59:59.999Z", "tsus": "1970-01-01 00:00:00Z",
		"uuid": "00000000-0000-0000-0000-000000000000", "dur": `{"months":0,"days":0,"nanoseconds":0}`,
		"fx": "AAAAAA==", "e": "RED", "arr": "[]", "m": "[]", "rec": "NULL", "recs": "[]",
	}}
	f := newAvroTest(t, reg, "all-value", 0)
	col := f.NewColumn()
	for _, v := range []map[string]any{full, empty} {
		b := sd.Encode(t, v)
		if err := f.Check(b); err != nil {
			t.Fatalf("check: %v", err)
		}
		col.Append(b)
	}
	col.Append(nil)
	arr := col.Finish()
	defer arr.Release()
	for i, w := range want {
		got := cells(t, arr, i)
		for k, wv := range w {
			if got[k] != wv {
				t.Errorf("row %d field %s = %s, want %s", i, k, got[k], wv)
			}
		}
	}
	if !arr.IsNull(2) {
		t.Errorf("row 2 is not null")
	}
	// Raw re-encodes to bytes that decode to the same element (the upsert
	// state rebuild depends on it).
	checkRaw(t, f, arr, 2)
	if !strings.Contains(f.Type().String(), "struct<") {
		t.Fatalf("type %s", f.Type())
	}
}
