package pipe

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// BenchmarkWriteRead writes 1M rows of (int64, ~20-byte string, float64)
// plus _time and _diff as one data stream of 64Ki-row batches, then reads
// them back and checks every batch. It reports rows/s for the round trip.
func BenchmarkWriteRead(b *testing.B) {
	const rows, batchRows = 1 << 20, 1 << 16
	mem := memory.NewGoAllocator()
	user := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
	}
	h := Header{Kind: KindData, Collection: "public.orders", Domain: frontier.DomainLSN, Key: []string{"id"}}
	s := DataSchema(user, h.Domain, h.Metadata())
	var recs []arrow.Record
	for start := 0; start < rows; start += batchRows {
		rb := array.NewRecordBuilder(mem, s)
		for i := start; i < start+batchRows; i++ {
			rb.Field(0).(*array.Int64Builder).Append(int64(i))
			rb.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("customer-%011d", i))
			rb.Field(2).(*array.Float64Builder).Append(float64(i) * 0.25)
			rb.Field(3).(*array.Uint64Builder).Append(uint64(i / 100))
			rb.Field(4).(*array.Int64Builder).Append(1)
		}
		recs = append(recs, rb.NewRecord())
		rb.Release()
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var buf bytes.Buffer
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		buf.Reset()
		w := NewWriter(&buf, mem)
		for _, r := range recs {
			if err := w.WriteRecord(h, r); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		r := NewReader(&buf, mem)
		st, err := r.Next()
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			rec, err := st.NextRecord()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			got += int(rec.NumRows())
			rec.Release()
		}
		if got != rows {
			b.Fatalf("read %d rows, want %d", got, rows)
		}
		if _, err := r.Next(); err != io.EOF {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(0, "ns/op")
}
