package kafkafmt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
)

// RegistryConfig is how to reach a Confluent-compatible schema registry.
type RegistryConfig struct {
	// URL is the registry's base URL (http:// or https://).
	URL string
	// User and Password are HTTP basic auth credentials (none when User
	// is empty). The password is never logged nor put in errors.
	User, Password string
	// TLS, when set, is the client configuration for an https URL (the
	// system's roots otherwise).
	TLS *tls.Config
	// RetryFor bounds how long a request is retried while the registry
	// does not answer (default 1 minute).
	RetryFor time.Duration
}

// Registry is a schema registry client (franz-go's pkg/sr) with a cache
// of the schemas it has fetched by id: a schema id names one schema
// forever, so each is fetched once.
type Registry struct {
	cfg RegistryConfig
	cl  *sr.Client

	mu   sync.Mutex
	byID map[int]avro.Schema
	// raw: schemas of any type by id, as the registry holds them
	// (RawSchema).
	raw map[int]sr.Schema
}

// NewRegistry returns a client of the registry cfg names.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.URL == "" {
		return nil, errors.New("schema registry: no URL (pass --schema-registry URL)")
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = time.Minute
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URL), sr.HTTPClient(&http.Client{Timeout: 10 * time.Second})}
	if cfg.TLS != nil {
		opts = append(opts, sr.HTTPClient(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.TLS}}))
	}
	if cfg.User != "" {
		opts = append(opts, sr.BasicAuth(cfg.User, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry %s: %w", cfg.URL, err)
	}
	return &Registry{cfg: cfg, cl: cl, byID: map[int]avro.Schema{}}, nil
}

// URL is the registry's URL.
func (r *Registry) URL() string { return r.cfg.URL }

// RegistryError is a definite answer of the registry (an HTTP status
// below 500: a schema, subject or version that does not exist, bad
// credentials), or (Code 0) a schema it holds that rtrctl cannot use.
type RegistryError struct {
	Op   string
	Code int // the registry's error_code; 0 for rtrctl's own refusal
	Msg  string
}

func (e *RegistryError) Error() string {
	return fmt.Sprintf("schema registry: %s: %s (error code %d)", e.Op, e.Msg, e.Code)
}

// do runs f, retrying for cfg.RetryFor while the registry does not
// answer or answers 5xx; a 4xx answer is a *RegistryError at once.
func (r *Registry) do(ctx context.Context, op string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(r.cfg.RetryFor)
	wait := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode < 500 {
			rerr := &RegistryError{Op: op, Code: re.ErrorCode, Msg: re.Message}
			if re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden {
				return hint.Wrap(rerr, "check --schema-registry-user and the password (--schema-registry-password-file or $RTR_SCHEMA_REGISTRY_PASSWORD)")
			}
			return rerr
		}
		if retry.TLSRejected(err) {
			// Not the registry going away: retrying will not help.
			return retry.Permanent(hint.Wrap(fmt.Errorf("schema registry %s: %s: %w", r.cfg.URL, op, err),
				"pass --schema-registry-ca with the CA that signed the registry's certificate (or --schema-registry-server-name); if the registry refused ours, check --schema-registry-cert and --schema-registry-key"))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("schema registry %s: %s: %w", r.cfg.URL, op, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// SchemaByID returns the Avro schema with id.
func (r *Registry) SchemaByID(ctx context.Context, id int) (avro.Schema, error) {
	r.mu.Lock()
	s, ok := r.byID[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	var got sr.Schema
	err := r.do(ctx, fmt.Sprintf("schema id %d", id), func(ctx context.Context) (err error) {
		got, err = r.cl.SchemaByID(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	if got.Type != sr.TypeAvro {
		return nil, &RegistryError{Op: fmt.Sprintf("schema id %d", id), Msg: fmt.Sprintf("is a %s schema, not Avro", got.Type)}
	}
	s, err = parseAvro(got.Schema)
	if err != nil {
		return nil, &RegistryError{Op: fmt.Sprintf("schema id %d", id), Msg: fmt.Sprintf("does not parse as Avro: %v", err)}
	}
	r.mu.Lock()
	r.byID[id] = s
	r.mu.Unlock()
	return s, nil
}

// SubjectVersion is one registered version of a subject.
type SubjectVersion struct {
	Subject     string
	Version, ID int
	Schema      avro.Schema
}

// Version returns version v of subject (v <= 0: the latest).
func (r *Registry) Version(ctx context.Context, subject string, v int) (SubjectVersion, error) {
	ss, err := r.RawVersion(ctx, subject, v)
	if err != nil {
		return SubjectVersion{}, err
	}
	s, err := r.SchemaByID(ctx, ss.ID)
	if err != nil {
		return SubjectVersion{}, err
	}
	return SubjectVersion{Subject: subject, Version: ss.Version, ID: ss.ID, Schema: s}, nil
}

// VersionOfID returns the version of subject registered as schema id, or
// 0 when id is not a version of subject.
func (r *Registry) VersionOfID(ctx context.Context, subject string, id int) (int, error) {
	var vs []sr.SubjectVersion
	err := r.do(ctx, fmt.Sprintf("versions of schema id %d", id), func(ctx context.Context) (err error) {
		vs, err = r.cl.SchemaVersionsByID(ctx, id)
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, v := range vs {
		if v.Subject == subject {
			return v.Version, nil
		}
	}
	return 0, nil
}

func versionName(v int) string {
	if v < 0 {
		return "latest"
	}
	return fmt.Sprint(v)
}

// parseAvro parses a schema with a cache of its own, so that versions of
// one named type do not meet in hamba/avro's global cache.
func parseAvro(text string) (avro.Schema, error) {
	return avro.ParseWithCache(text, "", &avro.SchemaCache{})
}

// RawSchema is a registered schema as the registry holds it, of any
// schema type, for the formats that parse schemas themselves.
type RawSchema struct {
	Subject     string // empty when fetched by id
	Version, ID int    // Version 0 when fetched by id
	// Type is the registry's schemaType: AVRO, JSON or PROTOBUF.
	Type string
	Text string
}

// rawSchema refuses what no format here reads: schema references.
func rawSchema(op string, s sr.Schema) (RawSchema, error) {
	if len(s.References) > 0 {
		return RawSchema{}, &RegistryError{Op: op, Msg: "has schema references, which rtrctl does not resolve"}
	}
	return RawSchema{Type: s.Type.String(), Text: s.Schema}, nil
}

// SchemaText is RawSchema without references (which the json-schema
// format does not resolve).
func (r *Registry) SchemaText(ctx context.Context, id int) (RawSchema, error) {
	got, err := r.RawSchema(ctx, id)
	if err != nil {
		return RawSchema{}, err
	}
	rs, err := rawSchema(fmt.Sprintf("schema id %d", id), got)
	rs.ID = id
	return rs, err
}

// VersionText is RawVersion without references.
func (r *Registry) VersionText(ctx context.Context, subject string, v int) (RawSchema, error) {
	ss, err := r.RawVersion(ctx, subject, v)
	if err != nil {
		return RawSchema{}, err
	}
	rs, err := rawSchema(fmt.Sprintf("subject %s version %s", subject, versionName(ss.Version)), ss.Schema)
	rs.Subject, rs.Version, rs.ID = subject, ss.Version, ss.ID
	return rs, err
}

// recordSchemaErr is what a format makes of err, the registry's answer
// for the writer schema id of a record: a definite error of the record
// (an unknown id, a schema rtrctl refused), or a *TransientError when the
// registry is not the record's fault (away, credentials, TLS).
func recordSchemaErr(format string, reg *Registry, id uint32, err error) error {
	re, ok := errors.AsType[*RegistryError](err)
	switch {
	case ok && re.Code == 40403:
		return fmt.Errorf("unknown schema id %d (the registry %s does not have it)", id, reg.URL())
	case ok && re.Code == 0:
		return fmt.Errorf("schema id %d: %w", id, err)
	}
	return &TransientError{Err: fmt.Errorf("%s format: %w", format, err)}
}

// RawSchema returns the schema with id as the registry holds it, of any
// type: its text, schemaType and references (formats other than Avro
// parse it themselves).
func (r *Registry) RawSchema(ctx context.Context, id int) (sr.Schema, error) {
	r.mu.Lock()
	s, ok := r.raw[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	err := r.do(ctx, fmt.Sprintf("schema id %d", id), func(ctx context.Context) (err error) {
		s, err = r.cl.SchemaByID(ctx, id)
		return err
	})
	if err != nil {
		return sr.Schema{}, err
	}
	r.mu.Lock()
	if r.raw == nil {
		r.raw = map[int]sr.Schema{}
	}
	r.raw[id] = s
	r.mu.Unlock()
	return s, nil
}

// RawVersion returns version v of subject (v <= 0: the latest) as the
// registry holds it, of any type (a reference names its schema so).
func (r *Registry) RawVersion(ctx context.Context, subject string, v int) (sr.SubjectSchema, error) {
	if v <= 0 {
		v = -1
	}
	var ss sr.SubjectSchema
	err := r.do(ctx, fmt.Sprintf("subject %s version %s", subject, versionName(v)), func(ctx context.Context) (err error) {
		ss, err = r.cl.SchemaByVersion(ctx, subject, v)
		return err
	})
	return ss, err
}
