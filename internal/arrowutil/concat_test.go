package arrowutil

import (
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

func TestConcat(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	mk := func(vals ...int64) arrow.Record {
		b := array.NewRecordBuilder(mem, schema)
		defer b.Release()
		for _, v := range vals {
			b.Field(0).(*array.Int64Builder).Append(v)
			if v%2 == 0 {
				b.Field(1).(*array.StringBuilder).AppendNull()
			} else {
				b.Field(1).(*array.StringBuilder).Append("x")
			}
		}
		return b.NewRecord()
	}
	for _, tc := range []struct {
		name  string
		parts [][]int64
		want  []int64
	}{
		{"none", nil, nil},
		{"one", [][]int64{{1, 2}}, []int64{1, 2}},
		{"three", [][]int64{{1}, {2, 3}, {4}}, []int64{1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recs []arrow.Record
			for _, p := range tc.parts {
				recs = append(recs, mk(p...))
			}
			out, err := Concat(schema, recs, mem)
			for _, r := range recs {
				r.Release()
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if out != nil {
					t.Fatalf("want nil, got %v", out)
				}
				return
			}
			defer out.Release()
			a := out.Column(0).(*array.Int64)
			s := out.Column(1).(*array.String)
			if a.Len() != len(tc.want) {
				t.Fatalf("len %d, want %d", a.Len(), len(tc.want))
			}
			for i, w := range tc.want {
				if a.Value(i) != w || s.IsNull(i) != (w%2 == 0) {
					t.Fatalf("row %d: %d null=%v, want %d", i, a.Value(i), s.IsNull(i), w)
				}
			}
		})
	}
}
