package kafkafmt

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The benchmarks decode benchRecords records per op, flushing every
// benchFlush rows as ingest does: 10-byte keys drawn from benchKeys keys,
// 100-byte values, 4 partitions with increasing offsets.
const (
	benchRecords = 1_000_000
	benchKeys    = 100_000
	benchFlush   = 65_000
	benchValue   = 100
	benchParts   = 4
)

// benchInput is the keys and values of one op. The keys lie one after the
// other, as in a fetched batch, so that reading them costs no cache misses
// the decoder would not have; the values are windows of one buffer of
// random bytes, consecutive records' windows 101 bytes apart.
type benchInput struct {
	keys []byte // benchRecords keys of 10 bytes, "key-012345"
	vals []byte
}

func newBenchInput() *benchInput {
	in := &benchInput{keys: make([]byte, 0, benchRecords*10), vals: make([]byte, 1<<20)}
	// A simple LCG (Numerical Recipes) picks the keys and fills the values.
	x := uint32(12345)
	next := func() uint32 { x = x*1664525 + 1013904223; return x }
	for i := range in.vals {
		in.vals[i] = byte(next() >> 24)
	}
	for range benchRecords {
		in.keys = fmt.Appendf(in.keys, "key-%06d", (next()>>8)%benchKeys)
	}
	return in
}

// run adds the records of in to a fresh decoder of cfg, flushing every
// benchFlush rows; headers are added to every record when hs is not nil;
// net nets upsert batches.
func (in *benchInput) run(b *testing.B, cfg Config, hs []kgo.RecordHeader, net bool) {
	d, err := NewDecoder(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if net {
		must[Netting](d).NetFrom(nil)
	}
	defer d.Release()
	var offs [benchParts]int64
	r := &kgo.Record{Topic: "t", Headers: hs}
	t0 := time.UnixMilli(1700000000000)
	for i := 0; i < benchRecords; i++ {
		p := int32(i % benchParts)
		r.Partition, r.Offset = p, offs[p]
		offs[p]++
		r.Timestamp = t0.Add(time.Duration(i) * time.Millisecond)
		r.Key = in.keys[i*10 : i*10+10 : i*10+10]
		o := i * 101 % (len(in.vals) - benchValue)
		r.Value = in.vals[o : o+benchValue : o+benchValue]
		if err := d.Add(r); err != nil {
			b.Fatal(err)
		}
		if d.Rows() >= benchFlush {
			d.Flush().Release()
		}
	}
	if rec := d.Flush(); rec != nil {
		rec.Release()
	}
}

func benchDecode(b *testing.B, cfg Config, hs []kgo.RecordHeader, net bool) {
	in := newBenchInput()
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in.run(b, cfg, hs, net)
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	n := float64(b.N) * benchRecords
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/record")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/record")
}

func BenchmarkDecodeNone(b *testing.B) {
	cfg := Config{Envelope: "none", Collection: "t", Source: "kafka.t"}
	b.Run("plain", func(b *testing.B) { benchDecode(b, cfg, nil, false) })
	hs := []kgo.RecordHeader{{Key: "trace-id", Value: []byte("0123456789abcdef")}, {Key: "origin", Value: []byte("svc-a")}}
	b.Run("headers", func(b *testing.B) { benchDecode(b, cfg, hs, false) })
}

// BenchmarkDecodeUpsert decodes record by record, and netted per batch
// (Netting), as ingest does.
func BenchmarkDecodeUpsert(b *testing.B) {
	cfg := Config{Envelope: "upsert", Key: bytesFormat{}, Value: bytesFormat{}, Collection: "t", Source: "kafka.t"}
	b.Run("record", func(b *testing.B) { benchDecode(b, cfg, nil, false) })
	b.Run("netted", func(b *testing.B) { benchDecode(b, cfg, nil, true) })
}
