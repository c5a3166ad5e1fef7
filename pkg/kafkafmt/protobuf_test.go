package kafkafmt

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

const (
	// protoMoney is imported by protoAll through a reference.
	protoMoney = `syntax = "proto3";
package common;
message Money { string currency = 1; sint64 cents = 2; }`
	// protoAll has a field of every Protobuf type the format maps
	// (docs/kafka.md).
	protoAll = `syntax = "proto3";
package t;
import "common/money.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";
enum Color { RED = 0; GREEN = 1; }
message All {
  message Addr { string city = 1; optional int32 zip = 2; }
  bool b = 1;
  int32 i32 = 2; sint32 s32 = 3; sfixed32 sf32 = 4;
  int64 i64 = 5; sint64 s64 = 6; sfixed64 sf64 = 7;
  uint32 u32 = 8; fixed32 f32 = 9; uint64 u64 = 10; fixed64 f64 = 11;
  float fl = 12; double d = 13; string s = 14; bytes by = 15;
  Color e = 16;
  optional string opt = 17;
  oneof choice { string name = 18; int64 num = 19; }
  Addr addr = 20;
  repeated Addr addrs = 21;
  repeated int64 ns = 22;
  map<string, int64> m = 23;
  map<int32, Addr> mi = 24;
  google.protobuf.Timestamp ts = 25;
  google.protobuf.Duration dur = 26;
  google.protobuf.Int64Value wi = 27;
  google.protobuf.StringValue ws = 28;
  common.Money price = 29;
  repeated google.protobuf.Timestamp tss = 30;
  google.protobuf.Empty emp = 31;
}`
)

func newProtoTest(t testing.TB, reg *testenv.Registry, subject string, version int) Format {
	t.Helper()
	f, err := NewProtobuf(context.Background(), ProtobufConfig{Registry: testRegistry(t, reg), Subject: subject, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testRegistry is a client of reg.
func testRegistry(t testing.TB, reg *testenv.Registry) *Registry {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// set sets fields of m by name (a value of the field's Go type, or a
// *dynamicpb.Message / proto message for message fields).
func set(t testing.TB, m *dynamicpb.Message, kv map[string]any) *dynamicpb.Message {
	t.Helper()
	for k, v := range kv {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			t.Fatalf("no field %s in %s", k, m.Descriptor().FullName())
		}
		m.Set(fd, protoreflect.ValueOf(v))
	}
	return m
}

// registerMoney registers protoMoney as subject common/money.proto; the
// reference to it.
func registerMoney(t testing.TB, reg *testenv.Registry) sr.SchemaReference {
	reg.ProtoSerde(t, "common/money.proto", protoMoney)
	return sr.SchemaReference{Name: "common/money.proto", Subject: "common/money.proto", Version: 1}
}

// TestProtobufRoundTrip: every mapped type, produced with protocompile's
// descriptors, dynamicpb and proto.Marshal and framed by sr.Encode, with
// an import resolved through a reference, into the columns
// docs/kafka.md states; Raw re-encodes each row to bytes that decode to
// it again.
func TestProtobufRoundTrip(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.ProtoSerde(t, "all-value", protoAll, registerMoney(t, reg))
	addr := func(city string, zip *int32) *dynamicpb.Message {
		m := set(t, sd.New(t, "All.Addr"), map[string]any{"city": city})
		if zip != nil {
			set(t, m, map[string]any{"zip": *zip})
		}
		return m
	}
	zip := int32(150)
	full := set(t, sd.New(t, "All"), map[string]any{
		"b": true, "i32": int32(-7), "s32": int32(-8), "sf32": int32(-9), "i64": int64(1) << 40, "s64": int64(-1) << 41, "sf64": int64(-3),
		"u32": uint32(4000000000), "f32": uint32(7), "u64": uint64(1) << 63, "f64": uint64(9),
		"fl": float32(1.5), "d": -2.25, "s": "héllo", "by": []byte{0, 1, 255},
		"e": protoreflect.EnumNumber(1), "opt": "", "num": int64(42),
		"addr": addr("Oslo", &zip).ProtoReflect(),
	})
	fm := full.ProtoReflect()
	fields := fm.Descriptor().Fields()
	l := fm.Mutable(fields.ByName("addrs")).List()
	l.Append(protoreflect.ValueOf(addr("A", nil).ProtoReflect()))
	l.Append(protoreflect.ValueOf(addr("B", &zip).ProtoReflect()))
	ns := fm.Mutable(fields.ByName("ns")).List()
	for _, n := range []int64{3, 1, 2} {
		ns.Append(protoreflect.ValueOfInt64(n))
	}
	mp := fm.Mutable(fields.ByName("m")).Map()
	mp.Set(protoreflect.ValueOfString("b").MapKey(), protoreflect.ValueOfInt64(2))
	mp.Set(protoreflect.ValueOfString("a").MapKey(), protoreflect.ValueOfInt64(1))
	mi := fm.Mutable(fields.ByName("mi")).Map()
	mi.Set(protoreflect.ValueOfInt32(-1).MapKey(), protoreflect.ValueOf(addr("Z", nil).ProtoReflect()))
	ts := time.Date(2026, 11, 30, 12, 34, 56, 789123456, time.UTC)
	set(t, full, map[string]any{
		"ts": timestamppb.New(ts).ProtoReflect(), "dur": durationpb.New(-90*time.Second - 5*time.Microsecond).ProtoReflect(),
		"wi": wrapperspb.Int64(0).ProtoReflect(), "ws": wrapperspb.String("w").ProtoReflect(),
		"price": set(t, dynamicpb.NewMessage(fields.ByName("price").Message()), map[string]any{"currency": "EUR", "cents": int64(-1250)}).ProtoReflect(),
		"emp":   dynamicpb.NewMessage(fields.ByName("emp").Message()).ProtoReflect(),
	})
	tss := fm.Mutable(fields.ByName("tss")).List()
	tss.Append(protoreflect.ValueOf(timestamppb.New(time.Unix(-1, 999999000).UTC()).ProtoReflect()))
	// An enum number the enum does not name (proto3 enums are open).
	empty := set(t, sd.New(t, "All"), map[string]any{"e": protoreflect.EnumNumber(7)})

	want := []map[string]string{{
		"b": "true", "i32": "-7", "s32": "-8", "sf32": "-9", "i64": "1099511627776", "s64": "-2199023255552", "sf64": "-3",
		"u32": "4000000000", "f32": "7", "u64": "9223372036854775808", "f64": "9",
		"fl": "1.5", "d": "-2.25", "s": "héllo", "by": "AAH/", "e": "GREEN", "opt": "", "name": "NULL", "num": "42",
		"addr": `{"city":"Oslo","zip":150}`, "addrs": `[{"city":"A","zip":null},{"city":"B","zip":150}]`, "ns": "[3,1,2]",
		"m": `[{"key":"a","value":1},{"key":"b","value":2}]`, "mi": `[{"key":-1,"value":{"city":"Z","zip":null}}]`,
		"ts": "2026-11-30 12:34:56.789123Z", "dur": "-90000005us", "wi": "0", "ws": "w",
		"price": `{"cents":-1250,"currency":"EUR"}`, "tss": `["1969-12-31 23:59:59.999999Z"]`, "emp": "{}",
	}, {
		// Fields without presence are their defaults, never null.
		"b": "false", "i32": "0", "s32": "0", "sf32": "0", "i64": "0", "s64": "0", "sf64": "0",
		"u32": "0", "f32": "0", "u64": "0", "f64": "0",
		"fl": "0", "d": "0", "s": "", "by": "", "e": "7", "opt": "NULL", "name": "NULL", "num": "NULL",
		"addr": "NULL", "addrs": "[]", "ns": "[]", "m": "[]", "mi": "[]",
		"ts": "NULL", "dur": "NULL", "wi": "NULL", "ws": "NULL", "price": "NULL", "tss": "[]", "emp": "NULL",
	}}
	f := newProtoTest(t, reg, "all-value", 0)
	col := f.NewColumn()
	for _, m := range []*dynamicpb.Message{full, empty} {
		b := sd.Encode(t, m)
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
		if len(got) != len(w) {
			t.Errorf("row %d has %d fields, want %d: %v", i, len(got), len(w), got)
		}
		for k, wv := range w {
			if got[k] != wv {
				t.Errorf("row %d field %s = %s, want %s", i, k, got[k], wv)
			}
		}
	}
	if !arr.IsNull(2) {
		t.Errorf("row 2 is not null")
	}
	st := f.Type().String()
	for _, typ := range []string{"ts: timestamp[us, tz=UTC]", "dur: duration[us]", "u64: uint64", "e: utf8", "by: binary"} {
		if !strings.Contains(st, typ) {
			t.Errorf("type %s lacks %s", st, typ)
		}
	}
	checkRaw(t, f, arr, 2)
}

// TestProtobufRecursive: a recursive message is a definite error when the
// format is made, naming the message.
func TestProtobufRecursive(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	reg.ProtoSerde(t, "tree-value", `syntax = "proto3"; package t; message Node { string v = 1; repeated Node kids = 2; }`)
	r := testRegistry(t, reg)
	_, err := NewProtobuf(context.Background(), ProtobufConfig{Registry: r, Subject: "tree-value"})
	if err == nil || !strings.Contains(err.Error(), "message t.Node is recursive") || !strings.Contains(err.Error(), "field kids") {
		t.Fatalf("recursive message: %v, want an error naming t.Node and field kids", err)
	}
	reg.Serde(t, "avro-value", orderV1)
	_, err = NewProtobuf(context.Background(), ProtobufConfig{Registry: r, Subject: "avro-value"})
	if err == nil || !strings.Contains(err.Error(), "is an Avro schema, not Protobuf (use --value-format avro)") {
		t.Fatalf("avro subject: %v", err)
	}
}

const (
	protoOrderV1 = `syntax = "proto3"; package t; message Order { int64 id = 1; int32 qty = 2; }`
	// v2 adds a field: v1 records read with v2 have its default.
	protoOrderV2 = `syntax = "proto3"; package t; message Order { int64 id = 1; int32 qty = 2; optional string note = 3; repeated string tags = 4; }`
	// v3 changes qty to a string: its wire type differs.
	protoOrderV3 = `syntax = "proto3"; package t; message Order { int64 id = 1; string qty = 2; }`
)

func order(t testing.TB, sd *testenv.ProtoSerde, kv map[string]any) []byte {
	return sd.Encode(t, set(t, sd.New(t, "Order"), kv))
}

// TestProtobufTwoVersions: records of v1 and v2 in one topic read with
// the latest (v2) at start: v1 records get v2's defaults (null for the
// optional field); pinned to v1, v2's extra fields are dropped; a version
// registered while running with fields the reader lacks, and one whose
// field changes wire type, are definite errors.
func TestProtobufTwoVersions(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	s1, s2 := reg.ProtoSerde(t, "t-value", protoOrderV1), reg.ProtoSerde(t, "t-value", protoOrderV2)
	d := avroDec(t, "none", nil, newProtoTest(t, reg, "t-value", 0), "", nil)
	v2rec := order(t, s2, map[string]any{"id": int64(2), "qty": int32(6), "note": "rush"})
	for i, b := range [][]byte{
		order(t, s1, map[string]any{"id": int64(1), "qty": int32(5)}),
		v2rec,
		order(t, s1, map[string]any{"id": int64(3)}),
	} {
		if err := d.Add(rec(0, int64(i), []byte("k"), b)); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	r := d.Flush()
	defer r.Release()
	got := rows(t, r)
	want := []string{
		`0 0 k {"id":1,"note":null,"qty":5,"tags":[]}`,
		`0 1 k {"id":2,"note":"rush","qty":6,"tags":[]}`,
		`0 2 k {"id":3,"note":null,"qty":0,"tags":[]}`,
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("row %d = %s, want prefix %s", i, got[i], w)
		}
	}

	p := avroDec(t, "none", nil, newProtoTest(t, reg, "t-value", 1), "", nil)
	if err := p.Add(rec(0, 0, []byte("k"), v2rec)); err != nil {
		t.Fatal(err)
	}
	pr := p.Flush()
	defer pr.Release()
	if g := rows(t, pr); !strings.HasPrefix(g[0], `0 0 k {"id":2,"qty":6}`) {
		t.Fatalf("pinned v1 read %s", g[0])
	}

	// The reader is v1 when it is the latest at start; v2 registered
	// later would lose note and tags.
	reg2 := testenv.StartRegistry(t, testenv.RegistryOptions{})
	n1 := reg2.ProtoSerde(t, "t-value", protoOrderV1)
	l := avroDec(t, "none", nil, newProtoTest(t, reg2, "t-value", 0), "", nil)
	if err := l.Add(rec(0, 0, []byte("k"), order(t, n1, map[string]any{"id": int64(1)}))); err != nil {
		t.Fatal(err)
	}
	n2 := reg2.ProtoSerde(t, "t-value", protoOrderV2)
	err := l.Add(rec(0, 1, []byte("k"), order(t, n2, map[string]any{"id": int64(2), "note": "x"})))
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 1 || !strings.Contains(de.Msg, "version 2") || !strings.Contains(de.Msg, "note, tags") || !strings.Contains(de.Msg, "--value-schema-version 1") {
		t.Fatalf("v2 record: %v, want a decode error at offset 1 naming version 2, its fields and --value-schema-version 1", err)
	}
	cl, _ := sr.NewClient(sr.URLs(reg2.URL))
	cl.SetCompatibility(t.Context(), sr.SetCompatibility{Level: sr.CompatNone}, "t-value")
	n3 := reg2.ProtoSerde(t, "t-value", protoOrderV3)
	err = l.Add(rec(0, 2, []byte("k"), order(t, n3, map[string]any{"id": int64(3), "qty": "many"})))
	if !errors.As(err, &de) || de.Offset != 2 || !strings.Contains(de.Msg, "field qty (number 2) is string in the writer's schema and int32 in the reader's") {
		t.Fatalf("v3 record: %v, want a decode error at offset 2 naming field qty", err)
	}
	lr := l.Flush()
	defer lr.Release()
	if lr.NumRows() != 1 {
		t.Fatalf("%d rows, want only the v1 record", lr.NumRows())
	}
}

// TestProtobufUpsertKeyVersions: a key written with two versions of the
// key subject is one key (keys are re-encoded as the reader message),
// and the state rebuilt from the decoder's output (Raw) equals the live
// state.
func TestProtobufUpsertKeyVersions(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	kv1 := reg.ProtoSerde(t, "t-key", `syntax = "proto3"; package k; message Key { int64 id = 1; }`)
	kv2 := reg.ProtoSerde(t, "t-key", `syntax = "proto3"; package k; message Key { int64 id = 1; map<string, string> labels = 2; }`)
	vs := reg.ProtoSerde(t, "t-value", protoOrderV1)
	kf, vf := newProtoTest(t, reg, "t-key", 0), newProtoTest(t, reg, "t-value", 0)
	d := avroDec(t, "upsert", kf, vf, "", nil)
	key1 := kv1.Encode(t, set(t, kv1.New(t, "Key"), map[string]any{"id": int64(1)}))
	key1b := kv2.Encode(t, set(t, kv2.New(t, "Key"), map[string]any{"id": int64(1)}))
	for i, r := range []struct{ k, v []byte }{
		{key1, order(t, vs, map[string]any{"id": int64(1), "qty": int32(1)})},
		{key1b, order(t, vs, map[string]any{"id": int64(1), "qty": int32(2)})},
	} {
		if err := d.Add(rec(0, int64(i), r.k, r.v)); err != nil {
			t.Fatal(err)
		}
	}
	out := d.Flush()
	defer out.Release()
	got := rows(t, out)
	want := []string{
		`{"id":1,"labels":[]} {"id":1,"qty":1} @0:0 +1`,
		`{"id":1,"labels":[]} {"id":1,"qty":1} @0:1 -1`,
		`{"id":1,"labels":[]} {"id":1,"qty":2} @0:1 +1`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkRebuiltTombstone(t, kf, vf, out, key1, `{"id":1,"labels":[]} {"id":1,"qty":2} @0:2 -1`)
}

// TestProtobufDecodeErrorPolicies: records that do not decode (bad magic
// byte, short framing, an unknown schema id, a truncated payload, a
// message index the schema does not have, another message, an Avro
// schema id) under fail, skip and inline.
func TestProtobufDecodeErrorPolicies(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.ProtoSerde(t, "t-value", protoOrderV1+` message Other { string x = 1; }`)
	good := order(t, sd, map[string]any{"id": int64(1), "qty": int32(5)})
	other := sd.Encode(t, set(t, sd.New(t, "Other"), map[string]any{"x": "y"}))
	avroID := reg.Serde(t, "a-value", orderV1).ID
	bad := []struct {
		name, msg string
		b         []byte
	}{
		{"bad magic", "bad magic byte 0x7b", []byte(`{"id":1}`)},
		{"short framing", "truncated: 5 bytes", good[:5]},
		{"unknown id", "unknown schema id 99", []byte{0, 0, 0, 0, 99, 0, 8, 1}},
		{"truncated payload", "schema id 1: protobuf", append(good[:len(good)-1:len(good)-1], 0x80)},
		{"bad index", "schema id 1 has no message at index [5]", []byte{0, 0, 0, 0, 1, 2, 10, 8, 1}},
		{"other message", "written as message t.Other", other},
		{"avro id", "is an Avro schema, not Protobuf", []byte{0, 0, 0, 0, byte(avroID), 0, 8, 1}},
	}
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			var counted []string
			d := avroDec(t, "none", nil, newProtoTest(t, reg, "t-value", 0), policy, func(de *DecodeError, p string) {
				counted = append(counted, de.Msg)
			})
			for i, b := range bad {
				err := d.Add(rec(0, int64(i), []byte("k"), b.b))
				var de *DecodeError
				switch {
				case policy == PolicyFail && (!errors.As(err, &de) || de.Offset != int64(i) || !strings.Contains(de.Msg, b.msg)):
					t.Errorf("%s: %v, want a decode error at %d with %q", b.name, err, i, b.msg)
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
			n := 1
			if policy == PolicyInline {
				n += len(bad)
				for i, b := range bad {
					if !strings.Contains(got[i], b.msg) {
						t.Errorf("inline row %d = %s, want the error %q", i, got[i], b.msg)
					}
				}
			}
			if len(got) != n || !strings.Contains(got[n-1], `{"id":1,"qty":5}`) {
				t.Fatalf("rows\n%s\nwant %d ending with the good record", strings.Join(got, "\n"), n)
			}
			if len(counted) != len(bad) {
				t.Fatalf("counted %d decode errors, want %d: %v", len(counted), len(bad), counted)
			}
		})
	}
}

// checkRaw: Raw re-encodes rows 0..n-1 of arr, a column of f, to bytes
// that decode to the same rows (the upsert state rebuild depends on it).
func checkRaw(t *testing.T, f Format, arr arrow.Array, n int) {
	t.Helper()
	again := f.NewColumn()
	for i := range n {
		raw, err := f.Raw(arr, i)
		if err != nil {
			t.Fatalf("raw %d: %v", i, err)
		}
		if err := f.Check(raw); err != nil {
			t.Fatalf("check raw %d: %v", i, err)
		}
		again.Append(raw)
	}
	back := again.Finish()
	defer back.Release()
	if !sameRows(arr, 0, back, 0, n) {
		t.Fatalf("raw round trip:\n got %v\nwant %v", back, arr)
	}
}

// sameRows: n rows of a from i and of b from j are equal (NaNs equal to
// NaNs, floats exactly).
func sameRows(a arrow.Array, i int, b arrow.Array, j, n int) bool {
	x, y := array.NewSlice(a, int64(i), int64(i+n)), array.NewSlice(b, int64(j), int64(j+n))
	defer x.Release()
	defer y.Release()
	return array.ApproxEqual(x, y, array.WithNaNsEqual(true), array.WithAbsTolerance(0))
}

// checkRebuiltTombstone: an upsert decoder of kf and vf whose state is
// rebuilt from out (Raw re-encodes) retracts want on a tombstone of key.
func checkRebuiltTombstone(t *testing.T, kf, vf Format, out arrow.Record, key []byte, want string) {
	t.Helper()
	e := avroDec(t, "upsert", kf, vf, "", nil)
	if err := loadState(e, out); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(rec(0, 2, key, nil)); err != nil {
		t.Fatal(err)
	}
	del := e.Flush()
	defer del.Release()
	if g := rows(t, del); len(g) != 1 || g[0] != want {
		t.Fatalf("tombstone after rebuild: %v, want %s", g, want)
	}
}

// TestProtobufProto2: a proto2 required field is a non-null column and a
// record without it does not decode; an optional field with a default is
// null when absent (not the default).
func TestProtobufProto2(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	sd := reg.ProtoSerde(t, "p2-value", `syntax = "proto2"; package p; message R { required int64 id = 1; optional string s = 2 [default = "dflt"]; }`)
	f := newProtoTest(t, reg, "p2-value", 0)
	if got := f.Type().String(); got != "struct<id: int64, s: utf8>" {
		t.Fatalf("type %s, want id non-null and s nullable", got)
	}
	if st := f.Type().(*arrow.StructType); st.Field(0).Nullable || !st.Field(1).Nullable {
		t.Fatalf("nullability of %v: want id not nullable, s nullable", st)
	}
	good := sd.Encode(t, set(t, sd.New(t, "R"), map[string]any{"id": int64(3)}))
	col := f.NewColumn()
	col.Append(good)
	arr := col.Finish()
	defer arr.Release()
	if got := cells(t, arr, 0); got["id"] != "3" || got["s"] != "NULL" {
		t.Fatalf("row %v, want id 3 and s null", got)
	}
	missing := append(bytes.Clone(good[:6]), 0x12, 1, 'x') // only s
	if err := f.Check(missing); err == nil || !strings.Contains(err.Error(), "required field p.R.id not set") {
		t.Fatalf("a record without the required field: %v", err)
	}
}
