// Package kafkafmt turns Kafka records into rtrctl updates: formats decode
// a record's key or value bytes into an Arrow column, and envelopes decide
// which rows a record adds or retracts.
//
// Formats (Format, ParseFormat):
//
//   - bytes: Arrow binary, the bytes as they are;
//   - text: Arrow utf8; the bytes must be valid UTF-8;
//   - json: Arrow utf8 holding the JSON text verbatim; it must be one valid
//     JSON value;
//   - avro (NewAvro): Confluent-framed Avro read through a schema registry
//     with one reader schema, into the Arrow type of that schema (a
//     record is a struct);
//   - json-schema (NewJSONSchema): Confluent-framed JSON validated against
//     its JSON Schema from a schema registry, into the Arrow type of the
//     reader schema (an object with properties is a struct).
//   - protobuf (NewProtobuf): Confluent-framed Protobuf read through a
//     schema registry (schemas with references) with one reader message,
//     into a struct of its fields.
//
// A null key or value (Kafka's null, not an empty byte string) is a null in
// every format. Bytes a format refuses are a *DecodeError; rtrctl records it
// as a definite error of the collection (docs/kafka.md).
//
// Envelopes (NewDecoder):
//
//   - none: append-only; every record is one row inserted at its offset
//     (partition, offset, key, value, timestamp, header_keys,
//     header_values);
//   - upsert: one row (key, value) per key; a record retracts the key's
//     current row and inserts its value at the record's offset, and a null
//     value (a tombstone) deletes the key. The decoder keeps the current
//     value of every key (its state), which can be rebuilt from the store
//     (Stateful) instead of re-reading the topic;
//   - debezium: Debezium change events, an upsert of the after row by the
//     record key, over formats that implement ChangeFormat (debezium.go).
//
// Envelopes use formats only through the Format interface, so a new format
// (Avro with a schema registry, say) needs no change here.
package kafkafmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// Format decodes the bytes of a record's key or value into one Arrow
// column.
type Format interface {
	// Name is the format's name on the command line (bytes, text, json).
	Name() string
	// Type is the Arrow type of the column.
	Type() arrow.DataType
	// Check reports whether data (never nil) decodes; the error says why
	// not, without naming the record (the caller adds that).
	Check(data []byte) error
	// NewColumn returns an empty column of Type() that decodes values
	// this format's Check accepted.
	NewColumn() Column
	// Raw returns the bytes that decode to element i of arr (a non-null
	// element of a column of Type()). The upsert envelope uses it to
	// rebuild its state from the store; a format whose decoding loses
	// information must re-encode here to bytes that decode to the same
	// element.
	Raw(arr arrow.Array, i int) ([]byte, error)
}

// Formats lists the format names: ParseFormat makes the first three,
// NewAvro, NewJSONSchema and NewProtobuf (which need a schema registry)
// avro, json-schema and protobuf.
var Formats = []string{"bytes", "text", "json", "avro", "json-schema", "protobuf"}

// ErrNeedsRegistry is ParseFormat's error for a format that is made with
// a schema registry (NewAvro, NewJSONSchema, NewProtobuf).
var ErrNeedsRegistry = errors.New("the format reads schemas from a schema registry")

// ParseFormat returns the format called name.
func ParseFormat(name string) (Format, error) {
	switch name {
	case "bytes", "":
		return bytesFormat{}, nil
	case "text":
		return textFormat{}, nil
	case "json":
		return jsonFormat{}, nil
	case "avro", "json-schema", "protobuf":
		return nil, fmt.Errorf("parse format: %s: %w (pass --schema-registry URL)", name, ErrNeedsRegistry)
	}
	return nil, fmt.Errorf("parse format: unknown format %q (want bytes, text, json, avro, json-schema or protobuf)", name)
}

type bytesFormat struct{}

func (bytesFormat) Name() string            { return "bytes" }
func (bytesFormat) Type() arrow.DataType    { return arrow.BinaryTypes.Binary }
func (bytesFormat) Check(data []byte) error { return nil }
func (bytesFormat) NewColumn() Column       { return newBytesColumn(arrow.BinaryTypes.Binary) }
func (bytesFormat) Raw(arr arrow.Array, i int) ([]byte, error) {
	a, ok := arr.(*array.Binary)
	if !ok {
		return nil, fmt.Errorf("bytes format: column is %s, want binary", arr.DataType())
	}
	return append([]byte(nil), a.Value(i)...), nil
}

type textFormat struct{}

func (textFormat) Name() string         { return "text" }
func (textFormat) Type() arrow.DataType { return arrow.BinaryTypes.String }
func (textFormat) Check(data []byte) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("not valid UTF-8 text (the bytes format takes any bytes)")
	}
	return nil
}
func (textFormat) NewColumn() Column                          { return newBytesColumn(arrow.BinaryTypes.String) }
func (textFormat) Raw(arr arrow.Array, i int) ([]byte, error) { return stringRaw(arr, i) }

type jsonFormat struct{}

func (jsonFormat) Name() string         { return "json" }
func (jsonFormat) Type() arrow.DataType { return arrow.BinaryTypes.String }
func (jsonFormat) Check(data []byte) error {
	if json.Valid(data) {
		return nil
	}
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		err = fmt.Errorf("invalid JSON")
	}
	return fmt.Errorf("malformed JSON: %w", err)
}
func (jsonFormat) NewColumn() Column                          { return newBytesColumn(arrow.BinaryTypes.String) }
func (jsonFormat) Raw(arr arrow.Array, i int) ([]byte, error) { return stringRaw(arr, i) }

func stringRaw(arr arrow.Array, i int) ([]byte, error) {
	a, ok := arr.(*array.String)
	if !ok {
		return nil, fmt.Errorf("text format: column is %s, want utf8", arr.DataType())
	}
	return []byte(a.Value(i)), nil
}
