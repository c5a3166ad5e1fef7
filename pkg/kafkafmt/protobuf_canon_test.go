package kafkafmt

import (
	"bytes"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/rtrctl/rtrctl/internal/testenv"
)

// protoCanon has no map: protoCanonical must recognize every
// deterministic encoding of it.
const protoCanon = `syntax = "proto3";
package c;
enum E { Z = 0; A = 1; }
message Sub { string s = 1; repeated int32 ns = 2; }
message M {
  int32 i32 = 1; sint32 s32 = 2; uint32 u32 = 3; int64 i64 = 4; bool b = 5; E e = 6;
  float f = 7; double d = 8; fixed32 fx = 9; string s = 10; bytes by = 11;
  optional int64 opt = 12; Sub sub = 13; repeated Sub subs = 14; repeated int64 ns = 15;
  repeated string ss = 16;
  oneof o { string on = 17; int32 oi = 18; }
  oneof p { bool pb = 19; }
}`

// canonOracle reports whether b decodes as md and is exactly its
// deterministic re-encoding.
func canonOracle(b []byte, md protoreflect.MessageDescriptor) (decodes, canonical bool) {
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return false, false
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return err == nil, err == nil && bytes.Equal(out, b)
}

// mutate returns b changed the ways producers differ from Go's
// deterministic encoding: two top-level records swapped, a record
// repeated, an unknown field or a zero value added, a varint made
// overlong, a byte flipped.
func mutate(rnd *rand.Rand, b []byte) []byte {
	var recs [][]byte
	for rest := b; len(rest) > 0; {
		_, _, n := protowire.ConsumeField(rest)
		if n < 0 {
			break
		}
		recs = append(recs, rest[:n])
		rest = rest[n:]
	}
	join := func(rs [][]byte) []byte { return bytes.Join(rs, nil) }
	switch rnd.Intn(7) {
	case 0:
		if len(recs) > 1 {
			i, j := rnd.Intn(len(recs)), rnd.Intn(len(recs))
			recs[i], recs[j] = recs[j], recs[i]
		}
		return join(recs)
	case 1:
		if len(recs) > 0 {
			i := rnd.Intn(len(recs))
			recs = append(recs[:i+1], append([][]byte{recs[i]}, recs[i+1:]...)...)
		}
		return join(recs)
	case 2:
		return protowire.AppendVarint(protowire.AppendTag(bytes.Clone(b), 99, protowire.VarintType), 5)
	case 3:
		num := protowire.Number(1 + rnd.Intn(19))
		return protowire.AppendVarint(protowire.AppendTag(bytes.Clone(b), num, protowire.VarintType), 0)
	case 4:
		return append([]byte{0x08, 0x81, 0x00}, b...) // i32 = 1, overlong
	case 5:
		if len(b) > 0 {
			c := bytes.Clone(b)
			c[rnd.Intn(len(c))] ^= byte(1 << rnd.Intn(8))
			return c
		}
	}
	return b
}

// randomMessage sets random fields of a message of md (no maps).
func randomMessage(rnd *rand.Rand, md protoreflect.MessageDescriptor, depth int) *dynamicpb.Message {
	m := dynamicpb.NewMessage(md)
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		if rnd.Intn(3) == 0 || fd.IsMap() {
			continue
		}
		val := func() protoreflect.Value {
			switch fd.Kind() {
			case protoreflect.MessageKind:
				if depth > 2 {
					return protoreflect.ValueOfMessage(dynamicpb.NewMessage(fd.Message()))
				}
				return protoreflect.ValueOfMessage(randomMessage(rnd, fd.Message(), depth+1))
			case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
				return protoreflect.ValueOfInt32(int32(rnd.Intn(5) - 2))
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				return protoreflect.ValueOfInt64(int64(rnd.Intn(5)-2) << rnd.Intn(60))
			case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
				return protoreflect.ValueOfUint32(uint32(rnd.Intn(3)))
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				return protoreflect.ValueOfUint64(uint64(rnd.Intn(3)) << rnd.Intn(63))
			case protoreflect.BoolKind:
				return protoreflect.ValueOfBool(rnd.Intn(2) == 0)
			case protoreflect.EnumKind:
				return protoreflect.ValueOfEnum(protoreflect.EnumNumber(rnd.Intn(3)))
			case protoreflect.FloatKind:
				return protoreflect.ValueOfFloat32(float32(rnd.Intn(3)) - 1)
			case protoreflect.DoubleKind:
				return protoreflect.ValueOfFloat64(float64(rnd.Intn(3)) - 1)
			case protoreflect.StringKind:
				return protoreflect.ValueOfString([]string{"", "x", "héllo"}[rnd.Intn(3)])
			case protoreflect.BytesKind:
				return protoreflect.ValueOfBytes([]byte{0, 1}[:rnd.Intn(3)])
			}
			panic(fd.Kind())
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for range rnd.Intn(3) {
				l.Append(val())
			}
			continue
		}
		m.Set(fd, val())
	}
	return m
}

// TestProtobufCanonical: protoCanonical (Normal keeps bytes it accepts)
// never accepts bytes that are not the deterministic encoding of what
// they decode to, and accepts every deterministic encoding of a message
// without maps; checked against proto.Marshal on random messages and
// their mutations.
func TestProtobufCanonical(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	cs := reg.ProtoSerde(t, "c-value", protoCanon)
	md := cs.File.Messages().ByName("M")
	all := reg.ProtoSerde(t, "all-value", protoAll, registerMoney(t, reg)).File.Messages().ByName("All")
	rnd := rand.New(rand.NewSource(1))
	accepted, refused := 0, 0
	for range 3000 {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(randomMessage(rnd, md, 0))
		if err != nil {
			t.Fatal(err)
		}
		if !protoCanonical(b, md) {
			t.Fatalf("deterministic encoding %x refused", b)
		}
		for _, c := range [][]byte{mutate(rnd, b), mutate(rnd, mutate(rnd, b))} {
			decodes, want := canonOracle(c, md)
			if !decodes {
				continue
			}
			got := protoCanonical(c, md)
			if got != want {
				t.Fatalf("protoCanonical(%x) = %v, but it is the deterministic encoding: %v", c, got, want)
			}
			if got {
				accepted++
			} else {
				refused++
			}
		}
		// The schema with maps and well-known types: never unsound.
		a, err := proto.Marshal(randomMessage(rnd, all, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range [][]byte{a, mutate(rnd, a)} {
			if _, want := canonOracle(c, all); protoCanonical(c, all) && !want {
				t.Fatalf("protoCanonical accepts %x, which is not the deterministic encoding", c)
			}
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("mutations accepted %d, refused %d: want both", accepted, refused)
	}
}

// FuzzProtobufDecode: no input crashes the decoder; whatever Check
// accepts appends, and Raw of it decodes to the same row; Normal's bytes
// decode to the same row as the input.
func FuzzProtobufDecode(f *testing.F) {
	reg := testenv.StartRegistry(f, testenv.RegistryOptions{})
	sd := reg.ProtoSerde(f, "all-value", protoAll, registerMoney(f, reg))
	rnd := rand.New(rand.NewSource(2))
	for range 5 {
		f.Add(sd.Encode(f, randomMessage(rnd, sd.File.Messages().ByName("All"), 0)))
	}
	f.Add([]byte{0, 0, 0, 0, byte(sd.ID), 0})
	f.Add([]byte{0, 0, 0, 0, byte(sd.ID), 4, 0, 2})
	f.Add([]byte{0, 0, 0, 0, 99, 0})
	fm := newProtoTest(f, reg, "all-value", 0)
	f.Fuzz(func(t *testing.T, b []byte) {
		if fm.Check(b) != nil {
			return
		}
		norm, err := fm.(Normalizer).Normal(b)
		if err != nil {
			t.Fatalf("normal of accepted bytes: %v", err)
		}
		col := fm.NewColumn()
		col.Append(b)
		col.Append(norm)
		arr := col.Finish()
		defer arr.Release()
		if !sameRows(arr, 0, arr, 1, 1) {
			t.Fatalf("normal bytes decode to %v, the input to %v", array.NewSlice(arr, 1, 2), array.NewSlice(arr, 0, 1))
		}
		checkRaw(t, fm, arr, 1)
	})
}
