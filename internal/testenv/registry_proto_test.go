package testenv

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const (
	protoMoney = `syntax = "proto3";
package shop;
message Money { string currency = 1; int64 cents = 2; }`
	protoOrderV1 = `syntax = "proto3";
package shop;
import "shop/money.proto";
message Order { int64 id = 1; Money total = 2; }`
	// v2 adds a field: compatible.
	protoOrderV2 = `syntax = "proto3";
package shop;
import "shop/money.proto";
message Order { int64 id = 1; Money total = 2; string note = 3; }`
	// v3 changes field 1's kind: incompatible.
	protoOrderV3 = `syntax = "proto3";
package shop;
import "shop/money.proto";
message Order { string id = 1; Money total = 2; }`
)

// TestRegistrySRProtobuf drives the test registry's PROTOBUF schemas and
// references with franz-go's sr client: what is registered comes back
// by id and by version with its type and references, and bad references,
// text that does not compile and incompatible changes get the
// registry's error codes.
func TestRegistrySRProtobuf(t *testing.T) {
	ctx := context.Background()
	reg := StartRegistry(t, RegistryOptions{})
	cl, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	m, err := cl.CreateSchema(ctx, "shop/money.proto", sr.Schema{Schema: protoMoney, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatalf("create money: %v", err)
	}
	refs := []sr.SchemaReference{{Name: "shop/money.proto", Subject: "shop/money.proto", Version: m.Version}}
	o1, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV1, Type: sr.TypeProtobuf, References: refs})
	if err != nil || o1.ID != m.ID+1 || o1.Version != 1 {
		t.Fatalf("create order v1 = %+v, %v", o1, err)
	}
	if again, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV1, Type: sr.TypeProtobuf, References: refs}); err != nil || again.ID != o1.ID {
		t.Fatalf("re-register v1 = %+v, %v", again, err)
	}
	byID, err := cl.SchemaByID(ctx, o1.ID)
	if err != nil || byID.Type != sr.TypeProtobuf || byID.Schema != protoOrderV1 || !slices.Equal(byID.References, refs) {
		t.Fatalf("schema by id = %+v, %v; want the text, PROTOBUF and %v", byID, err, refs)
	}
	o2, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV2, Type: sr.TypeProtobuf, References: refs})
	if err != nil || o2.Version != 2 {
		t.Fatalf("create order v2 = %+v, %v", o2, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "orders-value", -1)
	if err != nil || latest.ID != o2.ID || latest.Type != sr.TypeProtobuf || !slices.Equal(latest.References, refs) {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	if got, err := cl.LookupSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV1, Type: sr.TypeProtobuf, References: refs}); err != nil || got.Version != 1 {
		t.Fatalf("lookup v1 = %+v, %v", got, err)
	}
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV3, Type: sr.TypeProtobuf, References: refs})
	wantCode(t, err, 409, http.StatusConflict)
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV2, Type: sr.TypeProtobuf})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity) // the import is not found without its reference
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: protoOrderV2, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/money.proto", Subject: "shop/money.proto", Version: 7}}})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity)
	_, err = cl.CreateSchema(ctx, "other-value", sr.Schema{Schema: `syntax = "proto3"; message {`, Type: sr.TypeProtobuf})
	wantCode(t, err, 42201, http.StatusUnprocessableEntity)
	// Avro still works beside it, and its id answers no schemaType.
	a, err := cl.CreateSchema(ctx, "avro-value", sr.Schema{Schema: regV1})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := cl.SchemaByID(ctx, a.ID); err != nil || s.Type != sr.TypeAvro || len(s.References) != 0 {
		t.Fatalf("avro by id = %+v, %v", s, err)
	}
}
