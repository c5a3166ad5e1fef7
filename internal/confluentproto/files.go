// Package confluentproto holds the .proto files Confluent's schema
// registry resolves without references: ProtobufConverter's schemas
// import them (confluent/meta.proto for field params,
// confluent/type/decimal.proto, google/type/date.proto and
// timeofday.proto) and register none.
package confluentproto

// Files are the files by import path.
var Files = map[string]string{
	"confluent/meta.proto": `syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta {
  string doc = 1;
  map<string, string> params = 2;
  repeated string tags = 3;
}
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
`,
	"confluent/type/decimal.proto": `syntax = "proto3";
package confluent.type;
message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
`,
	"google/type/date.proto": `syntax = "proto3";
package google.type;
message Date {
  int32 year = 1;
  int32 month = 2;
  int32 day = 3;
}
`,
	"google/type/timeofday.proto": `syntax = "proto3";
package google.type;
message TimeOfDay {
  int32 hours = 1;
  int32 minutes = 2;
  int32 seconds = 3;
  int32 nanos = 4;
}
`,
}

// AddTo adds Files to files (by import path), where files does not have
// them already (a reference that gives its own).
func AddTo(files map[string]string) {
	for name, text := range Files {
		if _, ok := files[name]; !ok {
			files[name] = text
		}
	}
}
