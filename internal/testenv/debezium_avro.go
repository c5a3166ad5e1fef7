package testenv

import (
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// The Avro shapes of a DebeziumTable: the schemas Confluent's
// AvroConverter registers for the connector's keys and values and the
// values it writes, as io.confluent.connect.avro.AvroData maps Connect
// schemas (fromConnectSchema): int8 and int16 are "int" with
// "connect.type", a logical type keeps its Connect name in "connect.name"
// (with "connect.version" and "connect.parameters"), Connect's Decimal,
// Date, Time and Timestamp also get Avro's logicalType (a decimal without
// connect.decimal.precision has precision 64), an optional field is a
// union of null and its type with default null (its type first when it
// has another default), a struct is a record named by its Connect name
// (io.confluent.connect.avro.ConnectDefault when it has none), a map with
// string keys an Avro map and one with other keys an array of MapEntry
// records. The values are hamba/avro's generic form of the JsonConverter
// payloads the Row holds (base64 strings decoded, decimals as *big.Rat,
// union values wrapped in {branch: value}; a required field the payload
// lacks is its type's zero), with names adjusted as Debezium's
// schema.name.adjustment.mode=avro does. Independent of rtrctl's
// decoders: it only builds schemas and values.

// avroShape is the Avro schema of a Connect schema and how a JSON
// payload value becomes a hamba/avro value of it.
type avroShape struct {
	schema any
	branch string // its name as a union branch
	conv   func(v any) any
	// zero is the value of a required field the payload lacks (the
	// columns other than the key in the before of a PostgreSQL delete
	// under REPLICA IDENTITY DEFAULT).
	zero any
}

type avroNamer struct {
	defined  map[string]bool
	defaults int
	structs  map[string]avroShape // the named structs mapped
}

// avroOf maps a Connect schema (JsonConverter's form) to Avro.
func (n *avroNamer) avroOf(cs map[string]any) avroShape {
	typ, _ := cs["type"].(string)
	name, _ := cs["name"].(string)
	params, _ := cs["parameters"].(map[string]any)
	sh := n.required(typ, name, params, cs)
	if opt, _ := cs["optional"].(bool); !opt {
		return sh
	}
	inner := sh
	wrap := func(v any) any {
		if v == nil {
			return nil
		}
		return map[string]any{inner.branch: inner.conv(v)}
	}
	if d, ok := cs["default"]; ok && d != nil {
		return avroShape{schema: []any{inner.schema, "null"}, branch: "union", conv: wrap}
	}
	return avroShape{schema: []any{"null", inner.schema}, branch: "union", conv: wrap}
}

func (n *avroNamer) required(typ, name string, params map[string]any, cs map[string]any) avroShape {
	s := map[string]any{}
	if name != "" {
		s["connect.name"] = name
		if v, ok := cs["version"]; ok {
			s["connect.version"] = v
		}
		if params != nil {
			s["connect.parameters"] = params
		}
	}
	prim := func(avroType string, conv func(any) any) avroShape {
		s["type"] = avroType
		branch := avroType
		if lt, ok := s["logicalType"].(string); ok {
			branch += "." + lt
		}
		zero := map[string]any{"int": 0, "long": int64(0), "float": float32(0), "double": 0.0, "boolean": false, "string": "", "bytes": []byte{}}[avroType]
		if branch == "bytes.decimal" {
			zero = new(big.Rat)
		}
		return avroShape{schema: s, branch: branch, conv: conv, zero: zero}
	}
	switch typ {
	case "int8", "int16":
		s["connect.type"] = typ
		return prim("int", func(v any) any { return int(toInt64(v)) })
	case "int32":
		switch name {
		case "org.apache.kafka.connect.data.Date":
			s["logicalType"] = "date"
		case "org.apache.kafka.connect.data.Time":
			s["logicalType"] = "time-millis"
		}
		return prim("int", func(v any) any { return int(toInt64(v)) })
	case "int64":
		if name == "org.apache.kafka.connect.data.Timestamp" {
			s["logicalType"] = "timestamp-millis"
		}
		return prim("long", func(v any) any { return toInt64(v) })
	case "float":
		return prim("float", func(v any) any { return float32(toFloat(v)) })
	case "double":
		return prim("double", func(v any) any { return toFloat(v) })
	case "boolean":
		return prim("boolean", func(v any) any { return v.(bool) })
	case "string":
		return prim("string", func(v any) any { return v.(string) })
	case "bytes":
		if name == "org.apache.kafka.connect.data.Decimal" {
			scale, _ := strconv.Atoi(fmt.Sprint(params["scale"]))
			prec := 64
			if p, ok := params["connect.decimal.precision"]; ok {
				prec, _ = strconv.Atoi(fmt.Sprint(p))
			}
			s["logicalType"], s["precision"], s["scale"] = "decimal", prec, scale
			return prim("bytes", func(v any) any {
				unscaled := twos(unbase64(v))
				return new(big.Rat).SetFrac(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
			})
		}
		return prim("bytes", func(v any) any { return unbase64(v) })
	case "array":
		items := n.avroOf(cs["items"].(map[string]any))
		s["type"], s["items"] = "array", items.schema
		return avroShape{schema: s, branch: "array", conv: func(v any) any {
			var out []any
			for _, it := range v.([]any) {
				out = append(out, items.conv(it))
			}
			if out == nil {
				out = []any{}
			}
			return out
		}}
	case "map":
		keys, vals := cs["keys"].(map[string]any), n.avroOf(cs["values"].(map[string]any))
		if keys["type"] == "string" {
			s["type"], s["values"] = "map", vals.schema
			return avroShape{schema: s, branch: "map", conv: func(v any) any {
				out := map[string]any{}
				for k, x := range v.(map[string]any) {
					out[k] = vals.conv(x)
				}
				return out
			}}
		}
		ks := n.avroOf(keys)
		entry := n.record("io.confluent.connect.avro.MapEntry", []any{
			map[string]any{"name": "key", "type": ks.schema}, map[string]any{"name": "value", "type": vals.schema}}, nil)
		s["type"], s["items"] = "array", entry
		return avroShape{schema: s, branch: "array", conv: func(v any) any {
			out := []any{}
			for _, p := range v.([]any) {
				kv := p.([]any)
				out = append(out, map[string]any{"key": ks.conv(kv[0]), "value": vals.conv(kv[1])})
			}
			return out
		}}
	case "struct":
		name = avroName(name)
		if sh, ok := n.structs[name]; ok && name != "" {
			return avroShape{schema: name, branch: name, conv: sh.conv}
		}
		var fields []any
		convs, zeros := map[string]func(any) any{}, map[string]any{}
		for _, f := range cs["fields"].([]any) {
			fm := f.(map[string]any)
			fs := n.avroOf(fm)
			field := map[string]any{"name": fm["field"], "type": fs.schema}
			if opt, _ := fm["optional"].(bool); opt {
				field["default"] = nil
				if d, ok := fm["default"]; ok {
					field["default"] = d
				}
			}
			fields = append(fields, field)
			convs[fm["field"].(string)] = fs.conv
			zeros[fm["field"].(string)] = fs.zero
		}
		full := name
		if full == "" {
			n.defaults++
			full = "io.confluent.connect.avro.ConnectDefault"
			if n.defaults > 1 {
				full += strconv.Itoa(n.defaults)
			}
		}
		if name != "" {
			s["connect.name"] = name
		}
		rec := n.record(full, fields, s)
		sh := avroShape{schema: rec, branch: full, conv: func(v any) any {
			m := v.(map[string]any)
			out := map[string]any{}
			for k, c := range convs {
				if x, ok := m[k]; ok && x != nil {
					out[k] = c(x)
				} else {
					out[k] = zeros[k]
				}
			}
			return out
		}}
		if name != "" {
			n.structs[name] = sh
		}
		return sh
	}
	panic(fmt.Sprintf("testenv: no Avro shape for Connect type %q", typ))
}

// record is the Avro record full (namespace.name) with fields, or a
// reference by name when it was defined before.
func (n *avroNamer) record(full string, fields []any, props map[string]any) any {
	if n.defined[full] {
		return full
	}
	n.defined[full] = true
	rec := map[string]any{"type": "record", "fields": fields}
	for k, v := range props {
		rec[k] = v
	}
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		rec["namespace"], rec["name"] = full[:i], full[i+1:]
	} else {
		rec["name"] = full
	}
	return rec
}

// avroName is a Connect struct's name as Debezium's
// schema.name.adjustment.mode=avro writes it: characters Avro names do
// not take replaced by _ (mysql-server-1 -> mysql_server_1).
func avroName(name string) string {
	b := []byte(name)
	for i, c := range b {
		ok := c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0 && b[i-1] != '.'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

func toInt64(v any) int64 {
	switch v := v.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	case int32:
		return int64(v)
	case float64:
		return int64(v)
	}
	panic(fmt.Sprintf("testenv: %T is not an integer", v))
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case float32:
		return float64(v)
	}
	return float64(toInt64(v))
}

func unbase64(v any) []byte {
	b, err := base64.StdEncoding.DecodeString(v.(string))
	if err != nil {
		panic(fmt.Sprintf("testenv: bytes %q are not base64: %v", v, err))
	}
	return b
}

func twos(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

// keyShape and valueShape are the Avro shapes of t's key and change
// event (the Connect schemas KeyOf and Event write).
func (t *DebeziumTable) keyShape() avroShape {
	n := &avroNamer{defined: map[string]bool{}, structs: map[string]avroShape{}}
	return n.avroOf(map[string]any{"type": "struct", "fields": t.fields(t.Key), "optional": false, "name": t.prefix() + ".Key"})
}

func (t *DebeziumTable) valueShape() avroShape {
	n := &avroNamer{defined: map[string]bool{}, structs: map[string]avroShape{}}
	return n.avroOf(t.envelopeSchema())
}

// AvroKeySchema is the Avro schema AvroConverter registers for t's keys
// (subject <topic>-key).
func (t *DebeziumTable) AvroKeySchema() string { return string(mustJSON(t.keyShape().schema)) }

// AvroValueSchema is the Avro schema AvroConverter registers for t's
// change events (subject <topic>-value); a table with columns added has
// another.
func (t *DebeziumTable) AvroValueSchema() string { return string(mustJSON(t.valueShape().schema)) }

// AvroKey is row's key as hamba/avro encodes it with AvroKeySchema.
func (t *DebeziumTable) AvroKey(row Row) map[string]any {
	payload := map[string]any{}
	for _, k := range t.Key {
		payload[k] = row[k]
	}
	return t.keyShape().conv(payload).(map[string]any)
}

// AvroEvent is Event's change event as hamba/avro encodes it with
// AvroValueSchema; op "t" (before and after nil) is a truncate, which
// Debezium writes with the same schema.
func (t *DebeziumTable) AvroEvent(op string, before, after Row, pos, tsMs int64) map[string]any {
	payload := map[string]any{"before": rowOrNil(before), "after": rowOrNil(after), "source": t.source(op, pos, tsMs),
		"op": op, "ts_ms": tsMs + 2, "transaction": nil}
	return t.valueShape().conv(payload).(map[string]any)
}
