package kafkafmt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/google/uuid"
)

// Debezium JSON: the json format is a ChangeFormat for records written by
// Kafka Connect's JsonConverter with schemas.enable=true (its default):
// {"schema": <Connect schema>, "payload": <value>}. The columns come from
// the schema (after's for a value, the key's for a key), so every record
// says its own columns; records without a schema (schemas.enable=false)
// are refused with that setting named. Connect types and Debezium logical
// types map to Arrow as docs/kafka.md tabulates (connectLeaf).

// connectSchema is a Kafka Connect schema in JsonConverter's form.
type connectSchema struct {
	Type       string            `json:"type"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Fields     []connectSchema   `json:"fields"`
	Items      *connectSchema    `json:"items"`
	Keys       *connectSchema    `json:"keys"`
	Values     *connectSchema    `json:"values"`
	Parameters map[string]string `json:"parameters"`
}

// leafKind is how a JSON value of a leaf column is read.
type leafKind uint8

const (
	leafInt leafKind = iota
	leafFloat32
	leafFloat64
	leafBool
	leafString
	leafBytes
	leafDecimal    // Connect Decimal: base64 two's complement (or a JSON number)
	leafVarDecimal // io.debezium.data.VariableScaleDecimal: {scale, value} -> decimal text
	leafUUID       // io.debezium.data.Uuid: text -> 16 bytes
	leafZoned      // io.debezium.time.ZonedTimestamp: ISO-8601 text -> µs UTC
)

// jsonNode reads one Connect value: a struct (its fields, flattened), a
// leaf column, an array (a list column of its items) or a map (two list
// columns, keys and values).
type jsonNode struct {
	name   string // the field's name in its struct
	kind   byte   // 's' struct, 'l' leaf, 'a' array, 'm' map
	fields []*jsonNode
	leaves int // columns it writes

	leaf  leafKind
	typ   arrow.DataType
	bits  int   // leafInt: the integer's width
	scale int32 // leafDecimal

	elem     *jsonNode // 'a': items; 'm': values
	key      *jsonNode // 'm'
	jsonKeys bool      // 'm': a JSON object (string keys), else [[k, v], ...]
}

// jsonCompiled is a compiled envelope or key schema.
type jsonCompiled struct {
	row   *RowSchema // nil: the schema has no after row
	after *jsonNode
	err   error
}

// jsonSchemas caches compiled schemas by their JSON text: a topic's
// records repeat a few schemas, so a record's schema costs a lookup.
var jsonSchemas struct {
	m sync.Map // "k"|"v" + schema text -> *jsonCompiled
	n atomic.Int64
}

const maxJSONSchemas = 4096

func compiledSchema(kind byte, raw []byte, compile func(*connectSchema) *jsonCompiled) *jsonCompiled {
	var kb [1]byte
	kb[0] = kind
	key := string(kb[:]) + unsafe.String(unsafe.SliceData(raw), len(raw))
	if c, ok := jsonSchemas.m.Load(key); ok {
		return c.(*jsonCompiled)
	}
	var cs connectSchema
	var c *jsonCompiled
	if err := json.Unmarshal(raw, &cs); err != nil {
		c = &jsonCompiled{err: fmt.Errorf("schema: %w", err)}
	} else {
		c = compile(&cs)
	}
	if jsonSchemas.n.Add(1) <= maxJSONSchemas {
		jsonSchemas.m.Store(strings.Clone(key), c)
	}
	return c
}

// compileEnvelope compiles a Debezium envelope schema: its after field.
func compileEnvelope(cs *connectSchema) *jsonCompiled {
	if cs.Type != "struct" {
		return &jsonCompiled{err: fmt.Errorf("schema: a Debezium change event is a struct, not %s", cs.Type)}
	}
	i := slices.IndexFunc(cs.Fields, func(f connectSchema) bool { return f.Field == "after" })
	if i < 0 {
		return &jsonCompiled{} // a truncate event may carry only source, op, ts_ms
	}
	return compileRow(&cs.Fields[i], "after")
}

// compileKey compiles a record key's schema.
func compileKey(cs *connectSchema) *jsonCompiled { return compileRow(cs, "key") }

func compileRow(cs *connectSchema, what string) *jsonCompiled {
	if cs.Type != "struct" {
		return &jsonCompiled{err: fmt.Errorf("schema: %s is %s, want a struct of the table's columns", what, cs.Type)}
	}
	var fields []arrow.Field
	n, err := compileStruct(cs, "", &fields)
	if err != nil {
		return &jsonCompiled{err: fmt.Errorf("schema of %s: %w", what, err)}
	}
	if len(fields) == 0 {
		return &jsonCompiled{err: fmt.Errorf("schema of %s: no fields", what)}
	}
	if err := distinctColumns(fields); err != nil {
		return &jsonCompiled{err: fmt.Errorf("schema of %s: %w", what, err)}
	}
	return &jsonCompiled{row: &RowSchema{Fields: fields}, after: n}
}

// distinctColumns refuses two columns of one name (a struct field
// flattened to the name of another column).
func distinctColumns(fields []arrow.Field) error {
	for i := range fields {
		for j := range i {
			if fields[i].Name == fields[j].Name {
				return fmt.Errorf("two columns named %q (flattened)", fields[i].Name)
			}
		}
	}
	return nil
}

func compileStruct(cs *connectSchema, prefix string, out *[]arrow.Field) (*jsonNode, error) {
	n := &jsonNode{kind: 's'}
	for i := range cs.Fields {
		f := &cs.Fields[i]
		name := prefix + f.Field
		var c *jsonNode
		if f.Type == "struct" && f.Name != "io.debezium.data.VariableScaleDecimal" {
			var err error
			if c, err = compileStruct(f, name+".", out); err != nil {
				return nil, err
			}
		} else if f.Type == "map" {
			k, err := compileValue(f.Keys)
			if err != nil {
				return nil, fmt.Errorf("map %s keys: %w", name, err)
			}
			v, err := compileValue(f.Values)
			if err != nil {
				return nil, fmt.Errorf("map %s values: %w", name, err)
			}
			c = &jsonNode{kind: 'm', key: k, elem: v, leaves: 2, jsonKeys: f.Keys.Type == "string"}
			*out = append(*out, arrow.Field{Name: name + ".keys", Type: arrow.ListOf(k.typ), Nullable: true},
				arrow.Field{Name: name + ".values", Type: arrow.ListOf(v.typ), Nullable: true})
		} else {
			var err error
			if c, err = compileValue(f); err != nil {
				return nil, fmt.Errorf("column %s: %w", name, err)
			}
			c.leaves = 1
			*out = append(*out, arrow.Field{Name: name, Type: c.typ, Nullable: true})
		}
		c.name = f.Field
		n.fields = append(n.fields, c)
		n.leaves += c.leaves
	}
	return n, nil
}

// compileValue compiles a leaf or array schema (structs and maps are
// flattened into columns only at the top of a row, not inside arrays or
// maps).
func compileValue(cs *connectSchema) (*jsonNode, error) {
	if cs == nil {
		return nil, errors.New("no schema")
	}
	if cs.Type == "array" {
		e, err := compileValue(cs.Items)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		return &jsonNode{kind: 'a', elem: e, typ: arrow.ListOf(e.typ)}, nil
	}
	n := &jsonNode{kind: 'l'}
	if err := connectLeaf(cs, n); err != nil {
		return nil, err
	}
	return n, nil
}

// connectInts are the integer Connect types and the logical types on
// integers: their width and Arrow type.
var connectInts = map[string]struct {
	bits int
	typ  arrow.DataType
}{
	"int8": {8, arrow.PrimitiveTypes.Int8}, "int16": {16, arrow.PrimitiveTypes.Int16},
	"int32": {32, arrow.PrimitiveTypes.Int32}, "int64": {64, arrow.PrimitiveTypes.Int64},
	"io.debezium.time.Date":                   {32, arrow.FixedWidthTypes.Date32},
	"org.apache.kafka.connect.data.Date":      {32, arrow.FixedWidthTypes.Date32},
	"io.debezium.time.Time":                   {32, arrow.FixedWidthTypes.Time32ms},
	"org.apache.kafka.connect.data.Time":      {32, arrow.FixedWidthTypes.Time32ms},
	"io.debezium.time.MicroTime":              {64, arrow.FixedWidthTypes.Time64us},
	"io.debezium.time.NanoTime":               {64, arrow.FixedWidthTypes.Time64ns},
	"io.debezium.time.Timestamp":              {64, &arrow.TimestampType{Unit: arrow.Millisecond}},
	"io.debezium.time.MicroTimestamp":         {64, &arrow.TimestampType{Unit: arrow.Microsecond}},
	"io.debezium.time.NanoTimestamp":          {64, &arrow.TimestampType{Unit: arrow.Nanosecond}},
	"org.apache.kafka.connect.data.Timestamp": {64, &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
}

// connectLeaf sets n's leaf kind and Arrow type for a Connect schema:
// the logical name when it is one rtrctl knows, else the Connect type.
func connectLeaf(cs *connectSchema, n *jsonNode) error {
	intOf := func(bits int, typ arrow.DataType) error {
		n.leaf, n.bits, n.typ = leafInt, bits, typ
		want := map[int]string{8: "int8", 16: "int16", 32: "int32", 64: "int64"}[bits]
		if cs.Type != want {
			return fmt.Errorf("logical type %s on %s, want %s", cs.Name, cs.Type, want)
		}
		return nil
	}
	if it, ok := connectInts[cs.Name]; ok {
		return intOf(it.bits, it.typ)
	}
	switch cs.Name {
	case "io.debezium.time.ZonedTimestamp":
		n.leaf, n.typ = leafZoned, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
		return nil
	case "io.debezium.data.Uuid":
		n.leaf, n.typ = leafUUID, &arrow.FixedSizeBinaryType{ByteWidth: 16}
		return nil
	case "io.debezium.data.VariableScaleDecimal":
		n.leaf, n.typ = leafVarDecimal, arrow.BinaryTypes.String
		return nil
	case "org.apache.kafka.connect.data.Decimal":
		scale, err := strconv.ParseInt(cs.Parameters["scale"], 10, 32)
		if err != nil {
			return fmt.Errorf("decimal without a scale parameter: %w", err)
		}
		prec := int64(38)
		if p, ok := cs.Parameters["connect.decimal.precision"]; ok {
			if prec, err = strconv.ParseInt(p, 10, 32); err != nil {
				return fmt.Errorf("decimal precision %q: %w", p, err)
			}
		}
		if prec > 38 || prec < 1 || scale > prec || scale < 0 {
			return fmt.Errorf("decimal(%d, %d) does not fit decimal128 (precision 1-38, scale 0-precision); set decimal.handling.mode=string on the Debezium connector", prec, scale)
		}
		n.leaf, n.scale, n.typ = leafDecimal, int32(scale), &arrow.Decimal128Type{Precision: int32(prec), Scale: int32(scale)}
		return nil
	}
	if it, ok := connectInts[cs.Type]; ok && !strings.Contains(cs.Type, ".") { // a type, not a logical name
		return intOf(it.bits, it.typ)
	}
	switch cs.Type {
	case "float", "float32":
		n.leaf, n.typ = leafFloat32, arrow.PrimitiveTypes.Float32
	case "double", "float64":
		n.leaf, n.typ = leafFloat64, arrow.PrimitiveTypes.Float64
	case "boolean":
		n.leaf, n.typ = leafBool, arrow.FixedWidthTypes.Boolean
	case "string":
		n.leaf, n.typ = leafString, arrow.BinaryTypes.String
	case "bytes":
		n.leaf, n.typ = leafBytes, arrow.BinaryTypes.Binary
	case "struct", "map":
		return fmt.Errorf("a %s inside an array or map is not supported (flatten it upstream, e.g. with an SMT)", cs.Type)
	default:
		return fmt.Errorf("unknown Connect type %q", cs.Type)
	}
	return nil
}

// connectJSON is a JsonConverter record with schemas.
type connectJSON struct {
	Schema  json.RawMessage `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}

func splitConnect(data []byte) (connectJSON, error) {
	var c connectJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("malformed JSON: %w", err)
	}
	if len(c.Schema) == 0 || isNull(c.Schema) || len(c.Payload) == 0 {
		return c, errors.New(`not Kafka Connect JSON with a schema ({"schema": ..., "payload": ...}); ` +
			"the debezium envelope needs schemas: set key.converter.schemas.enable=true and value.converter.schemas.enable=true on the connector")
	}
	return c, nil
}

func isNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

// lastSchemas holds, for keys [0] and values [1], the schema texts last
// seen (one per topic of an ingest, up to len) and their compilations: a
// topic's records repeat theirs, so a record that is
// {"schema":<it>,"payload":P} (JsonConverter's order) or
// {"payload":P,"schema":<it>} (keys sorted) is split without scanning the
// schema again. The payload is then decoded (and so validated) as usual,
// and a record the shortcut misreads falls back to the full parse.
var lastSchemas [2]struct {
	seen [8]atomic.Pointer[seenSchema]
	next atomic.Uint32
}

type seenSchema struct {
	raw []byte
	c   *jsonCompiled
}

// splitSeen splits data as lastSchemas[kind] allows, or returns false.
func splitSeen(kind int, data []byte) ([]byte, *jsonCompiled, bool) {
	const sp, pp = `{"schema":`, `,"payload":`
	const pf, sf = `{"payload":`, `,"schema":`
	n := len(data)
	if n == 0 || data[n-1] != '}' {
		return nil, nil, false
	}
	for i := range lastSchemas[kind].seen {
		last := lastSchemas[kind].seen[i].Load()
		if last == nil {
			return nil, nil, false
		}
		sch := last.raw
		if n > len(sp)+len(sch)+len(pp) && string(data[:len(sp)]) == sp &&
			bytes.Equal(data[len(sp):len(sp)+len(sch)], sch) && string(data[len(sp)+len(sch):len(sp)+len(sch)+len(pp)]) == pp {
			return data[len(sp)+len(sch)+len(pp) : n-1], last.c, true
		}
		if tail := len(sf) + len(sch) + 1; n > len(pf)+tail && string(data[:len(pf)]) == pf &&
			string(data[n-tail:n-tail+len(sf)]) == sf && bytes.Equal(data[n-tail+len(sf):n-1], sch) {
			return data[len(pf) : n-tail], last.c, true
		}
	}
	return nil, nil, false
}

// splitFull parses data and compiles its schema, which becomes the last
// seen of kind.
func splitFull(kind int, data []byte, compile func(*connectSchema) *jsonCompiled) ([]byte, *jsonCompiled, error) {
	c, err := splitConnect(data)
	if err != nil {
		return nil, nil, err
	}
	k := compiledSchema(byte('k'+kind), c.Schema, compile)
	if k.err == nil {
		l := &lastSchemas[kind]
		i := (l.next.Add(1) - 1) % uint32(len(l.seen))
		l.seen[i].Store(&seenSchema{raw: bytes.Clone(c.Schema), c: k})
	}
	return c.Payload, k, k.err
}

// decodeConnect decodes data's payload with decode, splitting it by the
// last seen schema when it can.
func decodeConnect(kind int, data []byte, compile func(*connectSchema) *jsonCompiled, decode func(payload []byte, c *jsonCompiled) error) error {
	if payload, c, ok := splitSeen(kind, data); ok && decode(payload, c) == nil {
		return nil
	}
	payload, c, err := splitFull(kind, data, compile)
	if err != nil {
		return err
	}
	return decode(payload, c)
}

// DecodeKey implements ChangeFormat for Debezium JSON keys.
func (jsonFormat) DecodeKey(data []byte, e *RowEncoder) (*RowSchema, error) {
	var row *RowSchema
	err := decodeConnect(0, data, compileKey, func(payload []byte, k *jsonCompiled) (err error) {
		row, err = decodeKeyPayload(payload, k, e)
		return err
	})
	return row, err
}

// decodeKeyPayload writes the columns of payload, a key of k's schema.
func decodeKeyPayload(payload []byte, k *jsonCompiled, e *RowEncoder) (*RowSchema, error) {
	e.Reset()
	if isNull(payload) {
		return nil, errors.New("the key's payload is null")
	}
	return k.row, k.after.encode(payload, e)
}

// debeziumPayload is the part of a change event's payload the envelope
// reads (before, source and ts_ms are not).
type debeziumPayload struct {
	After json.RawMessage `json:"after"`
	Op    string          `json:"op"`
}

// DecodeChange implements ChangeFormat for Debezium JSON values.
func (jsonFormat) DecodeChange(data []byte, e *RowEncoder) (Change, error) {
	var ch Change
	err := decodeConnect(1, data, compileEnvelope, func(payload []byte, s *jsonCompiled) (err error) {
		ch, err = decodeChangePayload(payload, s, e)
		return err
	})
	return ch, err
}

// decodeChangePayload decodes payload, a change event of s's schema:
// its op, and its after row into e.
func decodeChangePayload(payload []byte, s *jsonCompiled, e *RowEncoder) (Change, error) {
	e.Reset()
	var p debeziumPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return Change{}, fmt.Errorf("payload: %w", err)
	}
	if len(p.Op) != 1 {
		return Change{}, fmt.Errorf("payload: op %q is not a Debezium op (c, r, u, d, t)", p.Op)
	}
	ch := Change{Op: p.Op[0], Schema: s.row}
	if !isNull(p.After) {
		if s.after == nil {
			return Change{}, errors.New("payload: an after row, but the schema has no after field")
		}
		if err := s.after.encode(p.After, e); err != nil {
			return Change{}, fmt.Errorf("after: %w", err)
		}
		ch.After = true
	}
	return ch, nil
}

// encode writes the columns of raw, a JSON value of n's schema.
func (n *jsonNode) encode(raw json.RawMessage, e *RowEncoder) error {
	switch n.kind {
	case 's':
		if isNull(raw) {
			for range n.leaves {
				e.Null()
			}
			return nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("%s: want an object: %w", n.name, err)
		}
		for _, f := range n.fields {
			if err := f.encode(obj[f.name], e); err != nil {
				return err
			}
		}
		return nil
	case 'm':
		return n.encodeMap(raw, e)
	}
	if err := n.encodeValue(raw, e); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

func (n *jsonNode) encodeMap(raw json.RawMessage, e *RowEncoder) error {
	if isNull(raw) {
		e.Null()
		e.Null()
		return nil
	}
	var keys, vals []json.RawMessage
	if n.jsonKeys {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("%s: want an object: %w", n.name, err)
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		slices.Sort(names) // a map has no order; the row must be canonical
		for _, k := range names {
			kb, _ := json.Marshal(k)
			keys, vals = append(keys, kb), append(vals, obj[k])
		}
	} else {
		var pairs [][2]json.RawMessage
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return fmt.Errorf("%s: want an array of [key, value]: %w", n.name, err)
		}
		for _, p := range pairs {
			keys, vals = append(keys, p[0]), append(vals, p[1])
		}
	}
	for _, part := range []struct {
		n  *jsonNode
		vs []json.RawMessage
	}{{n.key, keys}, {n.elem, vals}} {
		e.List(len(part.vs))
		for _, v := range part.vs {
			if err := part.n.encodeValue(v, e); err != nil {
				return fmt.Errorf("%s: %w", n.name, err)
			}
		}
	}
	return nil
}

// encodeValue writes a leaf or array value.
func (n *jsonNode) encodeValue(raw json.RawMessage, e *RowEncoder) error {
	if isNull(raw) {
		e.Null()
		return nil
	}
	if n.kind == 'a' {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("want an array: %w", err)
		}
		e.List(len(items))
		for _, it := range items {
			if err := n.elem.encodeValue(it, e); err != nil {
				return err
			}
		}
		return nil
	}
	text := unsafe.String(unsafe.SliceData(raw), len(raw))
	switch n.leaf {
	case leafInt:
		v, err := strconv.ParseInt(text, 10, n.bits)
		if err != nil {
			return fmt.Errorf("want an int%d: %w", n.bits, err)
		}
		e.Int(v)
	case leafFloat32, leafFloat64:
		bits := 64
		if n.leaf == leafFloat32 {
			bits = 32
		}
		var v float64
		var err error
		switch text {
		case `"NaN"`:
			v = math.NaN()
		case `"Infinity"`:
			v = math.Inf(1)
		case `"-Infinity"`:
			v = math.Inf(-1)
		default:
			v, err = strconv.ParseFloat(text, bits)
		}
		if err != nil {
			return fmt.Errorf("want a number: %w", err)
		}
		if bits == 32 {
			e.Float32(float32(v))
		} else {
			e.Float64(v)
		}
	case leafBool:
		switch text {
		case "true":
			e.Bool(true)
		case "false":
			e.Bool(false)
		default:
			return fmt.Errorf("want true or false, got %.40s", text)
		}
	case leafString, leafUUID, leafZoned:
		s, err := jsonString(raw)
		if err != nil {
			return err
		}
		return encodeText(n.leaf, s, e)
	case leafBytes:
		b, err := jsonBase64(raw)
		if err != nil {
			return err
		}
		e.Binary(b)
	case leafDecimal:
		v, err := n.decimal(raw)
		if err != nil {
			return err
		}
		e.Decimal(v)
	case leafVarDecimal:
		var vs struct {
			Scale *int32          `json:"scale"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &vs); err != nil || vs.Scale == nil {
			return fmt.Errorf("want a VariableScaleDecimal {scale, value}, got %.40s", text)
		}
		b, err := jsonBase64(vs.Value)
		if err != nil {
			return err
		}
		return encodeVarScale(b, int64(*vs.Scale), e)
	}
	return nil
}

// encodeText writes s, the text of a string leaf: utf8, a Uuid (16
// bytes) or a ZonedTimestamp (µs since the epoch).
func encodeText(leaf leafKind, s []byte, e *RowEncoder) error {
	switch leaf {
	case leafUUID:
		u, err := uuid.ParseBytes(s)
		if err != nil {
			return fmt.Errorf("want a UUID: %w", err)
		}
		e.Binary(u[:])
	case leafZoned:
		t, err := time.Parse(time.RFC3339Nano, string(s))
		if err != nil {
			return fmt.Errorf("want an ISO-8601 timestamp with offset: %w", err)
		}
		if t.Nanosecond()%1000 != 0 {
			return fmt.Errorf("timestamp %s is finer than microseconds", s)
		}
		e.Int(t.UnixMicro())
	default:
		e.Binary(s)
	}
	return nil
}

// decimal reads a Connect Decimal: base64 of the unscaled value's two's
// complement (decimal.format=BASE64, the default) or a JSON number
// (decimal.format=NUMERIC).
func (n *jsonNode) decimal(raw json.RawMessage) (decimal128.Num, error) {
	dt := n.typ.(*arrow.Decimal128Type)
	if raw[0] == '"' {
		b, err := jsonBase64(raw)
		if err != nil {
			return decimal128.Num{}, err
		}
		return connectDecimal(b, dt)
	}
	num, err := decimal128.FromString(string(raw), dt.Precision, dt.Scale)
	if err != nil {
		return decimal128.Num{}, fmt.Errorf("want a decimal: %w", err)
	}
	return num, nil
}

// maxVarScale bounds a VariableScaleDecimal's scale: PostgreSQL's
// numeric has at most 16383 digits after the point, and the text of a
// larger one would be as long as the scale says.
const maxVarScale = 16383

// encodeVarScale writes a VariableScaleDecimal (its unscaled value's
// two's complement and its scale) as its decimal text.
func encodeVarScale(unscaled []byte, scale int64, e *RowEncoder) error {
	if scale < -maxVarScale || scale > maxVarScale {
		return fmt.Errorf("VariableScaleDecimal scale %d is beyond ±%d", scale, maxVarScale)
	}
	e.Binary([]byte(decimalText(twosComplement(unscaled), int32(scale))))
	return nil
}

// connectDecimal is b, the unscaled value's two's complement (big
// endian), as a value of dt.
func connectDecimal(b []byte, dt *arrow.Decimal128Type) (decimal128.Num, error) {
	v := twosComplement(b)
	if v.BitLen() > 127 {
		return decimal128.Num{}, fmt.Errorf("decimal does not fit decimal128")
	}
	num := decimal128.FromBigInt(v)
	if !num.FitsInPrecision(dt.Precision) {
		return decimal128.Num{}, fmt.Errorf("decimal %s does not fit precision %d", decimalText(v, dt.Scale), dt.Precision)
	}
	return num, nil
}

func twosComplement(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

// decimalText is unscaled * 10^-scale in decimal notation.
func decimalText(unscaled *big.Int, scale int32) string {
	if scale <= 0 {
		return new(big.Int).Mul(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil)).String()
	}
	s := new(big.Int).Abs(unscaled).String()
	for len(s) <= int(scale) {
		s = "0" + s
	}
	s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	if unscaled.Sign() < 0 {
		s = "-" + s
	}
	return s
}

// jsonString returns the text of a JSON string.
func jsonString(raw json.RawMessage) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, fmt.Errorf("want a string, got %.40s", raw)
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// jsonBase64 decodes a JSON string of base64 (JsonConverter's bytes).
func jsonBase64(raw json.RawMessage) ([]byte, error) {
	s, err := jsonString(raw)
	if err != nil {
		return nil, err
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		return nil, fmt.Errorf("want base64 bytes: %w", err)
	}
	return b[:n], nil
}
