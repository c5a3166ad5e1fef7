package kafkafmt

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// jsAllTypes has a property of every JSON Schema type the format maps
// (docs/kafka.md), and the fallbacks to JSON text.
const jsAllTypes = `{
 "$schema": "http://json-schema.org/draft-07/schema#",
 "type": "object",
 "definitions": {
  "addr": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": ["integer", "null"]}}, "required": ["city"]},
  "tree": {"type": "object", "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/tree"}}}}
 },
 "properties": {
  "b": {"type": "boolean"},
  "i": {"type": "integer"},
  "n": {"type": "number"},
  "s": {"type": "string"},
  "date": {"type": "string", "format": "date"},
  "ts": {"type": "string", "format": "date-time"},
  "uuid": {"type": "string", "format": "uuid"},
  "bin": {"type": "string", "contentEncoding": "base64"},
  "opt": {"type": ["string", "null"]},
  "missing": {"type": "integer"},
  "arr": {"type": "array", "items": {"type": ["integer", "null"]}},
  "m": {"type": "object", "additionalProperties": {"type": "integer"}},
  "rec": {"anyOf": [{"type": "null"}, {"$ref": "#/definitions/addr"}]},
  "recs": {"type": "array", "items": {"$ref": "#/definitions/addr"}},
  "color": {"enum": ["RED", "GREEN"]},
  "union": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
  "open": {"type": "object"},
  "tree": {"$ref": "#/definitions/tree"}
 },
 "required": ["b", "i", "n", "s", "date", "ts", "uuid", "bin", "opt", "arr", "m", "recs", "color", "union", "open"]
}`

// jsAllType is jsAllTypes' column type.
const jsAllType = `struct<arr: list<item: int64, nullable>, b: bool, bin: binary, color: utf8, date: date32, i: int64, m: list<entry: struct<key: utf8, value: int64>>, ` +
	`missing: int64, n: float64, open: utf8, opt: utf8, rec: struct<city: utf8, zip: int64>, recs: list<item: struct<city: utf8, zip: int64>>, ` +
	`s: utf8, tree: struct<kids: list<item: utf8, nullable>, name: utf8>, ts: timestamp[us, tz=UTC], union: utf8, uuid: utf8>`

func newJSONSchemaTest(t testing.TB, reg *testenv.Registry, subject string, version int) Format {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewJSONSchema(context.Background(), AvroConfig{Registry: r, Subject: subject, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestJSONSchemaRoundTrip: documents encoded with encoding/json (framed
// by franz-go's sr) decode into every mapped type; Raw re-encodes each
// row to bytes that decode to the same row and that Normal gives for
// the record.
func TestJSONSchemaRoundTrip(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.JSONSerde(t, "all-value", jsAllTypes)
	full := map[string]any{
		"b": true, "i": int64(1) << 60, "n": -2.25, "s": "héllo \"q\" <&>\n", "date": "2026-12-01",
		"ts": "2026-11-30T13:34:56.789123+01:00", "uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "bin": []byte{0, 1, 255},
		"opt": "x", "arr": []any{1, nil, 3}, "m": map[string]any{"b": 2, "a": 1},
		"rec":   map[string]any{"city": "Oslo", "zip": 150},
		"recs":  []any{map[string]any{"city": "A", "zip": nil}, map[string]any{"city": "B", "extra": true}},
		"color": "GREEN", "union": 7, "open": map[string]any{"z": []any{1.5, "x"}, "a": nil},
		"tree":    map[string]any{"name": "root", "kids": []any{map[string]any{"name": "leaf", "kids": []any{}}}},
		"dropped": "not in the schema",
	}
	empty := map[string]any{
		"b": false, "i": 0, "n": 0, "s": "", "date": "1969-12-31", "ts": "1970-01-01T00:00:00Z",
		"uuid": "00000000-0000-0000-0000-000000000000", "bin": []byte{}, "opt": nil, "arr": []any{}, "m": map[string]any{},
		"recs": []any{}, "color": "RED", "union": "seven", "open": map[string]any{},
	}
	want := []map[string]string{{
		"b": "true", "i": "1152921504606846976", "n": "-2.25", "s": "héllo \"q\" <&>\n", "date": "2026-12-01",
		"ts": "2026-11-30 12:34:56.789123Z", "uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "bin": "AAH/",
		"opt": "x", "missing": "NULL", "arr": "[1,null,3]", "m": `[{"key":"a","value":1},{"key":"b","value":2}]`,
		"rec": `{"city":"Oslo","zip":150}`, "recs": `[{"city":"A","zip":null},{"city":"B","zip":null}]`,
		"color": "GREEN", "union": "7", "open": `{"a":null,"z":[1.5,"x"]}`,
		"tree": `{"kids":["{\"kids\":[],\"name\":\"leaf\"}"],"name":"root"}`,
	}, {
		"b": "false", "i": "0", "n": "0", "s": "", "date": "1969-12-31", "ts": "1970-01-01 00:00:00Z",
		"uuid": "00000000-0000-0000-0000-000000000000", "bin": "", "opt": "NULL", "missing": "NULL", "arr": "[]", "m": "[]",
		"rec": "NULL", "recs": "[]", "color": "RED", "union": `"seven"`, "open": "{}", "tree": "NULL",
	}}
	f := newJSONSchemaTest(t, reg, "all-value", 0)
	if got := f.Type().String(); got != jsAllType {
		t.Fatalf("type\n %s\nwant\n %s", got, jsAllType)
	}
	col := f.NewColumn()
	var recs [][]byte
	for _, v := range []map[string]any{full, empty} {
		b := sd.Encode(t, v)
		if err := f.Check(b); err != nil {
			t.Fatalf("check: %v", err)
		}
		recs = append(recs, b)
		col.Append(b)
	}
	col.Append(nil)
	arr := col.Finish()
	defer arr.Release()
	for i, w := range want {
		got := cells(t, arr, i)
		for k, wv := range w {
			if got[k] != wv {
				t.Errorf("row %d property %s = %s, want %s", i, k, got[k], wv)
			}
		}
	}
	if !arr.IsNull(2) {
		t.Errorf("row 2 is not null")
	}
	again := f.NewColumn()
	for i := range 2 {
		raw, err := f.Raw(arr, i)
		if err != nil {
			t.Fatalf("raw %d: %v", i, err)
		}
		if err := f.Check(raw); err != nil {
			t.Fatalf("check raw %d (%s): %v", i, raw[5:], err)
		}
		norm, err := f.(Normalizer).Normal(recs[i])
		if err != nil || string(norm) != string(raw) {
			t.Fatalf("normal of record %d = %s, %v; want Raw's %s", i, norm, err, raw)
		}
		again.Append(raw)
	}
	back := again.Finish()
	defer back.Release()
	if !array.SliceEqual(arr, 0, 2, back, 0, 2) {
		t.Fatalf("raw round trip:\n got %v\nwant %v", back, arr)
	}
}

// TestJSONSchemaScalar: a schema that is not an object is one column of
// its type.
func TestJSONSchemaScalar(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.JSONSerde(t, "n-key", `{"type":"integer"}`)
	f := newJSONSchemaTest(t, reg, "n-key", 0)
	col := f.NewColumn()
	for _, doc := range []string{"42", " 7.0 ", "-1e2"} {
		b := testenv.FrameJSON(sd.ID, doc)
		if err := f.Check(b); err != nil {
			t.Fatalf("check %s: %v", doc, err)
		}
		col.Append(b)
	}
	arr := col.Finish()
	defer arr.Release()
	if arr.DataType().String() != "int64" || arr.String() != "[42 7 -100]" {
		t.Fatalf("column %s %v, want int64 [42 7 -100]", arr.DataType(), arr)
	}
	for _, doc := range []string{"null", `"42"`, "1.5", "1e30"} {
		if err := f.Check(testenv.FrameJSON(sd.ID, doc)); err == nil {
			t.Errorf("document %s checks", doc)
		}
	}
}

const (
	jsOrderV1 = `{"type":"object","properties":{"id":{"type":"integer"},"qty":{"type":"integer"},"old":{"type":"string"}},"required":["id","qty"]}`
	// v2 drops old and adds note (optional).
	jsOrderV2 = `{"type":"object","properties":{"id":{"type":"integer"},"qty":{"type":"integer"},"note":{"type":"string"}},"required":["id","qty"]}`
)

// TestJSONSchemaTwoVersions: documents written with v1 and v2 of a
// subject map by property name into the reader's columns, the latest
// (v2) at start or a pinned v1: a property the reader lacks is dropped,
// one the writer lacks is null.
func TestJSONSchemaTwoVersions(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	v1, v2 := reg.JSONSerde(t, "o-value", jsOrderV1), reg.JSONSerde(t, "o-value", jsOrderV2)
	recs := [][]byte{
		v1.Encode(t, map[string]any{"id": 1, "qty": 2, "old": "o"}),
		v2.Encode(t, map[string]any{"id": 2, "qty": 3, "note": "n"}),
		v1.Encode(t, map[string]any{"id": 3, "qty": 4}),
	}
	for _, tc := range []struct {
		version int
		want    []string
	}{
		{0, []string{`{"id":1,"note":null,"qty":2}`, `{"id":2,"note":"n","qty":3}`, `{"id":3,"note":null,"qty":4}`}},
		{1, []string{`{"id":1,"old":"o","qty":2}`, `{"id":2,"old":null,"qty":3}`, `{"id":3,"old":null,"qty":4}`}},
	} {
		d := avroDec(t, "none", nil, newJSONSchemaTest(t, reg, "o-value", tc.version), "", nil)
		for i, b := range recs {
			if err := d.Add(rec(0, int64(i), []byte("k"), b)); err != nil {
				t.Fatalf("version %d record %d: %v", tc.version, i, err)
			}
		}
		r := d.Flush()
		var got []string
		for _, row := range rows(t, r) {
			got = append(got, strings.Fields(row)[3])
		}
		r.Release()
		if !slices.Equal(got, tc.want) {
			t.Errorf("reader version %d: values\n%s\nwant\n%s", tc.version, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestJSONSchemaVersionConflict: a writer's document whose property has
// another type than the reader's, or that lacks a property the reader
// requires, is a decode error naming the property.
func TestJSONSchemaVersionConflict(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	v1 := reg.JSONSerde(t, "c-value", `{"type":"object","properties":{"id":{"type":"string"}}}`)
	reg.JSONSerde(t, "c-value", `{"type":"object","properties":{"id":{"type":"integer"},"qty":{"type":"integer"}},"required":["qty"]}`)
	f := newJSONSchemaTest(t, reg, "c-value", 0)
	for doc, want := range map[string]string{
		`{"id":"x","qty":1}`: `property id: "x", but the reader schema wants an integer`,
		`{}`:                 `"qty" is missing or null, but the reader schema requires it`,
	} {
		err := f.Check(testenv.FrameJSON(v1.ID, doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}

// TestJSONSchemaUpsertKeys: one key in two spellings (property order,
// whitespace, 1.0 for 1) is one upsert key, also after a state rebuild
// from the rows (Raw).
func TestJSONSchemaUpsertKeys(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	ks := reg.JSONSerde(t, "t-key", `{"type":"object","properties":{"id":{"type":"integer"},"region":{"type":"string"}},"required":["id","region"]}`)
	vs := reg.JSONSerde(t, "t-value", jsOrderV2)
	kf, vf := newJSONSchemaTest(t, reg, "t-key", 0), newJSONSchemaTest(t, reg, "t-value", 0)
	d := avroDec(t, "upsert", kf, vf, "", nil)
	key1 := testenv.FrameJSON(ks.ID, `{"region":"eu","id":1}`)
	key1b := testenv.FrameJSON(ks.ID, ` { "id" : 1.0, "region" : "eu" } `)
	for i, r := range []struct{ k, v []byte }{
		{key1, vs.Encode(t, map[string]any{"id": 1, "qty": 1})},
		{key1b, testenv.FrameJSON(vs.ID, `{"qty":2, "id":1}`)},
	} {
		if err := d.Add(rec(0, int64(i), r.k, r.v)); err != nil {
			t.Fatal(err)
		}
	}
	out := d.Flush()
	defer out.Release()
	want := []string{
		`{"id":1,"region":"eu"} {"id":1,"note":null,"qty":1} @0:0 +1`,
		`{"id":1,"region":"eu"} {"id":1,"note":null,"qty":1} @0:1 -1`,
		`{"id":1,"region":"eu"} {"id":1,"note":null,"qty":2} @0:1 +1`,
	}
	if got := rows(t, out); !slices.Equal(got, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	e := avroDec(t, "upsert", kf, vf, "", nil)
	if err := loadState(e, out); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(rec(0, 2, key1b, nil)); err != nil {
		t.Fatal(err)
	}
	del := e.Flush()
	defer del.Release()
	if g := rows(t, del); len(g) != 1 || g[0] != `{"id":1,"region":"eu"} {"id":1,"note":null,"qty":2} @0:2 -1` {
		t.Fatalf("tombstone after rebuild: %v", g)
	}
}

// TestJSONSchemaDecodeErrorPolicies: a document that does not validate
// against its writer schema, malformed JSON, JSON null, a bad magic byte
// and an unknown schema id under fail, skip and inline.
func TestJSONSchemaDecodeErrorPolicies(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.JSONSerde(t, "t-value", jsOrderV2)
	good := sd.Encode(t, map[string]any{"id": 1, "qty": 5})
	bad := []struct {
		name, msg string
		b         []byte
	}{
		{"invalid", "schema id 1: the document does not validate", sd.Encode(t, map[string]any{"id": "one", "qty": 5})},
		{"missing required", "the document does not validate", sd.Encode(t, map[string]any{"id": 1})},
		{"malformed", "schema id 1: malformed JSON", testenv.FrameJSON(sd.ID, `{"id":1,`)},
		{"null", "JSON null", testenv.FrameJSON(sd.ID, `null`)},
		{"bad magic", "bad magic byte 0x7b", []byte(`{"id":1,"qty":5}`)},
		{"unknown id", "unknown schema id 99", testenv.FrameJSON(99, `{}`)},
	}
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			var counted []string
			d := avroDec(t, "none", nil, newJSONSchemaTest(t, reg, "t-value", 0), policy, func(de *DecodeError, p string) {
				counted = append(counted, de.Msg)
			})
			for off, b := range bad {
				err := d.Add(rec(0, int64(off), []byte("k"), b.b))
				de, ok := errors.AsType[*DecodeError](err)
				switch {
				case policy == PolicyFail && (!ok || de.Offset != int64(off) || !strings.Contains(de.Msg, b.msg)):
					t.Errorf("%s: %v, want a decode error at %d with %q", b.name, err, off, b.msg)
				case policy != PolicyFail && err != nil:
					t.Errorf("%s: %v, want none under %s", b.name, err, policy)
				}
			}
			if err := d.Add(rec(0, int64(len(bad)), []byte("k"), good)); err != nil {
				t.Fatal(err)
			}
			r := d.Flush()
			defer r.Release()
			got := rows(t, r)
			want := []string{`0 6 k {"id":1,"note":null,"qty":5}`}
			if policy == PolicyInline {
				want = nil
				for i := range bad {
					want = append(want, "0 "+string(rune('0'+i))+` k {"decode_error":"`)
				}
				want = append(want, `0 6 k {"decode_error":null,"decoded":{"id":1,"note":null,"qty":5},"raw":null}`)
			}
			if len(got) != len(want) {
				t.Fatalf("rows\n%s\nwant %d", strings.Join(got, "\n"), len(want))
			}
			for i := range want {
				if !strings.HasPrefix(got[i], want[i]) {
					t.Errorf("row %d = %s, want prefix %s", i, got[i], want[i])
				}
				if policy == PolicyInline && i < len(bad) && !strings.Contains(got[i], bad[i].msg) {
					t.Errorf("row %d = %s, want the error %q", i, got[i], bad[i].msg)
				}
			}
			if len(counted) != len(bad) {
				t.Fatalf("counted %d decode errors, want %d: %v", len(counted), len(bad), counted)
			}
		})
	}
}

// TestJSONSchemaNotJSON: a reader subject of another schema type is
// refused when the format is made; records of an Avro schema id are
// decode errors.
func TestJSONSchemaNotJSON(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	avroID := reg.Register(t, "a-value", orderV1)
	reg.JSONSerde(t, "j-value", jsOrderV2)
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewJSONSchema(context.Background(), AvroConfig{Registry: r, Subject: "a-value"}); err == nil || !strings.Contains(err.Error(), "is a AVRO schema, not JSON Schema (use --value-format avro)") {
		t.Fatalf("avro reader subject: %v", err)
	}
	f := newJSONSchemaTest(t, reg, "j-value", 0)
	if err := f.Check(testenv.FrameJSON(avroID, `{}`)); err == nil || !strings.Contains(err.Error(), "is a AVRO schema, not JSON Schema") {
		t.Fatalf("record of an avro id: %v", err)
	}
}

// FuzzJSONSchemaDecode: no input crashes the decoder; whatever Check
// accepts appends, and its Raw checks again.
func FuzzJSONSchemaDecode(f *testing.F) {
	reg := testenv.StartRegistry(f, testenv.RegistryOptions{})
	id := reg.RegisterJSON(f, "all-value", jsAllTypes)
	f.Add([]byte{})
	f.Add(testenv.FrameJSON(id, `{}`))
	f.Add(testenv.FrameJSON(id, `{"b":true,"i":1,"n":1,"s":"","date":"2020-01-01","ts":"2020-01-01T00:00:00Z","uuid":"7c9e6679-7425-40de-944b-e07fc1f90ae7","bin":"","opt":null,"arr":[],"m":{},"recs":[],"color":"RED","union":1,"open":{}}`))
	f.Add(testenv.FrameJSON(99, `1`))
	fm := newJSONSchemaTest(f, reg, "all-value", 0)
	f.Fuzz(func(t *testing.T, b []byte) {
		col := fm.NewColumn()
		if fm.Check(b) != nil {
			return
		}
		col.Append(b)
		arr := col.Finish()
		defer arr.Release()
		raw, err := fm.Raw(arr, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := fm.Check(raw); err != nil {
			t.Fatalf("raw %s of %q does not check: %v", raw, b, err)
		}
	})
}
