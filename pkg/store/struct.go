package store

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// structCol is a column of structs (Avro records, pkg/kafkafmt): a null
// struct first, then field by field in the fields' own orders.
type structCol struct {
	dt     *arrow.StructType
	fields []column
	nulls  []nullMap
}

func newStructCol(dt *arrow.StructType) (column, error) {
	c := &structCol{dt: dt}
	for _, f := range dt.Fields() {
		fc, err := newColumn(f.Type)
		if err != nil {
			return nil, fmt.Errorf("struct field %s: %w", f.Name, err)
		}
		c.fields = append(c.fields, fc)
	}
	return c, nil
}

func (c *structCol) add(arr arrow.Array) {
	s := arr.(*array.Struct)
	// Field(k) is the field's array sliced to the struct's rows; its
	// buffers stay alive with arr, which the runSet retains.
	for k, f := range c.fields {
		f.add(s.Field(k))
	}
	c.nulls = append(c.nulls, nullMapOf(arr.Data()))
}

func (c *structCol) cmp(a, i, b, j int) int {
	if r, ok := cmpValid(c.nulls[a].valid(i), c.nulls[b].valid(j)); !ok {
		return r
	}
	for _, f := range c.fields {
		if r := f.cmp(a, i, b, j); r != 0 {
			return r
		}
	}
	return 0
}

// prefix: 0 for null, else the first field's prefix raised to at least 1
// (monotone, as listCol's).
func (c *structCol) prefix(r, i int) uint64 {
	if !c.nulls[r].valid(i) {
		return 0
	}
	if len(c.fields) == 0 {
		return 1
	}
	return max(c.fields[0].prefix(r, i), 1)
}

func (c *structCol) gather(refs []ent) arrow.Array {
	kids := make([]arrow.ArrayData, len(c.fields))
	for k, f := range c.fields {
		a := f.gather(refs)
		defer a.Release()
		kids[k] = a.Data()
	}
	nb, nn := gatherNulls(c.nulls, refs)
	d := array.NewData(c.dt, len(refs), []*memory.Buffer{nb}, kids, nn, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
