package testenv

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/sr"
)

// parseJSONBody checks a JSON Schema body (it compiles, no references);
// on failure it has replied. The text is kept as registered.
func parseJSONBody(w http.ResponseWriter, b schemaBody) (string, bool) {
	if len(b.References) > 0 {
		fail(w, 42201, "Invalid schema: references are not supported by this test registry")
		return "", false
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(b.Schema))
	if err == nil {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft7)
		c.UseLoader(jsonschema.SchemeURLLoader{})
		if err = c.AddResource("urn:test-registry:schema", doc); err == nil {
			_, err = c.Compile("urn:test-registry:schema")
		}
	}
	if err != nil {
		fail(w, 42201, "Invalid schema %s: %v", b.Schema, err)
		return "", false
	}
	return strings.TrimSpace(b.Schema), true
}

// registerJSON registers a JSON Schema: the same text under the subject
// is the same version, the same text anywhere the same id. A subject
// holds one schema type; JSON versions are not checked for
// compatibility.
func (r *Registry) registerJSON(w http.ResponseWriter, subject string, b schemaBody) {
	text, ok := parseJSONBody(w, b)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.subjects[subject]
	for _, id := range ids {
		if r.types[id] != "JSON" {
			fail(w, 409, "Schema being registered is incompatible with an earlier schema for subject %q: schema type JSON, the subject's versions are %s", subject, typeName(r.types[id]))
			return
		}
		if r.schemas[id-1] == text {
			reply(w, http.StatusOK, map[string]int{"id": id})
			return
		}
	}
	id := 0
	for i, t := range r.schemas {
		if t == text && r.types[i+1] == "JSON" {
			id = i + 1
		}
	}
	if id == 0 {
		r.schemas = append(r.schemas, text)
		id = len(r.schemas)
		r.types[id] = "JSON"
	}
	r.subjects[subject] = append(ids, id)
	reply(w, http.StatusOK, map[string]int{"id": id})
}

func typeName(t string) string {
	if t == "" {
		return "AVRO"
	}
	return t
}

// lookupJSON finds a JSON Schema's version under subject.
func (r *Registry) lookupJSON(w http.ResponseWriter, subject string, b schemaBody) {
	text, ok := parseJSONBody(w, b)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replyVersion(w, subject, func(id int) bool { return r.types[id] == "JSON" && r.schemas[id-1] == text })
}

// RegisterJSON registers a JSON Schema under subject with franz-go's sr
// client (schemaType JSON) and returns its id.
func (r *Registry) RegisterJSON(t testing.TB, subject, schema string) int {
	t.Helper()
	ss, err := r.client(t).CreateSchema(t.Context(), subject, sr.Schema{Schema: schema, Type: sr.TypeJSON})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID
}

// JSONSerde serialises documents of one registered JSON Schema as a
// producer independent of rtrctl's decoders would: franz-go's sr
// framing (sr.Encode with the Confluent header: magic byte, schema id)
// around encoding/json's encoding.
type JSONSerde struct{ ID int }

// JSONSerde registers schema (a JSON Schema) under subject and returns
// its serialiser.
func (r *Registry) JSONSerde(t testing.TB, subject, schema string) *JSONSerde {
	t.Helper()
	return &JSONSerde{ID: r.RegisterJSON(t, subject, schema)}
}

// Encode serialises v with encoding/json.
func (s *JSONSerde) Encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := sr.Encode(v, &sr.ConfluentHeader{}, s.ID, nil, json.Marshal)
	if err != nil {
		t.Fatalf("encode %v: %v", v, err)
	}
	return b
}

// FrameJSON is doc framed by hand as Confluent's wire format: magic byte
// 0, id as 4 bytes big-endian, the bytes of doc as they are (whitespace,
// property order).
func FrameJSON(id int, doc string) []byte {
	return append([]byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, doc...)
}

// client is a franz-go sr client of the registry, with its credentials
// and TLS.
func (r *Registry) client(t testing.TB) *sr.Client {
	t.Helper()
	opts := []sr.ClientOpt{sr.URLs(r.URL), sr.BasicAuth(r.user, r.password)}
	if r.clientTLS != nil {
		opts = append(opts, sr.DialTLSConfig(r.clientTLS))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
