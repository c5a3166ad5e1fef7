package testenv

import (
	"context"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const (
	regJSONV1 = `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`
	regJSONV2 = `{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id"]}`
)

// TestRegistrySRJSON: JSON Schemas (schemaType JSON) through franz-go's
// sr client: registered, looked up, and answered with their type by id
// and by version; invalid ones and a type change in a subject refused.
func TestRegistrySRJSON(t *testing.T) {
	ctx := context.Background()
	reg := StartRegistry(t, RegistryOptions{})
	cl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	avroID := reg.Register(t, "avro-value", regV1)
	j1, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regJSONV1, Type: sr.TypeJSON})
	if err != nil || j1.Version != 1 || j1.ID == avroID {
		t.Fatalf("create json v1 = %+v, %v", j1, err)
	}
	if again, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regJSONV1, Type: sr.TypeJSON}); err != nil || again.ID != j1.ID || again.Version != 1 {
		t.Fatalf("re-register json v1 = %+v, %v", again, err)
	}
	j2, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regJSONV2, Type: sr.TypeJSON})
	if err != nil || j2.Version != 2 || j2.ID == j1.ID {
		t.Fatalf("create json v2 = %+v, %v", j2, err)
	}
	// The same text as JSON and as Avro are two schemas.
	const str = `{"type":"string"}`
	sa, err := cl.CreateSchema(ctx, "s-value", sr.Schema{Schema: str})
	if err != nil {
		t.Fatal(err)
	}
	sj, err := cl.CreateSchema(ctx, "sj-value", sr.Schema{Schema: str, Type: sr.TypeJSON})
	if err != nil || sj.ID == sa.ID {
		t.Fatalf("json %+v (%v) shares avro id %d", sj, err, sa.ID)
	}
	if s, err := cl.SchemaByID(ctx, sj.ID); err != nil || s.Type != sr.TypeJSON || s.Schema != str {
		t.Fatalf("schema %d = %+v, %v; want type JSON", sj.ID, s, err)
	}
	if s, err := cl.SchemaByID(ctx, sa.ID); err != nil || s.Type != sr.TypeAvro {
		t.Fatalf("schema %d = %+v, %v; want type AVRO", sa.ID, s, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "orders-value", -1)
	if err != nil || latest.ID != j2.ID || latest.Version != 2 || latest.Type != sr.TypeJSON || latest.Schema.Schema != regJSONV2 {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	found, err := cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: regJSONV1, Type: sr.TypeJSON})
	if err != nil || found.ID != j1.ID || found.Version != 1 || found.Type != sr.TypeJSON {
		t.Fatalf("lookup json v1 = %+v, %v", found, err)
	}
	_, err = cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	wantCode(t, err, 40403, http.StatusNotFound)
	_, err = cl.CreateSchema(ctx, "bad-value", sr.Schema{Schema: `{"type":"nope"}`, Type: sr.TypeJSON})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity)
	_, err = cl.CreateSchema(ctx, "bad-value", sr.Schema{Schema: `{"type":`, Type: sr.TypeJSON})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity)
	// A subject keeps its schema type.
	_, err = cl.CreateSchema(ctx, "avro-value", sr.Schema{Schema: regJSONV1, Type: sr.TypeJSON})
	wantCode(t, err, 409, http.StatusConflict)
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: regV1})
	wantCode(t, err, 409, http.StatusConflict)
	vs, err := cl.SchemaVersionsByID(ctx, j1.ID)
	if err != nil || len(vs) != 1 || vs[0].Subject != "orders-value" || vs[0].Version != 1 {
		t.Fatalf("versions of id %d = %+v, %v", j1.ID, vs, err)
	}
}
