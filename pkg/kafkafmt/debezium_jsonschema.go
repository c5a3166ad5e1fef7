package kafkafmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Debezium over JSON Schema: the json-schema format is a ChangeFormat for
// records written by Confluent's JsonSchemaConverter: a document (the
// change event's payload, or the key) validated by its registered writer
// schema. Each writer schema is compiled once: its JSON Schema is read
// back into the Kafka Connect schema the converter wrote it from
// (connectOfJSONSchema: connect.type for the Connect type behind
// "integer", "number" and "string", connect.name, or the title, for a
// logical type, connect.parameters, connect.index for the field order, a
// oneOf with null for an optional field), and that is compiled and read
// exactly as the JSON path reads JsonConverter's (debezium_json.go): the
// same columns, the same Arrow types, the same payload decoding.

// jsDbzPlan is a compiled writer schema in one role.
type jsDbzPlan struct {
	valid *jsonschema.Schema
	c     *jsonCompiled
}

// jsDbzPlans are a json-schema format's Debezium plans by role and writer
// schema id.
type jsDbzPlans struct {
	plans   map[[2]uint32]*jsDbzPlan
	refused map[[2]uint32]error
}

// dbzPlan returns the plan of data's writer schema in role ('k' or 'v')
// and the document.
func (f *jsonSchemaFormat) dbzPlan(data []byte, role byte) (*jsDbzPlan, []byte, error) {
	id, err := confluentID(data, "JSON", "; the json format takes JsonConverter's JSON")
	if err != nil {
		return nil, nil, err
	}
	key := [2]uint32{uint32(role), id}
	if p, ok := f.dbz.plans[key]; ok {
		return p, data[confluentHeader:], nil
	}
	if err, ok := f.dbz.refused[key]; ok {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := f.compileDbz(ctx, id, role)
	if errors.As(err, new(*TransientError)) {
		return nil, nil, err
	}
	if f.dbz.plans == nil {
		f.dbz.plans, f.dbz.refused = map[[2]uint32]*jsDbzPlan{}, map[[2]uint32]error{}
	}
	if err != nil {
		f.dbz.refused[key] = err
		return nil, nil, err
	}
	f.dbz.plans[key] = p
	return p, data[confluentHeader:], nil
}

func (f *jsonSchemaFormat) compileDbz(ctx context.Context, id uint32, role byte) (*jsDbzPlan, error) {
	rs, err := f.reg.SchemaText(ctx, int(id))
	if err != nil {
		return nil, recordSchemaErr("json-schema", f.reg, id, err)
	}
	if rs.Type != "JSON" {
		return nil, fmt.Errorf("schema id %d is a %s schema, not JSON Schema", id, rs.Type)
	}
	valid, err := compileJSONSchema(int(id), rs.Text)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	var doc jsDoc
	if err := json.Unmarshal([]byte(rs.Text), &doc); err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	cs, err := connectOfJSONSchema(&doc, "")
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	compile := compileKey
	if role == 'v' {
		compile = compileEnvelope
	}
	c := compile(cs)
	if c.err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, c.err)
	}
	return &jsDbzPlan{valid: valid, c: c}, nil
}

// decode validates doc against the plan's writer schema.
func (p *jsDbzPlan) validate(doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if err := p.valid.Validate(v); err != nil {
		return fmt.Errorf("the document does not validate: %s", oneLine(err))
	}
	return nil
}

// DecodeKey implements ChangeFormat for Debezium keys over JSON Schema.
func (f *jsonSchemaFormat) DecodeKey(data []byte, e *RowEncoder) (*RowSchema, error) {
	p, doc, err := f.dbzPlan(data, 'k')
	if err != nil {
		return nil, err
	}
	if err := p.validate(doc); err != nil {
		return nil, err
	}
	return decodeKeyPayload(doc, p.c, e)
}

// DecodeChange implements ChangeFormat for Debezium values over JSON
// Schema.
func (f *jsonSchemaFormat) DecodeChange(data []byte, e *RowEncoder) (Change, error) {
	p, doc, err := f.dbzPlan(data, 'v')
	if err != nil {
		return Change{}, err
	}
	if err := p.validate(doc); err != nil {
		return Change{}, err
	}
	return decodeChangePayload(doc, p.c, e)
}

// jsDoc is the part of a JSON Schema JsonSchemaConverter writes that says
// the Connect schema.
type jsDoc struct {
	Type                 jsTypes           `json:"type"`
	Title                string            `json:"title"`
	ConnectName          string            `json:"connect.name"`
	ConnectType          string            `json:"connect.type"`
	ConnectIndex         *int              `json:"connect.index"`
	ConnectParameters    map[string]string `json:"connect.parameters"`
	Properties           jsProps           `json:"properties"`
	Required             []string          `json:"required"`
	Items                *jsDoc            `json:"items"`
	AdditionalProperties *jsDoc            `json:"-"`
	OneOf                []jsDoc           `json:"oneOf"`
	AnyOf                []jsDoc           `json:"anyOf"`
	Ref                  string            `json:"$ref"`
}

// UnmarshalJSON reads additionalProperties only when it is a schema (not
// true or false).
func (d *jsDoc) UnmarshalJSON(b []byte) error {
	type plain jsDoc
	var aux struct {
		*plain
		AP json.RawMessage `json:"additionalProperties"`
	}
	aux.plain = (*plain)(d)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if len(aux.AP) > 0 && aux.AP[0] == '{' {
		d.AdditionalProperties = new(jsDoc)
		return json.Unmarshal(aux.AP, d.AdditionalProperties)
	}
	return nil
}

// jsTypes is a schema's type: one name or several.
type jsTypes []string

func (t *jsTypes) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = jsTypes{s}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(t))
}

// jsProps are an object's properties in the document's order.
type jsProps []jsPropDoc

type jsPropDoc struct {
	name string
	doc  jsDoc
}

func (p *jsProps) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("properties is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var d jsDoc
		if err := dec.Decode(&d); err != nil {
			return err
		}
		*p = append(*p, jsPropDoc{name: t.(string), doc: d})
	}
	return nil
}

// connectOfJSONSchema is the Kafka Connect schema d was written from, as
// JsonSchemaConverter writes one: field is its name in its struct.
func connectOfJSONSchema(d *jsDoc, field string) (*connectSchema, error) {
	if d.Ref != "" {
		return nil, fmt.Errorf("%s: $ref (%s) is not supported in a Debezium schema", orRoot(field), d.Ref)
	}
	if alts := append(slices.Clone(d.OneOf), d.AnyOf...); len(alts) > 0 {
		var some []jsDoc
		for _, a := range alts {
			if !slices.Equal(a.Type, jsTypes{"null"}) {
				some = append(some, a)
			}
		}
		if len(some) != 1 {
			return nil, fmt.Errorf("%s: a union of %d types (not one type or null) has no Connect type", orRoot(field), len(some))
		}
		cs, err := connectOfJSONSchema(&some[0], field)
		if err != nil {
			return nil, err
		}
		cs.Optional = cs.Optional || len(some) < len(alts)
		return cs, nil
	}
	types := slices.DeleteFunc(slices.Clone(d.Type), func(t string) bool { return t == "null" })
	cs := &connectSchema{Field: field, Optional: len(types) < len(d.Type), Name: d.ConnectName, Parameters: d.ConnectParameters}
	if cs.Name == "" {
		cs.Name = d.Title
	}
	if len(types) != 1 {
		return nil, fmt.Errorf("%s: type %v has no Connect type", orRoot(field), []string(d.Type))
	}
	switch types[0] {
	case "integer":
		cs.Type = "int64"
		switch d.ConnectType {
		case "int8", "int16", "int32", "int64":
			cs.Type = d.ConnectType
		}
	case "number":
		cs.Type = "double"
		switch d.ConnectType {
		case "float32":
			cs.Type = "float"
		case "bytes": // a Decimal written as a number
			cs.Type = "bytes"
		}
	case "boolean":
		cs.Type = "boolean"
	case "string":
		cs.Type = "string"
		if d.ConnectType == "bytes" {
			cs.Type = "bytes"
		}
	case "array":
		if d.Items == nil {
			return nil, fmt.Errorf("%s: an array without items", orRoot(field))
		}
		if d.ConnectType == "map" {
			return nil, fmt.Errorf("%s: a map with keys that are not strings (an array of key and value) is not supported over JSON Schema", orRoot(field))
		}
		items, err := connectOfJSONSchema(d.Items, field+"[]")
		if err != nil {
			return nil, err
		}
		cs.Type, cs.Items = "array", items
	case "object":
		if d.ConnectType == "map" || (len(d.Properties) == 0 && d.AdditionalProperties != nil) {
			if d.AdditionalProperties == nil {
				return nil, fmt.Errorf("%s: a map without additionalProperties", orRoot(field))
			}
			return connectMap(cs, &jsDoc{Type: jsTypes{"string"}}, d.AdditionalProperties, field)
		}
		cs.Type = "struct"
		props := slices.Clone(d.Properties)
		if !slices.ContainsFunc(props, func(p jsPropDoc) bool { return !hasIndex(p.doc) }) {
			slices.SortStableFunc(props, func(a, b jsPropDoc) int { return propIndex(a.doc) - propIndex(b.doc) })
		}
		for _, p := range props {
			c, err := connectOfJSONSchema(&p.doc, p.name)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(d.Required, p.name) {
				c.Optional = true
			}
			cs.Fields = append(cs.Fields, *c)
		}
	default:
		return nil, fmt.Errorf("%s: type %s has no Connect type", orRoot(field), types[0])
	}
	return cs, nil
}

// connectMap makes cs a Connect map of keys k and values v.
func connectMap(cs *connectSchema, k, v *jsDoc, field string) (*connectSchema, error) {
	ks, err := connectOfJSONSchema(k, field+".key")
	if err != nil {
		return nil, err
	}
	vs, err := connectOfJSONSchema(v, field+".value")
	if err != nil {
		return nil, err
	}
	cs.Type, cs.Keys, cs.Values = "map", ks, vs
	return cs, nil
}

// hasIndex: an optional property's connect.index is on the oneOf's
// schema, or on its non-null member.
func hasIndex(d jsDoc) bool { return propIndex(d) >= 0 }

func propIndex(d jsDoc) int {
	if d.ConnectIndex != nil {
		return *d.ConnectIndex
	}
	for _, a := range append(slices.Clone(d.OneOf), d.AnyOf...) {
		if a.ConnectIndex != nil {
			return *a.ConnectIndex
		}
	}
	return -1
}

func orRoot(field string) string {
	if field == "" {
		return "the schema"
	}
	return "field " + strings.TrimSuffix(field, "[]")
}
