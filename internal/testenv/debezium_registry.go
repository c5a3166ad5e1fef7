package testenv

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Debezium over a schema registry: DebeziumSerde turns the JsonConverter
// records DebeziumTable writes into the records Confluent's
// ProtobufConverter or JsonSchemaConverter would write for them: the
// Connect schema becomes a registered schema (registered under
// <topic>-key and <topic>-value when first used: a table whose columns
// changed registers a new version), the payload a message or document
// of it framed with franz-go's sr.Encode. It is independent of rtrctl's
// decoders.
//
// Protobuf (ProtobufConverter with optional.for.nullables=true): a Connect
// struct is a message nested in the one that holds it, named by the last
// part of its Connect name (or its field's name); an optional primitive
// is proto3 optional; int8 and int16 are int32 with the field option
// (confluent.field_meta) params connect.type; Decimal is
// confluent.type.Decimal with params precision and scale; Date, Time and
// Timestamp are google.type.Date, google.type.TimeOfDay and
// google.protobuf.Timestamp; Debezium's logical names are lost (the
// primitive only) unless names is set, which adds params connect.name.
//
// JSON Schema (JsonSchemaConverter): a struct is an object with a title
// (its Connect name) and properties carrying connect.index; an optional
// field is oneOf null and its schema; integer and number carry
// connect.type; bytes are strings with connect.type bytes (base64); a
// logical type has connect.name and connect.parameters; Decimal is a
// number; a map with string keys an object with additionalProperties.

// DebeziumSerde converts a DebeziumTable's records for one topic and
// format ("protobuf" or "json-schema").
type DebeziumSerde struct {
	reg    *Registry
	Format string
	Topic  string
	Table  *DebeziumTable
	// Names: Protobuf fields keep Debezium's logical names in their
	// params (connect.name).
	Names bool
	// by schema text: registered protobuf serdes and JSON Schema ids.
	protos map[string]*ProtoSerde
	jsons  map[string]int
}

// DebeziumSerde returns the converter of tb's records for topic in
// format.
func (r *Registry) DebeziumSerde(format, topic string, tb *DebeziumTable) *DebeziumSerde {
	return &DebeziumSerde{reg: r, Format: format, Topic: topic, Table: tb, protos: map[string]*ProtoSerde{}, jsons: map[string]int{}}
}

// Key is tb.KeyOf(row) converted.
func (s *DebeziumSerde) Key(t testing.TB, row Row) []byte {
	t.Helper()
	return s.Convert(t, "key", s.Table.KeyOf(row))
}

// Event is tb.Event(...) converted.
func (s *DebeziumSerde) Event(t testing.TB, op string, before, after Row, pos, tsMs int64) []byte {
	t.Helper()
	return s.Convert(t, "value", s.Table.Event(op, before, after, pos, tsMs))
}

// Truncate is a truncate event (op t, no before or after) with the
// envelope schema of the table's other events, converted.
func (s *DebeziumSerde) Truncate(t testing.TB, pos, tsMs int64) []byte {
	t.Helper()
	var rec struct {
		Schema  json.RawMessage `json:"schema"`
		Payload map[string]any  `json:"payload"`
	}
	dec := json.NewDecoder(bytes.NewReader(s.Table.Event("t", nil, nil, pos, tsMs)))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	delete(rec.Payload, "before")
	delete(rec.Payload, "after")
	delete(rec.Payload, "transaction")
	return s.Convert(t, "value", mustJSON(map[string]any{"schema": rec.Schema, "payload": rec.Payload}))
}

// Convert converts a JsonConverter record ({"schema", "payload"}) of role
// key or value.
func (s *DebeziumSerde) Convert(t testing.TB, role string, record []byte) []byte {
	t.Helper()
	var rec struct {
		Schema  map[string]any `json:"schema"`
		Payload any            `json:"payload"`
	}
	dec := json.NewDecoder(bytes.NewReader(record))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	subject := s.Topic + "-" + role
	switch s.Format {
	case "protobuf":
		text := connectProtoFile(rec.Schema, s.Names)
		ps := s.protos[text]
		if ps == nil {
			ps = s.reg.ProtoSerde(t, subject, text)
			s.protos[text] = ps
		}
		md := ps.File.Messages().Get(0)
		m := dynamicpb.NewMessage(md)
		if err := fillConnect(m, rec.Schema, rec.Payload); err != nil {
			t.Fatalf("convert %s: %v", record, err)
		}
		return ps.Encode(t, m)
	case "json-schema":
		text := string(mustJSON(connectJSONSchema(rec.Schema)))
		id, ok := s.jsons[text]
		if !ok {
			id = s.reg.RegisterJSON(t, subject, text)
			s.jsons[text] = id
		}
		doc, err := connectDocument(rec.Schema, rec.Payload)
		if err != nil {
			t.Fatalf("convert %s: %v", record, err)
		}
		b, err := sr.Encode(doc, &sr.ConfluentHeader{}, id, nil, json.Marshal)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("debezium serde: format %q", s.Format)
	return nil
}

// cs reads a Connect schema's attributes.
type cs map[string]any

func (c cs) str(k string) string { s, _ := c[k].(string); return s }
func (c cs) optional() bool      { b, _ := c["optional"].(bool); return b }
func (c cs) fields() []cs {
	var out []cs
	fs, _ := c["fields"].([]any)
	for _, f := range fs {
		out = append(out, cs(f.(map[string]any)))
	}
	return out
}
func (c cs) sub(k string) cs { m, _ := c[k].(map[string]any); return cs(m) }
func (c cs) params() map[string]any {
	m, _ := c["parameters"].(map[string]any)
	return m
}

func lastPart(name string) string { return name[strings.LastIndex(name, ".")+1:] }

func protoIdent(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// connectProtoFile is the .proto file of a Connect struct schema.
func connectProtoFile(schema map[string]any, names bool) string {
	root := cs(schema)
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\n")
	if n := root.str("name"); strings.Contains(n, ".") {
		fmt.Fprintf(&b, "package %s;\n", protoIdent(n[:strings.LastIndex(n, ".")]))
	}
	for _, imp := range []string{"confluent/meta.proto", "confluent/type/decimal.proto", "google/type/date.proto", "google/type/timeofday.proto", "google/protobuf/timestamp.proto"} {
		fmt.Fprintf(&b, "import %q;\n", imp)
	}
	name := lastPart(root.str("name"))
	if name == "" {
		name = "ConnectDefault"
	}
	protoMessage(&b, name, root, names, "")
	return b.String()
}

func protoMessage(b *strings.Builder, name string, s cs, names bool, indent string) {
	fmt.Fprintf(b, "%smessage %s {\n", indent, name)
	declared := map[string]bool{}
	for i, f := range s.fields() {
		typ, opts := protoType(b, f, names, indent+"  ", declared, f.str("field"))
		label := ""
		switch {
		case f.str("type") == "array":
			label = "repeated "
		case f.optional() && !strings.Contains(typ, ".") && !declared[typ] && !strings.HasPrefix(typ, "map<"):
			label = "optional "
		}
		fmt.Fprintf(b, "%s  %s%s %s = %d%s;\n", indent, label, typ, protoIdent(f.str("field")), i+1, opts)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

// protoType is the field type (declaring nested messages in b) and
// options of Connect schema f.
func protoType(b *strings.Builder, f cs, names bool, indent string, declared map[string]bool, field string) (string, string) {
	params := map[string]string{}
	opts := func() string {
		if len(params) == 0 {
			return ""
		}
		var kv []string
		for k, v := range params {
			kv = append(kv, fmt.Sprintf("{key: %q, value: %q}", k, v))
		}
		slices.Sort(kv)
		return fmt.Sprintf(" [(confluent.field_meta) = {params: [%s]}]", strings.Join(kv, ", "))
	}
	name := f.str("name")
	switch name {
	case "org.apache.kafka.connect.data.Decimal":
		p := f.params()
		params["scale"] = fmt.Sprint(p["scale"])
		if prec, ok := p["connect.decimal.precision"]; ok {
			params["precision"] = fmt.Sprint(prec)
		}
		return "confluent.type.Decimal", opts()
	case "org.apache.kafka.connect.data.Date":
		return "google.type.Date", ""
	case "org.apache.kafka.connect.data.Time":
		return "google.type.TimeOfDay", ""
	case "org.apache.kafka.connect.data.Timestamp":
		return "google.protobuf.Timestamp", ""
	}
	if names && strings.HasPrefix(name, "io.debezium.") && f.str("type") != "struct" {
		params["connect.name"] = name
	}
	switch t := f.str("type"); t {
	case "int8", "int16":
		params["connect.type"] = t
		return "int32", opts()
	case "int32", "int64", "float", "double", "string", "bytes":
		return t, opts()
	case "boolean":
		return "bool", opts()
	case "array":
		it, _ := protoType(b, f.sub("items"), names, indent, declared, field)
		return it, opts()
	case "map":
		kt, _ := protoType(b, f.sub("keys"), names, indent, declared, field+"_key")
		vt, _ := protoType(b, f.sub("values"), names, indent, declared, field+"_value")
		return "map<" + kt + ", " + vt + ">", ""
	case "struct":
		mn := lastPart(name)
		if mn == "" {
			mn = strings.ToUpper(field[:1]) + field[1:]
		}
		if !declared[mn] {
			declared[mn] = true
			protoMessage(b, mn, f, names, indent)
		}
		return mn, ""
	}
	panic("debezium serde: connect type " + f.str("type"))
}

// fillConnect sets m's fields from payload, a value of struct schema s.
func fillConnect(m protoreflect.Message, s map[string]any, payload any) error {
	obj, ok := payload.(map[string]any)
	if !ok {
		return fmt.Errorf("payload %v is not an object", payload)
	}
	fds := m.Descriptor().Fields()
	for _, f := range cs(s).fields() {
		v := obj[f.str("field")]
		if v == nil {
			continue
		}
		fd := fds.ByName(protoreflect.Name(protoIdent(f.str("field"))))
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for _, it := range v.([]any) {
				if it == nil {
					return fmt.Errorf("field %s: a null element, which a repeated field cannot hold", fd.Name())
				}
				x, err := protoValue(fd, f.sub("items"), it, l.NewElement)
				if err != nil {
					return err
				}
				l.Append(x)
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for k, it := range v.(map[string]any) {
				if it == nil {
					return fmt.Errorf("field %s: a null value, which a map cannot hold", fd.Name())
				}
				x, err := protoValue(fd.MapValue(), f.sub("values"), it, mp.NewValue)
				if err != nil {
					return err
				}
				mp.Set(protoreflect.ValueOfString(k).MapKey(), x)
			}
		default:
			x, err := protoValue(fd, f, v, func() protoreflect.Value { return m.NewField(fd) })
			if err != nil {
				return fmt.Errorf("field %s: %w", fd.Name(), err)
			}
			m.Set(fd, x)
		}
	}
	return nil
}

func num(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%v is not a number", v)
	}
	return n.Int64()
}

// protoValue converts v, a JsonConverter value of Connect schema f, to a
// value of fd.
func protoValue(fd protoreflect.FieldDescriptor, f cs, v any, fresh func() protoreflect.Value) (protoreflect.Value, error) {
	if fd.Kind() == protoreflect.MessageKind {
		x := fresh()
		m := x.Message()
		get := func(n string) protoreflect.FieldDescriptor {
			return m.Descriptor().Fields().ByName(protoreflect.Name(n))
		}
		switch fd.Message().FullName() {
		case "confluent.type.Decimal":
			b, err := base64.StdEncoding.DecodeString(v.(string))
			if err != nil {
				return x, err
			}
			scale, _ := strconv.Atoi(fmt.Sprint(f.params()["scale"]))
			prec, _ := strconv.Atoi(fmt.Sprint(f.params()["connect.decimal.precision"]))
			m.Set(get("value"), protoreflect.ValueOfBytes(b))
			m.Set(get("precision"), protoreflect.ValueOfUint32(uint32(prec)))
			m.Set(get("scale"), protoreflect.ValueOfInt32(int32(scale)))
		case "google.type.Date":
			days, err := num(v)
			if err != nil {
				return x, err
			}
			d := time.Unix(days*86400, 0).UTC()
			m.Set(get("year"), protoreflect.ValueOfInt32(int32(d.Year())))
			m.Set(get("month"), protoreflect.ValueOfInt32(int32(d.Month())))
			m.Set(get("day"), protoreflect.ValueOfInt32(int32(d.Day())))
		case "google.type.TimeOfDay":
			ms, err := num(v)
			if err != nil {
				return x, err
			}
			m.Set(get("hours"), protoreflect.ValueOfInt32(int32(ms/3600000)))
			m.Set(get("minutes"), protoreflect.ValueOfInt32(int32(ms/60000%60)))
			m.Set(get("seconds"), protoreflect.ValueOfInt32(int32(ms/1000%60)))
			m.Set(get("nanos"), protoreflect.ValueOfInt32(int32(ms%1000*1e6)))
		case "google.protobuf.Timestamp":
			ms, err := num(v)
			if err != nil {
				return x, err
			}
			s, r := ms/1000, ms%1000
			if r < 0 {
				s, r = s-1, r+1000
			}
			m.Set(get("seconds"), protoreflect.ValueOfInt64(s))
			m.Set(get("nanos"), protoreflect.ValueOfInt32(int32(r*1e6)))
		default:
			if err := fillConnect(m, f, v); err != nil {
				return x, err
			}
		}
		return x, nil
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind:
		n, err := num(v)
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind:
		n, err := num(v)
		return protoreflect.ValueOfInt64(n), err
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		n, ok := v.(json.Number)
		if !ok {
			return protoreflect.Value{}, fmt.Errorf("%v is not a number", v)
		}
		x, err := n.Float64()
		if fd.Kind() == protoreflect.FloatKind {
			return protoreflect.ValueOfFloat32(float32(x)), err
		}
		return protoreflect.ValueOfFloat64(x), err
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(v.(bool)), nil
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(v.(string)), nil
	case protoreflect.BytesKind:
		b, err := base64.StdEncoding.DecodeString(v.(string))
		return protoreflect.ValueOfBytes(b), err
	}
	return protoreflect.Value{}, fmt.Errorf("kind %s", fd.Kind())
}

// connectJSONSchema is the JSON Schema JsonSchemaConverter writes for a
// Connect schema.
func connectJSONSchema(schema map[string]any) map[string]any {
	f := cs(schema)
	out := map[string]any{}
	name := f.str("name")
	switch t := f.str("type"); t {
	case "int8", "int16", "int32", "int64":
		out["type"], out["connect.type"] = "integer", t
	case "float":
		out["type"], out["connect.type"] = "number", "float32"
	case "double":
		out["type"], out["connect.type"] = "number", "float64"
	case "boolean":
		out["type"] = "boolean"
	case "string":
		out["type"] = "string"
	case "bytes":
		out["type"], out["connect.type"] = "string", "bytes"
		if name == "org.apache.kafka.connect.data.Decimal" {
			out["type"] = "number"
		}
	case "array":
		out["type"], out["items"] = "array", optionalJSON(f.sub("items"))
	case "map":
		out["type"], out["connect.type"], out["additionalProperties"] = "object", "map", optionalJSON(f.sub("values"))
	case "struct":
		props := map[string]any{}
		for i, fl := range f.fields() {
			p := optionalJSON(fl)
			p["connect.index"] = i
			props[fl.str("field")] = p
		}
		out["type"], out["properties"] = "object", props
		if name != "" {
			out["title"] = name
		}
		name = ""
	}
	if name != "" {
		out["connect.name"] = name
	}
	if p := f.params(); p != nil {
		out["connect.parameters"] = p
	}
	return out
}

// optionalJSON is the schema of f, oneOf null when f is optional.
func optionalJSON(f cs) map[string]any {
	s := connectJSONSchema(f)
	if !f.optional() {
		return s
	}
	return map[string]any{"oneOf": []any{map[string]any{"type": "null"}, s}}
}

// connectDocument is the document JsonSchemaConverter writes for a
// JsonConverter payload of schema: the same JSON, decimals as numbers.
func connectDocument(schema map[string]any, v any) (any, error) {
	f := cs(schema)
	if v == nil {
		return nil, nil
	}
	switch f.str("type") {
	case "struct":
		if f.str("name") == "io.debezium.data.VariableScaleDecimal" {
			return v, nil
		}
		obj := map[string]any{}
		for _, fl := range f.fields() {
			x, err := connectDocument(fl, v.(map[string]any)[fl.str("field")])
			if err != nil {
				return nil, err
			}
			if _, ok := v.(map[string]any)[fl.str("field")]; ok {
				obj[fl.str("field")] = x
			}
		}
		return obj, nil
	case "array":
		var out []any
		for _, it := range v.([]any) {
			x, err := connectDocument(f.sub("items"), it)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	case "bytes":
		if f.str("name") == "org.apache.kafka.connect.data.Decimal" {
			b, err := base64.StdEncoding.DecodeString(v.(string))
			if err != nil {
				return nil, err
			}
			u := new(big.Int).SetBytes(b)
			if len(b) > 0 && b[0]&0x80 != 0 {
				u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			}
			scale, _ := strconv.Atoi(fmt.Sprint(f.params()["scale"]))
			r := new(big.Rat).SetFrac(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
			return json.Number(r.FloatString(scale)), nil
		}
	}
	return v, nil
}
