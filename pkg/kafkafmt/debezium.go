package kafkafmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// The debezium envelope: Debezium change events (before, after, op,
// source, ts_ms) as an upsert keyed by the record key, whose value is the
// after row. It is the upsert envelope (upsertDecoder: its state, netting
// and state rebuild) with other rows: the collection's columns are the
// fields of after, flattened, and its key columns (rtr.key) the fields of
// the record key (Debezium's key is the table's primary key).
//
//   - op c, r (a snapshot read), u: after becomes the key's row,
//     retracting the key's current one (if any);
//   - op d: the key's current row is retracted;
//   - a tombstone (the null value Debezium writes after a delete, for
//     compaction) changes nothing;
//   - op t (truncate): every row is retracted at the record's offset.
//
// before is not read: the state holds the key's current row, which is
// exact also when before is null (PostgreSQL REPLICA IDENTITY DEFAULT
// updates) or holds only the key (its deletes), so a before that
// disagrees with the state is not an error. Materialize does the same
// (its ENVELOPE DEBEZIUM is an upsert of after by the key).
//
// A value format gives the envelope its rows through ChangeFormat;
// Debezium JSON (JsonConverter, schemas.enable=true) implements it
// (debezium_json.go), and so does Avro with a schema registry
// (AvroConverter, debezium_avro.go).

// ChangeFormat is what the debezium envelope needs of a key and value
// format: a record's key as its fields, and a record's value as its op and
// after row, each written to a RowEncoder as typed values of the columns
// they report.
type ChangeFormat interface {
	Format
	// DecodeKey decodes a record key (never nil) into e (empty): the key's
	// fields, flattened as DecodeChange flattens after, in the order of
	// the columns it returns.
	DecodeKey(data []byte, e *RowEncoder) (*RowSchema, error)
	// DecodeChange decodes a record value (never nil): its op and, when
	// it has an after row, that row into e (empty), its fields flattened
	// in the order of Change.Schema.
	DecodeChange(data []byte, e *RowEncoder) (Change, error)
}

// Change is a decoded Debezium change event.
type Change struct {
	// Op is the event's op: 'c' (create), 'r' (snapshot read), 'u'
	// (update), 'd' (delete) or 't' (truncate).
	Op byte
	// Schema is the columns of the table's rows (after's), nil when the
	// value does not say (a truncate event may not).
	Schema *RowSchema
	// After says that the event has an after row (written to the
	// encoder).
	After bool
}

// RowSchema is the columns of a row: leaf fields (struct fields
// flattened to "outer.inner"), all nullable. A format should return the
// same *RowSchema for records of the same schema, which makes checking it
// a pointer comparison.
type RowSchema struct {
	Fields []arrow.Field
}

// Equal reports whether s and o have the same column names and types.
func (s *RowSchema) Equal(o *RowSchema) bool {
	if s == o {
		return true
	}
	if s == nil || o == nil || len(s.Fields) != len(o.Fields) {
		return false
	}
	for i, f := range s.Fields {
		if f.Name != o.Fields[i].Name || !arrow.TypeEqual(f.Type, o.Fields[i].Type) {
			return false
		}
	}
	return true
}

func (s *RowSchema) String() string {
	var b strings.Builder
	for i, f := range s.Fields {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", f.Name, f.Type)
	}
	return b.String()
}

// RowEncoder writes a row as the debezium envelope keeps it: one value per
// column of its RowSchema, in order, each Null or the method of its type.
// Two rows are equal exactly when their bytes are.
//
// Each value is a tag byte (0 null, 1 a value) and then: Bool one byte;
// Int a zigzag varint (every integer, date, time and timestamp column);
// Float32/Float64 the IEEE bits; Binary a uvarint length and the bytes
// (utf8, binary, fixed_size_binary); Decimal 16 bytes; List a uvarint
// count and that many values of the element type.
type RowEncoder struct{ buf []byte }

// Reset empties the encoder.
func (e *RowEncoder) Reset() { e.buf = e.buf[:0] }

// Row returns the encoded row; it is valid until the next Reset.
func (e *RowEncoder) Row() []byte { return e.buf }

// Null writes a null.
func (e *RowEncoder) Null() { e.buf = append(e.buf, 0) }

// Bool writes a bool column's value.
func (e *RowEncoder) Bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	e.buf = append(e.buf, 1, b)
}

// Int writes the value of an integer, date32, time32/64 or timestamp
// column (in the column's unit).
func (e *RowEncoder) Int(v int64) { e.buf = binary.AppendVarint(append(e.buf, 1), v) }

// Float32 writes a float32 column's value.
func (e *RowEncoder) Float32(v float32) {
	e.buf = binary.LittleEndian.AppendUint32(append(e.buf, 1), math.Float32bits(v))
}

// Float64 writes a float64 column's value.
func (e *RowEncoder) Float64(v float64) {
	e.buf = binary.LittleEndian.AppendUint64(append(e.buf, 1), math.Float64bits(v))
}

// Binary writes the value of a utf8, binary or fixed_size_binary column.
func (e *RowEncoder) Binary(v []byte) {
	e.buf = append(binary.AppendUvarint(append(e.buf, 1), uint64(len(v))), v...)
}

// Decimal writes a decimal128 column's value (unscaled).
func (e *RowEncoder) Decimal(v decimal128.Num) {
	e.buf = binary.LittleEndian.AppendUint64(append(e.buf, 1), uint64(v.HighBits()))
	e.buf = binary.LittleEndian.AppendUint64(e.buf, v.LowBits())
}

// List starts a list column's value of n elements; the n element values
// follow.
func (e *RowEncoder) List(n int) { e.buf = binary.AppendUvarint(append(e.buf, 1), uint64(n)) }

// errRow: encoded bytes that do not follow the columns (a format's bug).
var errRow = errors.New("encoded row does not match its columns")

// rowValue reads the value of type dt at buf[pos:]; with b non-nil it
// appends it to b. It returns the position after it.
func rowValue(dt arrow.DataType, buf []byte, pos int, b array.Builder) (int, error) {
	if pos >= len(buf) {
		return 0, errRow
	}
	tag := buf[pos]
	pos++
	if tag == 0 {
		if b != nil {
			b.AppendNull()
		}
		return pos, nil
	}
	switch dt.ID() {
	case arrow.BOOL:
		if pos >= len(buf) {
			return 0, errRow
		}
		if b != nil {
			b.(*array.BooleanBuilder).Append(buf[pos] != 0)
		}
		return pos + 1, nil
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.DATE32, arrow.TIME32, arrow.TIME64, arrow.TIMESTAMP:
		v, n := binary.Varint(buf[pos:])
		if n <= 0 {
			return 0, errRow
		}
		if b != nil {
			switch b := b.(type) {
			case *array.Int8Builder:
				b.Append(int8(v))
			case *array.Int16Builder:
				b.Append(int16(v))
			case *array.Int32Builder:
				b.Append(int32(v))
			case *array.Int64Builder:
				b.Append(v)
			case *array.Date32Builder:
				b.Append(arrow.Date32(v))
			case *array.Time32Builder:
				b.Append(arrow.Time32(v))
			case *array.Time64Builder:
				b.Append(arrow.Time64(v))
			case *array.TimestampBuilder:
				b.Append(arrow.Timestamp(v))
			}
		}
		return pos + n, nil
	case arrow.FLOAT32:
		if pos+4 > len(buf) {
			return 0, errRow
		}
		if b != nil {
			b.(*array.Float32Builder).Append(math.Float32frombits(binary.LittleEndian.Uint32(buf[pos:])))
		}
		return pos + 4, nil
	case arrow.FLOAT64:
		if pos+8 > len(buf) {
			return 0, errRow
		}
		if b != nil {
			b.(*array.Float64Builder).Append(math.Float64frombits(binary.LittleEndian.Uint64(buf[pos:])))
		}
		return pos + 8, nil
	case arrow.STRING, arrow.BINARY, arrow.FIXED_SIZE_BINARY:
		l, n := binary.Uvarint(buf[pos:])
		if n <= 0 || uint64(len(buf)-pos-n) < l {
			return 0, errRow
		}
		v := buf[pos+n : pos+n+int(l)]
		if fsb, ok := dt.(*arrow.FixedSizeBinaryType); ok && len(v) != fsb.ByteWidth {
			return 0, errRow
		}
		if b != nil {
			switch b := b.(type) {
			case *array.StringBuilder:
				b.BinaryBuilder.Append(v)
			case *array.BinaryBuilder:
				b.Append(v)
			case *array.FixedSizeBinaryBuilder:
				b.Append(v)
			}
		}
		return pos + n + int(l), nil
	case arrow.DECIMAL128:
		if pos+16 > len(buf) {
			return 0, errRow
		}
		if b != nil {
			b.(*array.Decimal128Builder).Append(decimal128.New(int64(binary.LittleEndian.Uint64(buf[pos:])), binary.LittleEndian.Uint64(buf[pos+8:])))
		}
		return pos + 16, nil
	case arrow.LIST:
		cnt, n := binary.Uvarint(buf[pos:])
		if n <= 0 {
			return 0, errRow
		}
		pos += n
		var vb array.Builder
		if b != nil {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			vb = lb.ValueBuilder()
		}
		elem := dt.(*arrow.ListType).Elem()
		for range cnt {
			var err error
			if pos, err = rowValue(elem, buf, pos, vb); err != nil {
				return 0, err
			}
		}
		return pos, nil
	}
	return 0, fmt.Errorf("debezium envelope: column type %s is not supported", dt)
}

// encodeValue writes element i of arr, a column of a collection the
// debezium envelope wrote, to e as the format wrote it.
func encodeValue(e *RowEncoder, arr arrow.Array, i int) error {
	if arr.IsNull(i) {
		e.Null()
		return nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		e.Bool(a.Value(i))
	case *array.Int8, *array.Int16, *array.Int32, *array.Int64, *array.Date32, *array.Time32, *array.Time64, *array.Timestamp:
		e.Int(intAt(arr, i))
	case *array.Float32:
		e.Float32(a.Value(i))
	case *array.Float64:
		e.Float64(a.Value(i))
	case *array.String:
		e.Binary(stringBytes(a.Value(i)))
	case *array.Binary:
		e.Binary(a.Value(i))
	case *array.FixedSizeBinary:
		e.Binary(a.Value(i))
	case *array.Decimal128:
		e.Decimal(a.Value(i))
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		e.List(int(hi - lo))
		for j := lo; j < hi; j++ {
			if err := encodeValue(e, a.ListValues(), int(j)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("column type %s is not one the debezium envelope writes", arr.DataType())
	}
	return nil
}

// intAt is element i of arr, a signed fixed-width column of 1 to 8
// bytes, as an int64.
func intAt(arr arrow.Array, i int) int64 {
	w := arr.DataType().(arrow.FixedWidthDataType).BitWidth() / 8
	b := arr.Data().Buffers()[1].Bytes()[(arr.Data().Offset()+i)*w:]
	switch w {
	case 1:
		return int64(int8(b[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// debeziumRows are the debezium envelope's rows (upsertRows): the after
// row's columns, decoded from the encoded row the state holds.
type debeziumRows struct {
	fields   []arrow.Field
	keyIdx   []int // the key columns' indices in fields
	builders []array.Builder
}

func (o *debeziumRows) append(_, value []byte) {
	pos := 0
	for i, f := range o.fields {
		var err error
		if pos, err = rowValue(f.Type, value, pos, o.builders[i]); err != nil {
			// Every row was checked when it was added (checkRow).
			panic(fmt.Sprintf("debezium envelope: %v", err))
		}
	}
}

func (o *debeziumRows) finish() []arrow.Array {
	out := make([]arrow.Array, len(o.builders))
	for i, b := range o.builders {
		out[i] = b.NewArray()
	}
	return out
}

func (o *debeziumRows) stateOf(rec arrow.Record) (func(i int) (k, v []byte, err error), error) {
	cols := make([]arrow.Array, len(o.fields))
	for j, f := range o.fields {
		idx := rec.Schema().FieldIndices(f.Name)
		if len(idx) != 1 || !arrow.TypeEqual(rec.Column(idx[0]).DataType(), f.Type) {
			return nil, fmt.Errorf("the collection has no column %s %s", f.Name, f.Type)
		}
		cols[j] = rec.Column(idx[0])
	}
	var ke, ve RowEncoder
	return func(i int) ([]byte, []byte, error) {
		ke.Reset()
		ve.Reset()
		for _, c := range cols {
			if err := encodeValue(&ve, c, i); err != nil {
				return nil, nil, err
			}
		}
		for _, j := range o.keyIdx {
			if err := encodeValue(&ke, cols[j], i); err != nil {
				return nil, nil, err
			}
		}
		return ke.Row(), ve.Row(), nil
	}, nil
}

// debeziumDecoder is the debezium envelope.
type debeziumDecoder struct {
	*upsertDecoder
	keyF, valF ChangeFormat
	cols, keys *RowSchema // the collection's columns and its key columns
	keyIdx     []int
	// lastCols and lastKeys are the schemas last found equal to cols and
	// keys (a pointer comparison for the records after).
	lastCols, lastKeys *RowSchema
	ke, ve             RowEncoder
	// hold keeps the encoded keys and rows put until the next Flush (the
	// upsert decoder may apply them late).
	hold  []byte
	spans []int // leaf boundaries of the row being added
	// next is the columns a switch goes to (Evolve): the table's with
	// columns added.
	next *RowSchema
}

// compatible says why the collection cannot take the columns s of a
// record ("" when it can): each of its columns must be one of s, of the
// same type; the columns s adds are null in the rows before it (every
// column is nullable).
func (d *debeziumDecoder) compatible(s *RowSchema) string {
	for _, f := range d.cols.Fields {
		i := slices.IndexFunc(s.Fields, func(g arrow.Field) bool { return g.Name == f.Name })
		switch {
		case i < 0:
			return "column " + f.Name + " is gone"
		case !arrow.TypeEqual(s.Fields[i].Type, f.Type):
			return fmt.Sprintf("column %s is %s, was %s", f.Name, s.Fields[i].Type, f.Type)
		}
	}
	for _, f := range s.Fields {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			return "column " + f.Name + " is a name rtrctl reserves"
		}
		if _, err := rowValue(f.Type, []byte{0}, 0, nil); err != nil {
			return fmt.Sprintf("column %s: %v", f.Name, err)
		}
	}
	return ""
}

// Target implements Evolver: user is the collection's new columns.
func (d *debeziumDecoder) Target(_ context.Context, user *arrow.Schema, _ int) error {
	s := &RowSchema{Fields: slices.Clone(user.Fields())}
	for i := range s.Fields {
		s.Fields[i].Nullable, s.Fields[i].Metadata = true, arrow.Metadata{}
	}
	if s.Equal(d.cols) {
		return nil
	}
	if why := d.compatible(s); why != "" {
		return fmt.Errorf("debezium envelope: switch to columns (%s): %s", s, why)
	}
	d.next = s
	return nil
}

// Evolve implements Evolver: the state's rows are re-encoded in the new
// columns (null in the added ones) and emitted.
func (d *debeziumDecoder) Evolve(part int32, off int64, reset func(*arrow.Schema) error, emit func(arrow.Record) error) error {
	next := d.next
	if next == nil {
		return errors.New("debezium envelope: no columns to switch to")
	}
	if d.rows > 0 || len(d.touched) > 0 || len(d.queue) > 0 {
		return errors.New("debezium envelope: switch columns: rows not flushed")
	}
	from := make([]int, len(next.Fields)) // column of d.cols, or -1
	for j, f := range next.Fields {
		from[j] = slices.IndexFunc(d.cols.Fields, func(g arrow.Field) bool { return g.Name == f.Name })
	}
	var spans []int
	var buf []byte
	var err error
	d.state.each(func(id uint32) {
		if err != nil || !d.state.live(id) {
			return
		}
		v := d.state.value(id)
		if err = d.checkRow(d.cols, v, &spans); err != nil {
			return
		}
		buf = buf[:0]
		for _, i := range from {
			if i < 0 {
				buf = append(buf, 0) // null
			} else {
				buf = append(buf, v[spans[i]:spans[i+1]]...)
			}
		}
		d.state.setValue(id, buf)
	})
	if err != nil {
		return fmt.Errorf("debezium envelope: switch columns: %w", err)
	}
	d.cols, d.lastCols, d.next = next, nil, nil
	d.keyIdx = d.keyIdx[:0]
	for _, k := range d.keys.Fields {
		d.keyIdx = append(d.keyIdx, slices.IndexFunc(next.Fields, func(g arrow.Field) bool { return g.Name == k.Name }))
	}
	rows := &debeziumRows{fields: next.Fields, keyIdx: d.keyIdx}
	for _, f := range next.Fields {
		rows.builders = append(rows.builders, array.NewBuilder(memory.DefaultAllocator, f.Type))
	}
	d.out = rows
	d.retype(next.Fields)
	if err := reset(arrow.NewSchema(slices.Clone(next.Fields), nil)); err != nil {
		return err
	}
	return d.resnapshot(part, off, emit)
}

func newDebeziumDecoder(cfg Config) (Decoder, error) {
	kf, ok1 := cfg.Key.(ChangeFormat)
	vf, ok2 := cfg.Value.(ChangeFormat)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("new decoder: the debezium envelope reads keys and values of a format that reads Debezium change events (ChangeFormat), not key format %s and value format %s", cfg.Key.Name(), cfg.Value.Name())
	}
	if len(cfg.Columns) == 0 {
		return nil, errors.New("new decoder: the debezium envelope needs the collection's columns (DebeziumColumns of a first record)")
	}
	fields := slices.Clone(cfg.Columns)
	for i := range fields {
		fields[i].Nullable = true
		fields[i].Metadata = arrow.Metadata{}
	}
	d := &debeziumDecoder{keyF: kf, valF: vf, cols: &RowSchema{Fields: fields}}
	d.keys = &RowSchema{}
	for _, k := range cfg.KeyColumns {
		i := slices.IndexFunc(fields, func(f arrow.Field) bool { return f.Name == k })
		if i < 0 {
			return nil, fmt.Errorf("new decoder: key column %q is not a column of the collection", k)
		}
		d.keyIdx = append(d.keyIdx, i)
		d.keys.Fields = append(d.keys.Fields, fields[i])
	}
	if len(d.keyIdx) == 0 {
		return nil, errors.New("new decoder: the debezium envelope needs key columns")
	}
	rows := &debeziumRows{fields: fields, keyIdx: d.keyIdx}
	for _, f := range fields {
		if _, err := rowValue(f.Type, []byte{0}, 0, nil); err != nil {
			return nil, fmt.Errorf("new decoder: %w", err)
		}
		rows.builders = append(rows.builders, array.NewBuilder(memory.DefaultAllocator, f.Type))
	}
	u := &upsertDecoder{base: newBase(cfg, fields, cfg.KeyColumns), state: newStateTable(), gen: 1, out: rows}
	d.upsertDecoder = u
	return d, nil
}

// Add implements Decoder.
func (d *debeziumDecoder) Add(r *kgo.Record) error {
	if r.Partition < 0 {
		return d.decodeErr(r, "negative partition")
	}
	if r.Value == nil {
		return nil // a tombstone after a delete: the delete did it
	}
	d.ve.Reset()
	ch, err := d.valF.DecodeChange(r.Value, &d.ve)
	if _, ok := errors.AsType[*TransientError](err); ok {
		return err // the registry is away: not the record's fault
	}
	if err != nil {
		return d.decodeErr(r, "value (format %s): %v", d.valF.Name(), err)
	}
	if ch.Op == 't' {
		return d.deleteAll(r.Partition, r.Offset)
	}
	if ch.Op != 'c' && ch.Op != 'r' && ch.Op != 'u' && ch.Op != 'd' {
		return d.decodeErr(r, "value (format %s): op %q is not a Debezium change (c, r, u, d, t)", d.valF.Name(), string(ch.Op))
	}
	if ch.Schema != nil && ch.Schema != d.lastCols {
		if !ch.Schema.Equal(d.cols) {
			if why := d.compatible(ch.Schema); why != "" {
				return d.decodeErr(r, "the table's columns changed (an ALTER TABLE upstream?) in a way the collection cannot follow (%s): the collection has columns (%s), this record (%s); "+
					"the debezium envelope takes columns added to a table: have Debezium snapshot the table into a new topic "+
					"(a connector with a new topic.prefix) and ingest that one", why, d.cols, ch.Schema)
			}
			d.next = ch.Schema
			msg := fmt.Sprintf("the table gained columns: the collection has (%s), this record (%s)", d.cols, ch.Schema)
			return &SwitchError{What: msg, Msg: msg}
		}
		d.lastCols = ch.Schema
	}
	if r.Key == nil {
		return d.decodeErr(r, "the debezium envelope needs the record key (the table's primary key), the record has a null key "+
			"(a table without a primary key: set message.key.columns on the Debezium connector)")
	}
	d.ke.Reset()
	ks, err := d.keyF.DecodeKey(r.Key, &d.ke)
	if _, ok := errors.AsType[*TransientError](err); ok {
		return err
	}
	if err != nil {
		return d.decodeErr(r, "key (format %s): %v", d.keyF.Name(), err)
	}
	if ks != d.lastKeys {
		if !ks.Equal(d.keys) {
			return d.decodeErr(r, "the key's columns changed: the collection's key is (%s), this record's (%s); "+
				"have Debezium snapshot the table into a new topic (a connector with a new topic.prefix) and ingest that one", d.keys, ks)
		}
		d.lastKeys = ks
	}
	if err := d.checkRow(d.keys, d.ke.Row(), nil); err != nil {
		return d.decodeErr(r, "key (format %s): %v", d.keyF.Name(), err)
	}
	key := d.keep(d.ke.Row())
	if ch.Op == 'd' {
		return d.put(r.Partition, r.Offset, key, nil)
	}
	if !ch.After {
		return d.decodeErr(r, "value (format %s): op %c without an after row", d.valF.Name(), ch.Op)
	}
	row := d.ve.Row()
	if err := d.checkRow(d.cols, row, &d.spans); err != nil {
		return d.decodeErr(r, "value (format %s): %v", d.valF.Name(), err)
	}
	// The key must be after's key columns, or the state could not be
	// rebuilt from the collection.
	pos := 0
	for _, j := range d.keyIdx {
		v := row[d.spans[j]:d.spans[j+1]]
		if pos+len(v) > len(key) || !bytes.Equal(key[pos:pos+len(v)], v) {
			return d.decodeErr(r, "the record key does not match the key columns of after (%s)", d.keys)
		}
		pos += len(v)
	}
	if pos != len(key) {
		return d.decodeErr(r, "the record key does not match the key columns of after (%s)", d.keys)
	}
	return d.put(r.Partition, r.Offset, key, d.keep(row))
}

// checkRow checks that row holds a value of each column of s; with spans
// non-nil it sets (*spans)[i] to where column i starts, and the last to
// the end.
func (d *debeziumDecoder) checkRow(s *RowSchema, row []byte, spans *[]int) error {
	pos := 0
	if spans != nil {
		*spans = (*spans)[:0]
	}
	for _, f := range s.Fields {
		if spans != nil {
			*spans = append(*spans, pos)
		}
		var err error
		if pos, err = rowValue(f.Type, row, pos, nil); err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
	}
	if spans != nil {
		*spans = append(*spans, pos)
	}
	if pos != len(row) {
		return errRow
	}
	return nil
}

// keep copies b into hold, where it stays until the next Flush.
func (d *debeziumDecoder) keep(b []byte) []byte {
	if len(d.hold)+len(b) > cap(d.hold) {
		// A new buffer: the slices of the old one stay valid.
		d.hold = make([]byte, 0, max(2*cap(d.hold), len(b), 1<<16))
	}
	n := len(d.hold)
	d.hold = append(d.hold, b...)
	return d.hold[n:len(d.hold):len(d.hold)]
}

// Flush implements Decoder.
func (d *debeziumDecoder) Flush() arrow.Record {
	rec := d.upsertDecoder.Flush()
	d.hold = d.hold[:0] // nothing refers to it any more
	return rec
}

// ErrNoColumns: a record that does not tell the table's columns (a
// tombstone, a truncate).
var ErrNoColumns = errors.New("the record does not carry the table's columns")

// DebeziumColumns returns the columns and key columns of the debezium
// collection of a topic whose record r is, with key and value formats key
// and value (ChangeFormats): the fields of its after row and of its key.
// A record that does not tell them is ErrNoColumns.
func DebeziumColumns(key, value Format, r *kgo.Record) ([]arrow.Field, []string, error) {
	kf, ok1 := key.(ChangeFormat)
	vf, ok2 := value.(ChangeFormat)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("debezium columns: key format %s and value format %s do not read Debezium change events (ChangeFormat)", key.Name(), value.Name())
	}
	if r.Value == nil || r.Key == nil {
		return nil, nil, ErrNoColumns
	}
	var e RowEncoder
	ch, err := vf.DecodeChange(r.Value, &e)
	if err != nil {
		return nil, nil, fmt.Errorf("debezium columns: value: %w", err)
	}
	if ch.Schema == nil {
		return nil, nil, ErrNoColumns
	}
	e.Reset()
	ks, err := kf.DecodeKey(r.Key, &e)
	if err != nil {
		return nil, nil, fmt.Errorf("debezium columns: key: %w", err)
	}
	for _, f := range ch.Schema.Fields {
		switch f.Name {
		case pipe.ColTime, pipe.ColDiff, pipe.ColPartition:
			return nil, nil, fmt.Errorf("debezium columns: the table has a column %s, a name rtrctl reserves; rename it upstream (e.g. with Debezium's column.rename or an SMT)", f.Name)
		}
	}
	var keys []string
	for _, k := range ks.Fields {
		i := slices.IndexFunc(ch.Schema.Fields, func(f arrow.Field) bool { return f.Name == k.Name })
		if i < 0 || !arrow.TypeEqual(ch.Schema.Fields[i].Type, k.Type) {
			return nil, nil, fmt.Errorf("debezium columns: key field %s %s is not a column of after (%s)", k.Name, k.Type, ch.Schema)
		}
		keys = append(keys, k.Name)
	}
	if len(keys) == 0 {
		return nil, nil, errors.New("debezium columns: the record key has no fields")
	}
	return slices.Clone(ch.Schema.Fields), keys, nil
}
