package testenv

import (
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// Registry is a Confluent-compatible schema registry for tests: an HTTP
// server on 127.0.0.1 that keeps Avro schemas in memory and answers the
// registry's REST API for the endpoints rtrctl and its tests use:
//
//	POST /subjects/{subject}/versions          register; {"id":N}
//	GET  /subjects                             ["a","b"]
//	GET  /subjects/{subject}/versions          [1,2]
//	GET  /subjects/{subject}/versions/{v}      v a number or "latest"; {"subject","version","id","schema"}
//	POST /subjects/{subject}                   lookup; {"subject","version","id","schema"}
//	GET  /schemas/ids/{id}                     {"schema"}
//	GET  /schemas/ids/{id}/versions            [{"subject","version"}]
//	GET  /config, GET /config/{subject}        {"compatibilityLevel":"BACKWARD"}
//	PUT  /config, PUT /config/{subject}        {"compatibility":"FULL"} -> the same
//
// Errors are {"error_code":N,"message":"..."} with the registry's codes:
// 40401 subject not found, 40402 version not found, 40403 schema not
// found, 40408 no subject-level compatibility, 409 incompatible schema,
// 42201 invalid schema, 42202 invalid version, 42203 invalid compatibility
// level, 401 unauthorized (basic auth), 50005 a body that is not JSON.
// Compatibility (NONE, BACKWARD, FORWARD, FULL and their _TRANSITIVE
// forms; default BACKWARD) is checked with hamba/avro's schema resolution
// rules when a new version is registered. Avro schemas (schemaType
// absent or "AVRO") take no references; JSON Schemas (schemaType "JSON",
// compiled with santhosh-tekuri/jsonschema; registerJSON) are not checked
// for compatibility and take no references; PROTOBUF schemas take
// references and are checked as registry_proto.go says (GET
// /schemas/ids/{id} and GET .../versions/{v} then also answer
// "schemaType" and "references"); a subject holds one schema type.
type Registry struct {
	URL string // http(s)://127.0.0.1:port

	user, password string
	clientTLS      *tls.Config
	srv            *http.Server
	ln             net.Listener

	mu       sync.Mutex
	subjects map[string][]int // subject -> schema ids, version v at [v-1]
	schemas  []string         // id -> canonical schema text, id i at [i-1]
	types    map[int]string   // id -> schemaType, for those not AVRO
	global   string
	compat   map[string]string
	requests int
	// protos: the PROTOBUF schemas by id (registry_proto.go); an id
	// not in it is Avro.
	protos map[int]protoSchema
}

// RegistryOptions configures StartRegistry.
type RegistryOptions struct {
	// User and Password, when User is set, are required as HTTP basic
	// auth on every request (401 otherwise).
	User, Password string
	// TLS, when set, serves HTTPS with it (e.g. servers.Certs.ServerTLS);
	// ClientTLS is then what Register and Serde connect with
	// (servers.Certs.ClientTLS).
	TLS, ClientTLS *tls.Config
}

// StartRegistry starts a registry on a free loopback port, stopped at t's
// cleanup.
func StartRegistry(t testing.TB, opts RegistryOptions) *Registry {
	t.Helper()
	r, err := LaunchRegistry(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// LaunchRegistry starts a registry; the caller closes it.
func LaunchRegistry(opts RegistryOptions) (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("launch registry: %w", err)
	}
	r := &Registry{user: opts.User, password: opts.Password, clientTLS: opts.ClientTLS, ln: ln,
		subjects: map[string][]int{}, types: map[int]string{}, global: "BACKWARD", compat: map[string]string{}}
	scheme := "http"
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
		scheme = "https"
	}
	r.URL = scheme + "://" + r.ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /subjects/{subject}/versions", r.bySchemaType(r.register, r.registerProto))
	mux.HandleFunc("GET /subjects", r.listSubjects)
	mux.HandleFunc("GET /subjects/{subject}/versions", r.listVersions)
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}", r.getVersion)
	mux.HandleFunc("POST /subjects/{subject}", r.bySchemaType(r.lookup, r.lookupProto))
	mux.HandleFunc("GET /schemas/ids/{id}", r.getID)
	mux.HandleFunc("GET /schemas/ids/{id}/versions", r.getIDVersions)
	mux.HandleFunc("GET /config", r.getConfig)
	mux.HandleFunc("GET /config/{subject}", r.getConfig)
	mux.HandleFunc("PUT /config", r.putConfig)
	mux.HandleFunc("PUT /config/{subject}", r.putConfig)
	r.srv = &http.Server{Handler: r.auth(mux)}
	go r.srv.Serve(ln)
	return r, nil
}

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }

// Requests is how many requests the registry has answered (past auth).
func (r *Registry) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// regError is the registry's error body.
type regError struct {
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

func (r *Registry) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(r.user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(r.password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="SchemaRegistry"`)
				reply(w, http.StatusUnauthorized, regError{401, "Unauthorized"})
				return
			}
		}
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	status := code
	for status >= 1000 {
		status /= 10
	}
	reply(w, status, regError{code, fmt.Sprintf(format, args...)})
}

// schemaBody is the body of a register or lookup request.
type schemaBody struct {
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schemaType,omitempty"`
	References []json.RawMessage `json:"references,omitempty"`
}

// readBody reads a schema body; on failure it has replied.
func readBody(w http.ResponseWriter, req *http.Request) (schemaBody, bool) {
	var b schemaBody
	if err := json.NewDecoder(req.Body).Decode(&b); err != nil {
		fail(w, 50005, "Unrecognized JSON: %v", err)
		return b, false
	}
	return b, true
}

// parseBody parses an Avro schema body; on failure it has replied.
// The text is kept as registered: the canonical form (Schema.String)
// drops defaults, which schema resolution needs.
func parseBody(w http.ResponseWriter, b schemaBody) (avro.Schema, string, bool) {
	if b.SchemaType != "" && b.SchemaType != "AVRO" {
		fail(w, 42201, "Invalid schema: schema type %s is not supported by this test registry", b.SchemaType)
		return nil, "", false
	}
	if len(b.References) > 0 {
		fail(w, 42201, "Invalid schema: references are not supported by this test registry")
		return nil, "", false
	}
	s, err := ParseAvro(b.Schema)
	if err != nil {
		fail(w, 42201, "Invalid schema %s: %v", b.Schema, err)
		return nil, "", false
	}
	return s, strings.TrimSpace(b.Schema), true
}

// same reports whether schema id is s: the same canonical form and the
// same defaults (compared by the schemas' fingerprints and their JSON).
func (r *Registry) same(id int, s avro.Schema) bool {
	if r.types[id] != "" {
		return false
	}
	old, err := ParseAvro(r.schemas[id-1])
	if err != nil || old.String() != s.String() {
		return false
	}
	a, _ := json.Marshal(old)
	b, _ := json.Marshal(s)
	return string(a) == string(b)
}

// ParseAvro parses an Avro schema with a cache of its own, so that two
// versions of one named type do not meet in hamba/avro's global cache.
func ParseAvro(text string) (avro.Schema, error) {
	return avro.ParseWithCache(text, "", &avro.SchemaCache{})
}

func (r *Registry) register(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	b, ok := readBody(w, req)
	if !ok {
		return
	}
	if b.SchemaType == "JSON" {
		r.registerJSON(w, subject, b)
		return
	}
	s, text, ok := parseBody(w, b)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.subjects[subject]
	for _, id := range ids {
		if r.same(id, s) {
			reply(w, http.StatusOK, map[string]int{"id": id})
			return
		}
	}
	if err := r.compatible(subject, s); err != nil {
		fail(w, 409, "Schema being registered is incompatible with an earlier schema for subject %q: %v", subject, err)
		return
	}
	id := slices.IndexFunc(r.schemas, func(t string) bool { return t == text }) + 1
	if r.types[id] != "" {
		id = 0
	}
	for i := range r.schemas {
		if id == 0 && r.same(i+1, s) {
			id = i + 1
		}
	}
	if id == 0 {
		r.schemas = append(r.schemas, text)
		id = len(r.schemas)
	}
	r.subjects[subject] = append(ids, id)
	reply(w, http.StatusOK, map[string]int{"id": id})
}

// compatible checks s against the subject's versions under its level.
func (r *Registry) compatible(subject string, s avro.Schema) error {
	level, ids := r.checkedIDs(subject)
	sc := avro.NewSchemaCompatibility()
	for _, id := range ids {
		old, err := ParseAvro(r.schemas[id-1])
		if err != nil {
			return err
		}
		if strings.HasPrefix(level, "BACKWARD") || strings.HasPrefix(level, "FULL") {
			if err := sc.Compatible(s, old); err != nil {
				return fmt.Errorf("new schema cannot read version with id %d: %w", id, err)
			}
		}
		if strings.HasPrefix(level, "FORWARD") || strings.HasPrefix(level, "FULL") {
			if err := sc.Compatible(old, s); err != nil {
				return fmt.Errorf("version with id %d cannot read the new schema: %w", id, err)
			}
		}
	}
	return nil
}

// checkedIDs returns the subject's compatibility level and the ids of the
// versions a new one is checked against under it (none for NONE).
func (r *Registry) checkedIDs(subject string) (string, []int) {
	level := r.level(subject)
	ids := r.subjects[subject]
	if level == "NONE" || len(ids) == 0 {
		return level, nil
	}
	if !strings.HasSuffix(level, "_TRANSITIVE") {
		ids = ids[len(ids)-1:]
	}
	return level, ids
}

func (r *Registry) level(subject string) string {
	if l, ok := r.compat[subject]; ok {
		return l
	}
	return r.global
}

func (r *Registry) listSubjects(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for s := range r.subjects {
		out = append(out, s)
	}
	sort.Strings(out)
	reply(w, http.StatusOK, out)
}

// subjectIDs returns the ids of a subject; on failure it has replied.
func (r *Registry) subjectIDs(w http.ResponseWriter, subject string) ([]int, bool) {
	ids, ok := r.subjects[subject]
	if !ok {
		fail(w, 40401, "Subject '%s' not found.", subject)
	}
	return ids, ok
}

func (r *Registry) listVersions(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, ok := r.subjectIDs(w, req.PathValue("subject"))
	if !ok {
		return
	}
	vs := make([]int, len(ids))
	for i := range ids {
		vs[i] = i + 1
	}
	reply(w, http.StatusOK, vs)
}

// subjectVersion is the registry's answer about one version of a subject.
type subjectVersion struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Schema  string `json:"schema"`
	// SchemaType is absent for Avro, as the registry answers.
	SchemaType string `json:"schemaType,omitempty"`
}

func (r *Registry) getVersion(w http.ResponseWriter, req *http.Request) {
	subject, vs := req.PathValue("subject"), req.PathValue("version")
	v, err := strconv.Atoi(vs)
	if vs != "latest" && (err != nil || v < 1) {
		fail(w, 42202, "The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", vs)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, ok := r.subjectIDs(w, subject)
	if !ok {
		return
	}
	if vs == "latest" {
		v = len(ids)
	}
	if v > len(ids) {
		fail(w, 40402, "Version %d not found.", v)
		return
	}
	id := ids[v-1]
	reply(w, http.StatusOK, r.versionBody(subject, v, id))
}

func (r *Registry) lookup(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	b, ok := readBody(w, req)
	if !ok {
		return
	}
	if b.SchemaType == "JSON" {
		r.lookupJSON(w, subject, b)
		return
	}
	s, _, ok := parseBody(w, b)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replyVersion(w, subject, func(id int) bool { return r.same(id, s) })
}

// replyVersion answers a lookup under subject (r.mu held): the first
// version whose schema same accepts, or 40403.
func (r *Registry) replyVersion(w http.ResponseWriter, subject string, same func(id int) bool) {
	ids, ok := r.subjectIDs(w, subject)
	if !ok {
		return
	}
	for i, id := range ids {
		if same(id) {
			reply(w, http.StatusOK, r.versionBody(subject, i+1, id))
			return
		}
	}
	fail(w, 40403, "Schema not found")
}

// schemaID returns the id in the path; on failure it has replied.
func (r *Registry) schemaID(w http.ResponseWriter, req *http.Request) (int, bool) {
	id, err := strconv.Atoi(req.PathValue("id"))
	if err != nil || id < 1 || id > len(r.schemas) {
		fail(w, 40403, "Schema %s not found", req.PathValue("id"))
		return 0, false
	}
	return id, true
}

func (r *Registry) getID(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.schemaID(w, req); ok {
		reply(w, http.StatusOK, r.idBody(id))
	}
}

func (r *Registry) getIDVersions(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.schemaID(w, req)
	if !ok {
		return
	}
	out := []map[string]any{}
	subjects := make([]string, 0, len(r.subjects))
	for s := range r.subjects {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	for _, s := range subjects {
		for i, sid := range r.subjects[s] {
			if sid == id {
				out = append(out, map[string]any{"subject": s, "version": i + 1})
			}
		}
	}
	reply(w, http.StatusOK, out)
}

var compatLevels = []string{"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}

func (r *Registry) getConfig(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	level := r.global
	if subject != "" {
		l, ok := r.compat[subject]
		switch {
		case ok:
			level = l
		case req.URL.Query().Get("defaultToGlobal") != "true":
			fail(w, 40408, "Subject '%s' does not have subject-level compatibility configured", subject)
			return
		}
	}
	reply(w, http.StatusOK, map[string]string{"compatibilityLevel": level})
}

func (r *Registry) putConfig(w http.ResponseWriter, req *http.Request) {
	var b struct {
		Compatibility string `json:"compatibility"`
	}
	if err := json.NewDecoder(req.Body).Decode(&b); err != nil {
		fail(w, 50005, "Unrecognized JSON: %v", err)
		return
	}
	if !slices.Contains(compatLevels, b.Compatibility) {
		fail(w, 42203, "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := req.PathValue("subject"); s != "" {
		r.compat[s] = b.Compatibility
	} else {
		r.global = b.Compatibility
	}
	reply(w, http.StatusOK, map[string]string{"compatibility": b.Compatibility})
}

// Register registers schema under subject with franz-go's sr client and
// returns its id.
func (r *Registry) Register(t testing.TB, subject, schema string) int {
	t.Helper()
	return r.create(t, subject, sr.Schema{Schema: schema})
}

// AvroSerde serialises values of one registered schema as a producer
// independent of rtrctl's decoders would: franz-go's sr.Serde framing
// (magic byte, schema id) around hamba/avro's encoding.
type AvroSerde struct {
	ID    int
	serde *sr.Serde
}

// Serde registers schema under subject and returns its serialiser.
func (r *Registry) Serde(t testing.TB, subject, schema string) *AvroSerde {
	t.Helper()
	id := r.Register(t, subject, schema)
	s, err := ParseAvro(schema)
	if err != nil {
		t.Fatal(err)
	}
	// A codec cache of its own: hamba/avro's default one knows a named
	// type referred to by name by its name only, so two versions of a
	// record referred to by name would share one encoder.
	api := avro.Config{}.Freeze()
	var sd sr.Serde
	sd.Register(id, map[string]any{}, sr.EncodeFn(func(v any) ([]byte, error) { return api.Marshal(s, v) }))
	return &AvroSerde{ID: id, serde: &sd}
}

// Encode serialises v (a map of the record's fields, in hamba/avro's
// generic form).
func (s *AvroSerde) Encode(t testing.TB, v map[string]any) []byte {
	t.Helper()
	b, err := s.serde.Encode(v)
	if err != nil {
		t.Fatalf("encode %v: %v", v, err)
	}
	return b
}
