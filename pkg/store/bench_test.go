package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

var benchFields = []arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
}

// benchRecord builds n updates over [lower, lower+span) with keys in random
// order; retractFrac of them retract earlier inserts of the same batch.
func benchRecord(n int, lower, span uint64, retractFrac float64, seed uint64) arrow.Record {
	r := rand.New(rand.NewPCG(seed, 1))
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(append(append([]arrow.Field(nil), benchFields...), timeField, diffField), nil))
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	names := b.Field(1).(*array.StringBuilder)
	amts := b.Field(2).(*array.Float64Builder)
	ts := b.Field(3).(*array.Uint64Builder)
	ds := b.Field(4).(*array.Int64Builder)
	for _, bb := range []array.Builder{ids, names, amts, ts, ds} {
		bb.Reserve(n)
	}
	names.ReserveData(n * 20)
	perm := r.Perm(n)
	nret := int(float64(n) * retractFrac)
	for i := 0; i < n; i++ {
		k, diff, t := int64(perm[i]+int(seed)*n), int64(1), lower+uint64(r.IntN(int(span-1)))
		if i >= n-nret {
			// Retract the row inserted at position i-(n-nret), at the last time.
			k, diff, t = int64(perm[i-(n-nret)]+int(seed)*n), -1, lower+span-1
		}
		ids.Append(k)
		names.Append(fmt.Sprintf("customer-%011d", k))
		amts.Append(float64(k) * 0.25)
		ts.Append(t)
		ds.Append(diff)
	}
	return b.NewRecord()
}

func BenchmarkAppend(b *testing.B) {
	for _, frac := range []float64{0, 0.1} {
		b.Run(fmt.Sprintf("rows=1M/retracted=%.0f%%", frac*100), func(b *testing.B) {
			const n = 1 << 20
			rec := benchRecord(n, 0, 1000, frac, 0)
			defer rec.Release()
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s := openTest(b, b.TempDir(), Options{})
				sh := createTest(b, s, "bench.t", benchFields)
				b.StartTimer()
				if _, err := sh.Append(ctx, 0, 1000, rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func BenchmarkReadAsOf(b *testing.B) {
	for _, frac := range []float64{0, 0.1} {
		b.Run(fmt.Sprintf("rows=1M/retracted=%.0f%%", frac*100), func(b *testing.B) {
			const n = 1 << 20
			ctx := context.Background()
			s := openTest(b, b.TempDir(), Options{})
			sh := createTest(b, s, "bench.t", benchFields)
			// Eight batches of 128Ki updates, each retracting frac of its own
			// inserts at its last time.
			const parts = 8
			for p := uint64(0); p < parts; p++ {
				rec := benchRecord(n/parts, 1000*p, 1000, frac, p)
				if _, err := sh.Append(ctx, 1000*p, 1000*(p+1), rec); err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			b.ResetTimer()
			var rows int64
			for i := 0; i < b.N; i++ {
				rec, err := sh.ReadAsOf(ctx, 1000*parts-1)
				if err != nil {
					b.Fatal(err)
				}
				rows = rec.NumRows()
				rec.Release()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(rows), "out-rows")
		})
	}
}

// BenchmarkBackends appends 1Mi rows as eight commits (eight batches)
// and reads them as of the last time, on the local directory, gofakes3
// and versitygw, so make bench can print the S3 backends' rates beside
// the local one's.
func BenchmarkBackends(b *testing.B) {
	const n, parts = 1 << 20, 8
	recs := make([]arrow.Record, parts)
	for p := range recs {
		recs[p] = benchRecord(n/parts, 1000*uint64(p), 1000, 0.1, uint64(p))
		defer recs[p].Release()
	}
	ctx := context.Background()
	outer := b // stores outlive the sub-benchmark that writes them
	for _, be := range allBackends {
		var sh *Shard
		b.Run(be.name+"/append", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				sh = createTest(b, openTest(b, be.dir(outer), Options{}), "bench.t", benchFields)
				b.StartTimer()
				for p, rec := range recs {
					if _, err := sh.Append(ctx, 1000*uint64(p), 1000*uint64(p+1), rec); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(be.name+"/read", func(b *testing.B) {
			// A new handle, as a reader in another process.
			rsh, err := openTest(b, sh.st.loc, Options{}).Shard(ctx, "bench.t")
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rec, err := rsh.ReadAsOf(ctx, 1000*parts-1)
				if err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
