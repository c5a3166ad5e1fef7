package kafkafmt

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The Arrow types of Protobuf (docs/kafka.md has the table): a message is
// a struct of its fields in declaration order (a oneof's members are
// fields of it, at most one non-null); a field is nullable exactly when
// it has presence (proto2 optional, proto3 optional, message-typed,
// oneof members), so a proto3 scalar without presence is its default
// when absent, never null; repeated is a list, map<K, V> a list of
// struct{key, value} sorted by key (the store has no map type); an enum
// is utf8, its value's name (a number the enum does not name: its
// decimal digits); google.protobuf.Timestamp is timestamp[us, UTC],
// Duration duration[us], and the wrappers (Int64Value, StringValue, ...)
// their scalar, null when absent.

const (
	wktTimestamp protoreflect.FullName = "google.protobuf.Timestamp"
	wktDuration  protoreflect.FullName = "google.protobuf.Duration"
)

// protoWrappers are the wrapper messages: their field 1 (value) is the
// column.
var protoWrappers = map[protoreflect.FullName]bool{
	"google.protobuf.DoubleValue": true, "google.protobuf.FloatValue": true,
	"google.protobuf.Int64Value": true, "google.protobuf.UInt64Value": true,
	"google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true,
	"google.protobuf.BoolValue": true, "google.protobuf.StringValue": true,
	"google.protobuf.BytesValue": true,
}

var (
	arrowTimestampUS = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	arrowDurationUS  = &arrow.DurationType{Unit: arrow.Microsecond}
)

// protoMessageType is the struct type of md's fields. seen holds the
// messages being mapped: a recursive message has no Arrow type.
func protoMessageType(md protoreflect.MessageDescriptor, seen []protoreflect.FullName) (*arrow.StructType, error) {
	if slices.Contains(seen, md.FullName()) {
		return nil, fmt.Errorf("message %s is recursive, which an Arrow column cannot hold", md.FullName())
	}
	seen = append(seen, md.FullName())
	fs := md.Fields()
	fields := make([]arrow.Field, 0, fs.Len())
	for i := range fs.Len() {
		fd := fs.Get(i)
		t, err := protoFieldType(fd, seen)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", fd.Name(), err)
		}
		fields = append(fields, arrow.Field{Name: string(fd.Name()), Type: t, Nullable: protoNullable(fd)})
	}
	return arrow.StructOf(fields...), nil
}

// protoNullable: a singular field with presence (absent is not its
// default); a proto2 required field is always there.
func protoNullable(fd protoreflect.FieldDescriptor) bool {
	return !fd.IsList() && !fd.IsMap() && fd.HasPresence() && fd.Cardinality() != protoreflect.Required
}

func protoFieldType(fd protoreflect.FieldDescriptor, seen []protoreflect.FullName) (arrow.DataType, error) {
	if fd.IsMap() {
		kt, err := protoValueType(fd.MapKey(), seen)
		if err != nil {
			return nil, err
		}
		vt, err := protoValueType(fd.MapValue(), seen)
		if err != nil {
			return nil, fmt.Errorf("map values: %w", err)
		}
		return arrow.ListOfField(arrow.Field{Name: "entry", Type: arrow.StructOf(
			arrow.Field{Name: "key", Type: kt}, arrow.Field{Name: "value", Type: vt})}), nil
	}
	t, err := protoValueType(fd, seen)
	if err != nil {
		return nil, err
	}
	if fd.IsList() {
		return arrow.ListOfField(arrow.Field{Name: "item", Type: t}), nil
	}
	return t, nil
}

// protoValueType is the Arrow type of one value of fd's kind.
func protoValueType(fd protoreflect.FieldDescriptor, seen []protoreflect.FullName) (arrow.DataType, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return arrow.FixedWidthTypes.Boolean, nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return arrow.PrimitiveTypes.Int32, nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return arrow.PrimitiveTypes.Int64, nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return arrow.PrimitiveTypes.Uint32, nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return arrow.PrimitiveTypes.Uint64, nil
	case protoreflect.FloatKind:
		return arrow.PrimitiveTypes.Float32, nil
	case protoreflect.DoubleKind:
		return arrow.PrimitiveTypes.Float64, nil
	case protoreflect.StringKind, protoreflect.EnumKind:
		return arrow.BinaryTypes.String, nil
	case protoreflect.BytesKind:
		return arrow.BinaryTypes.Binary, nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		switch n := md.FullName(); {
		case n == wktTimestamp:
			return arrowTimestampUS, nil
		case n == wktDuration:
			return arrowDurationUS, nil
		case protoWrappers[n]:
			return protoValueType(md.Fields().ByNumber(1), seen)
		}
		return protoMessageType(md, seen)
	}
	return nil, fmt.Errorf("protobuf kind %s has no column type", fd.Kind())
}

// appendProtoMessage appends m to b, a builder of protoMessageType of
// m's descriptor.
func appendProtoMessage(b *array.StructBuilder, m protoreflect.Message) {
	b.Append(true)
	fs := m.Descriptor().Fields()
	for i := range fs.Len() {
		appendProtoField(b.FieldBuilder(i), fs.Get(i), m)
	}
}

func appendProtoField(b array.Builder, fd protoreflect.FieldDescriptor, m protoreflect.Message) {
	switch {
	case fd.IsMap():
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		mp := m.Get(fd).Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, cmpMapKey) // one row for one map, whatever the wire order
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, k := range keys {
			sb.Append(true)
			appendProtoValue(sb.FieldBuilder(0), fd.MapKey(), k.Value())
			appendProtoValue(sb.FieldBuilder(1), fd.MapValue(), mp.Get(k))
		}
	case fd.IsList():
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		l := m.Get(fd).List()
		for j := range l.Len() {
			appendProtoValue(lb.ValueBuilder(), fd, l.Get(j))
		}
	case protoNullable(fd) && !m.Has(fd):
		b.AppendNull()
	default:
		appendProtoValue(b, fd, m.Get(fd))
	}
}

func cmpMapKey(a, b protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return cmp.Compare(x, b.String())
	case bool:
		return cmp.Compare(boolInt(x), boolInt(b.Bool()))
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendProtoValue appends v, one value of fd's kind.
func appendProtoValue(b array.Builder, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b.(*array.BooleanBuilder).Append(v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		b.(*array.Int32Builder).Append(int32(v.Int()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.(*array.Int64Builder).Append(v.Int())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		b.(*array.Uint32Builder).Append(uint32(v.Uint()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.(*array.Uint64Builder).Append(v.Uint())
	case protoreflect.FloatKind:
		b.(*array.Float32Builder).Append(float32(v.Float()))
	case protoreflect.DoubleKind:
		b.(*array.Float64Builder).Append(v.Float())
	case protoreflect.StringKind:
		b.(*array.StringBuilder).Append(v.String())
	case protoreflect.BytesKind:
		b.(*array.BinaryBuilder).Append(v.Bytes())
	case protoreflect.EnumKind:
		b.(*array.StringBuilder).Append(enumName(fd.Enum(), v.Enum()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		m := v.Message()
		md := fd.Message()
		switch n := md.FullName(); {
		case n == wktTimestamp:
			s, ns := m.Get(md.Fields().ByNumber(1)).Int(), m.Get(md.Fields().ByNumber(2)).Int()
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(s*1e6 + ns/1e3))
		case n == wktDuration:
			s, ns := m.Get(md.Fields().ByNumber(1)).Int(), m.Get(md.Fields().ByNumber(2)).Int()
			b.(*array.DurationBuilder).Append(arrow.Duration(s*1e6 + ns/1e3))
		case protoWrappers[n]:
			vf := md.Fields().ByNumber(1)
			appendProtoValue(b, vf, m.Get(vf))
		default:
			appendProtoMessage(b.(*array.StructBuilder), m)
		}
	}
}

// enumName is the name of enum value n, or n's digits when the enum has
// no such value (an open enum keeps numbers it does not name).
func enumName(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	if ev := ed.Values().ByNumber(n); ev != nil {
		return string(ev.Name())
	}
	return strconv.Itoa(int(n))
}

// fillProto sets the fields of m from element i of arr, a struct array
// of protoMessageType of m's descriptor: appendProtoMessage's inverse.
func fillProto(m protoreflect.Message, arr arrow.Array, i int) error {
	sa, ok := arr.(*array.Struct)
	if !ok {
		return fmt.Errorf("column is %s, want a struct for message %s", arr.DataType(), m.Descriptor().FullName())
	}
	fs := m.Descriptor().Fields()
	for k := range fs.Len() {
		if err := setProtoField(m, fs.Get(k), sa.Field(k), i); err != nil {
			return fmt.Errorf("field %s: %w", fs.Get(k).Name(), err)
		}
	}
	return nil
}

func setProtoField(m protoreflect.Message, fd protoreflect.FieldDescriptor, arr arrow.Array, i int) error {
	switch {
	case fd.IsMap():
		la := arr.(*array.List)
		lo, hi := la.ValueOffsets(i)
		if lo == hi {
			return nil
		}
		ent := la.ListValues().(*array.Struct)
		mp := m.Mutable(fd).Map()
		for j := int(lo); j < int(hi); j++ {
			k, err := protoValueOf(ent.Field(0), j, fd.MapKey(), nil)
			if err != nil {
				return err
			}
			v, err := protoValueOf(ent.Field(1), j, fd.MapValue(), mp.NewValue)
			if err != nil {
				return err
			}
			mp.Set(k.MapKey(), v)
		}
	case fd.IsList():
		la := arr.(*array.List)
		lo, hi := la.ValueOffsets(i)
		if lo == hi {
			return nil
		}
		l := m.Mutable(fd).List()
		for j := int(lo); j < int(hi); j++ {
			v, err := protoValueOf(la.ListValues(), j, fd, l.NewElement)
			if err != nil {
				return err
			}
			l.Append(v)
		}
	case arr.IsNull(i):
	default:
		v, err := protoValueOf(arr, i, fd, func() protoreflect.Value { return m.NewField(fd) })
		if err != nil {
			return err
		}
		m.Set(fd, v)
	}
	return nil
}

// errProtoColumn: a column whose Arrow type is not fd's.
var errProtoColumn = errors.New("column type does not match the field")

// protoValueOf is element i of arr as a value of fd's kind; fresh makes
// an empty message of a message-typed fd.
func protoValueOf(arr arrow.Array, i int, fd protoreflect.FieldDescriptor, fresh func() protoreflect.Value) (v protoreflect.Value, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("%w: %s for %s", errProtoColumn, arr.DataType(), fd.Kind())
		}
	}()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(arr.(*array.Boolean).Value(i)), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(arr.(*array.Int32).Value(i)), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(arr.(*array.Int64).Value(i)), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(arr.(*array.Uint32).Value(i)), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(arr.(*array.Uint64).Value(i)), nil
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(arr.(*array.Float32).Value(i)), nil
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(arr.(*array.Float64).Value(i)), nil
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(arr.(*array.String).Value(i)), nil
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(bytes.Clone(arr.(*array.Binary).Value(i))), nil
	case protoreflect.EnumKind:
		name := arr.(*array.String).Value(i)
		if ev := fd.Enum().Values().ByName(protoreflect.Name(name)); ev != nil {
			return protoreflect.ValueOfEnum(ev.Number()), nil
		}
		n, err := strconv.ParseInt(name, 10, 32)
		if err != nil {
			return v, fmt.Errorf("enum %s has no value %q", fd.Enum().FullName(), name)
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), nil
	}
	v = fresh()
	m := v.Message()
	md := fd.Message()
	switch n := md.FullName(); {
	case n == wktTimestamp:
		us := int64(arr.(*array.Timestamp).Value(i))
		s, r := us/1e6, us%1e6
		if r < 0 { // nanos are never negative
			s, r = s-1, r+1e6
		}
		m.Set(md.Fields().ByNumber(1), protoreflect.ValueOfInt64(s))
		m.Set(md.Fields().ByNumber(2), protoreflect.ValueOfInt32(int32(r*1e3)))
	case n == wktDuration:
		us := int64(arr.(*array.Duration).Value(i))
		m.Set(md.Fields().ByNumber(1), protoreflect.ValueOfInt64(us/1e6))
		m.Set(md.Fields().ByNumber(2), protoreflect.ValueOfInt32(int32(us%1e6*1e3)))
	case protoWrappers[n]:
		vf := md.Fields().ByNumber(1)
		x, err := protoValueOf(arr, i, vf, nil)
		if err != nil {
			return v, err
		}
		m.Set(vf, x)
	default:
		if err := fillProto(m, arr, i); err != nil {
			return v, err
		}
	}
	return v, nil
}
