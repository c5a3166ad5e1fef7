package kafkafmt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// dbzRegistryFormats are the registry formats of the debezium envelope,
// each with a name for subtests: protobuf without Debezium's logical
// names (as ProtobufConverter writes it), protobuf with them in the
// field params, json-schema.
var dbzRegistryFormats = []struct {
	name, format string
	names        bool
}{{"protobuf", "protobuf", false}, {"protobuf-names", "protobuf", true}, {"json-schema", "json-schema", false}}

// dbzFormats returns the key and value formats of topic on reg.
func dbzFormats(t *testing.T, reg *testenv.Registry, format, topic string) (ChangeFormat, ChangeFormat) {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	var out [2]ChangeFormat
	for i, role := range []string{"key", "value"} {
		cfg := AvroConfig{Registry: r, Subject: topic + "-" + role}
		var f Format
		if format == "protobuf" {
			f, err = NewProtobuf(context.Background(), ProtobufConfig(cfg))
		} else {
			f, err = NewJSONSchema(context.Background(), cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		out[i] = f.(ChangeFormat)
	}
	return out[0], out[1]
}

// rowColumns splits an encoded row of s into its columns' bytes.
func rowColumns(t *testing.T, s *RowSchema, row []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	pos := 0
	for _, f := range s.Fields {
		end, err := rowValue(f.Type, row, pos, nil)
		if err != nil {
			t.Fatalf("column %s: %v", f.Name, err)
		}
		out[f.Name] = row[pos:end]
		pos = end
	}
	if pos != len(row) {
		t.Fatalf("row has %d bytes after its columns", len(row)-pos)
	}
	return out
}

// TestDebeziumRegistryTypes: over Protobuf and JSON Schema, every column
// of the debezium types table has the JSON path's Arrow type and value
// where the registered schema says the type (JSON Schema: every one;
// Protobuf with connect.name params: every one; Protobuf as
// ProtobufConverter writes it: Debezium's logical names are lost, so
// those columns are the integers and strings under them, with the same
// values; a null repeated field or map is [], which Protobuf cannot tell
// from null); a writer schema's rows have one *RowSchema; and the rows
// round-trip through the store's form.
func TestDebeziumRegistryTypes(t *testing.T) {
	tb := typesTable()
	full := testenv.Row{"id": 1, "i8": -8, "i16": -1600, "i64": int64(-9007199254740993), "f32": 1.5, "f64": -2.25, "b": true,
		"s": "héllo \"q\"\n", "by": "AAEC/w==", "d": 19000, "t": 3723004, "mt": int64(3723004005), "nt": int64(3723004005006),
		"ts": int64(1614834367123), "mts": int64(1614834367123456), "nts": int64(1614834367123456789), "zts": "2021-03-04T06:06:07.123456+01:00",
		"cd": -1, "ct": 1000, "cts": int64(1614834367000), "dec": "MDk=", "vsd": map[string]any{"scale": 3, "value": "AeJA"},
		"u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "js": `{"a": [1, 2]}`, "arr": []any{1, -2, 3},
		"m": map[string]any{"b": 2, "a": 7}, "geo": map[string]any{"x": 1.25, "y": -3}}
	nulls := testenv.Row{"id": 2}
	neg := testenv.Row{"id": 3, "dec": "/w==", "vsd": map[string]any{"scale": 0, "value": "/g=="}, "arr": []any{}, "m": map[string]any{}}
	rowsIn := []testenv.Row{full, nulls, neg}
	// What Protobuf without names says instead of the JSON path's type.
	unnamed := map[string]string{"d": "int32", "t": "int32", "mt": "int64", "nt": "int64", "ts": "int64", "mts": "int64", "nts": "int64",
		"zts": "utf8", "u": "utf8"}
	for _, fc := range dbzRegistryFormats {
		t.Run(fc.name, func(t *testing.T) {
			reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
			s := reg.DebeziumSerde(fc.format, "types", tb)
			s.Names = fc.names
			var keys, vals [][]byte
			for i, r := range rowsIn {
				keys, vals = append(keys, s.Key(t, r)), append(vals, s.Event(t, "c", nil, r, int64(i), 1))
			}
			kf, vf := dbzFormats(t, reg, fc.format, "types")
			var lastSchema *RowSchema
			for i, r := range rowsIn {
				var je, e RowEncoder
				jch, err := jsonFormat{}.DecodeChange(tb.Event("c", nil, r, int64(i), 1), &je)
				if err != nil {
					t.Fatal(err)
				}
				ch, err := vf.DecodeChange(vals[i], &e)
				if err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
				if ch.Op != 'c' || !ch.After {
					t.Fatalf("row %d: op %c after %v", i, ch.Op, ch.After)
				}
				if lastSchema != nil && ch.Schema != lastSchema {
					t.Errorf("row %d: another *RowSchema for the same writer schema", i)
				}
				lastSchema = ch.Schema
				if len(ch.Schema.Fields) != len(jch.Schema.Fields) {
					t.Fatalf("columns (%s), JSON path (%s)", ch.Schema, jch.Schema)
				}
				got, want := rowColumns(t, ch.Schema, e.Row()), rowColumns(t, jch.Schema, je.Row())
				for j, f := range ch.Schema.Fields {
					jf := jch.Schema.Fields[j]
					if f.Name != jf.Name {
						t.Fatalf("column %d is %s, JSON path %s", j, f.Name, jf.Name)
					}
					wantType := jf.Type.String()
					if u, ok := unnamed[f.Name]; ok && fc.format == "protobuf" && !fc.names {
						wantType = u
					}
					if f.Type.String() != wantType {
						t.Errorf("column %s: %s, want %s", f.Name, f.Type, wantType)
					}
					switch {
					case wantType != jf.Type.String() && (f.Name == "zts" || f.Name == "u"):
						// The string as Debezium wrote it.
						if r[f.Name] != nil && !bytes.HasSuffix(got[f.Name], []byte(r[f.Name].(string))) {
							t.Errorf("row %d column %s: %q, want the string %v", i, f.Name, got[f.Name], r[f.Name])
						}
					case fc.format == "protobuf" && bytes.Equal(want[f.Name], []byte{0}) && bytes.Equal(got[f.Name], []byte{1, 0}):
						// A repeated field or map has no null: absent is [].
					case !bytes.Equal(got[f.Name], want[f.Name]):
						// Integers under a lost name encode as the JSON path's
						// date, time or timestamp does.
						t.Errorf("row %d column %s: %x, JSON path %x", i, f.Name, got[f.Name], want[f.Name])
					}
				}
				var jk, k RowEncoder
				jks, err := jsonFormat{}.DecodeKey(tb.KeyOf(r), &jk)
				if err != nil {
					t.Fatal(err)
				}
				ks, err := kf.DecodeKey(keys[i], &k)
				if err != nil {
					t.Fatal(err)
				}
				if !ks.Equal(jks) || !bytes.Equal(k.Row(), jk.Row()) {
					t.Errorf("row %d key (%s) %x, JSON path (%s) %x", i, ks, k.Row(), jks, jk.Row())
				}
			}

			// Through the envelope, and back from the store's form.
			first := rec(0, 0, keys[0], vals[0])
			d := newDebeziumWith(t, kf, vf, first, "")
			for i := range rowsIn {
				if err := d.Add(rec(0, int64(i), keys[i], vals[i])); err != nil {
					t.Fatal(err)
				}
			}
			out := d.Flush()
			defer out.Release()
			if out.NumRows() != 3 {
				t.Fatalf("%d rows", out.NumRows())
			}
			again := newDebeziumWith(t, kf, vf, first, "")
			if err := loadState(again, out); err != nil {
				t.Fatal(err)
			}
			for i, r := range rowsIn {
				if err := again.Add(rec(0, int64(10+i), keys[i], s.Event(t, "u", nil, r, int64(10+i), 1))); err != nil {
					t.Fatal(err)
				}
			}
			if r := again.Flush(); r != nil {
				t.Fatalf("the same rows again after a rebuild changed the collection: %v", sortedRows(t, r))
			}
			for i, r := range rowsIn {
				if err := again.Add(rec(0, int64(20+i), keys[i], s.Event(t, "d", r, nil, int64(20+i), 1))); err != nil {
					t.Fatal(err)
				}
			}
			if got := sortedRows(t, again.Flush()); len(got) != 3 || !strings.HasSuffix(got[0], "-1") {
				t.Fatalf("deletes: %v", got)
			}
		})
	}
}

// TestDebeziumRegistryAddColumn: over Protobuf and JSON Schema, a new
// registered value version with a column added in the middle is a
// *SwitchError; Evolve re-expresses the state (null in the new column);
// the record then adds in the new columns. A version without a column is
// a DecodeError at its offset.
func TestDebeziumRegistryAddColumn(t *testing.T) {
	for _, fc := range []int{0, 2} {
		fc := dbzRegistryFormats[fc]
		t.Run(fc.name, func(t *testing.T) {
			reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
			tb := testenv.DebeziumCustomers("mysql")
			s := reg.DebeziumSerde(fc.format, "cust", tb)
			row := func(id int, first string) testenv.Row {
				return testenv.Row{"id": id, "first_name": first, "last_name": "L", "email": "e"}
			}
			var recs []*kgo.Record
			for i, r := range []testenv.Row{row(1, "a"), row(2, "b"), row(3, "c")} {
				recs = append(recs, rec(0, int64(i), s.Key(t, r), s.Event(t, "c", nil, r, int64(i), 1)))
			}
			kf, vf := dbzFormats(t, reg, fc.format, "cust")
			d := newDebeziumWith(t, kf, vf, recs[0], "")
			for _, r := range recs {
				if err := d.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			d.Flush().Release()
			tb.Columns = slices.Insert(tb.Columns, 2, testenv.DebeziumColumn{Name: "nick", Schema: map[string]any{"type": "string", "optional": true}})
			bob := row(2, "bob")
			bob["nick"] = "B"
			r := rec(0, 3, s.Key(t, bob), s.Event(t, "u", nil, bob, 3, 1))
			checkNickSwitch(t, d, r)
			// A version that drops a column: a definite error at its offset.
			tb.Columns = slices.DeleteFunc(tb.Columns, func(c testenv.DebeziumColumn) bool { return c.Name == "email" })
			carl := testenv.Row{"id": 4, "first_name": "c", "last_name": "L", "nick": "C"}
			var de *DecodeError
			if err := d.Add(rec(0, 4, s.Key(t, carl), s.Event(t, "c", nil, carl, 4, 1))); !errors.As(err, &de) || de.Offset != 4 || !strings.Contains(de.Msg, "column email is gone") {
				t.Fatalf("a dropped column: %v, want a DecodeError at offset 4", de)
			}
		})
	}
}

// checkNickSwitch checks the ADD COLUMN of TestDebeziumAddColumn: r, bob
// (id 2) with nick B, on a state of ids 1-3 (a, b, c) whose columns gain
// nick after first_name, is a *SwitchError; Evolve re-expresses the state
// with nick null at r's offset 3; r then replaces bob's row.
func checkNickSwitch(t *testing.T, d Decoder, r *kgo.Record) {
	t.Helper()
	err := d.Add(r)
	if _, ok := errors.AsType[*SwitchError](err); !ok {
		t.Fatalf("an added column: %v, want a *SwitchError", err)
	}
	var got []string
	var schema *arrow.Schema
	err = must[Evolver](d).Evolve(0, 3, func(s *arrow.Schema) error { schema = s; return nil }, func(rec arrow.Record) error {
		defer rec.Release()
		got = append(got, sortedRows(t, rec)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range schema.Fields() {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "id,first_name,nick,last_name,email" {
		t.Fatalf("new columns %v", names)
	}
	if want := []string{"1 a null L e @0:3 +1", "2 b null L e @0:3 +1", "3 c null L e @0:3 +1"}; !slices.Equal(got, want) {
		t.Fatalf("re-expressed state:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := d.Add(r); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedRows(t, d.Flush()), []string{"2 b null L e @0:3 -1", "2 bob B L e @0:3 +1"}; !slices.Equal(got, want) {
		t.Fatalf("the record after the switch: %v, want %v", got, want)
	}
}

// TestDebeziumRegistryDecodeErrors: over Protobuf and JSON Schema,
// records that do not decode are a DecodeError at their offset naming
// what is wrong, add nothing, and are dropped under skip; random
// corruptions of valid records never crash the decoder.
func TestDebeziumRegistryDecodeErrors(t *testing.T) {
	for _, fc := range []int{0, 2} {
		fc := dbzRegistryFormats[fc]
		t.Run(fc.name, func(t *testing.T) {
			reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
			tb := testenv.DebeziumCustomers("postgresql")
			s := reg.DebeziumSerde(fc.format, "cust", tb)
			anne := testenv.Row{"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
			other := testenv.Row{"id": 1005, "first_name": "A", "last_name": "B", "email": "c"}
			key, val := s.Key(t, anne), s.Event(t, "c", nil, anne, 1, 1)
			// A registered schema that is not a change event, and one
			// with an op that is not Debezium's.
			var notEvent, badOp, corrupt, invalid []byte
			if fc.format == "protobuf" {
				ps := reg.ProtoSerde(t, "other", `syntax = "proto3"; message Row { int32 id = 1; }`)
				m := ps.New(t, "Row")
				m.Set(m.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfInt32(7))
				notEvent = ps.Encode(t, m)
				badOp = bytes.Replace(val, []byte{0x22, 0x01, 'c'}, []byte{0x22, 0x01, 'x'}, 1) // op (field 4) "c" -> "x"
				corrupt = append(slices.Clone(val[:6]), 0xff, 0xff, 0xff)
				invalid = corrupt
			} else {
				id := reg.RegisterJSON(t, "other", `{"type": "object", "properties": {"id": {"type": "integer"}}}`)
				notEvent = testenv.FrameJSON(id, `{"id": 7}`)
				badOp = bytes.Replace(val, []byte(`"op":"c"`), []byte(`"op":"x"`), 1)
				corrupt = append(slices.Clone(val[:5]), `{"before": `...)
				invalid = bytes.Replace(val, []byte(`"id":1004`), []byte(`"id":"x"`), 1)
			}
			if bytes.Equal(badOp, val) {
				t.Fatal("the op was not replaced")
			}
			cases := []struct {
				name       string
				key, value []byte
				want       string
			}{
				{"truncated", key, val[:3], "truncated"},
				{"bad magic", key, append([]byte{1}, val[1:]...), "bad magic byte"},
				{"unknown id", key, append([]byte{0, 0, 0, 0, 99}, val[5:]...), "unknown schema id 99"},
				{"corrupt", key, corrupt, "value (format " + fc.format + ")"},
				{"invalid", key, invalid, "value (format " + fc.format + ")"},
				{"not an event", key, notEvent, "op"},
				{"bad op", key, badOp, `op "x"`},
				{"bad key", val, val, "the key's columns changed"},
				{"corrupt key", corrupt, val, "key (format " + fc.format + ")"},
				{"key mismatch", s.Key(t, other), val, "does not match"},
				{"null key", nil, val, "null key"},
			}
			kf, vf := dbzFormats(t, reg, fc.format, "cust")
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					d := newDebeziumWith(t, kf, vf, rec(0, 0, key, val), "")
					err := d.Add(rec(2, 17, c.key, c.value))
					var de *DecodeError
					if !errors.As(err, &de) || de.Partition != 2 || de.Offset != 17 || !strings.Contains(de.Msg, c.want) {
						t.Fatalf("error %v, want a DecodeError at 2/17 containing %q", err, c.want)
					}
					if d.Rows() != 0 {
						t.Fatalf("%d rows added", d.Rows())
					}
					cols, keys, err := DebeziumColumns(kf, vf, rec(0, 0, key, val))
					if err != nil {
						t.Fatal(err)
					}
					skip, err := NewDecoder(Config{Envelope: "debezium", Key: kf, Value: vf, Collection: "t", Source: "kafka.t",
						Columns: cols, KeyColumns: keys, OnDecodeError: PolicySkip})
					if err != nil {
						t.Fatal(err)
					}
					if err := skip.Add(rec(2, 17, c.key, c.value)); err != nil || skip.Rows() != 0 {
						t.Fatalf("skip: %v, %d rows", err, skip.Rows())
					}
				})
			}
			// Corruptions never crash; what decodes is one row.
			d := newDebeziumWith(t, kf, vf, rec(0, 0, key, val), "")
			rnd := rand.New(rand.NewPCG(1, 2))
			for i := range 3000 {
				k, v := slices.Clone(key), slices.Clone(val)
				b := v
				if rnd.IntN(3) == 0 {
					b = k
				}
				switch rnd.IntN(3) {
				case 0:
					b[rnd.IntN(len(b))] ^= byte(1 << rnd.IntN(8))
				case 1:
					b = b[:rnd.IntN(len(b))]
				default:
					b[5+rnd.IntN(len(b)-5)] = byte(rnd.IntN(256))
				}
				if rnd.IntN(3) == 0 {
					k = b
				} else {
					v = b
				}
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("corruption %d (key %x value %x) panicked: %v", i, k, v, p)
						}
					}()
					err := d.Add(rec(0, int64(i), k, v))
					if _, ok := errors.AsType[*SwitchError](err); ok {
						return // a corrupt id that names another writer
					}
					if err != nil && !errors.As(err, new(*DecodeError)) {
						t.Fatalf("corruption %d: %v, want a DecodeError", i, err)
					}
				}()
				if d.Rows() > 1 {
					d.Flush()
				}
			}
		})
	}
}

// BenchmarkDecodeDebeziumProtobuf decodes Debezium change events over
// Protobuf (the customers table) with the envelope.
func BenchmarkDecodeDebeziumProtobuf(b *testing.B) {
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	tb := testenv.DebeziumCustomers("postgresql")
	s := reg.DebeziumSerde("protobuf", "cust", tb)
	var recs []*kgo.Record
	for i := range 1000 {
		r := testenv.Row{"id": i, "first_name": fmt.Sprint("n", i), "last_name": "Kretchmar", "email": fmt.Sprintf("%d@noanswer.org", i)}
		recs = append(recs, rec(0, int64(i), s.Key(b, r), s.Event(b, "c", nil, r, int64(i), 1)))
	}
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		b.Fatal(err)
	}
	kf, err := NewProtobuf(context.Background(), ProtobufConfig{Registry: r, Subject: "cust-key"})
	if err != nil {
		b.Fatal(err)
	}
	vf, err := NewProtobuf(context.Background(), ProtobufConfig{Registry: r, Subject: "cust-value"})
	if err != nil {
		b.Fatal(err)
	}
	cols, keys, err := DebeziumColumns(kf, vf, recs[0])
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDecoder(Config{Envelope: "debezium", Key: kf, Value: vf, Collection: "t", Source: "kafka.t", Columns: cols, KeyColumns: keys})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := d.Add(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if r := d.Flush(); r != nil {
				r.Release()
			}
		}
	}
}
