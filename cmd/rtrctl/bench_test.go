package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/bench"
)

// benchJSON runs `rtrctl bench ... --output json` in-process, with ingest
// as the built rtrctl binary, and decodes the summary. It also checks the
// fields every summary must have.
func benchJSON(t *testing.T, args ...string) (bench.Result, map[string]any, string) {
	t.Helper()
	all := append(append([]string{"bench"}, args...), "--output", "json", "--rtrctl", rtrctlBin(t))
	stdout, stderr, code := runCLI(t, "", all...)
	if code != exitOK {
		t.Fatalf("rtrctl %v: exit %d\nstdout:\n%s\nstderr:\n%s", all, code, stdout, stderr)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(stdout), &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sent", "ingested", "rate", "lag_p50_seconds", "lag_p99_seconds", "max_lag_records",
		"drain_seconds", "peak_rss_bytes", "cpu_seconds", "restarts"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("summary has no %q: %s", f, stdout)
		}
	}
	if res.Sent <= 0 || res.Ingested != res.Sent {
		t.Errorf("sent %d, ingested %d: want equal and positive", res.Sent, res.Ingested)
	}
	if !(res.LagP50Seconds >= 0 && res.LagP50Seconds <= res.LagP99Seconds && res.LagP99Seconds <= res.LagMaxSeconds) {
		t.Errorf("lag percentiles out of order: p50 %g, p99 %g, max %g", res.LagP50Seconds, res.LagP99Seconds, res.LagMaxSeconds)
	}
	if res.PeakRSSBytes <= 0 || res.CPUSeconds <= 0 || res.Rate <= 0 || res.Samples == 0 || res.DrainSeconds < 0 {
		t.Errorf("implausible summary: %s", stdout)
	}
	// The per-second lines go to stderr with --output json.
	if !strings.Contains(stderr, "after ") || !strings.Contains(stderr, "ingested") {
		t.Errorf("no progress lines on stderr:\n%s", stderr)
	}
	return res, fields, stderr
}

func TestBenchKafka(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	res, _, _ := benchJSON(t, "kafka", "--records-per-second", "2000", "--num-seconds", "3", "--store", dir, "--plot", filepath.Join(t.TempDir(), "lag.png"))
	if res.Sent != 6000 {
		t.Errorf("sent %d records, want 2000/s * 3 s = 6000", res.Sent)
	}
	if res.Source != "kafka" || res.Envelope != "none" || len(res.Restarts) != 0 {
		t.Errorf("unexpected summary: %+v", res)
	}
	// The store stays, with everything durable: status agrees.
	st := statusOf(t, dir)
	if len(st.Collections) != 1 || st.Collections[0].Name != "bench" {
		t.Fatalf("store collections: %+v", st.Collections)
	}
	var n uint64
	if f := st.Collections[0].Frontier; f != nil {
		for _, p := range f.Partitions() {
			n += f.Get(p)
		}
	}
	if n != 6000 {
		t.Errorf("rtrctl status: the store's frontier holds %d records, want 6000", n)
	}
}

func TestBenchKafkaRestarts(t *testing.T) {
	res, _, stderr := benchJSON(t, "kafka", "--records-per-second", "2000", "--num-seconds", "4", "--restart-every", "1s",
		"--envelope", "upsert", "--key-cardinality", "500")
	if len(res.Restarts) < 2 {
		t.Fatalf("%d restarts in a 4 s run with --restart-every 1s, want at least 2\n%s", len(res.Restarts), stderr)
	}
	for i, r := range res.Restarts {
		// Every restart resumes from the store: where the killed process
		// had made things durable, never from the topic's start.
		if r.ResumeRecords <= 0 || r.ResumeFrom == "" {
			t.Errorf("restart %d resumed from %q (%d records), want past offset 0", i+1, r.ResumeFrom, r.ResumeRecords)
		}
		if r.ResumeRecords != r.DurableAtKill {
			t.Errorf("restart %d resumed from %d records, but %d were durable at the kill", i+1, r.ResumeRecords, r.DurableAtKill)
		}
		if i > 0 && r.ResumeRecords <= res.Restarts[i-1].ResumeRecords {
			t.Errorf("restart %d resumed from %d records, not past restart %d (%d)", i+1, r.ResumeRecords, i, res.Restarts[i-1].ResumeRecords)
		}
		if r.SentAtRestart < r.DurableAtKill {
			t.Errorf("restart %d: sent %d < durable %d", i+1, r.SentAtRestart, r.DurableAtKill)
		}
		if r.FirstProgressSeconds > r.CatchUpSeconds && r.CatchUpSeconds >= 0 {
			t.Errorf("restart %d caught up (%g s) before it progressed (%g s)", i+1, r.CatchUpSeconds, r.FirstProgressSeconds)
		}
	}
	// The last restart has caught up by the end of the run.
	if last := res.Restarts[len(res.Restarts)-1]; last.CatchUpSeconds < 0 {
		t.Errorf("the last restart never caught up: %+v", last)
	}
}

func TestBenchPG(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	res, fields, _ := benchJSON(t, "pg", "--rate", "50", "--num-seconds", "3", "--dsn", dsn, "--rows-per-txn", "4")
	if res.Sent != 150 || res.Rows != 600 {
		t.Errorf("sent %d transactions (%d rows), want 150 (600)", res.Sent, res.Rows)
	}
	if _, ok := fields["max_lag_wal_bytes"]; !ok && res.LagMaxSeconds > 0 {
		t.Errorf("no max_lag_wal_bytes although ingest lagged")
	}
}

// TestBenchKafkaPreload: --preload-keys writes every key once and makes
// it durable before the timed run, whose rate does not count it.
func TestBenchKafkaPreload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	res, _, stderr := benchJSON(t, "kafka", "--records-per-second", "1000", "--num-seconds", "2", "--envelope", "upsert",
		"--key-cardinality", "50000", "--preload-keys", "20000", "--store", dir)
	if res.PreloadRecords != 20000 || res.Sent != 22000 || res.PreloadSeconds <= 0 {
		t.Errorf("preload %d records in %g s, sent %d: want 20000 preloaded and 20000+2000 sent", res.PreloadRecords, res.PreloadSeconds, res.Sent)
	}
	if res.Rate > 1500 {
		t.Errorf("rate %g records/s counts the preload (target 1000/s)", res.Rate)
	}
	if !strings.Contains(stderr, "preload after") {
		t.Errorf("no preload progress on stderr:\n%s", stderr)
	}
	// Every preloaded key is in the upsert collection: at least 20000
	// keys, at most 22000.
	out, _, code := runCLI(t, "", "read", dir, "bench", "--format", "csv")
	if code != 0 {
		t.Fatalf("read: exit %d", code)
	}
	if n := strings.Count(out, "\n") - 1; n < 20000 || n > 22000 {
		t.Errorf("the upsert collection holds %d keys after a preload of 20000 and 2000 more records", n)
	}
}

func TestBenchUsage(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"bench", "kafka", "--num-seconds", "3"}, exitUsage, "--records-per-second"},
		{[]string{"bench", "kafka", "--records-per-second", "10"}, exitUsage, "--num-seconds"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--envelope", "debezium"}, exitUsage, "--envelope"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--output", "yaml"}, exitUsage, "--output"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--partitions", "0"}, exitUsage, "--partitions"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--store", full}, exitError, "not empty"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--key-cardinality", "10", "--preload-keys", "11"}, exitUsage, "--preload-keys"},
		{[]string{"bench", "pg", "--num-seconds", "1"}, exitUsage, "--rate"},
		{[]string{"bench", "pg", "--rate", "10", "--num-seconds", "1", "--update-ratio", "2"}, exitUsage, "--update-ratio"},
		{[]string{"bench", "kafka", "--records-per-second", "10", "--num-seconds", "1", "--bogus"}, exitUsage, "bogus"},
	}
	for _, tc := range tests {
		_, stderr, code := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.inStderr) {
			t.Errorf("rtrctl %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, stderr, tc.code, tc.inStderr)
		}
	}
}
