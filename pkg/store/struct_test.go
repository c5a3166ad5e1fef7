package store

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// structFields: a key and a nullable struct holding a list of structs
// (what an Avro record with an array of records becomes).
var structFields = []arrow.Field{
	{Name: "k", Type: arrow.PrimitiveTypes.Int64},
	{Name: "v", Nullable: true, Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "l", Nullable: true, Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "key", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Int32, Nullable: true})),
		},
	)},
}

func structRecord(t *testing.T, rows string) arrow.Record {
	t.Helper()
	fields := append(append([]arrow.Field(nil), structFields...),
		arrow.Field{Name: "_time", Type: arrow.PrimitiveTypes.Uint64}, arrow.Field{Name: "_diff", Type: arrow.PrimitiveTypes.Int64})
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, arrow.NewSchema(fields, nil), strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestStructConsolidates: a struct row inserted in one batch and
// retracted in a later one (a slice of a larger record) cancels in reads
// and in compaction; structs that differ in a nested field, or null vs a
// struct of nulls, stay apart.
func TestStructConsolidates(t *testing.T) {
	row := `{"k":1,"v":{"a":2,"l":[{"key":"x","value":1},{"key":"y","value":null}]}}`
	tests := []struct {
		name, ins, ret string
		cancel         bool
	}{
		{"equal structs cancel", row, row, true},
		{"null structs cancel", `{"k":1,"v":null}`, `{"k":1,"v":null}`, true},
		{"nested field differs", row, `{"k":1,"v":{"a":2,"l":[{"key":"x","value":1},{"key":"y","value":0}]}}`, false},
		{"null vs struct of nulls", `{"k":1,"v":null}`, `{"k":1,"v":{"a":null,"l":null}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, t.TempDir(), Options{Retain: -1})
			sh := createTest(t, s, "structs.t", structFields)
			ins := structRecord(t, `[`+strings.TrimSuffix(tc.ins, "}")+`,"_time":0,"_diff":1}]`)
			defer ins.Release()
			if _, err := sh.Append(ctx, 0, 1, ins); err != nil {
				t.Fatal(err)
			}
			filler := `{"k":9,"v":{"a":7,"l":[]},"_time":5,"_diff":1}`
			full := structRecord(t, `[`+filler+`,`+strings.TrimSuffix(tc.ret, "}")+`,"_time":5,"_diff":-1},`+filler+`]`)
			defer full.Release()
			ret := full.NewSlice(1, 2)
			defer ret.Release()
			if _, err := sh.Append(ctx, 1, 10, ret); err != nil {
				t.Fatal(err)
			}
			got, err := sh.ReadAsOf(ctx, 9)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			want := int64(2)
			if tc.cancel {
				want = 0
			}
			if got.NumRows() != want {
				t.Fatalf("%d rows as of 9, want %d: %v", got.NumRows(), want, got)
			}
			first, err := sh.ReadAsOf(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release()
			if first.NumRows() != 1 || !array.Equal(first.Column(1), ins.Column(1)) {
				t.Fatalf("as of 0: %v, want the inserted struct %v", first, ins)
			}
		})
	}
}
