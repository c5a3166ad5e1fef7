package testenv

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/servers"
)

const (
	regV1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
	// v2 adds a field with a default: BACKWARD compatible.
	regV2 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	// v3 adds a field without a default: not BACKWARD compatible.
	regV3 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`
)

// wantCode fails unless err is a registry error with the given code and
// HTTP status, as franz-go's sr client parses it.
func wantCode(t *testing.T, err error, code, status int) {
	t.Helper()
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T), want a registry response error %d", err, err, code)
	}
	if re.ErrorCode != code || re.StatusCode != status || re.Message == "" {
		t.Fatalf("error code %d status %d message %q, want code %d status %d and a message", re.ErrorCode, re.StatusCode, re.Message, code, status)
	}
}

// TestRegistrySR drives the test registry with franz-go's sr client, whose
// requests and response parsing follow the Confluent REST API, so the
// registry cannot drift into a dialect of its own.
func TestRegistrySR(t *testing.T) {
	ctx := context.Background()
	reg := StartRegistry(t, RegistryOptions{})
	cl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	s1, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV1})
	if err != nil {
		t.Fatalf("create v1: %v", err)
	}
	if s1.ID != 1 || s1.Version != 1 || s1.Subject != "orders-value" {
		t.Fatalf("v1 = %+v, want id 1 version 1", s1)
	}
	// The same schema again is the same id and version.
	if again, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV1}); err != nil || again.ID != 1 || again.Version != 1 {
		t.Fatalf("re-register v1 = %+v, %v", again, err)
	}
	s2, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV2})
	if err != nil || s2.ID != 2 || s2.Version != 2 {
		t.Fatalf("v2 = %+v, %v", s2, err)
	}
	// The same schema under another subject keeps its id.
	if k, err := cl.CreateSchema(ctx, "other-value", sr.Schema{Schema: regV1}); err != nil || k.ID != 1 || k.Version != 1 {
		t.Fatalf("v1 under another subject = %+v, %v", k, err)
	}
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV3})
	wantCode(t, err, 409, http.StatusConflict)
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: `{"type":"nope"}`})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity)

	subs, err := cl.Subjects(ctx)
	if err != nil || !slices.Equal(subs, []string{"orders-value", "other-value"}) {
		t.Fatalf("subjects = %v, %v", subs, err)
	}
	vs, err := cl.SubjectVersions(ctx, "orders-value")
	if err != nil || !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("versions = %v, %v", vs, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "orders-value", -1)
	if err != nil || latest.ID != 2 || latest.Version != 2 || !strings.Contains(latest.Schema.Schema, "note") {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	first, err := cl.SchemaByVersion(ctx, "orders-value", 1)
	if err != nil || first.ID != 1 || strings.Contains(first.Schema.Schema, "note") {
		t.Fatalf("version 1 = %+v, %v", first, err)
	}
	_, err = cl.SchemaByVersion(ctx, "orders-value", 9)
	wantCode(t, err, 40402, http.StatusNotFound)
	_, err = cl.SchemaByVersion(ctx, "missing-value", 1)
	wantCode(t, err, 40401, http.StatusNotFound)
	byID, err := cl.SchemaByID(ctx, 2)
	if err != nil || byID.Schema != latest.Schema.Schema {
		t.Fatalf("schema 2 = %+v, %v", byID, err)
	}
	_, err = cl.SchemaByID(ctx, 77)
	wantCode(t, err, 40403, http.StatusNotFound)
	found, err := cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: regV2})
	if err != nil || found.ID != 2 || found.Version != 2 {
		t.Fatalf("lookup v2 = %+v, %v", found, err)
	}
	_, err = cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: regV3})
	wantCode(t, err, 40403, http.StatusNotFound)

	// Compatibility: global BACKWARD; a subject level NONE lets v3 in.
	if g := cl.Compatibility(ctx); g[0].Err != nil || g[0].Level != sr.CompatBackward {
		t.Fatalf("global compatibility = %+v", g[0])
	}
	wantCode(t, cl.Compatibility(ctx, "orders-value")[0].Err, 40408, http.StatusNotFound)
	if r := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}, "orders-value"); r[0].Err != nil || r[0].Level != sr.CompatNone {
		t.Fatalf("set compatibility = %+v", r[0])
	}
	if c := cl.Compatibility(ctx, "orders-value"); c[0].Err != nil || c[0].Level != sr.CompatNone {
		t.Fatalf("subject compatibility = %+v", c[0])
	}
	if s3, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV3}); err != nil || s3.Version != 3 {
		t.Fatalf("v3 under NONE = %+v, %v", s3, err)
	}
}

// TestRegistryAuthTLS: basic auth and TLS as a client configures them.
func TestRegistryAuthTLS(t *testing.T) {
	ctx := context.Background()
	certs := servers.TestCerts(t)
	reg := StartRegistry(t, RegistryOptions{User: "reader", Password: "s3cret", TLS: certs.ServerTLS(false)})
	if !strings.HasPrefix(reg.URL, "https://") {
		t.Fatalf("URL %s, want https", reg.URL)
	}
	good, err := sr.NewClient(sr.URLs(reg.URL), sr.BasicAuth("reader", "s3cret"), sr.DialTLSConfig(certs.ClientTLS("127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.CreateSchema(ctx, "t-value", sr.Schema{Schema: regV1}); err != nil {
		t.Fatalf("create with auth over TLS: %v", err)
	}
	bad, _ := sr.NewClient(sr.URLs(reg.URL), sr.BasicAuth("reader", "wrong"), sr.DialTLSConfig(certs.ClientTLS("127.0.0.1")))
	_, err = bad.Subjects(ctx)
	wantCode(t, err, 401, http.StatusUnauthorized)
	untrusted, _ := sr.NewClient(sr.URLs(reg.URL), sr.BasicAuth("reader", "s3cret"))
	if _, err := untrusted.Subjects(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client without the CA: %v, want a certificate error", err)
	}
}
