package replicate_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// countSink counts what it gets; every gcEvery records it collects garbage
// and notes the live heap.
type countSink struct {
	rows, records, upper, peakHeap atomic.Uint64
	gcEvery                        uint64
}

func (s *countSink) Data(_ string, rec arrow.Record) error {
	s.rows.Add(uint64(rec.NumRows()))
	if n := s.records.Add(1); s.gcEvery > 0 && n%s.gcEvery == 0 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > s.peakHeap.Load() {
			s.peakHeap.Store(ms.HeapAlloc)
		}
	}
	return nil
}
func (s *countSink) Progress(_ string, u frontier.Frontier) error { s.upper.Store(u.Pos()); return nil }
func (s *countSink) Error(string, frontier.Time, string) error    { return nil }

// vmHWM reads the peak resident set size of this process in kB.
func vmHWM() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return 0
}

// BenchmarkReplicateLargeTxn streams one transaction of 1,000,000 rows
// (about 100 bytes of text each) per iteration and reports rows/s, the
// peak live heap (sampled after a GC every 16 records) and the process's
// peak RSS.
func BenchmarkReplicateLargeTxn(b *testing.B) {
	pg := testenv.SharedPostgres(b)
	d := newDB(b, pg, "CREATE TABLE big (id int, a text, b bigint, c timestamptz); ALTER TABLE big REPLICA IDENTITY FULL;")
	sink := &countSink{gcEvery: 16}
	r := start(b, d.cfg(), sink)
	const n = 1_000_000
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d.exec(b, "INSERT INTO big SELECT g, md5(g::text) || md5((g+1)::text), g * 1000, now() FROM generate_series(1, 1000000) g")
		after := d.insertLSN(b)
		b.StartTimer()
		for frontier.LSN(sink.upper.Load()) < after {
			runtime.Gosched()
		}
	}
	b.StopTimer()
	r.failIfDone(b)
	if got := sink.rows.Load(); got != uint64(n*b.N) {
		b.Fatalf("got %d rows, want %d", got, n*b.N)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(sink.peakHeap.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(vmHWM())/1024, "peak-RSS-MiB")
}

func (s *countSink) Reset(string, frontier.Time, *arrow.Schema) error { return nil }
