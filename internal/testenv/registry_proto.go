package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/confluentproto"
)

// PROTOBUF schemas in the test registry: registered as .proto text with
// "schemaType":"PROTOBUF" and "references" ([{"name","subject","version"}]:
// name is the import path the text uses, subject and version a registered
// schema). A reference to a version that does not exist, or text that does
// not compile with its references (google/protobuf's well-known files
// need none), is 42201. Two registrations are the same schema when text,
// type and references are equal.
//
// Compatibility (every level but NONE, against the latest version or,
// _TRANSITIVE, all): a message of an earlier version that the new schema
// also has (by full name) keeps the kind and cardinality (singular,
// repeated, map) of every field number both have. Adding and removing
// fields is allowed, as protobuf's wire format allows; the real
// registry's finer rules (a removed field's number reused, changes among
// wire-compatible kinds, oneof moves) are not checked.

// protoSchema is a PROTOBUF schema's type and references.
type protoSchema struct {
	refs []sr.SchemaReference
}

// bySchemaType reads a register or lookup body and hands it to proto when
// it is a PROTOBUF schema, to avro otherwise.
func (r *Registry) bySchemaType(avro, proto http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			fail(w, 50005, "read body: %v", err)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		var peek struct {
			SchemaType string `json:"schemaType"`
		}
		if json.Unmarshal(b, &peek) == nil && peek.SchemaType == "PROTOBUF" {
			proto(w, req)
			return
		}
		avro(w, req)
	}
}

// protoBody parses a PROTOBUF register or lookup body and compiles it;
// on failure it has replied. Called with r.mu held.
func (r *Registry) protoBody(w http.ResponseWriter, req *http.Request) (string, []sr.SchemaReference, protoreflect.FileDescriptor, bool) {
	var b struct {
		Schema     string               `json:"schema"`
		References []sr.SchemaReference `json:"references"`
	}
	if err := json.NewDecoder(req.Body).Decode(&b); err != nil {
		fail(w, 50005, "Unrecognized JSON: %v", err)
		return "", nil, nil, false
	}
	fd, err := r.compileProto(b.Schema, b.References)
	if err != nil {
		fail(w, 42201, "Invalid schema: %v", err)
		return "", nil, nil, false
	}
	return strings.TrimSpace(b.Schema), b.References, fd, true
}

// compileProto compiles text with its references. Called with r.mu held.
func (r *Registry) compileProto(text string, refs []sr.SchemaReference) (protoreflect.FileDescriptor, error) {
	files := map[string]string{}
	var add func(refs []sr.SchemaReference) error
	add = func(refs []sr.SchemaReference) error {
		for _, ref := range refs {
			ids := r.subjects[ref.Subject]
			if ref.Version < 1 || ref.Version > len(ids) {
				return fmt.Errorf("reference %s: subject %s has no version %d", ref.Name, ref.Subject, ref.Version)
			}
			id := ids[ref.Version-1]
			files[ref.Name] = r.schemas[id-1]
			if err := add(r.protos[id].refs); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(refs); err != nil {
		return nil, err
	}
	const name = "registered.proto"
	files[name] = text
	confluentproto.AddTo(files) // what Confluent's registry resolves without references
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(files)})}
	out, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// sameProto reports whether schema id is text with refs.
func (r *Registry) sameProto(id int, text string, refs []sr.SchemaReference) bool {
	p, ok := r.protos[id]
	return ok && r.schemas[id-1] == text && slices.Equal(p.refs, refs)
}

func (r *Registry) registerProto(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	text, refs, fd, ok := r.protoBody(w, req)
	if !ok {
		return
	}
	ids := r.subjects[subject]
	for _, id := range ids {
		if r.sameProto(id, text, refs) {
			reply(w, http.StatusOK, map[string]int{"id": id})
			return
		}
	}
	if err := r.compatibleProto(subject, fd); err != nil {
		fail(w, 409, "Schema being registered is incompatible with an earlier schema for subject %q: %v", subject, err)
		return
	}
	id := 0
	for i := range r.schemas {
		if id == 0 && r.sameProto(i+1, text, refs) {
			id = i + 1
		}
	}
	if id == 0 {
		r.schemas = append(r.schemas, text)
		id = len(r.schemas)
		if r.protos == nil {
			r.protos = map[int]protoSchema{}
		}
		r.protos[id] = protoSchema{refs: refs}
	}
	r.subjects[subject] = append(ids, id)
	reply(w, http.StatusOK, map[string]int{"id": id})
}

// compatibleProto checks fd against the subject's versions (the rule in
// the comment at the top of this file).
func (r *Registry) compatibleProto(subject string, fd protoreflect.FileDescriptor) error {
	_, ids := r.checkedIDs(subject)
	for _, id := range ids {
		p, ok := r.protos[id]
		if !ok {
			return fmt.Errorf("version with id %d is not a PROTOBUF schema", id)
		}
		old, err := r.compileProto(r.schemas[id-1], p.refs)
		if err != nil {
			return err
		}
		if err := sameFieldTypes(old.Messages(), fd.Messages()); err != nil {
			return fmt.Errorf("version with id %d: %w", id, err)
		}
	}
	return nil
}

func sameFieldTypes(old, cur protoreflect.MessageDescriptors) error {
	for i := range old.Len() {
		om := old.Get(i)
		nm := cur.ByName(om.Name())
		if nm == nil {
			continue
		}
		for j := range om.Fields().Len() {
			of := om.Fields().Get(j)
			nf := nm.Fields().ByNumber(of.Number())
			if nf == nil {
				continue
			}
			if of.Kind() != nf.Kind() || of.IsList() != nf.IsList() || of.IsMap() != nf.IsMap() {
				return fmt.Errorf("field %d of %s changes from %s to %s", of.Number(), om.FullName(), fieldKind(of), fieldKind(nf))
			}
		}
		if err := sameFieldTypes(om.Messages(), nm.Messages()); err != nil {
			return err
		}
	}
	return nil
}

func fieldKind(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map"
	case fd.IsList():
		return "repeated " + fd.Kind().String()
	}
	return fd.Kind().String()
}

func (r *Registry) lookupProto(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	text, refs, _, ok := r.protoBody(w, req)
	if !ok {
		return
	}
	r.replyVersion(w, subject, func(id int) bool { return r.sameProto(id, text, refs) })
}

// idBody is the answer to GET /schemas/ids/{id}.
func (r *Registry) idBody(id int) any {
	p, ok := r.protos[id]
	if !ok {
		out := map[string]string{"schema": r.schemas[id-1]}
		if t := r.types[id]; t != "" {
			out["schemaType"] = t
		}
		return out
	}
	return map[string]any{"schema": r.schemas[id-1], "schemaType": "PROTOBUF", "references": p.refs}
}

// versionBody is the answer about version v (schema id) of subject.
func (r *Registry) versionBody(subject string, v, id int) any {
	p, ok := r.protos[id]
	if !ok {
		return subjectVersion{subject, v, id, r.schemas[id-1], r.types[id]}
	}
	return map[string]any{"subject": subject, "version": v, "id": id, "schema": r.schemas[id-1], "schemaType": "PROTOBUF", "references": p.refs}
}

// ProtoSerde serialises messages of one registered PROTOBUF schema as a
// producer independent of rtrctl's decoders would: messages of the
// schema's descriptors (compiled with protocompile), marshalled with
// proto.Marshal and framed with franz-go's sr.Encode (magic byte, schema
// id, message indexes).
type ProtoSerde struct {
	ID   int
	File protoreflect.FileDescriptor
}

// ProtoSerde registers schema (.proto text) with references under
// subject, with franz-go's sr client, and returns its serialiser.
func (r *Registry) ProtoSerde(t testing.TB, subject, schema string, refs ...sr.SchemaReference) *ProtoSerde {
	t.Helper()
	id := r.create(t, subject, sr.Schema{Schema: schema, Type: sr.TypeProtobuf, References: refs})
	r.mu.Lock()
	fd, err := r.compileProto(schema, refs)
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return &ProtoSerde{ID: id, File: fd}
}

// New returns an empty message of the schema's message called name (its
// name in the file, "Outer.Inner" for a nested one).
func (s *ProtoSerde) New(t testing.TB, name string) *dynamicpb.Message {
	t.Helper()
	var md protoreflect.MessageDescriptor
	ms := s.File.Messages()
	for part := range strings.SplitSeq(name, ".") {
		if md = ms.ByName(protoreflect.Name(part)); md == nil {
			t.Fatalf("schema %d has no message %s", s.ID, name)
		}
		ms = md.Messages()
	}
	return dynamicpb.NewMessage(md)
}

// Encode serialises m, a message of the schema, framed with the message
// indexes of its descriptor.
func (s *ProtoSerde) Encode(t testing.TB, m proto.Message) []byte {
	t.Helper()
	var index []int
	for d := protoreflect.Descriptor(m.ProtoReflect().Descriptor()); d != nil; d = d.Parent() {
		if md, ok := d.(protoreflect.MessageDescriptor); ok {
			index = append([]int{md.Index()}, index...)
		}
	}
	b, err := sr.Encode(m, &sr.ConfluentHeader{}, s.ID, index, func(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) })
	if err != nil {
		t.Fatalf("encode %v: %v", m, err)
	}
	return b
}

// create registers s under subject with franz-go's sr client and returns
// its id.
func (r *Registry) create(t testing.TB, subject string, s sr.Schema) int {
	t.Helper()
	opts := []sr.ClientOpt{sr.URLs(r.URL), sr.BasicAuth(r.user, r.password)}
	if r.clientTLS != nil {
		opts = append(opts, sr.DialTLSConfig(r.clientTLS))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.CreateSchema(context.Background(), subject, s)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID
}
