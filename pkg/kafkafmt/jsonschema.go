package kafkafmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonSchemaFormat decodes Confluent-framed JSON (magic byte 0, 4-byte
// big-endian schema id, the JSON document) registered with schemaType
// JSON: each document is validated against its writer schema and mapped
// by property name into the columns of the reader schema, chosen at
// start (jsonschema_map.go has the mapping).
type jsonSchemaFormat struct {
	reg    *Registry
	reader RawSchema
	root   *jsNode
	typ    arrow.DataType
	// writers: compiled schemas by writer schema id; refused: ids whose
	// records cannot be read, with why.
	writers map[uint32]*jsonschema.Schema
	refused map[uint32]error
	// The last decoded bytes (a copy) and their value (jsNode.convert's
	// form): Check decodes, and the Append or Normal that follows for the
	// same bytes reuses it.
	last    []byte
	lastVal any
	lastOK  bool
	enc     []byte
	// dbz: the debezium envelope's plans (debezium_jsonschema.go).
	dbz jsDbzPlans
}

// NewJSONSchema returns the JSON Schema format of cfg (the same
// configuration as Avro's): its reader schema is the subject's pinned or
// latest version, fetched now.
func NewJSONSchema(ctx context.Context, cfg AvroConfig) (Format, error) {
	if cfg.Registry == nil {
		return nil, errors.New("json-schema format: no schema registry (pass --schema-registry URL)")
	}
	rv, err := cfg.Registry.VersionText(ctx, cfg.Subject, cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("json-schema format: reader schema: %w", err)
	}
	at := fmt.Sprintf("subject %s version %d (schema id %d)", rv.Subject, rv.Version, rv.ID)
	if rv.Type != "JSON" {
		return nil, fmt.Errorf("json-schema format: %s is a %s schema, not JSON Schema (use --%s-format %s)", at, rv.Type, roleOf(cfg.Subject), strings.ToLower(rv.Type))
	}
	s, err := compileJSONSchema(rv.ID, rv.Text)
	if err != nil {
		return nil, fmt.Errorf("json-schema format: %s: %w", at, err)
	}
	root := mapJSONSchema(s, nil)
	return &jsonSchemaFormat{reg: cfg.Registry, reader: rv, root: root, typ: root.typ,
		writers: map[uint32]*jsonschema.Schema{uint32(rv.ID): s}, refused: map[uint32]error{}}, nil
}

// roleOf is key or value, from a TopicNameStrategy subject.
func roleOf(subject string) string {
	if strings.HasSuffix(subject, "-key") {
		return "key"
	}
	return "value"
}

// RegistryReader returns the subject, version and schema id of the
// reader schema of a format read through a schema registry (avro,
// json-schema); ok false for other formats.
func RegistryReader(f Format) (subject string, version, id int, ok bool) {
	if j, ok := f.(*jsonSchemaFormat); ok {
		return j.reader.Subject, j.reader.Version, j.reader.ID, true
	}
	return AvroReader(f)
}

// compileJSONSchema compiles a registered schema: drafts by $schema
// (draft-07 without it, as Confluent's serializers), format and
// contentEncoding asserted (the mapping relies on them), and no
// resources loaded from files or the network.
func compileJSONSchema(id int, text string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	c.AssertContent()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := fmt.Sprintf("urn:schema-registry:id:%d", id)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("json schema does not compile: %s", oneLine(err))
	}
	return s, nil
}

// oneLine is err's message on one line (jsonschema's list causes on
// lines of their own).
func oneLine(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) > 1 && strings.HasPrefix(lines[0], "jsonschema validation failed with") {
		lines = lines[1:] // names our resource URL, not the schema
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[i]), "- "))
	}
	return strings.Join(lines, "; ")
}

func (f *jsonSchemaFormat) Name() string         { return "json-schema" }
func (f *jsonSchemaFormat) Type() arrow.DataType { return f.typ }

// Check implements Format.
func (f *jsonSchemaFormat) Check(data []byte) error {
	_, err := f.decode(data)
	return err
}

// decode returns the value of data in the reader's columns.
func (f *jsonSchemaFormat) decode(data []byte) (any, error) {
	if f.lastOK && bytes.Equal(f.last, data) {
		return f.lastVal, nil
	}
	f.lastOK = false
	id, err := confluentID(data, "JSON", "; the json format takes plain JSON")
	if err != nil {
		return nil, err
	}
	ws, err := f.writer(id)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data[confluentHeader:]))
	if err != nil {
		return nil, fmt.Errorf("schema id %d: malformed JSON: %w", id, err)
	}
	if doc == nil {
		return nil, fmt.Errorf("schema id %d: the document is JSON null, which a column cannot tell from a Kafka null (a tombstone)", id)
	}
	if err := ws.Validate(doc); err != nil {
		return nil, fmt.Errorf("schema id %d: the document does not validate: %s", id, oneLine(err))
	}
	v, err := f.root.convert(doc, "")
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	if id != uint32(f.reader.ID) {
		// What the columns hold must be a document of the reader schema:
		// the upsert state is rebuilt from it (Raw) and read back as one.
		f.enc = f.root.encode(f.enc[:0], v)
		rd, err := jsonschema.UnmarshalJSON(bytes.NewReader(f.enc))
		if err == nil {
			err = f.writers[uint32(f.reader.ID)].Validate(rd)
		}
		if err != nil {
			return nil, fmt.Errorf("written with schema id %d, whose document in the reader schema's columns (subject %s version %d, id %d) does not validate against the reader schema: %s",
				id, f.reader.Subject, f.reader.Version, f.reader.ID, oneLine(err))
		}
	}
	f.last, f.lastVal, f.lastOK = append(f.last[:0], data...), v, true
	return v, nil
}

// writer returns the compiled schema of id, fetched once.
func (f *jsonSchemaFormat) writer(id uint32) (*jsonschema.Schema, error) {
	if s, ok := f.writers[id]; ok {
		return s, nil
	}
	if err, ok := f.refused[id]; ok {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := f.reg.SchemaText(ctx, int(id))
	var s *jsonschema.Schema
	switch {
	case err != nil:
		if err = recordSchemaErr("json-schema", f.reg, id, err); errors.As(err, new(*TransientError)) {
			return nil, err
		}
	case rs.Type != "JSON":
		err = fmt.Errorf("schema id %d is a %s schema, not JSON Schema", id, rs.Type)
	default:
		if s, err = compileJSONSchema(int(id), rs.Text); err != nil {
			err = fmt.Errorf("schema id %d: %w", id, err)
		}
	}
	if err != nil {
		f.refused[id] = err
		return nil, err
	}
	f.writers[id] = s
	return s, nil
}

// frame encodes v (a value of the reader's columns) as a document of the
// reader schema, framed with the reader's id.
func (f *jsonSchemaFormat) frame(v any) []byte {
	out := make([]byte, confluentHeader, 64)
	binary.BigEndian.PutUint32(out[1:], uint32(f.reader.ID))
	return f.root.encode(out, v)
}

// Normal implements Normalizer: the document re-encoded from its value in
// the reader's columns (properties in name order, no whitespace, the
// reader's id), so that equal values written with other bytes or
// another version are equal bytes, and the bytes Raw gives.
func (f *jsonSchemaFormat) Normal(data []byte) ([]byte, error) {
	v, err := f.decode(data)
	if err != nil {
		return nil, err
	}
	out := f.frame(v)
	if bytes.Equal(out, data) {
		return data, nil
	}
	f.last, f.lastVal, f.lastOK = append(f.last[:0], out...), v, true
	return out, nil
}

// NewColumn implements Format.
func (f *jsonSchemaFormat) NewColumn() Column {
	return newDecodedColumn(f.typ, f.decode, f.root.append)
}

// Raw implements Format: element i encoded as a document of the reader
// schema (Normal's bytes).
func (f *jsonSchemaFormat) Raw(arr arrow.Array, i int) ([]byte, error) {
	if !arrow.TypeEqual(arr.DataType(), f.typ) {
		return nil, fmt.Errorf("json-schema format: column is %s, want %s", arr.DataType(), f.typ)
	}
	v, err := f.root.generic(arr, i)
	if err != nil {
		return nil, fmt.Errorf("json-schema format: %w", err)
	}
	return f.frame(v), nil
}
