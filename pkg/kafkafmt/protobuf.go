package kafkafmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/confluentproto"
)

// ProtobufConfig configures the Protobuf format of one subject: the same
// settings as Avro's (Subject, pinned Version, the Flag that pins it).
type ProtobufConfig AvroConfig

// protoFormat decodes Confluent-framed Protobuf (magic byte 0, 4-byte
// big-endian schema id, the message indexes, the protobuf encoding of
// the message) with a reader message chosen at start: the first message
// of the subject's pinned or latest version. A record written with
// another schema is decoded with the reader's descriptor, which is
// protobuf's own schema evolution (fields are matched by number: a field
// the reader lacks is dropped, one the writer lacks is the reader's
// default or null), once its writer's descriptor has been checked to be
// wire-compatible with the reader's (protoCompat).
type protoFormat struct {
	reg    *Registry
	cfg    ProtobufConfig
	reader SubjectVersion // Schema is nil: the reader is md
	md     protoreflect.MessageDescriptor
	typ    *arrow.StructType
	// writers: writer schemas (id and message index) found readable;
	// refused: those that are not, with why.
	writers map[string]bool
	refused map[string]error
	// cache holds the messages of the last two decoded byte strings:
	// Check or Normal decodes, and the Append that follows for the same
	// bytes reuses it, also after the upsert envelope appended the key's
	// previous value in between; next is the entry a miss replaces.
	cache [2]protoDecoded
	next  int
	// unmarshal decodes payloads: without the check of required fields
	// when the reader message has none (proto3), which costs a walk of
	// every decoded message.
	unmarshal proto.UnmarshalOptions
	// dbz: the debezium envelope's plans (debezium_protobuf.go).
	dbz pbPlans
}

// NewProtobuf returns the Protobuf format of cfg: its reader message is
// the first message of the subject's pinned or latest version, fetched
// (with its references) and compiled now.
func NewProtobuf(ctx context.Context, cfg ProtobufConfig) (Format, error) {
	if cfg.Registry == nil {
		return nil, errors.New("protobuf format: no schema registry (pass --schema-registry URL)")
	}
	ss, err := cfg.Registry.RawVersion(ctx, cfg.Subject, cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("protobuf format: reader schema: %w", err)
	}
	rv := SubjectVersion{Subject: cfg.Subject, Version: ss.Version, ID: ss.ID}
	where := fmt.Sprintf("subject %s version %d (schema id %d)", rv.Subject, rv.Version, rv.ID)
	if ss.Type != sr.TypeProtobuf {
		return nil, fmt.Errorf("protobuf format: %s is %s schema, not Protobuf (use --%s-format %s)", where, schemaTypeName(ss.Type), role(cfg.Subject), formatOfType(ss.Type))
	}
	fd, err := compileProto(ctx, cfg.Registry, ss.ID, ss.Schema)
	if err != nil {
		return nil, fmt.Errorf("protobuf format: %s: %w", where, err)
	}
	if fd.Messages().Len() == 0 {
		return nil, fmt.Errorf("protobuf format: %s defines no message", where)
	}
	md := fd.Messages().Get(0)
	typ, err := protoMessageType(md, nil)
	if err != nil {
		return nil, fmt.Errorf("protobuf format: %s: message %s: %w", where, md.FullName(), err)
	}
	return &protoFormat{reg: cfg.Registry, cfg: cfg, reader: rv, md: md, typ: typ,
		writers: map[string]bool{writerKey(uint32(rv.ID), nil): true}, refused: map[string]error{},
		unmarshal: proto.UnmarshalOptions{DiscardUnknown: true, AllowPartial: !hasRequired(md, nil)}}, nil
}

// hasRequired reports whether md or a message in it has a required field.
func hasRequired(md protoreflect.MessageDescriptor, seen []protoreflect.FullName) bool {
	if slices.Contains(seen, md.FullName()) {
		return false
	}
	seen = append(seen, md.FullName())
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			return true
		}
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil && hasRequired(fd.Message(), seen) {
			return true
		}
	}
	return false
}

// schemaTypeName names a registry schema type with its article.
func schemaTypeName(t sr.SchemaType) string {
	switch t {
	case sr.TypeAvro:
		return "an Avro"
	case sr.TypeJSON:
		return "a JSON Schema"
	}
	return "a " + t.String()
}

// formatOfType is the format that reads schemas of type t.
func formatOfType(t sr.SchemaType) string {
	if t == sr.TypeJSON {
		return "json-schema"
	}
	return strings.ToLower(t.String())
}

// role is key or value, from a TopicNameStrategy subject.
func role(subject string) string {
	if strings.HasSuffix(subject, "-key") {
		return "key"
	}
	return "value"
}

// compileProto compiles s (the registry's schema id) with its
// references, fetched from reg: a reference's name is the import path
// the text uses. google/protobuf's well-known files need no reference.
// Not reaching the registry is a *TransientError.
func compileProto(ctx context.Context, reg *Registry, id int, s sr.Schema) (protoreflect.FileDescriptor, error) {
	files := map[string]string{}
	if err := protoRefs(ctx, reg, s.References, files, 0); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("rtrctl-schema-%d.proto", id)
	files[name] = s.Schema
	confluentproto.AddTo(files) // what Confluent's registry resolves without references
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(files)})}
	out, err := c.Compile(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("does not compile as Protobuf: %w", err)
	}
	return rebuildFile(out[0])
}

// rebuildFile returns fd built again by google.golang.org/protobuf's
// protodesc, with its imports: protocompile's linked descriptors compute
// what a field is on every call, which dynamicpb makes for every field of
// every record.
func rebuildFile(fd protoreflect.FileDescriptor) (protoreflect.FileDescriptor, error) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imps := f.Imports()
		for i := range imps.Len() {
			add(imps.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(fd)
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("build descriptors: %w", err)
	}
	return files.FindFileByPath(fd.Path())
}

// protoRefs adds the schemas refs name (and theirs) to files by import
// path.
func protoRefs(ctx context.Context, reg *Registry, refs []sr.SchemaReference, files map[string]string, depth int) error {
	if depth > 32 {
		return errors.New("references nest more than 32 deep")
	}
	for _, ref := range refs {
		if _, ok := files[ref.Name]; ok {
			continue
		}
		ss, err := reg.RawVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return transient(fmt.Errorf("reference %s (subject %s version %d): %w", ref.Name, ref.Subject, ref.Version, err))
		}
		files[ref.Name] = ss.Schema.Schema
		if err := protoRefs(ctx, reg, ss.References, files, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// transient marks err a *TransientError unless it is the registry's
// definite answer.
func transient(err error) error {
	if _, ok := errors.AsType[*RegistryError](err); ok {
		return err
	}
	return &TransientError{Err: fmt.Errorf("protobuf format: %w", err)}
}

func (f *protoFormat) Name() string         { return "protobuf" }
func (f *protoFormat) Type() arrow.DataType { return f.typ }

// Check implements Format.
func (f *protoFormat) Check(data []byte) error {
	_, err := f.decode(data)
	return err
}

// decode returns the message data holds, read with the reader message.
func (f *protoFormat) decode(data []byte) (*dynamicpb.Message, error) {
	e, err := f.decodeEntry(data)
	if err != nil {
		return nil, err
	}
	return e.msg, nil
}

// protoDecoded is a decoded byte string (a copy) and its message.
type protoDecoded struct {
	data []byte
	msg  *dynamicpb.Message
	ok   bool
}

// decodeEntry returns the cache entry of data, decoding it on a miss.
func (f *protoFormat) decodeEntry(data []byte) (*protoDecoded, error) {
	for i := range f.cache {
		if e := &f.cache[i]; e.ok && bytes.Equal(e.data, data) {
			f.next = 1 - i
			return e, nil
		}
	}
	id, index, payload, err := protoFrame(data)
	if err != nil {
		return nil, err
	}
	if err := f.writer(id, index); err != nil {
		return nil, err
	}
	e := &f.cache[f.next]
	f.next = 1 - f.next
	e.ok = false
	if e.msg == nil {
		e.msg = dynamicpb.NewMessage(f.md)
	}
	e.msg.Reset()
	if err := f.unmarshal.Unmarshal(payload, e.msg); err != nil {
		return nil, fmt.Errorf("schema id %d: protobuf: %w", id, err)
	}
	e.data, e.ok = append(e.data[:0], data...), true
	return e, nil
}

// protoFrame splits Confluent-framed Protobuf: the schema id, the message
// indexes (nil for the first message) and the payload.
func protoFrame(data []byte) (id uint32, index []int, payload []byte, err error) {
	if len(data) < confluentHeader+1 {
		return 0, nil, nil, fmt.Errorf("truncated: %d bytes, but Confluent-framed Protobuf starts with at least 6 (magic byte 0, a 4-byte schema id, the message indexes)", len(data))
	}
	if data[0] != 0 {
		return 0, nil, nil, fmt.Errorf("bad magic byte 0x%02x (want 0: the bytes are not Confluent-framed Protobuf; the bytes format takes any bytes)", data[0])
	}
	id = binary.BigEndian.Uint32(data[1:confluentHeader])
	payload = data[confluentHeader+1:]
	if data[confluentHeader] != 0 { // 0: the first message
		var h sr.ConfluentHeader
		index, payload, err = h.DecodeIndex(data[confluentHeader:], maxProtoIndexes)
		if errors.Is(err, sr.ErrNotRegistered) {
			err = fmt.Errorf("more than %d", maxProtoIndexes)
		}
		if err != nil {
			return 0, nil, nil, fmt.Errorf("schema id %d: bad message indexes: %w", id, err)
		}
	}
	return id, index, payload, nil
}

// maxProtoIndexes bounds the message indexes of a record (how deep its
// message is nested), so that a corrupt count does not allocate.
const maxProtoIndexes = 64

func writerKey(id uint32, index []int) string {
	if len(index) == 0 || slices.Equal(index, []int{0}) {
		return strconv.FormatUint(uint64(id), 10)
	}
	return fmt.Sprint(id, index)
}

// writer checks that records written as message index of schema id can
// be read with the reader message.
func (f *protoFormat) writer(id uint32, index []int) error {
	key := writerKey(id, index)
	if f.writers[key] {
		return nil
	}
	if err, ok := f.refused[key]; ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := f.readable(ctx, id, index)
	if _, ok := errors.AsType[*TransientError](err); ok {
		return err
	}
	if err != nil {
		f.refused[key] = err
		return err
	}
	f.writers[key] = true
	return nil
}

func (f *protoFormat) readable(ctx context.Context, id uint32, index []int) error {
	md, err := writerMessage(ctx, f.reg, id, index)
	if err != nil {
		return err
	}
	if md.FullName() != f.md.FullName() {
		return fmt.Errorf("written as message %s (schema id %d), but the reader reads message %s (subject %s version %d, its first message)",
			md.FullName(), id, f.md.FullName(), f.reader.Subject, f.reader.Version)
	}
	extra, err := protoCompat(f.md, md, "")
	if err != nil {
		return fmt.Errorf("written with schema id %d, which cannot be read with the reader schema (subject %s version %d, id %d): %w",
			id, f.reader.Subject, f.reader.Version, f.reader.ID, err)
	}
	if len(extra) == 0 || f.cfg.Version > 0 {
		return nil
	}
	return laterVersion(ctx, f.reg, AvroConfig(f.cfg), f.reader.Version, id, extra, "protobuf format")
}

// writerMessage is the message records written as message index of
// schema id are: the schema fetched from reg and compiled. Not reaching
// the registry is a *TransientError.
func writerMessage(ctx context.Context, reg *Registry, id uint32, index []int) (protoreflect.MessageDescriptor, error) {
	ws, err := reg.RawSchema(ctx, int(id))
	var re *RegistryError
	switch {
	case errors.As(err, &re) && re.Code == 40403:
		return nil, fmt.Errorf("unknown schema id %d (the registry %s does not have it)", id, reg.URL())
	case errors.As(err, &re):
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	case err != nil:
		// Credentials, TLS, the registry away: not the record's fault.
		return nil, &TransientError{Err: fmt.Errorf("protobuf format: %w", err)}
	case ws.Type != sr.TypeProtobuf:
		return nil, fmt.Errorf("schema id %d is %s schema, not Protobuf", id, schemaTypeName(ws.Type))
	}
	fd, err := compileProto(ctx, reg, int(id), ws)
	if _, ok := errors.AsType[*TransientError](err); ok {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	if len(index) == 0 {
		index = []int{0}
	}
	var md protoreflect.MessageDescriptor
	ms := fd.Messages()
	for _, i := range index {
		if i < 0 || i >= ms.Len() {
			return nil, fmt.Errorf("schema id %d has no message at index %v", id, index)
		}
		md = ms.Get(i)
		ms = md.Messages()
	}
	return md, nil
}

// protoCompat checks that messages of writer decode as reader: every
// field number both have is of one wire-compatible kind (protoKindGroup)
// and cardinality in both, messages recursively. It returns the fields
// (dotted paths) of writer that reader does not have.
func protoCompat(reader, writer protoreflect.MessageDescriptor, path string) ([]string, error) {
	var extra []string
	fs := writer.Fields()
	for i := range fs.Len() {
		wf := fs.Get(i)
		rf := reader.Fields().ByNumber(wf.Number())
		if rf == nil {
			extra = append(extra, path+string(wf.Name()))
			continue
		}
		what := func(fd protoreflect.FieldDescriptor) string {
			switch {
			case fd.IsMap():
				return "map<" + fd.MapKey().Kind().String() + ", " + fd.MapValue().Kind().String() + ">"
			case fd.IsList():
				return "repeated " + fd.Kind().String()
			}
			return fd.Kind().String()
		}
		if wf.IsMap() != rf.IsMap() || wf.IsList() != rf.IsList() ||
			(wf.IsMap() && protoKindGroup(wf.MapKey()) != protoKindGroup(rf.MapKey())) {
			return nil, fmt.Errorf("field %s%s (number %d) is %s in the writer's schema and %s in the reader's", path, wf.Name(), wf.Number(), what(wf), what(rf))
		}
		w, r := wf, rf
		if wf.IsMap() {
			w, r = wf.MapValue(), rf.MapValue()
		}
		if protoKindGroup(w) != protoKindGroup(r) {
			return nil, fmt.Errorf("field %s%s (number %d) is %s in the writer's schema and %s in the reader's, which do not share a wire encoding", path, wf.Name(), wf.Number(), what(wf), what(rf))
		}
		if w.Message() != nil && r.Message() != nil && w.Message().FullName() != writer.FullName() {
			sub, err := protoCompat(r.Message(), w.Message(), path+string(wf.Name())+".")
			if err != nil {
				return nil, err
			}
			extra = append(extra, sub...)
		}
	}
	return extra, nil
}

// protoKindGroup names the kinds a field can change between and still
// decode (the protobuf language guide's "Updating A Message Type"):
// int32, uint32, int64, uint64, bool and enum; sint32 and sint64; fixed32
// and sfixed32; fixed64 and sfixed64; string and bytes.
func protoKindGroup(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind, protoreflect.EnumKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "bytes"
	}
	return fd.Kind().String()
}

// Normal implements Normalizer: the message re-encoded with the reader
// (deterministically: map entries by key, no unknown fields), so that
// equal keys written with two schema versions or two producers are the
// same bytes; data itself when it is those bytes already
// (protoCanonical), as most producers write them.
func (f *protoFormat) Normal(data []byte) ([]byte, error) {
	e, err := f.decodeEntry(data)
	if err != nil {
		return nil, err
	}
	if data[confluentHeader] == 0 && binary.BigEndian.Uint32(data[1:confluentHeader]) == uint32(f.reader.ID) &&
		protoCanonical(data[confluentHeader+1:], f.md) {
		return data, nil // already what encode would write
	}
	out, err := f.encode(e.msg)
	if err != nil {
		return nil, err
	}
	e.data = append(e.data[:0], out...) // the same message
	return out, nil
}

// encode frames m, a message of the reader, with the reader's id and
// index (the first message: one 0 byte).
func (f *protoFormat) encode(m proto.Message) ([]byte, error) {
	out := make([]byte, confluentHeader+1, 64)
	binary.BigEndian.PutUint32(out[1:], uint32(f.reader.ID))
	// AllowPartial: decoding checked required fields already.
	out, err := proto.MarshalOptions{Deterministic: true, AllowPartial: true}.MarshalAppend(out, m)
	if err != nil {
		return nil, fmt.Errorf("protobuf: encode with schema id %d: %w", f.reader.ID, err)
	}
	return out, nil
}

// NewColumn implements Format.
func (f *protoFormat) NewColumn() Column {
	return newDecodedColumn(f.typ, f.decode, func(b array.Builder, m *dynamicpb.Message) { appendProtoMessage(b.(*array.StructBuilder), m) })
}

// Raw implements Format: element i re-encoded as the reader message.
func (f *protoFormat) Raw(arr arrow.Array, i int) ([]byte, error) {
	if !arrow.TypeEqual(arr.DataType(), f.typ) {
		return nil, fmt.Errorf("protobuf format: column is %s, want %s", arr.DataType(), f.typ)
	}
	m := dynamicpb.NewMessage(f.md)
	if err := fillProto(m, arr, i); err != nil {
		return nil, fmt.Errorf("protobuf format: %w", err)
	}
	return f.encode(m)
}
