package kafkafmt

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoCanonical reports whether b, the encoding of a message of md, is
// exactly what proto.MarshalOptions{Deterministic: true} writes for the
// message it decodes to: Normal then keeps the bytes instead of
// re-encoding them. It answers false whenever it is not sure (map fields,
// groups, unknown fields), which costs only the re-encoding.
//
// The deterministic encoding (google.golang.org/protobuf's
// order.LegacyFieldOrder) writes the fields outside real oneofs by
// number, then the set member of each oneof in declaration order; each
// field once (a packed list as one record, an unpacked one as
// consecutive records); no field without presence at its zero value;
// varints minimal and 32-bit kinds in their range.
func protoCanonical(b []byte, md protoreflect.MessageDescriptor) bool {
	fields := md.Fields()
	var prev protoreflect.FieldDescriptor
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || protowire.SizeTag(num) != n {
			return false
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		if fd == nil || fd.IsMap() || fd.Kind() == protoreflect.GroupKind {
			return false
		}
		switch {
		case prev == nil:
		case fd == prev:
			if !fd.IsList() || fd.IsPacked() {
				return false // a singular field twice, or a packed list in two records
			}
		case !protoFieldBefore(prev, fd):
			return false
		}
		prev = fd
		if fd.IsList() && fd.IsPacked() {
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || protowire.SizeBytes(len(v)) != n || len(v) == 0 {
				return false
			}
			for len(v) > 0 {
				m := protoCanonicalValue(v, fd, protoWireType(fd), true)
				if m < 0 {
					return false
				}
				v = v[m:]
			}
			b = b[n:]
			continue
		}
		if typ != protoWireType(fd) {
			return false
		}
		n = protoCanonicalValue(b, fd, typ, fd.IsList() || fd.HasPresence())
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// protoFieldBefore: the deterministic encoding writes a before b.
func protoFieldBefore(a, b protoreflect.FieldDescriptor) bool {
	oa, ob := realOneof(a), realOneof(b)
	switch {
	case oa == nil && ob == nil:
		return a.Number() < b.Number()
	case oa == nil || ob == nil:
		return oa == nil
	}
	return oa.Index() < ob.Index() // one member of a oneof at most
}

func realOneof(fd protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		return od
	}
	return nil
}

func protoWireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	}
	return protowire.VarintType
}

// protoCanonicalValue returns the length of the canonical value of fd at
// the start of b, or -1. zeroOK says a zero value is written (the field
// has presence or is a list element).
func protoCanonicalValue(b []byte, fd protoreflect.FieldDescriptor, typ protowire.Type, zeroOK bool) int {
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || protowire.SizeVarint(v) != n || (v == 0 && !zeroOK) {
			return -1
		}
		switch fd.Kind() {
		case protoreflect.Int32Kind:
			if v != uint64(int64(int32(v))) {
				return -1
			}
		case protoreflect.EnumKind:
			// A closed enum's unknown number goes to the unknown fields,
			// which decoding drops.
			if v != uint64(int64(int32(v))) || fd.Enum().IsClosed() && fd.Enum().Values().ByNumber(protoreflect.EnumNumber(int32(v))) == nil {
				return -1
			}
		case protoreflect.Uint32Kind, protoreflect.Sint32Kind:
			if v > math.MaxUint32 {
				return -1
			}
		case protoreflect.BoolKind:
			if v > 1 {
				return -1
			}
		}
		return n
	case protowire.Fixed32Type:
		v, n := protowire.ConsumeFixed32(b)
		if n < 0 || (v == 0 && !zeroOK) || (fd.Kind() == protoreflect.FloatKind && math.IsNaN(float64(math.Float32frombits(v)))) {
			return -1 // a float32 NaN's payload may not survive float64
		}
		return n
	case protowire.Fixed64Type:
		v, n := protowire.ConsumeFixed64(b)
		if n < 0 || (v == 0 && !zeroOK) {
			return -1
		}
		return n
	case protowire.BytesType:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || protowire.SizeBytes(len(v)) != n || (len(v) == 0 && !zeroOK) {
			return -1
		}
		if fd.Kind() == protoreflect.MessageKind && !protoCanonical(v, fd.Message()) {
			return -1
		}
		return n
	}
	return -1
}
