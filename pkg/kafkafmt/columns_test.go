package kafkafmt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestColumns builds batches of random values and nulls (none, some, all;
// the first null at every position) with the decoders' columns and with
// Arrow's builders: the arrays are equal.
func TestColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range []arrow.DataType{arrow.BinaryTypes.Binary, arrow.BinaryTypes.String} {
		c := newBytesColumn(typ)
		l := newListColumn(typ)
		for batch := 0; batch < 60; batch++ {
			n := rng.IntN(70)
			nullP := []float64{0, 0.1, 0.5, 1}[batch%4]
			b := array.NewBuilder(memory.DefaultAllocator, typ)
			lb := array.NewListBuilder(memory.DefaultAllocator, typ)
			for i := 0; i < n; i++ {
				var v []byte
				if rng.Float64() >= nullP {
					v = []byte(fmt.Sprintf("v%03d", rng.IntN(1000)))[:rng.IntN(5)]
				}
				c.Append(v)
				lb.Append(true)
				for range rng.IntN(3) {
					l.elems.Append(v)
					appendBytes(lb.ValueBuilder(), v)
				}
				l.next()
				appendBytes(b, v)
			}
			for _, p := range []struct {
				what      string
				got, want arrow.Array
			}{{"column", c.Finish(), b.NewArray()}, {"list", l.finish(), lb.NewArray()}} {
				if !array.Equal(p.got, p.want) || p.got.NullN() != p.want.NullN() || p.got.Len() != n {
					t.Fatalf("%s %s batch %d:\n got %v\nwant %v", typ, p.what, batch, p.got, p.want)
				}
				p.got.Release()
				p.want.Release()
			}
			b.Release()
			lb.Release()
		}
	}
}

func appendBytes(b array.Builder, v []byte) {
	switch {
	case v == nil:
		b.AppendNull()
	case b.Type().ID() == arrow.STRING:
		b.(*array.StringBuilder).BinaryBuilder.Append(v)
	default:
		b.(*array.BinaryBuilder).Append(v)
	}
}
