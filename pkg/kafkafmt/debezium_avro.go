package kafkafmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/hamba/avro/v2"
)

// Debezium Avro: the avro format is a ChangeFormat for records written by
// Confluent's AvroConverter (Debezium with a schema registry). Each
// record's writer schema (its registry id) is the change event's: a
// record with before and after (a nullable union of the table's Value
// record), op, source, ts_ms and transaction; a key is the Key record.
// The writer schema is compiled once per id into a plan that reads the
// Avro binary encoding straight into the RowEncoder: after's fields
// flattened as the JSON path flattens them, and each leaf mapped to the
// Arrow type the JSON path gives the same Connect schema (connectLeaf on
// the Connect schema AvroConverter records in the Avro schema:
// connect.name, connect.parameters, connect.type), Avro's own logical
// types taken as their Connect or Debezium equivalents. There is no
// reader schema: a record reads as it was written.

// avroPlan is a compiled writer schema.
type avroPlan struct {
	row *RowSchema
	err error
	// Values: the envelope's fields in writer order (after, op, or a
	// field to skip); keys: node, the key record.
	steps []avroStep
	node  *avroNode
}

type avroStep struct {
	what byte // 'a' after, 'o' op, 's' skip
	node *avroNode
	skip *avroSkip
}

// avroNode reads one Avro value into the RowEncoder: a record (its fields,
// flattened), a leaf column, an array (a list column) or a map (two list
// columns, keys and values).
type avroNode struct {
	name string
	kind byte // 's' record, 'l' leaf, 'a' array, 'm' map, 'e' array of MapEntry records (a map with other than string keys)
	// A union of null and the node's type: null and branch are the
	// branch indices (null -1: not a union).
	null, branch int64
	fields       []*avroNode
	leaves       int

	leaf  leafKind
	typ   arrow.DataType
	bits  int
	wire  avro.Type // the leaf's Avro type: how it is encoded
	size  int       // fixed
	syms  []string  // enum
	vsd   [2]int    // VariableScaleDecimal: the indices of scale and value
	elem  *avroNode // 'a' items; 'm', 'e' values
	key   *avroNode // 'm', 'e'
	entry bool      // 'e': the key is the entry record's first field
}

// avroSkip skips one Avro value (the fields the envelope does not read).
type avroSkip struct {
	t      avro.Type
	size   int
	fields []*avroSkip // record fields, union branches
	items  *avroSkip   // array items, map values
}

// changePlan returns the compiled writer schema of data's id (key
// plans when key is set).
func (f *avroFormat) changePlan(data []byte, key bool) (*avroPlan, []byte, error) {
	id, err := confluentID(data, "Avro", "")
	if err != nil {
		return nil, nil, err
	}
	plans := &f.valPlans
	if key {
		plans = &f.keyPlans
	}
	if p, ok := (*plans)[id]; ok {
		return p, data[confluentHeader:], p.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := f.reg.SchemaByID(ctx, int(id))
	var p *avroPlan
	switch {
	case err != nil:
		err = recordSchemaErr("avro", f.reg, id, err)
		if _, ok := errors.AsType[*TransientError](err); ok {
			return nil, nil, err // not cached: the registry may answer later
		}
		p = &avroPlan{err: err} // the registry's definite answer, as the avro format's refused
	case key:
		p = compileAvroRow(s, "key")
	default:
		p = compileAvroEnvelope(s)
	}
	if p.err != nil && err == nil {
		p.err = fmt.Errorf("schema id %d: %w", id, p.err)
	}
	if *plans == nil {
		*plans = map[uint32]*avroPlan{}
	}
	(*plans)[id] = p
	return p, data[confluentHeader:], p.err
}

// DecodeKey implements ChangeFormat for Avro keys.
func (f *avroFormat) DecodeKey(data []byte, e *RowEncoder) (*RowSchema, error) {
	p, payload, err := f.changePlan(data, true)
	if err != nil {
		return nil, err
	}
	e.Reset()
	in := avroIn{b: payload}
	p.node.decode(&in, e)
	if err := in.end(); err != nil {
		return nil, err
	}
	return p.row, nil
}

// DecodeChange implements ChangeFormat for Avro values.
func (f *avroFormat) DecodeChange(data []byte, e *RowEncoder) (Change, error) {
	p, payload, err := f.changePlan(data, false)
	if err != nil {
		return Change{}, err
	}
	e.Reset()
	in := avroIn{b: payload}
	ch := Change{Schema: p.row}
	var op []byte
	for _, st := range p.steps {
		switch st.what {
		case 'a':
			if n := st.node; n.null < 0 || in.union(n) {
				n.body(&in, e)
				ch.After = true
			}
		case 'o':
			if st.node.null >= 0 && in.long() != st.node.branch {
				in.fail(errors.New("op is null"))
			}
			op = in.bytes()
		default:
			st.skip.skip(&in)
		}
	}
	if err := in.end(); err != nil {
		return Change{}, err
	}
	if len(op) != 1 {
		return Change{}, fmt.Errorf("op %q is not a Debezium op (c, r, u, d, t)", op)
	}
	ch.Op = op[0]
	return ch, nil
}

// compileAvroEnvelope compiles a Debezium change event's writer schema.
func compileAvroEnvelope(s avro.Schema) *avroPlan {
	r, ok := deref(s).(*avro.RecordSchema)
	if !ok {
		return &avroPlan{err: fmt.Errorf("a Debezium change event is a record, not %s", s.Type())}
	}
	p := &avroPlan{}
	seen := map[string]*avroSkip{}
	var hasOp bool
	for _, fl := range r.Fields() {
		switch fl.Name() {
		case "after":
			ap := compileAvroRow(fl.Type(), "after")
			if ap.err != nil {
				return ap
			}
			p.row = ap.row
			p.steps = append(p.steps, avroStep{what: 'a', node: ap.node})
		case "op":
			n := &avroNode{null: -1}
			t := deref(fl.Type())
			if u, ok := t.(*avro.UnionSchema); ok {
				if t, ok = nullable(u); !ok {
					return &avroPlan{err: errors.New("op is a union, want a string")}
				}
				n.null, n.branch = unionIndices(u)
			}
			if deref(t).Type() != avro.String {
				return &avroPlan{err: fmt.Errorf("op is %s, want a string", t.Type())}
			}
			hasOp = true
			p.steps = append(p.steps, avroStep{what: 'o', node: n})
		default:
			p.steps = append(p.steps, avroStep{what: 's', skip: compileSkip(fl.Type(), seen)})
		}
	}
	if !hasOp {
		return &avroPlan{err: errors.New("the record has no op field: not a Debezium change event")}
	}
	return p
}

func unionIndices(u *avro.UnionSchema) (null, branch int64) {
	n, b := u.Indices()
	return int64(n), int64(b)
}

// compileAvroRow compiles a record (or a union of null and one) of the
// table's columns.
func compileAvroRow(s avro.Schema, what string) *avroPlan {
	n := &avroNode{kind: 's', null: -1}
	t := deref(s)
	if u, ok := t.(*avro.UnionSchema); ok {
		nn, ok := nullable(u)
		if !ok {
			return &avroPlan{err: fmt.Errorf("%s is a union of %d types, want a record of the table's columns", what, len(u.Types()))}
		}
		n.null, n.branch = unionIndices(u)
		t = deref(nn)
	}
	r, ok := t.(*avro.RecordSchema)
	if !ok {
		return &avroPlan{err: fmt.Errorf("%s is %s, want a record of the table's columns", what, t.Type())}
	}
	var fields []arrow.Field
	if err := compileAvroStruct(r, n, "", &fields); err != nil {
		return &avroPlan{err: fmt.Errorf("schema of %s: %w", what, err)}
	}
	if len(fields) == 0 {
		return &avroPlan{err: fmt.Errorf("schema of %s: no fields", what)}
	}
	if err := distinctColumns(fields); err != nil {
		return &avroPlan{err: fmt.Errorf("schema of %s: %w", what, err)}
	}
	return &avroPlan{row: &RowSchema{Fields: fields}, node: n}
}

// compileAvroStruct compiles r's fields into n, flattened as
// compileStruct flattens a Connect struct.
func compileAvroStruct(r *avro.RecordSchema, n *avroNode, prefix string, out *[]arrow.Field) error {
	for _, fl := range r.Fields() {
		name := prefix + fl.Name()
		c := &avroNode{null: -1}
		t := deref(fl.Type())
		if u, ok := t.(*avro.UnionSchema); ok {
			nn, ok := nullable(u)
			if !ok {
				return fmt.Errorf("column %s: a union of several types is not supported (Connect writes optional fields as a union of null and one type)", name)
			}
			c.null, c.branch = unionIndices(u)
			t = deref(nn)
		}
		switch {
		case t.Type() == avro.Record && !isVariableScale(t):
			c.kind = 's'
			if err := compileAvroStruct(t.(*avro.RecordSchema), c, name+".", out); err != nil {
				return err
			}
		case t.Type() == avro.Map || isMapEntries(t):
			if err := compileAvroMap(t, c, name); err != nil {
				return err
			}
			*out = append(*out, arrow.Field{Name: name + ".keys", Type: arrow.ListOf(c.key.typ), Nullable: true},
				arrow.Field{Name: name + ".values", Type: arrow.ListOf(c.elem.typ), Nullable: true})
		default:
			if err := compileAvroValue(t, c); err != nil {
				return fmt.Errorf("column %s: %w", name, err)
			}
			c.leaves = 1
			*out = append(*out, arrow.Field{Name: name, Type: c.typ, Nullable: true})
		}
		c.name = fl.Name()
		n.fields = append(n.fields, c)
		n.leaves += c.leaves
	}
	return nil
}

func isVariableScale(t avro.Schema) bool {
	r, ok := t.(*avro.RecordSchema)
	return ok && (r.FullName() == "io.debezium.data.VariableScaleDecimal" || r.Prop("connect.name") == "io.debezium.data.VariableScaleDecimal")
}

// isMapEntries: an array of records {key, value}, which AvroConverter
// writes for a Connect map whose keys are not strings.
func isMapEntries(t avro.Schema) bool {
	a, ok := t.(*avro.ArraySchema)
	if !ok {
		return false
	}
	r, ok := deref(a.Items()).(*avro.RecordSchema)
	return ok && r.Name() == "MapEntry" && len(r.Fields()) == 2 && r.Fields()[0].Name() == "key" && r.Fields()[1].Name() == "value"
}

func compileAvroMap(t avro.Schema, c *avroNode, name string) error {
	var ks, vs avro.Schema
	if m, ok := t.(*avro.MapSchema); ok {
		c.kind, ks, vs = 'm', avro.NewPrimitiveSchema(avro.String, nil), m.Values()
	} else {
		r := deref(t.(*avro.ArraySchema).Items()).(*avro.RecordSchema)
		c.kind, ks, vs = 'e', r.Fields()[0].Type(), r.Fields()[1].Type()
	}
	c.key, c.elem = &avroNode{null: -1}, &avroNode{null: -1}
	for _, kv := range []struct {
		n    *avroNode
		s    avro.Schema
		what string
	}{{c.key, ks, "keys"}, {c.elem, vs, "values"}} {
		s := deref(kv.s)
		if u, ok := s.(*avro.UnionSchema); ok {
			nn, ok := nullable(u)
			if !ok {
				return fmt.Errorf("map %s %s: a union of several types is not supported", name, kv.what)
			}
			kv.n.null, kv.n.branch = unionIndices(u)
			s = deref(nn)
		}
		if err := compileAvroValue(s, kv.n); err != nil {
			return fmt.Errorf("map %s %s: %w", name, kv.what, err)
		}
		kv.n.leaves = 1
	}
	c.leaves = 2
	return nil
}

// compileAvroValue compiles a leaf or array schema t (not a union) into
// n (structs and maps are columns only at the top of a row).
func compileAvroValue(t avro.Schema, n *avroNode) error {
	if a, ok := t.(*avro.ArraySchema); ok && !isMapEntries(t) {
		e := &avroNode{null: -1}
		it := deref(a.Items())
		if u, ok := it.(*avro.UnionSchema); ok {
			nn, ok := nullable(u)
			if !ok {
				return errors.New("items: a union of several types is not supported")
			}
			e.null, e.branch = unionIndices(u)
			it = deref(nn)
		}
		if err := compileAvroValue(it, e); err != nil {
			return fmt.Errorf("items: %w", err)
		}
		e.leaves = 1
		n.kind, n.elem, n.typ = 'a', e, arrow.ListOf(e.typ)
		return nil
	}
	n.kind = 'l'
	cs, err := avroConnect(t, n)
	if err != nil {
		return err
	}
	if cs == nil {
		return nil // mapped directly (timestamp-micros)
	}
	var jn jsonNode
	if err := connectLeaf(cs, &jn); err != nil {
		return err
	}
	n.leaf, n.typ, n.bits = jn.leaf, jn.typ, jn.bits
	switch {
	case (n.leaf == leafUUID || n.leaf == leafZoned) && n.wire != avro.String:
		return fmt.Errorf("logical type %s on %s, want a string", cs.Name, n.wire)
	case n.leaf == leafVarDecimal && n.wire != avro.Record:
		return fmt.Errorf("logical type %s on %s, want a record {scale, value}", cs.Name, n.wire)
	case n.leaf == leafDecimal && n.wire != avro.Bytes && n.wire != avro.Fixed:
		return fmt.Errorf("logical type %s on %s, want bytes", cs.Name, n.wire)
	}
	return nil
}

// avroLogical are Avro's logical types as the Connect or Debezium
// logical types of the same values (the JSON path's Arrow types).
var avroLogical = map[avro.LogicalType]string{
	avro.Date:                 "org.apache.kafka.connect.data.Date",
	avro.TimeMillis:           "org.apache.kafka.connect.data.Time",
	avro.TimeMicros:           "io.debezium.time.MicroTime",
	avro.TimestampMillis:      "org.apache.kafka.connect.data.Timestamp",
	avro.LocalTimestampMillis: "io.debezium.time.Timestamp",
	avro.LocalTimestampMicros: "io.debezium.time.MicroTimestamp",
	avro.UUID:                 "io.debezium.data.Uuid",
	avro.Decimal:              "org.apache.kafka.connect.data.Decimal",
}

// avroConnect is the Connect schema AvroConverter wrote as t (a leaf):
// its Connect type from the Avro type (connect.type for int8 and int16),
// its logical name (connect.name, else Avro's logical type's equivalent)
// and parameters (connect.parameters). It sets n's wire encoding. A nil
// schema: n is mapped already.
func avroConnect(t avro.Schema, n *avroNode) (*connectSchema, error) {
	n.wire = t.Type()
	cs := &connectSchema{Parameters: map[string]string{}}
	var props interface{ Prop(string) any }
	switch t := t.(type) {
	case *avro.PrimitiveSchema:
		props = t
	case *avro.FixedSchema:
		props, n.size = t, t.Size()
	case *avro.EnumSchema:
		props, n.syms = t, t.Symbols()
	case *avro.RecordSchema:
		if !isVariableScale(t) {
			return nil, errors.New("a record inside an array or map is not supported (flatten it upstream, e.g. with an SMT)")
		}
		n.vsd = [2]int{-1, -1}
		for i, f := range t.Fields() {
			switch {
			case f.Name() == "scale" && f.Type().Type() == avro.Int:
				n.vsd[0] = i
			case f.Name() == "value" && f.Type().Type() == avro.Bytes:
				n.vsd[1] = i
			}
		}
		if len(t.Fields()) != 2 || n.vsd[0] < 0 || n.vsd[1] < 0 {
			return nil, errors.New("io.debezium.data.VariableScaleDecimal is not a record {scale int, value bytes}")
		}
		return &connectSchema{Type: "struct", Name: "io.debezium.data.VariableScaleDecimal"}, nil
	case *avro.MapSchema:
		return nil, errors.New("a map inside an array or map is not supported (flatten it upstream, e.g. with an SMT)")
	default:
		return nil, fmt.Errorf("avro type %s has no column type", t.Type())
	}
	cs.Name, _ = props.Prop("connect.name").(string)
	if m, ok := props.Prop("connect.parameters").(map[string]any); ok {
		for k, v := range m {
			if s, ok := v.(string); ok {
				cs.Parameters[k] = s
			}
		}
	}
	var lt avro.LogicalSchema
	if l, ok := t.(avro.LogicalTypeSchema); ok {
		lt = l.Logical()
	}
	if d, ok := lt.(*avro.DecimalLogicalSchema); ok {
		if _, ok := cs.Parameters["scale"]; !ok {
			cs.Parameters["scale"] = strconv.Itoa(d.Scale())
		}
		if cs.Name == "" {
			cs.Parameters["connect.decimal.precision"] = strconv.Itoa(d.Precision())
		}
	}
	if cs.Name == "" && lt != nil {
		if lt.Type() == avro.TimestampMicros {
			n.leaf, n.bits, n.typ = leafInt, 64, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
			return nil, nil
		}
		cs.Name = avroLogical[lt.Type()]
	}
	switch n.wire {
	case avro.Int:
		cs.Type = "int32"
		if ct, _ := props.Prop("connect.type").(string); ct == "int8" || ct == "int16" {
			cs.Type = ct
		}
	case avro.Long:
		cs.Type = "int64"
	case avro.Float:
		cs.Type = "float"
	case avro.Double:
		cs.Type = "double"
	case avro.Boolean:
		cs.Type = "boolean"
	case avro.String, avro.Enum:
		cs.Type = "string"
	case avro.Bytes, avro.Fixed:
		cs.Type = "bytes"
	default:
		return nil, fmt.Errorf("avro type %s has no column type", n.wire)
	}
	return cs, nil
}

// compileSkip compiles a skipper of t; seen are the records compiled
// (a recursive schema refers to itself).
func compileSkip(t avro.Schema, seen map[string]*avroSkip) *avroSkip {
	t = deref(t)
	sk := &avroSkip{t: t.Type()}
	switch t := t.(type) {
	case *avro.RecordSchema:
		if s, ok := seen[t.FullName()]; ok {
			return s
		}
		seen[t.FullName()] = sk
		for _, f := range t.Fields() {
			sk.fields = append(sk.fields, compileSkip(f.Type(), seen))
		}
	case *avro.UnionSchema:
		for _, b := range t.Types() {
			sk.fields = append(sk.fields, compileSkip(b, seen))
		}
	case *avro.ArraySchema:
		sk.items = compileSkip(t.Items(), seen)
	case *avro.MapSchema:
		sk.items = compileSkip(t.Values(), seen)
	case *avro.FixedSchema:
		sk.size = t.Size()
	}
	return sk
}

func (s *avroSkip) skip(in *avroIn) {
	if in.err != nil {
		return
	}
	switch s.t {
	case avro.Null:
	case avro.Boolean:
		in.take(1)
	case avro.Int, avro.Long, avro.Enum:
		in.long()
	case avro.Float:
		in.take(4)
	case avro.Double:
		in.take(8)
	case avro.String, avro.Bytes:
		in.bytes()
	case avro.Fixed:
		in.take(s.size)
	case avro.Record:
		for _, f := range s.fields {
			f.skip(in)
		}
	case avro.Union:
		i := in.long()
		if i < 0 || i >= int64(len(s.fields)) {
			in.fail(fmt.Errorf("union branch %d of %d", i, len(s.fields)))
			return
		}
		s.fields[i].skip(in)
	case avro.Array, avro.Map:
		for c := in.block(); c > 0 && in.err == nil; c = in.block() {
			for range c {
				if s.t == avro.Map {
					in.bytes()
				}
				s.items.skip(in)
			}
		}
	}
}

// avroIn reads the Avro binary encoding; the first error sticks.
type avroIn struct {
	b   []byte
	p   int
	err error
	sub RowEncoder // a map's entries
}

func (in *avroIn) fail(err error) {
	if in.err == nil {
		in.err = err
	}
}

var errAvroShort = errors.New("the payload ends before the record does (truncated)")

// end is the error of the read: one, or bytes after the record.
func (in *avroIn) end() error {
	if in.err == nil && in.p != len(in.b) {
		in.err = fmt.Errorf("%d bytes after the record (not written with its schema id?)", len(in.b)-in.p)
	}
	if in.err != nil {
		return fmt.Errorf("avro: %w", in.err)
	}
	return nil
}

func (in *avroIn) take(n int) []byte {
	if in.err != nil {
		return nil
	}
	if n < 0 || len(in.b)-in.p < n {
		in.fail(errAvroShort)
		return nil
	}
	in.p += n
	return in.b[in.p-n : in.p]
}

// long reads a zigzag varint (int and long).
func (in *avroIn) long() int64 {
	if in.err != nil {
		return 0
	}
	u, n := binary.Uvarint(in.b[in.p:])
	if n <= 0 {
		if n == 0 {
			in.fail(errAvroShort)
		} else {
			in.fail(errors.New("a varint longer than 64 bits"))
		}
		return 0
	}
	in.p += n
	return int64(u>>1) ^ -int64(u&1)
}

func (in *avroIn) bytes() []byte {
	n := in.long()
	if n < 0 {
		in.fail(fmt.Errorf("negative length %d", n))
		return nil
	}
	if n > int64(len(in.b)-in.p) {
		in.fail(errAvroShort)
		return nil
	}
	return in.take(int(n))
}

// block reads an array or map block's count (0 at the end).
func (in *avroIn) block() int64 {
	c := in.long()
	if c < 0 {
		c = -c
		in.long() // the block's size in bytes
	}
	if c > int64(len(in.b)-in.p) {
		in.fail(fmt.Errorf("a block of %d items in %d bytes", c, len(in.b)-in.p))
		return 0
	}
	return c
}

// decode reads a value of n and writes its columns.
func (n *avroNode) decode(in *avroIn, e *RowEncoder) {
	if in.err != nil {
		return
	}
	if n.null >= 0 && !in.union(n) {
		for range n.leaves {
			e.Null()
		}
		return
	}
	n.body(in, e)
}

// union reads the branch of n's union: false for null (or an error).
func (in *avroIn) union(n *avroNode) bool {
	switch i := in.long(); {
	case in.err != nil || i == n.null:
		return false
	case i != n.branch:
		in.fail(fmt.Errorf("%s: union branch %d of 2", n.name, i))
		return false
	}
	return true
}

// body reads a value of n's type (past its union).
func (n *avroNode) body(in *avroIn, e *RowEncoder) {
	if in.err != nil {
		return
	}
	switch n.kind {
	case 's':
		for _, f := range n.fields {
			f.decode(in, e)
		}
	case 'm', 'e':
		n.decodeMap(in, e)
	case 'a':
		start, cnt := len(e.buf), uint64(0)
		for c := in.block(); c > 0 && in.err == nil; c = in.block() {
			for range c {
				n.elem.decode(in, e)
			}
			cnt += uint64(c)
		}
		var hdr [binary.MaxVarintLen64 + 1]byte
		hdr[0] = 1
		h := binary.PutUvarint(hdr[1:], cnt) + 1
		e.buf = slices.Insert(e.buf, start, hdr[:h]...)
	default:
		if err := n.decodeLeaf(in, e); err != nil {
			in.fail(fmt.Errorf("%s: %w", n.name, err))
		}
	}
}

// decodeMap writes a map's keys and values columns: sorted by key (the
// last of equal keys kept) for string keys, as a JSON object is, else
// in the order written.
func (n *avroNode) decodeMap(in *avroIn, e *RowEncoder) {
	type entry struct {
		raw        []byte // a string key
		k0, k1, v1 int    // the key's and value's encodings in in.sub
	}
	var entries []entry
	sub := &in.sub
	sub.Reset()
	for c := in.block(); c > 0 && in.err == nil; c = in.block() {
		for range c {
			var en entry
			en.k0 = len(sub.buf)
			if n.kind == 'm' {
				en.raw = in.bytes()
				sub.Binary(en.raw)
			} else {
				n.key.decode(in, sub)
			}
			en.k1 = len(sub.buf)
			n.elem.decode(in, sub)
			en.v1 = len(sub.buf)
			entries = append(entries, en)
		}
	}
	if in.err != nil {
		return
	}
	if n.kind == 'm' {
		slices.SortStableFunc(entries, func(a, b entry) int { return bytes.Compare(a.raw, b.raw) })
		out := entries[:0]
		for i, en := range entries {
			if i+1 < len(entries) && bytes.Equal(entries[i+1].raw, en.raw) {
				continue
			}
			out = append(out, en)
		}
		entries = out
	}
	e.List(len(entries))
	for _, en := range entries {
		e.buf = append(e.buf, sub.buf[en.k0:en.k1]...)
	}
	e.List(len(entries))
	for _, en := range entries {
		e.buf = append(e.buf, sub.buf[en.k1:en.v1]...)
	}
}

func (n *avroNode) decodeLeaf(in *avroIn, e *RowEncoder) error {
	switch n.wire {
	case avro.Int, avro.Long:
		v := in.long()
		if in.err == nil && n.bits < 64 && (v < -1<<(n.bits-1) || v > 1<<(n.bits-1)-1) {
			return fmt.Errorf("%d does not fit int%d", v, n.bits)
		}
		e.Int(v)
	case avro.Float:
		if b := in.take(4); b != nil {
			e.Float32(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		}
	case avro.Double:
		if b := in.take(8); b != nil {
			e.Float64(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		}
	case avro.Boolean:
		if b := in.take(1); b != nil {
			if b[0] > 1 {
				return fmt.Errorf("boolean byte %d", b[0])
			}
			e.Bool(b[0] == 1)
		}
	case avro.Enum:
		i := in.long()
		if in.err == nil && (i < 0 || i >= int64(len(n.syms))) {
			return fmt.Errorf("enum symbol %d of %d", i, len(n.syms))
		}
		if in.err == nil {
			e.Binary([]byte(n.syms[i]))
		}
	case avro.String:
		if s := in.bytes(); in.err == nil {
			return encodeText(n.leaf, s, e)
		}
	case avro.Bytes, avro.Fixed:
		var b []byte
		if n.wire == avro.Fixed {
			b = in.take(n.size)
		} else {
			b = in.bytes()
		}
		if in.err != nil {
			return nil
		}
		if n.leaf == leafDecimal {
			v, err := connectDecimal(b, n.typ.(*arrow.Decimal128Type))
			if err != nil {
				return err
			}
			e.Decimal(v)
			return nil
		}
		e.Binary(b)
	case avro.Record: // VariableScaleDecimal
		var scale int64
		var b []byte
		for i := range 2 {
			if i == n.vsd[0] {
				scale = in.long()
			} else {
				b = in.bytes()
			}
		}
		if in.err == nil {
			return encodeVarScale(b, scale, e)
		}
	}
	return nil
}
