package kafkafmt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsKind is what a JSON Schema maps to (docs/kafka.md has the table).
type jsKind uint8

const (
	// jsText: what the mapping cannot type (a union of different types,
	// a $ref cycle, an open object without properties, no type at all),
	// as utf8 holding the value's JSON text.
	jsText jsKind = iota
	jsString
	jsInt
	jsNumber
	jsBool
	jsDate      // string, format date: date32
	jsTimestamp // string, format date-time: timestamp[us, UTC]
	jsBinary    // string, contentEncoding base64: binary
	jsObject    // properties: struct
	jsArray     // items: list
	jsMap       // additionalProperties only: list<struct<key, value>>
)

// jsNode is the column of a (sub)schema.
type jsNode struct {
	kind     jsKind
	nullable bool // the schema admits null: a null in the column
	typ      arrow.DataType
	props    []jsProp // jsObject, by name
	elem     *jsNode  // jsArray items, jsMap values
}

// jsProp is a property of an object.
type jsProp struct {
	name     string
	node     *jsNode
	required bool
}

// nullable: a property that may be missing or null is a nullable field.
func (p jsProp) nullable() bool { return !p.required || p.node.nullable }

var jsTextNode = &jsNode{kind: jsText, nullable: true, typ: arrow.BinaryTypes.String}

// mapJSONSchema maps s to its column; stack holds the schemas being
// mapped, so a $ref cycle becomes text instead of an endless type.
func mapJSONSchema(s *jsonschema.Schema, stack []*jsonschema.Schema) *jsNode {
	if s == nil || s.Bool != nil || slices.Contains(stack, s) || s.DynamicRef != nil || s.RecursiveRef != nil {
		return jsTextNode
	}
	stack = append(stack, s)
	if s.Types == nil {
		switch {
		case s.Ref != nil:
			return mapJSONSchema(s.Ref, stack)
		case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
			return mapUnion(append(slices.Clone(s.AnyOf), s.OneOf...), stack)
		case len(s.AllOf) == 1:
			return mapJSONSchema(s.AllOf[0], stack)
		case s.Enum != nil && len(s.Enum.Values) > 0 && allStrings(s.Enum.Values):
			return &jsNode{kind: jsString, typ: arrow.BinaryTypes.String}
		case s.Const != nil && isString(*s.Const):
			return &jsNode{kind: jsString, typ: arrow.BinaryTypes.String}
		}
		return jsTextNode
	}
	types := s.Types.ToStrings()
	nullable := slices.Contains(types, "null")
	types = slices.DeleteFunc(types, func(t string) bool { return t == "null" })
	if slices.Equal(types, []string{"number", "integer"}) {
		types = []string{"number"}
	}
	if len(types) != 1 {
		return jsTextNode
	}
	n := &jsNode{nullable: nullable}
	switch types[0] {
	case "boolean":
		n.kind, n.typ = jsBool, arrow.FixedWidthTypes.Boolean
	case "integer":
		n.kind, n.typ = jsInt, arrow.PrimitiveTypes.Int64
	case "number":
		n.kind, n.typ = jsNumber, arrow.PrimitiveTypes.Float64
	case "string":
		n.kind, n.typ = jsString, arrow.BinaryTypes.String
		switch {
		case s.Format != nil && s.Format.Name == "date":
			n.kind, n.typ = jsDate, arrow.FixedWidthTypes.Date32
		case s.Format != nil && s.Format.Name == "date-time":
			n.kind, n.typ = jsTimestamp, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
		case s.ContentEncoding != nil && s.ContentEncoding.Name == "base64":
			n.kind, n.typ = jsBinary, arrow.BinaryTypes.Binary
		}
	case "array":
		items, _ := s.Items.(*jsonschema.Schema)
		if s.Items2020 != nil {
			items = s.Items2020
		}
		if items == nil || len(s.PrefixItems) > 0 {
			return jsTextNode // a tuple, or items of any type
		}
		n.kind, n.elem = jsArray, mapJSONSchema(items, stack)
		n.typ = arrow.ListOfField(arrow.Field{Name: "item", Type: n.elem.typ, Nullable: n.elem.nullable})
	case "object":
		ap, _ := s.AdditionalProperties.(*jsonschema.Schema)
		switch {
		case len(s.Properties) > 0:
			n.kind = jsObject
			names := make([]string, 0, len(s.Properties))
			for name := range s.Properties {
				names = append(names, name)
			}
			slices.Sort(names)
			fields := make([]arrow.Field, 0, len(names))
			for _, name := range names {
				p := jsProp{name: name, node: mapJSONSchema(s.Properties[name], stack), required: slices.Contains(s.Required, name)}
				n.props = append(n.props, p)
				fields = append(fields, arrow.Field{Name: name, Type: p.node.typ, Nullable: p.nullable()})
			}
			n.typ = arrow.StructOf(fields...)
		case ap != nil && len(s.PatternProperties) == 0:
			n.kind, n.elem = jsMap, mapJSONSchema(ap, stack)
			n.typ = arrow.ListOfField(arrow.Field{Name: "entry", Type: arrow.StructOf(
				arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
				arrow.Field{Name: "value", Type: n.elem.typ, Nullable: n.elem.nullable})})
		default:
			return jsTextNode // an open object
		}
	}
	return n
}

// mapUnion maps anyOf/oneOf branches: null branches make the column
// nullable; one other branch is its type; more are text.
func mapUnion(bs []*jsonschema.Schema, stack []*jsonschema.Schema) *jsNode {
	var other []*jsonschema.Schema
	nullable := false
	for _, b := range bs {
		if b.Types != nil && b.Types.ToStrings()[0] == "null" && len(b.Types.ToStrings()) == 1 {
			nullable = true
			continue
		}
		other = append(other, b)
	}
	if len(other) != 1 {
		return jsTextNode
	}
	n := mapJSONSchema(other[0], stack)
	if nullable && !n.nullable {
		c := *n
		c.nullable = true
		n = &c
	}
	return n
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

func allStrings(vs []any) bool {
	for _, v := range vs {
		if !isString(v) {
			return false
		}
	}
	return true
}

// jsEntry is a map entry of a converted value.
type jsEntry struct {
	k string
	v any
}

const jsDateLayout, jsTimeLayout = "2006-01-02", "2006-01-02T15:04:05.999999Z07:00"

// convert maps doc (jsonschema.UnmarshalJSON's value, which validated
// against its writer schema) to n's columns: nil for null; string, int64,
// float64, bool; int32 days (date); int64 microseconds (date-time);
// []byte (base64); []any by property (object) or element (array);
// []jsEntry sorted by key (map); the compact JSON text (text). path
// names the property for errors.
func (n *jsNode) convert(doc any, path string) (any, error) {
	if doc == nil {
		if !n.nullable {
			return nil, fmt.Errorf("%snull, but the reader schema does not admit null", at(path))
		}
		return nil, nil
	}
	bad := func(want string) error {
		b, _ := json.Marshal(doc)
		if len(b) > 64 {
			b = append(b[:61], "..."...)
		}
		return fmt.Errorf("%s%s, but the reader schema wants %s", at(path), b, want)
	}
	switch n.kind {
	case jsText:
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("%s%w", at(path), err)
		}
		return string(b), nil
	case jsString, jsDate, jsTimestamp, jsBinary:
		s, ok := doc.(string)
		if !ok {
			return nil, bad("a string")
		}
		switch n.kind {
		case jsDate:
			t, err := time.Parse(jsDateLayout, s)
			if err != nil {
				return nil, bad("a date (format date)")
			}
			return int32(t.Unix() / 86400), nil
		case jsTimestamp:
			t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
			if err != nil {
				return nil, bad("an RFC 3339 date-time (format date-time)")
			}
			return t.UnixMicro(), nil
		case jsBinary:
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, bad("base64 (contentEncoding base64)")
			}
			return b, nil
		}
		return s, nil
	case jsInt:
		num, ok := doc.(json.Number)
		if !ok {
			return nil, bad("an integer")
		}
		if i, err := strconv.ParseInt(string(num), 10, 64); err == nil {
			return i, nil
		}
		r, ok := new(big.Rat).SetString(string(num))
		if !ok || !r.IsInt() || !r.Num().IsInt64() {
			return nil, bad("an integer of 64 bits")
		}
		return r.Num().Int64(), nil
	case jsNumber:
		num, ok := doc.(json.Number)
		if !ok {
			return nil, bad("a number")
		}
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil {
			return nil, bad("a number of float64's range")
		}
		return f, nil
	case jsBool:
		b, ok := doc.(bool)
		if !ok {
			return nil, bad("a boolean")
		}
		return b, nil
	case jsObject:
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, bad("an object")
		}
		out := make([]any, len(n.props))
		for i, p := range n.props {
			v, ok := m[p.name]
			if !ok || v == nil {
				if !p.nullable() {
					return nil, fmt.Errorf("%s%q is missing or null, but the reader schema requires it", at(path), p.name)
				}
				continue
			}
			var err error
			if out[i], err = p.node.convert(v, path+p.name+"."); err != nil {
				return nil, err
			}
		}
		return out, nil
	case jsArray:
		a, ok := doc.([]any)
		if !ok {
			return nil, bad("an array")
		}
		out := make([]any, len(a))
		for i, e := range a {
			var err error
			if out[i], err = n.elem.convert(e, path+"[]."); err != nil {
				return nil, err
			}
		}
		return out, nil
	case jsMap:
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, bad("an object")
		}
		out := make([]jsEntry, 0, len(m))
		for k, e := range m {
			v, err := n.elem.convert(e, path+"{}.")
			if err != nil {
				return nil, err
			}
			out = append(out, jsEntry{k, v})
		}
		slices.SortFunc(out, func(a, b jsEntry) int { return strings.Compare(a.k, b.k) })
		return out, nil
	}
	return nil, fmt.Errorf("%sno column for this value", at(path))
}

func at(path string) string {
	if path == "" {
		return ""
	}
	return "property " + strings.TrimSuffix(path, ".") + ": "
}

// encode appends v (convert's form) as JSON: properties in name order, a
// null property left out unless required, no whitespace. It is the
// inverse of convert up to what convert normalizes (key order,
// whitespace, number spelling, time zones), so encode(convert(x)) is one
// text for equal values.
func (n *jsNode) encode(b []byte, v any) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	switch n.kind {
	case jsText:
		return append(b, v.(string)...)
	case jsString:
		return appendJSONString(b, v.(string))
	case jsDate:
		return appendJSONString(b, time.Unix(int64(v.(int32))*86400, 0).UTC().Format(jsDateLayout))
	case jsTimestamp:
		return appendJSONString(b, time.UnixMicro(v.(int64)).UTC().Format(jsTimeLayout))
	case jsBinary:
		return appendJSONString(b, base64.StdEncoding.EncodeToString(v.([]byte)))
	case jsInt:
		return strconv.AppendInt(b, v.(int64), 10)
	case jsNumber:
		return strconv.AppendFloat(b, v.(float64), 'g', -1, 64)
	case jsBool:
		return strconv.AppendBool(b, v.(bool))
	case jsObject:
		b = append(b, '{')
		first := true
		for i, p := range n.props {
			pv := v.([]any)[i]
			if pv == nil && !p.required {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(appendJSONString(b, p.name), ':')
			b = p.node.encode(b, pv)
		}
		return append(b, '}')
	case jsArray:
		b = append(b, '[')
		for i, e := range v.([]any) {
			if i > 0 {
				b = append(b, ',')
			}
			b = n.elem.encode(b, e)
		}
		return append(b, ']')
	case jsMap:
		b = append(b, '{')
		for i, e := range v.([]jsEntry) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, e.k), ':')
			b = n.elem.encode(b, e.v)
		}
		return append(b, '}')
	}
	return b
}

// appendJSONString appends s quoted as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return append(b, '"')
}

// append appends v (convert's form) to bld, a builder of n.typ.
func (n *jsNode) append(bld array.Builder, v any) {
	if v == nil {
		bld.AppendNull()
		return
	}
	switch n.kind {
	case jsText, jsString:
		bld.(*array.StringBuilder).Append(v.(string))
	case jsDate:
		bld.(*array.Date32Builder).Append(arrow.Date32(v.(int32)))
	case jsTimestamp:
		bld.(*array.TimestampBuilder).Append(arrow.Timestamp(v.(int64)))
	case jsBinary:
		bld.(*array.BinaryBuilder).Append(v.([]byte))
	case jsInt:
		bld.(*array.Int64Builder).Append(v.(int64))
	case jsNumber:
		bld.(*array.Float64Builder).Append(v.(float64))
	case jsBool:
		bld.(*array.BooleanBuilder).Append(v.(bool))
	case jsObject:
		sb := bld.(*array.StructBuilder)
		sb.Append(true)
		for i, p := range n.props {
			p.node.append(sb.FieldBuilder(i), v.([]any)[i])
		}
	case jsArray:
		lb := bld.(*array.ListBuilder)
		lb.Append(true)
		for _, e := range v.([]any) {
			n.elem.append(lb.ValueBuilder(), e)
		}
	case jsMap:
		lb := bld.(*array.ListBuilder)
		lb.Append(true)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, e := range v.([]jsEntry) {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(e.k)
			n.elem.append(sb.FieldBuilder(1), e.v)
		}
	}
}

// generic is element i of arr (of n.typ) in convert's form: append's
// inverse.
func (n *jsNode) generic(arr arrow.Array, i int) (any, error) {
	if arr.IsNull(i) {
		return nil, nil
	}
	switch a := arr.(type) {
	case *array.String:
		return a.Value(i), nil
	case *array.Date32:
		return int32(a.Value(i)), nil
	case *array.Timestamp:
		return int64(a.Value(i)), nil
	case *array.Binary:
		return bytes.Clone(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Struct:
		out := make([]any, len(n.props))
		for k, p := range n.props {
			var err error
			if out[k], err = p.node.generic(a.Field(k), i); err != nil {
				return nil, fmt.Errorf("property %s: %w", p.name, err)
			}
		}
		return out, nil
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		if n.kind == jsMap {
			entries := a.ListValues().(*array.Struct)
			keys := entries.Field(0).(*array.String)
			out := make([]jsEntry, 0, hi-lo)
			for j := lo; j < hi; j++ {
				v, err := n.elem.generic(entries.Field(1), int(j))
				if err != nil {
					return nil, err
				}
				out = append(out, jsEntry{keys.Value(int(j)), v})
			}
			return out, nil
		}
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			v, err := n.elem.generic(a.ListValues(), int(j))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("column type %s does not encode as JSON", arr.DataType())
}
