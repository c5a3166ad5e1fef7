package kafkafmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/decimal128"
	"github.com/hamba/avro/v2"
)

// AvroConfig configures the Avro format of one subject.
type AvroConfig struct {
	// Registry is where schemas are looked up.
	Registry *Registry
	// Subject is the reader schema's subject (TopicNameStrategy:
	// <topic>-value or <topic>-key).
	Subject string
	// Version pins the reader schema to that version of Subject; 0 means
	// the subject's latest version when the format is made.
	Version int
	// Flag names the option that pins the version, for hints
	// (--value-schema-version).
	Flag string
	// Evolve, when the version is not pinned, switches the reader to a
	// later version of the subject that a record is written with and
	// that adds what the reader lacks, when that version reads every
	// record the reader did (Avro resolution: its new fields have
	// defaults): Check returns a *SwitchError and the envelope switches
	// (Evolver). Without it such a record does not decode.
	Evolve bool
	// Start, when Version is 0, is the reader's version at start (the
	// one the collection was last read with) instead of the latest; Past
	// are the versions it was read with before (its earlier
	// generations'), which a later version must also read to become the
	// reader (the decision is the same in every run).
	Start int
	Past  []int
	// Changes makes the format read Debezium change events only
	// (ChangeFormat, the debezium envelope): each record is read with
	// the schema it was written with, so there is no reader schema
	// (nothing is fetched at start, and AvroReader reports none).
	Changes bool
}

// avroAPI decodes with bounds on what a corrupt length may allocate: a
// record is at most --max-record-bytes, so no string, bytes or array of
// it is longer.
var avroAPI = avro.Config{MaxByteSliceSize: 64 << 20, MaxSliceAllocSize: 64 << 20}.Freeze()

// avroFormat decodes Confluent-framed Avro (magic byte 0, 4-byte
// big-endian schema id, the Avro binary encoding) with a reader schema
// chosen at start, resolving records written with other schemas to it.
type avroFormat struct {
	reg    *Registry
	cfg    AvroConfig
	reader SubjectVersion
	typ    arrow.DataType
	// writers: composite schemas (hamba/avro Resolve) by writer schema
	// id; refused: ids whose records cannot be read, with why.
	writers map[uint32]avro.Schema
	refused map[uint32]error
	// The last decoded bytes (a copy) and their value: Check decodes, and
	// the Append or Normal that follows for the same bytes reuses it.
	last    []byte
	lastVal any
	lastOK  bool
	rd      *avro.Reader
	// next is the later version the last *SwitchError named; past are the
	// readers before reader in this run (the state may hold values framed
	// with their ids).
	next *SubjectVersion
	past []SubjectVersion
	// keyPlans and valPlans are the compiled writer schemas of
	// ChangeFormat (debezium_avro.go) by schema id.
	keyPlans, valPlans map[uint32]*avroPlan
}

// SwitchError says that a record is written with a later version of the
// reader schema's subject that the reader cannot represent (new fields)
// and that reads every record the reader did: the envelope switches its
// reader to it (Evolver) and adds the record again. An envelope that
// cannot switch makes it a decode error (Msg says what a reader pinned
// to the version does).
type SwitchError struct {
	// From and To are the reader and the version the record needs.
	From, To SubjectVersion
	// What says what changes, for a log line; Msg is the error.
	What, Msg string
}

func (e *SwitchError) Error() string { return e.Msg }

// NewAvro returns the Avro format of cfg: its reader schema is the
// subject's pinned or latest version, fetched now.
func NewAvro(ctx context.Context, cfg AvroConfig) (Format, error) {
	if cfg.Registry == nil {
		return nil, errors.New("avro format: no schema registry (pass --schema-registry URL)")
	}
	if cfg.Changes {
		return &avroFormat{reg: cfg.Registry, cfg: cfg, typ: arrow.BinaryTypes.Binary}, nil
	}
	v := cfg.Version
	if v <= 0 {
		v = cfg.Start
	}
	rv, err := cfg.Registry.Version(ctx, cfg.Subject, v)
	if err != nil {
		return nil, fmt.Errorf("avro format: reader schema: %w", err)
	}
	typ, err := avroArrowType(rv.Schema, nil)
	if err != nil {
		return nil, fmt.Errorf("avro format: subject %s version %d (schema id %d): %w", rv.Subject, rv.Version, rv.ID, err)
	}
	f := &avroFormat{reg: cfg.Registry, cfg: cfg, reader: rv, typ: typ,
		writers: map[uint32]avro.Schema{uint32(rv.ID): rv.Schema}, refused: map[uint32]error{}}
	for _, pv := range cfg.Past {
		if pv == rv.Version {
			continue
		}
		sv, err := cfg.Registry.Version(ctx, cfg.Subject, pv)
		if err != nil {
			return nil, fmt.Errorf("avro format: an earlier reader schema: %w", err)
		}
		f.past = append(f.past, sv)
	}
	return f, nil
}

// AvroReader returns the subject, version and schema id of an Avro or
// Protobuf format's reader schema (ok false for other formats).
func AvroReader(f Format) (subject string, version, id int, ok bool) {
	if p, ok := f.(*protoFormat); ok {
		return p.reader.Subject, p.reader.Version, p.reader.ID, true
	}
	a, ok := f.(*avroFormat)
	if !ok || a.cfg.Changes {
		return "", 0, 0, false
	}
	return a.reader.Subject, a.reader.Version, a.reader.ID, true
}

func (f *avroFormat) Name() string         { return "avro" }
func (f *avroFormat) Type() arrow.DataType { return f.typ }

// TransientError is a failure to reach the schema registry: not a
// property of the record, so not a decode error.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// Check implements Format.
func (f *avroFormat) Check(data []byte) error {
	if f.cfg.Changes {
		return errors.New("the format reads Debezium change events (the debezium envelope) only")
	}
	_, err := f.decode(data)
	return err
}

// confluentHeader is the length of the Confluent framing.
const confluentHeader = 5

// confluentID is the schema id of Confluent-framed data (magic byte 0, a
// 4-byte big-endian schema id, then the payload at confluentHeader) of the
// format kind ("Avro", "JSON"); other is said after a bad magic byte (what
// takes such bytes instead).
func confluentID(data []byte, kind, other string) (uint32, error) {
	if len(data) < confluentHeader {
		return 0, fmt.Errorf("truncated: %d bytes, but Confluent-framed %s starts with 5 (magic byte 0 and a 4-byte schema id)", len(data), kind)
	}
	if data[0] != 0 {
		return 0, fmt.Errorf("bad magic byte 0x%02x (want 0: the bytes are not Confluent-framed %s%s)", data[0], kind, other)
	}
	return binary.BigEndian.Uint32(data[1:confluentHeader]), nil
}

// decode returns the value of data under the reader schema.
func (f *avroFormat) decode(data []byte) (any, error) {
	if f.lastOK && bytes.Equal(f.last, data) {
		return f.lastVal, nil
	}
	f.lastOK = false
	id, err := confluentID(data, "Avro", "; the bytes format takes any bytes")
	if err != nil {
		return nil, err
	}
	ws, err := f.writer(id)
	if err != nil {
		return nil, err
	}
	var v any
	if f.rd == nil {
		f.rd = avro.NewReader(nil, 0, avro.WithReaderConfig(avroAPI))
	}
	f.rd.Reset(data[confluentHeader:])
	f.rd.Error = nil
	f.rd.ReadVal(ws, &v)
	if err := f.rd.Error; err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the payload ends before the record does (truncated)")
		}
		return nil, fmt.Errorf("schema id %d: avro: %w", id, err)
	}
	f.last, f.lastVal, f.lastOK = append(f.last[:0], data...), v, true
	return v, nil
}

// writer returns the schema that reads records written with schema id:
// the reader schema itself, or the two resolved (Avro's schema
// resolution: fields the writer lacks get the reader's defaults, numbers
// are promoted, and so on).
func (f *avroFormat) writer(id uint32) (avro.Schema, error) {
	if s, ok := f.writers[id]; ok {
		return s, nil
	}
	if err, ok := f.refused[id]; ok {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, err := f.reg.SchemaByID(ctx, int(id))
	var re *RegistryError
	switch {
	case errors.As(err, &re) && re.Code == 40403:
		err = fmt.Errorf("unknown schema id %d (the registry %s does not have it)", id, f.reg.URL())
	case errors.As(err, &re) && re.Code == 0:
		// rtrctl's own refusal of what the registry holds (not Avro,
		// does not parse): the record's schema is at fault.
		err = fmt.Errorf("schema id %d: %w", id, err)
	case err != nil:
		// Credentials, TLS, the registry away: not the record's fault.
		return nil, &TransientError{Err: fmt.Errorf("avro format: %w", err)}
	default:
		err = f.resolvable(ctx, id, ws)
	}
	if _, ok := errors.AsType[*SwitchError](err); ok {
		return nil, err // not refused: the reader moves on to it
	}
	if err != nil {
		f.refused[id] = err
		return nil, err
	}
	s, err := avro.NewSchemaCompatibility().Resolve(f.reader.Schema, ws)
	if err != nil {
		err = fmt.Errorf("written with schema id %d, which cannot be read with the reader schema (subject %s version %d, id %d): %w",
			id, f.reader.Subject, f.reader.Version, f.reader.ID, err)
		f.refused[id] = err
		return nil, err
	}
	f.writers[id] = s
	return s, nil
}

// resolvable refuses a version of the subject registered after the
// reader (the latest at start, not pinned) whose records have fields the
// reader schema lacks: resolution would drop them, so the collection
// could not represent the records of a version registered while rtrctl
// runs.
func (f *avroFormat) resolvable(ctx context.Context, id uint32, ws avro.Schema) error {
	if f.cfg.Version > 0 {
		return nil // pinned: every record is read as that version
	}
	missing := extraFields(f.reader.Schema, ws, "", nil)
	_, rerr := avro.NewSchemaCompatibility().Resolve(f.reader.Schema, ws)
	if len(missing) == 0 && (rerr == nil || !f.cfg.Evolve) {
		return nil
	}
	if !f.cfg.Evolve {
		return laterVersion(ctx, f.reg, f.cfg, f.reader.Version, id, missing, "avro format")
	}
	v, err := f.reg.VersionOfID(ctx, f.cfg.Subject, int(id))
	if _, ok := errors.AsType[*RegistryError](err); err != nil && !ok {
		return &TransientError{Err: fmt.Errorf("avro format: %w", err)}
	}
	if v <= f.reader.Version {
		return nil
	}
	which, flag := laterNames(f.cfg, id, v)
	to := SubjectVersion{Subject: f.cfg.Subject, Version: v, ID: int(id), Schema: ws}
	if err := f.canSwitch(to); err != nil {
		return fmt.Errorf("written with %s, a later version that cannot be the reader: %w; "+
			"make the change compatible (give new fields defaults; change types only as Avro promotes them), "+
			"or pass %s %d to read every record as version %d",
			which, err, flag, f.reader.Version, f.reader.Version)
	}
	f.next = &to
	return &SwitchError{From: f.reader, To: to, What: fmt.Sprintf("subject %s version %d (schema id %d) to version %d (schema id %d), which adds %s",
		f.cfg.Subject, f.reader.Version, f.reader.ID, v, id, strings.Join(missing, ", ")), Msg: fmt.Sprintf("written with %s, which has fields the reader schema (subject %s version %d) lacks: %s; "+
		"the envelope cannot switch its reader while it runs: pass %s %d to read every record as version %d (dropping those fields)",
		which, f.reader.Subject, f.reader.Version, strings.Join(missing, ", "), flag, f.reader.Version, f.reader.Version)}
}

// laterVersion refuses schema id, whose records have the fields missing
// that the reader schema (version readerV of cfg.Subject, the latest at
// start) lacks, when it is a version of the subject registered after the
// reader; an older version (or a schema of another subject) is read with
// those fields dropped.
func laterVersion(ctx context.Context, reg *Registry, cfg AvroConfig, readerV int, id uint32, missing []string, format string) error {
	v, err := reg.VersionOfID(ctx, cfg.Subject, int(id))
	if _, ok := errors.AsType[*RegistryError](err); err != nil && !ok {
		return &TransientError{Err: fmt.Errorf("%s: %w", format, err)}
	}
	if v <= readerV {
		return nil
	}
	which, flag := laterNames(cfg, id, v)
	return fmt.Errorf("written with %s, which has fields the reader schema (subject %s version %d, the latest when the ingest started) lacks: %s; "+
		"rtrctl reads a topic with one reader schema: re-ingest into another store or --source-id (the latest version is then the reader), "+
		"or pass %s %d to read every record as version %d (dropping those fields)",
		which, cfg.Subject, readerV, strings.Join(missing, ", "), flag, readerV, readerV)
}

// laterNames are the words of an error about schema id, version v of
// cfg.Subject: which schema, and the flag that pins a version.
func laterNames(cfg AvroConfig, id uint32, v int) (which, flag string) {
	flag = cfg.Flag
	if flag == "" {
		flag = "--value-schema-version"
	}
	return fmt.Sprintf("schema id %d (subject %s version %d)", id, cfg.Subject, v), flag
}

// canSwitch reports why to cannot become the reader: it has no column
// type, or it cannot read what the readers so far decoded (the values the
// state holds are framed with their ids).
func (f *avroFormat) canSwitch(to SubjectVersion) error {
	if _, err := avroArrowType(to.Schema, nil); err != nil {
		return err
	}
	for _, r := range append([]SubjectVersion{f.reader}, f.past...) {
		if _, err := avro.NewSchemaCompatibility().Resolve(to.Schema, r.Schema); err != nil {
			return fmt.Errorf("it cannot read records of version %d (schema id %d): %w", r.Version, r.ID, err)
		}
	}
	return nil
}

// SwitchTo makes version (a later version of the subject) the next
// reader, as a record written with it would: the collection's latest
// generation has it (a switch whose contents were not committed).
func (f *avroFormat) SwitchTo(ctx context.Context, version int) error {
	if version == f.reader.Version {
		return nil
	}
	to, err := f.reg.Version(ctx, f.cfg.Subject, version)
	if err != nil {
		return fmt.Errorf("avro format: switch to version %d: %w", version, err)
	}
	if err := f.canSwitch(to); err != nil {
		return fmt.Errorf("avro format: switch to subject %s version %d: %w", to.Subject, to.Version, err)
	}
	f.next = &to
	return nil
}

// switchReader makes the version the last *SwitchError (or SwitchTo)
// named the reader.
func (f *avroFormat) switchReader() error {
	if f.next == nil {
		return errors.New("avro format: no later version to switch to")
	}
	typ, err := avroArrowType(f.next.Schema, nil)
	if err != nil {
		return fmt.Errorf("avro format: subject %s version %d: %w", f.next.Subject, f.next.Version, err)
	}
	f.past = append(f.past, f.reader)
	f.reader, f.typ, f.next = *f.next, typ, nil
	f.writers = map[uint32]avro.Schema{uint32(f.reader.ID): f.reader.Schema}
	f.refused = map[uint32]error{}
	f.lastOK = false
	return nil
}

// extraFields lists the record fields of writer (dotted paths) that the
// matching records of reader do not have.
func extraFields(reader, writer avro.Schema, path string, seen map[string]bool) []string {
	reader, writer = deref(reader), deref(writer)
	if u, ok := reader.(*avro.UnionSchema); ok {
		if nn, ok := nullable(u); ok {
			reader = deref(nn)
		}
	}
	if u, ok := writer.(*avro.UnionSchema); ok {
		if nn, ok := nullable(u); ok {
			writer = deref(nn)
		}
	}
	switch w := writer.(type) {
	case *avro.RecordSchema:
		r, ok := reader.(*avro.RecordSchema)
		if !ok || seen[w.FullName()] {
			return nil
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[w.FullName()] = true
		var out []string
		for _, wf := range w.Fields() {
			i := slices.IndexFunc(r.Fields(), func(rf *avro.Field) bool {
				return rf.Name() == wf.Name() || slices.Contains(rf.Aliases(), wf.Name())
			})
			if i < 0 {
				out = append(out, path+wf.Name())
				continue
			}
			out = append(out, extraFields(r.Fields()[i].Type(), wf.Type(), path+wf.Name()+".", seen)...)
		}
		return out
	case *avro.ArraySchema:
		if r, ok := reader.(*avro.ArraySchema); ok {
			return extraFields(r.Items(), w.Items(), path+"[].", seen)
		}
	case *avro.MapSchema:
		if r, ok := reader.(*avro.MapSchema); ok {
			return extraFields(r.Values(), w.Values(), path+"{}.", seen)
		}
	}
	return nil
}

// Normal returns bytes that decode to the same value as data and are the
// same for equal values: data itself when it was written with the reader
// schema, else the value re-encoded with the reader schema (so that
// upsert keys written with two schema versions are one key).
func (f *avroFormat) Normal(data []byte) ([]byte, error) {
	v, err := f.decode(data)
	if err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(data[1:confluentHeader]) == uint32(f.reader.ID) {
		return data, nil
	}
	out, err := f.encode(v)
	if err != nil {
		return nil, err
	}
	f.last, f.lastVal, f.lastOK = append(f.last[:0], out...), v, true
	return out, nil
}

// encode frames v, a value of the reader schema, with the reader's id.
func (f *avroFormat) encode(v any) ([]byte, error) { return encodeWith(f.reader, v) }

// encodeWith frames v, a value of sv's schema, with sv's id.
func encodeWith(sv SubjectVersion, v any) ([]byte, error) {
	b, err := avroAPI.Marshal(sv.Schema, v)
	if err != nil {
		return nil, fmt.Errorf("avro: encode with schema id %d: %w", sv.ID, err)
	}
	out := make([]byte, confluentHeader, confluentHeader+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(sv.ID))
	return append(out, b...), nil
}

// rawer returns Raw of the reader in force now, which stays so after a
// switch: element i of a column of its type re-encoded with it, framed
// with its id, so that a later reader resolves it (Avro's schema
// resolution) as it does a record written with that version.
func (f *avroFormat) rawer() func(arr arrow.Array, i int) ([]byte, error) {
	reader, typ := f.reader, f.typ
	return func(arr arrow.Array, i int) ([]byte, error) {
		if !arrow.TypeEqual(arr.DataType(), typ) {
			return nil, fmt.Errorf("avro format: column is %s, want %s (version %d)", arr.DataType(), typ, reader.Version)
		}
		v, err := avroGeneric(arr, i, reader.Schema)
		if err != nil {
			return nil, fmt.Errorf("avro format: %w", err)
		}
		return encodeWith(reader, v)
	}
}

// NewColumn implements Format.
func (f *avroFormat) NewColumn() Column {
	return newDecodedColumn(f.typ, f.decode, func(b array.Builder, v any) { appendAvro(b, f.reader.Schema, v) })
}

// Raw implements Format: element i re-encoded with the reader schema.
func (f *avroFormat) Raw(arr arrow.Array, i int) ([]byte, error) {
	if !arrow.TypeEqual(arr.DataType(), f.typ) {
		return nil, fmt.Errorf("avro format: column is %s, want %s", arr.DataType(), f.typ)
	}
	v, err := avroGeneric(arr, i, f.reader.Schema)
	if err != nil {
		return nil, fmt.Errorf("avro format: %w", err)
	}
	return f.encode(v)
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// nullable returns the other branch of a union of null and one type.
func nullable(u *avro.UnionSchema) (avro.Schema, bool) {
	if !u.Nullable() {
		return nil, false
	}
	_, typ := u.Indices()
	return u.Types()[typ], true
}

// branches are a union's branches other than null.
func branches(u *avro.UnionSchema) []avro.Schema {
	var out []avro.Schema
	for _, t := range u.Types() {
		if t.Type() != avro.Null {
			out = append(out, t)
		}
	}
	return out
}

// branchName is how hamba/avro names a union branch in a generic value
// (map[string]any{name: value}): a named type's full name, else the type
// with its logical type ("long.timestamp-micros").
func branchName(s avro.Schema) string {
	s = deref(s)
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l := logicalOf(s); l != nil {
		name += "." + string(l.Type())
	}
	return name
}

func logicalOf(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

// avroArrowType is the Arrow type of an Avro schema (docs/kafka.md has the
// table). seen holds the records being mapped: a recursive schema has no
// Arrow type.
func avroArrowType(s avro.Schema, seen []string) (arrow.DataType, error) {
	switch s := deref(s).(type) {
	case *avro.UnionSchema:
		if nn, ok := nullable(s); ok {
			return avroArrowType(nn, seen)
		}
		var fields []arrow.Field
		for _, b := range branches(s) {
			t, err := avroArrowType(b, seen)
			if err != nil {
				return nil, err
			}
			fields = append(fields, arrow.Field{Name: branchName(b), Type: t, Nullable: true})
		}
		if len(fields) == 0 {
			return nil, errors.New("a union of only null has no column type")
		}
		return arrow.StructOf(fields...), nil
	case *avro.RecordSchema:
		if slices.Contains(seen, s.FullName()) {
			return nil, fmt.Errorf("record %s is recursive, which an Arrow column cannot hold", s.FullName())
		}
		seen = append(seen, s.FullName())
		fields := make([]arrow.Field, 0, len(s.Fields()))
		for _, f := range s.Fields() {
			t, err := avroArrowType(f.Type(), seen)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name(), err)
			}
			fields = append(fields, arrow.Field{Name: f.Name(), Type: t, Nullable: isNullable(f.Type())})
		}
		return arrow.StructOf(fields...), nil
	case *avro.ArraySchema:
		t, err := avroArrowType(s.Items(), seen)
		if err != nil {
			return nil, fmt.Errorf("array items: %w", err)
		}
		return arrow.ListOfField(arrow.Field{Name: "item", Type: t, Nullable: isNullable(s.Items())}), nil
	case *avro.MapSchema:
		t, err := avroArrowType(s.Values(), seen)
		if err != nil {
			return nil, fmt.Errorf("map values: %w", err)
		}
		return arrow.ListOfField(arrow.Field{Name: "entry", Type: arrow.StructOf(
			arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "value", Type: t, Nullable: isNullable(s.Values())})}), nil
	case *avro.EnumSchema:
		return arrow.BinaryTypes.String, nil
	case *avro.FixedSchema:
		switch l := s.Logical().(type) {
		case *avro.DecimalLogicalSchema:
			return decimalType(l)
		case nil:
		default:
			if l.Type() == avro.Duration {
				return arrow.FixedWidthTypes.MonthDayNanoInterval, nil
			}
		}
		return &arrow.FixedSizeBinaryType{ByteWidth: s.Size()}, nil
	case *avro.PrimitiveSchema:
		var lt avro.LogicalType
		if l := s.Logical(); l != nil {
			lt = l.Type()
			if d, ok := l.(*avro.DecimalLogicalSchema); ok {
				return decimalType(d)
			}
		}
		switch s.Type() {
		case avro.Boolean:
			return arrow.FixedWidthTypes.Boolean, nil
		case avro.Int:
			switch lt {
			case avro.Date:
				return arrow.FixedWidthTypes.Date32, nil
			case avro.TimeMillis:
				return arrow.FixedWidthTypes.Time32ms, nil
			}
			return arrow.PrimitiveTypes.Int32, nil
		case avro.Long:
			switch lt {
			case avro.TimeMicros:
				return arrow.FixedWidthTypes.Time64us, nil
			case avro.TimestampMillis:
				return &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, nil
			case avro.TimestampMicros:
				return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, nil
			case avro.LocalTimestampMillis:
				return &arrow.TimestampType{Unit: arrow.Millisecond}, nil
			case avro.LocalTimestampMicros:
				return &arrow.TimestampType{Unit: arrow.Microsecond}, nil
			}
			return arrow.PrimitiveTypes.Int64, nil
		case avro.Float:
			return arrow.PrimitiveTypes.Float32, nil
		case avro.Double:
			return arrow.PrimitiveTypes.Float64, nil
		case avro.Bytes:
			return arrow.BinaryTypes.Binary, nil
		case avro.String:
			return arrow.BinaryTypes.String, nil
		case avro.Null:
			return nil, errors.New("type null outside a union has no column type")
		}
	}
	return nil, fmt.Errorf("avro type %s has no column type", s.Type())
}

func decimalType(d *avro.DecimalLogicalSchema) (arrow.DataType, error) {
	if d.Precision() > decimal128.MaxPrecision {
		return nil, fmt.Errorf("decimal precision %d is more than decimal128's %d", d.Precision(), decimal128.MaxPrecision)
	}
	return &arrow.Decimal128Type{Precision: int32(d.Precision()), Scale: int32(d.Scale())}, nil
}

// isNullable: a union with a null branch.
func isNullable(s avro.Schema) bool {
	u, ok := deref(s).(*avro.UnionSchema)
	return ok && slices.ContainsFunc(u.Types(), func(t avro.Schema) bool { return t.Type() == avro.Null })
}

var epochDay = time.Unix(0, 0).UTC()

// appendAvro appends v, a generic value hamba/avro decoded with schema s,
// to b, a builder of avroArrowType(s).
func appendAvro(b array.Builder, s avro.Schema, v any) {
	s = deref(s)
	if v == nil {
		b.AppendNull()
		return
	}
	switch s := s.(type) {
	case *avro.UnionSchema:
		bs := branches(s)
		k, val := unionBranch(bs, v)
		if _, ok := nullable(s); ok {
			if k < 0 {
				b.AppendNull() // not reached: decoded values match a branch
				return
			}
			appendAvro(b, bs[k], val)
			return
		}
		sb := b.(*array.StructBuilder)
		sb.Append(true)
		for i, br := range bs {
			if i != k {
				sb.FieldBuilder(i).AppendNull()
				continue
			}
			appendAvro(sb.FieldBuilder(i), br, val)
		}
	case *avro.RecordSchema:
		sb := b.(*array.StructBuilder)
		m := v.(map[string]any)
		sb.Append(true)
		for i, f := range s.Fields() {
			appendAvro(sb.FieldBuilder(i), f.Type(), m[f.Name()])
		}
	case *avro.ArraySchema:
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		for _, e := range v.([]any) {
			appendAvro(lb.ValueBuilder(), s.Items(), e)
		}
	case *avro.MapSchema:
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		m := v.(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys) // one row for one map, whatever the wire order
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, k := range keys {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(k)
			appendAvro(sb.FieldBuilder(1), s.Values(), m[k])
		}
	case *avro.EnumSchema:
		b.(*array.StringBuilder).Append(v.(string))
	case *avro.FixedSchema:
		switch bb := b.(type) {
		case *array.Decimal128Builder:
			bb.Append(ratDecimal(v.(*big.Rat), bb.Type().(*arrow.Decimal128Type).Scale))
		case *array.MonthDayNanoIntervalBuilder:
			d := v.(avro.LogicalDuration)
			bb.Append(arrow.MonthDayNanoInterval{Months: int32(d.Months), Days: int32(d.Days), Nanoseconds: int64(d.Milliseconds) * 1e6})
		case *array.FixedSizeBinaryBuilder:
			bb.Append(fixedBytes(v))
		}
	case *avro.PrimitiveSchema:
		switch bb := b.(type) {
		case *array.BooleanBuilder:
			bb.Append(v.(bool))
		case *array.Int32Builder:
			bb.Append(int32(v.(int)))
		case *array.Int64Builder:
			bb.Append(v.(int64))
		case *array.Float32Builder:
			bb.Append(v.(float32))
		case *array.Float64Builder:
			bb.Append(v.(float64))
		case *array.BinaryBuilder:
			bb.Append(v.([]byte))
		case *array.StringBuilder:
			bb.Append(v.(string))
		case *array.Decimal128Builder:
			bb.Append(ratDecimal(v.(*big.Rat), bb.Type().(*arrow.Decimal128Type).Scale))
		case *array.Date32Builder:
			bb.Append(arrow.Date32(v.(time.Time).Sub(epochDay) / (24 * time.Hour)))
		case *array.Time32Builder:
			bb.Append(arrow.Time32(v.(time.Duration) / time.Millisecond))
		case *array.Time64Builder:
			bb.Append(arrow.Time64(v.(time.Duration) / time.Microsecond))
		case *array.TimestampBuilder:
			t := v.(time.Time)
			if bb.Type().(*arrow.TimestampType).Unit == arrow.Millisecond {
				bb.Append(arrow.Timestamp(t.UnixMilli()))
			} else {
				bb.Append(arrow.Timestamp(t.UnixMicro()))
			}
		}
	}
}

// unionBranch finds the branch of bs (a union's non-null branches) that
// v, a generic value hamba/avro decoded, holds, and the branch's value.
// hamba/avro gives a value of a type it has a Go type for as it is ("s"
// for ["null","long","string"]) and others wrapped in a map of the
// branch's name ({"t.Addr": {...}}).
func unionBranch(bs []avro.Schema, v any) (int, any) {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for k, val := range m {
			for i, b := range bs {
				if branchName(b) == k {
					return i, val
				}
			}
		}
	}
	for i, b := range bs {
		if goMatches(deref(b), v) {
			return i, v
		}
	}
	return -1, nil
}

// goMatches reports whether v is of the Go type hamba/avro decodes s into.
func goMatches(s avro.Schema, v any) bool {
	var lt avro.LogicalType
	if l := logicalOf(s); l != nil {
		lt = l.Type()
	}
	switch v := v.(type) {
	case bool:
		return s.Type() == avro.Boolean
	case int:
		return s.Type() == avro.Int && lt == ""
	case int64:
		return s.Type() == avro.Long && lt == ""
	case float32:
		return s.Type() == avro.Float
	case float64:
		return s.Type() == avro.Double
	case string:
		return s.Type() == avro.String || s.Type() == avro.Enum
	case []byte:
		return s.Type() == avro.Bytes && lt == ""
	case *big.Rat:
		return lt == avro.Decimal
	case time.Time:
		return lt == avro.Date || lt == avro.TimestampMillis || lt == avro.TimestampMicros || lt == avro.LocalTimestampMillis || lt == avro.LocalTimestampMicros
	case time.Duration:
		return lt == avro.TimeMillis || lt == avro.TimeMicros
	case avro.LogicalDuration:
		return lt == avro.Duration
	case []any:
		return s.Type() == avro.Array
	case map[string]any:
		return s.Type() == avro.Map || s.Type() == avro.Record
	default:
		fs, ok := s.(*avro.FixedSchema)
		rv := reflect.ValueOf(v)
		return ok && rv.Kind() == reflect.Array && rv.Len() == fs.Size()
	}
}

// fixedBytes is the bytes of a [N]byte array hamba/avro decodes a fixed
// into.
func fixedBytes(v any) []byte {
	rv := reflect.ValueOf(v)
	out := make([]byte, rv.Len())
	reflect.Copy(reflect.ValueOf(out), rv)
	return out
}

// ratDecimal is r (exactly a decimal of scale digits) as decimal128.
func ratDecimal(r *big.Rat, scale int32) decimal128.Num {
	n := new(big.Int).Mul(r.Num(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
	n.Quo(n, r.Denom())
	return decimal128.FromBigInt(n)
}

// avroGeneric is element i of arr (of avroArrowType(s)) as the generic
// value hamba/avro encodes with schema s: appendAvro's inverse.
func avroGeneric(arr arrow.Array, i int, s avro.Schema) (any, error) {
	s = deref(s)
	if arr.IsNull(i) {
		return nil, nil
	}
	switch s := s.(type) {
	case *avro.UnionSchema:
		if nn, ok := nullable(s); ok {
			v, err := avroGeneric(arr, i, nn)
			if err != nil {
				return nil, err
			}
			return map[string]any{branchName(nn): v}, nil
		}
		sa := arr.(*array.Struct)
		for k, br := range branches(s) {
			if !sa.Field(k).IsNull(i) {
				v, err := avroGeneric(sa.Field(k), i, br)
				if err != nil {
					return nil, err
				}
				return map[string]any{branchName(br): v}, nil
			}
		}
		return nil, nil
	case *avro.RecordSchema:
		sa := arr.(*array.Struct)
		m := make(map[string]any, len(s.Fields()))
		for k, f := range s.Fields() {
			v, err := avroGeneric(sa.Field(k), i, f.Type())
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name(), err)
			}
			m[f.Name()] = v
		}
		return m, nil
	case *avro.ArraySchema:
		la := arr.(*array.List)
		lo, hi := la.ValueOffsets(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			v, err := avroGeneric(la.ListValues(), int(j), s.Items())
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *avro.MapSchema:
		la := arr.(*array.List)
		lo, hi := la.ValueOffsets(i)
		entries := la.ListValues().(*array.Struct)
		keys := entries.Field(0).(*array.String)
		out := make(map[string]any, hi-lo)
		for j := lo; j < hi; j++ {
			v, err := avroGeneric(entries.Field(1), int(j), s.Values())
			if err != nil {
				return nil, err
			}
			out[keys.Value(int(j))] = v
		}
		return out, nil
	case *avro.EnumSchema:
		return arr.(*array.String).Value(i), nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int32:
		return int(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Float32:
		return a.Value(i), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Binary:
		return bytes.Clone(a.Value(i)), nil
	case *array.String:
		return a.Value(i), nil
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		return new(big.Rat).SetFrac(a.Value(i).BigInt(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)), nil
	case *array.Date32:
		return epochDay.Add(time.Duration(a.Value(i)) * 24 * time.Hour), nil
	case *array.Time32:
		return time.Duration(a.Value(i)) * time.Millisecond, nil
	case *array.Time64:
		return time.Duration(a.Value(i)) * time.Microsecond, nil
	case *array.Timestamp:
		if a.DataType().(*arrow.TimestampType).Unit == arrow.Millisecond {
			return time.UnixMilli(int64(a.Value(i))).UTC(), nil
		}
		return time.UnixMicro(int64(a.Value(i))).UTC(), nil
	case *array.MonthDayNanoInterval:
		d := a.Value(i)
		return avro.LogicalDuration{Months: uint32(d.Months), Days: uint32(d.Days), Milliseconds: uint32(d.Nanoseconds / 1e6)}, nil
	case *array.FixedSizeBinary:
		fs := s.(*avro.FixedSchema)
		out := reflect.New(reflect.ArrayOf(fs.Size(), reflect.TypeFor[byte]())).Elem()
		reflect.Copy(out, reflect.ValueOf(a.Value(i)))
		return out.Interface(), nil
	}
	return nil, fmt.Errorf("column type %s does not encode as Avro %s", arr.DataType(), s.Type())
}
