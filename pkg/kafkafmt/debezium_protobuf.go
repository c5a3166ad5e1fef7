package kafkafmt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Debezium over Protobuf: the protobuf format is a ChangeFormat for
// records written by Confluent's ProtobufConverter. Each writer schema
// (id and message index) is compiled once into a plan: for a value, the
// message's after field (a message of the table's columns) and its op
// string; for a key, the message's fields. The columns are the fields of
// that message flattened as the JSON path flattens a Connect struct
// (debezium_json.go): nested messages to outer.inner, repeated fields to
// lists, maps to name.keys and name.values (sorted by key).
//
// ProtobufConverter writes Connect's logical types as Confluent's and
// Google's messages, which map to the Arrow types of the JSON path:
// google.protobuf.Timestamp (Connect Timestamp) timestamp[ms, UTC],
// google.type.Date date32, google.type.TimeOfDay time32[ms],
// confluent.type.Decimal decimal128 (precision and scale from the
// field's confluent.field_meta params), int8 and int16 from the params'
// connect.type. Debezium's own logical names (io.debezium.time.*, Uuid,
// ZonedTimestamp) are not in the schema ProtobufConverter writes: those
// columns stay int32/int64/utf8, unless the field's params carry
// connect.name, which maps as the JSON path maps it. A message named
// VariableScaleDecimal (scale, value) is the exact decimal as utf8.

// pbPlans are a protobuf format's compiled Debezium plans by writer
// (writerKey) and role.
type pbPlans struct {
	plans   map[string]*pbPlan
	refused map[string]error
}

// pbPlan is the plan of one writer schema (message) in one role.
type pbPlan struct {
	msg       *dynamicpb.Message // reused for every record
	unmarshal proto.UnmarshalOptions
	row       *RowSchema // nil: a value without an after field
	node      *pbNode    // the row's message (after's, or the key's)
	after, op protoreflect.FieldDescriptor
}

// pbLeaf is how a protobuf value of a leaf column is written.
type pbLeaf uint8

const (
	pbInt pbLeaf = iota
	pbUint
	pbFloat32
	pbFloat64
	pbBool
	pbString
	pbBytes
	pbEnum
	pbTimestamp  // google.protobuf.Timestamp -> ms
	pbDate       // google.type.Date -> days
	pbTimeOfDay  // google.type.TimeOfDay -> ms
	pbDecimal    // confluent.type.Decimal
	pbVarDecimal // a VariableScaleDecimal message -> decimal text
	pbWrapper    // google.protobuf.*Value: elem is the value
	pbUUID       // string named io.debezium.data.Uuid
	pbZoned      // string named io.debezium.time.ZonedTimestamp
)

// pbNode writes one field: a message flattened ('s'), a leaf ('l'), a
// repeated field ('a', elem its values) or a map ('m', key and elem).
type pbNode struct {
	fd       protoreflect.FieldDescriptor // nil for the row's message
	kind     byte
	fields   []*pbNode
	leaves   int
	nullable bool // absent is null (the field has presence)

	leaf  pbLeaf
	typ   arrow.DataType
	bits  int // pbInt, pbUint: the Arrow integer's width
	scale int32
	elem  *pbNode
	key   *pbNode
	enum  protoreflect.EnumDescriptor // pbEnum
}

// dbzPlan returns the plan of data's writer schema in role ('k' or 'v')
// and the payload.
func (f *protoFormat) dbzPlan(data []byte, role byte) (*pbPlan, []byte, error) {
	id, index, payload, err := protoFrame(data)
	if err != nil {
		return nil, nil, err
	}
	key := string(role) + writerKey(id, index)
	if p, ok := f.dbz.plans[key]; ok {
		return p, payload, nil
	}
	if err, ok := f.dbz.refused[key]; ok {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	md, err := writerMessage(ctx, f.reg, id, index)
	var p *pbPlan
	if err == nil {
		if p, err = compilePBPlan(md, role); err != nil {
			err = fmt.Errorf("schema id %d: message %s: %w", id, md.FullName(), err)
		}
	}
	if _, ok := errors.AsType[*TransientError](err); ok {
		return nil, nil, err
	}
	if f.dbz.plans == nil {
		f.dbz.plans, f.dbz.refused = map[string]*pbPlan{}, map[string]error{}
	}
	if err != nil {
		f.dbz.refused[key] = err
		return nil, nil, err
	}
	f.dbz.plans[key] = p
	return p, payload, nil
}

// compilePBPlan compiles md as a Debezium change event ('v': its after
// and op fields) or key ('k').
func compilePBPlan(md protoreflect.MessageDescriptor, role byte) (*pbPlan, error) {
	p := &pbPlan{msg: dynamicpb.NewMessage(md),
		unmarshal: proto.UnmarshalOptions{DiscardUnknown: true, AllowPartial: !hasRequired(md, nil)}}
	row, what := md, "key"
	if role == 'v' {
		p.op = md.Fields().ByName("op")
		if p.op == nil || p.op.Kind() != protoreflect.StringKind || p.op.IsList() {
			return nil, errors.New("not a Debezium change event: no string field op")
		}
		p.after = md.Fields().ByName("after")
		if p.after == nil {
			return p, nil // a truncate event may carry only source, op, ts_ms
		}
		if p.after.Message() == nil || p.after.IsList() || p.after.IsMap() {
			return nil, fmt.Errorf("field after is %s, want a message of the table's columns", p.after.Kind())
		}
		row, what = p.after.Message(), "after"
	}
	var fields []arrow.Field
	n, err := compilePBStruct(row, "", &fields, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("%s: no fields", what)
	}
	for i := range fields {
		for j := range i {
			if fields[i].Name == fields[j].Name {
				return nil, fmt.Errorf("%s: two columns named %q (flattened)", what, fields[i].Name)
			}
		}
	}
	p.row, p.node = &RowSchema{Fields: fields}, n
	return p, nil
}

// pbParams are a field's confluent.field_meta params (connect.type,
// connect.name, precision, scale), read from its options' wire bytes.
func pbParams(fd protoreflect.FieldDescriptor) map[string]string {
	opts := fd.Options()
	if opts == nil {
		return nil
	}
	b, err := proto.Marshal(opts.(proto.Message))
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, meta := range wireFields(b, 1088) {
		for _, entry := range wireFields(meta, 2) { // Meta.params
			k, v := wireFields(entry, 1), wireFields(entry, 2)
			if len(k) == 1 && len(v) == 1 {
				if out == nil {
					out = map[string]string{}
				}
				out[string(k[0])] = string(v[0])
			}
		}
	}
	return out
}

// wireFields returns the length-delimited values of field num in b.
func wireFields(b []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return out
		}
		b = b[l:]
		if typ == protowire.BytesType && n == num {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return out
			}
			out = append(out, v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return out
		}
		b = b[m:]
	}
	return out
}

func compilePBStruct(md protoreflect.MessageDescriptor, prefix string, out *[]arrow.Field, seen []protoreflect.FullName) (*pbNode, error) {
	seen = append(seen, md.FullName())
	n := &pbNode{kind: 's'}
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		name := prefix + string(fd.Name())
		var c *pbNode
		switch {
		case fd.IsMap():
			k, err := compilePBValue(fd.MapKey(), nil)
			if err != nil {
				return nil, fmt.Errorf("map %s keys: %w", name, err)
			}
			v, err := compilePBValue(fd.MapValue(), nil)
			if err != nil {
				return nil, fmt.Errorf("map %s values: %w", name, err)
			}
			c = &pbNode{kind: 'm', key: k, elem: v, leaves: 2}
			*out = append(*out, arrow.Field{Name: name + ".keys", Type: arrow.ListOf(k.typ), Nullable: true},
				arrow.Field{Name: name + ".values", Type: arrow.ListOf(v.typ), Nullable: true})
		case fd.IsList():
			e, err := compilePBValue(fd, pbParams(fd))
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", name, err)
			}
			c = &pbNode{kind: 'a', elem: e, leaves: 1, typ: arrow.ListOf(e.typ)}
			*out = append(*out, arrow.Field{Name: name, Type: c.typ, Nullable: true})
		case fd.Message() != nil && !pbLeafMessage(fd.Message()):
			if slices.Contains(seen, fd.Message().FullName()) {
				return nil, fmt.Errorf("column %s: message %s is recursive", name, fd.Message().FullName())
			}
			var err error
			if c, err = compilePBStruct(fd.Message(), name+".", out, seen); err != nil {
				return nil, err
			}
		default:
			var err error
			if c, err = compilePBValue(fd, pbParams(fd)); err != nil {
				return nil, fmt.Errorf("column %s: %w", name, err)
			}
			c.leaves = 1
			*out = append(*out, arrow.Field{Name: name, Type: c.typ, Nullable: true})
		}
		c.fd, c.nullable = fd, fd.HasPresence()
		n.fields = append(n.fields, c)
		n.leaves += c.leaves
	}
	return n, nil
}

// pbLeafMessage: a message that is one column, not a struct of them.
func pbLeafMessage(md protoreflect.MessageDescriptor) bool {
	switch n := md.FullName(); {
	case n == wktTimestamp, n == "google.type.Date", n == "google.type.TimeOfDay", n == "confluent.type.Decimal", protoWrappers[n]:
		return true
	}
	return isVarDecimal(md)
}

// isVarDecimal: Debezium's io.debezium.data.VariableScaleDecimal struct,
// as ProtobufConverter names its message.
func isVarDecimal(md protoreflect.MessageDescriptor) bool {
	if md.Name() != "VariableScaleDecimal" || md.Fields().Len() != 2 {
		return false
	}
	s, v := md.Fields().ByName("scale"), md.Fields().ByName("value")
	return s != nil && v != nil && s.Kind() == protoreflect.Int32Kind && v.Kind() == protoreflect.BytesKind
}

// compilePBValue compiles one value of fd's kind (a list's element, a
// map's key or value, a singular field) with the field's params.
func compilePBValue(fd protoreflect.FieldDescriptor, params map[string]string) (*pbNode, error) {
	n := &pbNode{kind: 'l'}
	name := params["connect.name"]
	if it, ok := connectInts[name]; ok && name != "" {
		n.leaf, n.bits, n.typ = pbInt, it.bits, it.typ
		switch fd.Kind() {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			if it.bits != 32 {
				return nil, fmt.Errorf("logical type %s on %s, want int64", name, fd.Kind())
			}
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			if it.bits != 64 {
				return nil, fmt.Errorf("logical type %s on %s, want int32", name, fd.Kind())
			}
		default:
			return nil, fmt.Errorf("logical type %s on %s, want an integer", name, fd.Kind())
		}
		return n, nil
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n.leaf, n.bits, n.typ = pbInt, 32, arrow.PrimitiveTypes.Int32
		switch params["connect.type"] {
		case "int8":
			n.bits, n.typ = 8, arrow.PrimitiveTypes.Int8
		case "int16":
			n.bits, n.typ = 16, arrow.PrimitiveTypes.Int16
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n.leaf, n.bits, n.typ = pbInt, 64, arrow.PrimitiveTypes.Int64
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n.leaf, n.bits, n.typ = pbUint, 64, arrow.PrimitiveTypes.Int64
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return nil, fmt.Errorf("%s has no column type in the debezium envelope (Kafka Connect has no unsigned integers)", fd.Kind())
	case protoreflect.FloatKind:
		n.leaf, n.typ = pbFloat32, arrow.PrimitiveTypes.Float32
	case protoreflect.DoubleKind:
		n.leaf, n.typ = pbFloat64, arrow.PrimitiveTypes.Float64
	case protoreflect.BoolKind:
		n.leaf, n.typ = pbBool, arrow.FixedWidthTypes.Boolean
	case protoreflect.StringKind:
		n.leaf, n.typ = pbString, arrow.BinaryTypes.String
		switch name {
		case "io.debezium.data.Uuid":
			n.leaf, n.typ = pbUUID, &arrow.FixedSizeBinaryType{ByteWidth: 16}
		case "io.debezium.time.ZonedTimestamp":
			n.leaf, n.typ = pbZoned, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
		}
	case protoreflect.BytesKind:
		n.leaf, n.typ = pbBytes, arrow.BinaryTypes.Binary
	case protoreflect.EnumKind:
		n.leaf, n.typ, n.enum = pbEnum, arrow.BinaryTypes.String, fd.Enum()
	case protoreflect.MessageKind:
		return compilePBMessageValue(fd, params)
	default:
		return nil, fmt.Errorf("protobuf kind %s has no column type", fd.Kind())
	}
	return n, nil
}

func compilePBMessageValue(fd protoreflect.FieldDescriptor, params map[string]string) (*pbNode, error) {
	md := fd.Message()
	n := &pbNode{kind: 'l'}
	switch fn := md.FullName(); {
	case fn == wktTimestamp:
		n.leaf, n.typ = pbTimestamp, &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}
	case fn == "google.type.Date":
		n.leaf, n.typ = pbDate, arrow.FixedWidthTypes.Date32
	case fn == "google.type.TimeOfDay":
		n.leaf, n.typ = pbTimeOfDay, arrow.FixedWidthTypes.Time32ms
	case fn == "confluent.type.Decimal":
		ps, ok := params["scale"]
		if !ok {
			return nil, errors.New("confluent.type.Decimal without a scale in the field's confluent.field_meta params, so its column type is unknown")
		}
		scale, err := strconv.ParseInt(ps, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("decimal scale %q: %w", ps, err)
		}
		prec := int64(38)
		if p, ok := params["precision"]; ok {
			if prec, err = strconv.ParseInt(p, 10, 32); err != nil {
				return nil, fmt.Errorf("decimal precision %q: %w", p, err)
			}
		}
		if prec > 38 || prec < 1 || scale > prec || scale < 0 {
			return nil, fmt.Errorf("decimal(%d, %d) does not fit decimal128 (precision 1-38, scale 0-precision); set decimal.handling.mode=string on the Debezium connector", prec, scale)
		}
		n.leaf, n.scale, n.typ = pbDecimal, int32(scale), &arrow.Decimal128Type{Precision: int32(prec), Scale: int32(scale)}
	case protoWrappers[fn]:
		e, err := compilePBValue(md.Fields().ByNumber(1), params)
		if err != nil {
			return nil, err
		}
		n.leaf, n.typ, n.elem = pbWrapper, e.typ, e
	case isVarDecimal(md):
		n.leaf, n.typ = pbVarDecimal, arrow.BinaryTypes.String
	default:
		return nil, fmt.Errorf("a message (%s) inside a repeated field or map is not supported (flatten it upstream, e.g. with an SMT)", fn)
	}
	return n, nil
}

// DecodeKey implements ChangeFormat for Debezium keys over Protobuf.
func (f *protoFormat) DecodeKey(data []byte, e *RowEncoder) (*RowSchema, error) {
	p, payload, err := f.dbzPlan(data, 'k')
	if err != nil {
		return nil, err
	}
	if err := p.decode(payload); err != nil {
		return nil, err
	}
	e.Reset()
	if err := p.node.encodeStruct(p.msg, e); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	return p.row, nil
}

// DecodeChange implements ChangeFormat for Debezium values over Protobuf.
func (f *protoFormat) DecodeChange(data []byte, e *RowEncoder) (Change, error) {
	p, payload, err := f.dbzPlan(data, 'v')
	if err != nil {
		return Change{}, err
	}
	if err := p.decode(payload); err != nil {
		return Change{}, err
	}
	e.Reset()
	op := p.msg.Get(p.op).String()
	if len(op) != 1 {
		return Change{}, fmt.Errorf("op %q is not a Debezium op (c, r, u, d, t)", op)
	}
	ch := Change{Op: op[0], Schema: p.row}
	if p.after != nil && p.msg.Has(p.after) {
		if err := p.node.encodeStruct(p.msg.Get(p.after).Message(), e); err != nil {
			return Change{}, fmt.Errorf("after: %w", err)
		}
		ch.After = true
	}
	return ch, nil
}

func (p *pbPlan) decode(payload []byte) error {
	p.msg.Reset()
	if err := p.unmarshal.Unmarshal(payload, p.msg); err != nil {
		return fmt.Errorf("protobuf: %w", err)
	}
	return nil
}

// encodeStruct writes the columns of m, a message of n's.
func (n *pbNode) encodeStruct(m protoreflect.Message, e *RowEncoder) error {
	for _, c := range n.fields {
		if err := c.encodeField(m, e); err != nil {
			return err
		}
	}
	return nil
}

// encodeField writes the columns of field n.fd of m.
func (n *pbNode) encodeField(m protoreflect.Message, e *RowEncoder) error {
	switch n.kind {
	case 's':
		if !m.Has(n.fd) {
			for range n.leaves {
				e.Null()
			}
			return nil
		}
		return n.encodeStruct(m.Get(n.fd).Message(), e)
	case 'a':
		l := m.Get(n.fd).List()
		e.List(l.Len())
		for i := range l.Len() {
			if err := n.elem.encodeValue(l.Get(i), e); err != nil {
				return fmt.Errorf("%s: %w", n.fd.Name(), err)
			}
		}
		return nil
	case 'm':
		mp := m.Get(n.fd).Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, cmpMapKey) // a map has no order; the row must be canonical
		e.List(len(keys))
		for _, k := range keys {
			if err := n.key.encodeValue(k.Value(), e); err != nil {
				return fmt.Errorf("%s: %w", n.fd.Name(), err)
			}
		}
		e.List(len(keys))
		for _, k := range keys {
			if err := n.elem.encodeValue(mp.Get(k), e); err != nil {
				return fmt.Errorf("%s: %w", n.fd.Name(), err)
			}
		}
		return nil
	}
	if n.nullable && !m.Has(n.fd) {
		e.Null()
		return nil
	}
	if err := n.encodeValue(m.Get(n.fd), e); err != nil {
		return fmt.Errorf("%s: %w", n.fd.Name(), err)
	}
	return nil
}

// encodeValue writes v, one value of a leaf.
func (n *pbNode) encodeValue(v protoreflect.Value, e *RowEncoder) error {
	switch n.leaf {
	case pbInt:
		x := v.Int()
		if n.bits < 64 && (x < -(1<<(n.bits-1)) || x >= 1<<(n.bits-1)) {
			return fmt.Errorf("%d does not fit int%d", x, n.bits)
		}
		e.Int(x)
	case pbUint:
		e.Int(int64(v.Uint()))
	case pbFloat32:
		e.Float32(float32(v.Float()))
	case pbFloat64:
		e.Float64(v.Float())
	case pbBool:
		e.Bool(v.Bool())
	case pbString:
		e.Binary(stringBytes(v.String()))
	case pbBytes:
		e.Binary(v.Bytes())
	case pbEnum:
		e.Binary([]byte(enumName(n.enum, v.Enum())))
	case pbUUID:
		u, err := uuid.Parse(v.String())
		if err != nil {
			return fmt.Errorf("want a UUID: %w", err)
		}
		e.Binary(u[:])
	case pbZoned:
		t, err := time.Parse(time.RFC3339Nano, v.String())
		if err != nil {
			return fmt.Errorf("want an ISO-8601 timestamp with offset: %w", err)
		}
		if t.Nanosecond()%1000 != 0 {
			return fmt.Errorf("timestamp %s is finer than microseconds", v.String())
		}
		e.Int(t.UnixMicro())
	default:
		return n.encodeMessage(v.Message(), e)
	}
	return nil
}

// encodeMessage writes a message that is one column.
func (n *pbNode) encodeMessage(m protoreflect.Message, e *RowEncoder) error {
	fs := m.Descriptor().Fields()
	get := func(num protowire.Number) protoreflect.Value { return m.Get(fs.ByNumber(num)) }
	switch n.leaf {
	case pbTimestamp:
		s, ns := get(1).Int(), get(2).Int()
		if ns%1e6 != 0 {
			return fmt.Errorf("timestamp %d.%09d is finer than milliseconds (Kafka Connect's Timestamp)", s, ns)
		}
		e.Int(s*1000 + ns/1e6)
	case pbDate:
		y, mo, d := get(1).Int(), get(2).Int(), get(3).Int()
		t := time.Date(int(y), time.Month(mo), int(d), 0, 0, 0, 0, time.UTC)
		if t.Year() != int(y) || int64(t.Month()) != mo || int64(t.Day()) != d {
			return fmt.Errorf("date %d-%d-%d is not a calendar date", y, mo, d)
		}
		e.Int(t.Unix() / 86400)
	case pbTimeOfDay:
		h, mi, s, ns := get(1).Int(), get(2).Int(), get(3).Int(), get(4).Int()
		if h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59 || ns < 0 || ns >= 1e9 || ns%1e6 != 0 {
			return fmt.Errorf("time of day %02d:%02d:%02d.%09d is not a time in milliseconds", h, mi, s, ns)
		}
		e.Int(((h*60+mi)*60+s)*1000 + ns/1e6)
	case pbDecimal:
		if sc := get(3).Int(); sc != int64(n.scale) {
			return fmt.Errorf("decimal of scale %d in a column of scale %d", sc, n.scale)
		}
		v := twosComplement(get(1).Bytes())
		if v.BitLen() > 127 {
			return errors.New("decimal does not fit decimal128")
		}
		num := decimal128.FromBigInt(v)
		dt := n.typ.(*arrow.Decimal128Type)
		if !num.FitsInPrecision(dt.Precision) {
			return fmt.Errorf("decimal %s does not fit precision %d", decimalText(v, dt.Scale), dt.Precision)
		}
		e.Decimal(num)
	case pbVarDecimal:
		scale := m.Get(m.Descriptor().Fields().ByName("scale")).Int()
		e.Binary([]byte(decimalText(twosComplement(m.Get(m.Descriptor().Fields().ByName("value")).Bytes()), int32(scale))))
	case pbWrapper:
		return n.elem.encodeValue(get(1), e)
	}
	return nil
}
