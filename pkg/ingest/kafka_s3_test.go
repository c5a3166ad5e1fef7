package ingest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// BenchmarkKafkaIngestS3 compares ingest into a store on S3 with ingest
// into a local directory, the same workload: BenchmarkKafkaIngest's 1M
// 100-byte records (100k keys, 4 partitions, in-process kfake), envelopes
// none and upsert, each iteration into a new store until the store covers
// the topic. The S3 server is gofakes3, in this process behind a loopback
// HTTP server: the cost of the S3 protocol and the SDK, not of a network.
// x-local is the S3 rate over the local rate of the same envelope.
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngestS3 -benchtime 3x
func BenchmarkKafkaIngestS3(b *testing.B) {
	const records, keys, partitions = 1_000_000, 100_000, 4
	k := testenv.StartKafka(b)
	produceBench(b, k.Brokers, "s3bench", records, keys, partitions)
	be := s3mem.New()
	if err := be.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	defer srv.Close()
	for _, kv := range (&testenv.S3Server{Endpoint: srv.URL, AccessKey: "rtrbench", SecretKey: "rtrbench-secret", Region: "us-east-1"}).Env() {
		name, value, _ := strings.Cut(kv, "=")
		b.Setenv(name, value)
	}
	rates := map[string]float64{}
	for _, env := range []string{"none", "upsert"} {
		for _, backend := range []string{"local", "s3"} {
			b.Run(env+"/"+backend, func(b *testing.B) {
				var took time.Duration
				for i := 0; i < b.N; i++ {
					loc := b.TempDir()
					if backend == "s3" {
						loc = fmt.Sprintf("s3://bench/%s-%d-%d", env, i, time.Now().UnixNano())
					}
					st, err := store.Open(context.Background(), loc, store.Options{Retain: -1})
					if err != nil {
						b.Fatal(err)
					}
					quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
					cfg := KafkaConfig{Upstream: upstream.ParseKafka(strings.Join(k.Brokers, ",")), Topics: []string{"s3bench"},
						Envelope: env, StateDir: b.TempDir(), Logger: quiet}
					start := time.Now()
					run := startIngest(b, st, cfg, Options{Interval: 100 * time.Millisecond, Logger: quiet})
					waitCaughtUp(b, st, k.Brokers, "", "s3bench", 5*time.Minute)
					took += time.Since(start)
					if err := run.stop(b); err != nil {
						b.Fatal(err)
					}
					if backend == "local" {
						os.RemoveAll(loc)
					}
				}
				rates[env+"/"+backend] = float64(records*b.N) / took.Seconds()
				b.ReportMetric(rates[env+"/"+backend], "records/s")
				if l := rates[env+"/local"]; backend == "s3" && l > 0 {
					b.ReportMetric(rates[env+"/s3"]/l, "x-local")
				}
			})
		}
	}
}
