package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// hostEnv is the environment of a separate "host": the S3 server's AWS
// variables and its own temporary directory, so that two processes share
// nothing but the bucket.
func hostEnv(t *testing.T, s3 *testenv.S3Server) []string {
	return append(s3.Env(), "TMPDIR="+t.TempDir(), "HOME="+t.TempDir())
}

// runHost runs rtrctl to completion as a separate process on its own
// "host" and returns stdout, stderr and the exit status.
func runHost(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(rtrctlBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestS3StoreIngestFencing: two Kafka upsert ingests on two "hosts"
// (separate processes, temporary directories and homes; only the bucket
// of a versitygw server is shared). The second is refused while the
// first's lease is live; the first is paused (SIGSTOP) past its lease and
// the second takes over; resumed (SIGCONT), the first commits nothing and
// exits naming the lost lease; a reader on a third host with no local
// state reads the topic exactly as the producer wrote it, and status and
// wait-recent work against the bucket.
func TestS3StoreIngestFencing(t *testing.T) {
	s3 := testenv.StartVersityGW(t, "rtr")
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, "acct", 2)
	loc := "s3://rtr/stores/one"
	model := map[string]string{}
	n := 0
	produce := func(count int) {
		for i := 0; i < count; i++ {
			key := fmt.Sprintf("k%02d", n%17)
			val := fmt.Sprintf("v%d", n)
			// A key stays in one partition: upserts are ordered in it.
			r := &kgo.Record{Topic: "acct", Partition: int32(n % 17 % 2), Key: []byte(key), Value: []byte(val)}
			n++
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			model[key] = val
		}
	}
	args := []string{"ingest", "--source", "kafka", "--brokers", strings.Join(k.Brokers, ","), "--topics", "acct",
		"--envelope", "upsert", "--key-format", "text", "--value-format", "text", "--store", loc,
		"--interval", "20ms", "--compact-every", "200ms", "--lease-ttl", "2s"}
	hostA, hostB, hostC := hostEnv(t, s3), hostEnv(t, s3), hostEnv(t, s3)

	produce(40)
	a := startProc(t, hostA, args...)
	readerEnv := hostC
	exact := func(who string, p *proc) {
		t.Helper()
		want := fmt.Sprint(model)
		var got string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, errOut, code := runHost(t, readerEnv, "read", loc, "acct", "--format", "json")
			if code == 0 {
				got = fmt.Sprint(jsonKV(t, out))
				if got == want {
					return
				}
			} else {
				got = errOut
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: the store does not read as the topic within 30s:\nread %s\nwant %s\ningest stderr:\n%s", who, got, want, p.stderr.Bytes())
	}
	exact("first ingest", a)

	// A second ingest elsewhere is refused while the lease is live.
	_, errOut, code := runHost(t, hostB, args...)
	if code == 0 || !strings.Contains(errOut, "locked by another process") || !strings.Contains(errOut, "lease epoch 1") {
		t.Fatalf("second ingest while the first holds the lease: exit %d, stderr:\n%s", code, errOut)
	}

	// Pause the first past its lease; the second takes over.
	a.signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	b := startProc(t, hostB, args...)
	produce(40)
	exact("second ingest after takeover", b)

	// Resumed, the first finds its lease lost and commits nothing.
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	st, err := store.Open(context.Background(), loc, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	a.signal(syscall.SIGCONT)
	if code := a.wait(t, 30*time.Second); code == 0 {
		t.Fatalf("the paused ingest exited 0 after losing its lease:\n%s", a.stderr.Bytes())
	}
	if !strings.Contains(string(a.stderr.Bytes()), "writer lease of this source was lost") {
		t.Fatalf("the paused ingest did not report the lost lease:\n%s", a.stderr.Bytes())
	}
	produce(40)
	exact("second ingest after the first resumed", b)
	for _, name := range []string{"acct"} {
		sh, err := st.Shard(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := sh.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.Epoch != 2 {
			t.Errorf("collection %s: last commit by epoch %d, want 2 (the second ingest)", name, info.Epoch)
		}
	}

	// Status and wait-recent from the reader's host.
	out, errOut, code := runHost(t, readerEnv, "status", loc, "--output", "json")
	if code != 0 || !strings.Contains(out, "acct") {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	// The ingest's socket is on its host: from here it answers...
	out, errOut, code = runHost(t, readerEnv, "wait-recent", "--store", loc, "--timeout", "20s", "--output", "json")
	if code != 0 || !strings.Contains(out, `"via":"daemon"`) {
		t.Fatalf("wait-recent through the ingest's socket: exit %d\n%s\n%s", code, out, errOut)
	}
	// ...and from a host where its path does not exist, wait-recent
	// waits on the store's manifests itself.
	info, err := st.ReadSourceInfo("kafka.acct")
	if err != nil || info.Socket == "" {
		t.Fatalf("source info: %+v, %v", info, err)
	}
	if err := os.Remove(info.Socket); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runHost(t, readerEnv, "wait-recent", "--store", loc, "--timeout", "20s", "--output", "json")
	if code != 0 || !strings.Contains(out, `"via":"direct"`) {
		t.Fatalf("wait-recent from another host (the ingest's socket is not there): exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("wait-recent: %s", strings.TrimSpace(out))
	out, errOut, code = runHost(t, readerEnv, "read", loc, "acct", "--recent", "--format", "json")
	if code != 0 || fmt.Sprint(jsonKV(t, out)) != fmt.Sprint(model) {
		t.Fatalf("read --recent from another host: exit %d\n%s\n%s\nwant %v", code, out, errOut, model)
	}
	for _, s := range []string{out, errOut, string(b.stderr.Bytes())} {
		if strings.Contains(s, s3.SecretKey) {
			t.Fatalf("the secret key appears in output:\n%s", s)
		}
	}
	b.signal(syscall.SIGTERM)
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("second ingest exited %d:\n%s", code, b.stderr.Bytes())
	}
}

// jsonKV reads `read --format json` output of an upsert topic as key ->
// value.
func jsonKV(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("read output %q: %v", line, err)
		}
		m[fmt.Sprint(row["key"])] = fmt.Sprint(row["value"])
	}
	return m
}

// TestS3StoreStandbyTakeoverBank: PostgreSQL bank transfers ingested into
// a bucket (versitygw) by one ingest while a second, --standby, on
// another "host", waits; the holder is SIGKILLed mid-stream and the
// standby takes over within the lease's expiry plus 2 s, twice (a new
// standby after each takeover). Throughout, exactly one process writes
// (each manifest's epoch is the lease's), and the store stays exact:
// every binding is a consistent upstream state with the bank's sum
// (check 2), and what was read before a takeover reads the same after it
// (check 4).
func TestS3StoreStandbyTakeoverBank(t *testing.T) {
	s3 := testenv.StartVersityGW(t, "rtr")
	// This process reads the bucket too (the checks).
	for _, kv := range s3.Env() {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	h := &pgHarness{pg: testenv.SharedPostgres(t)}
	fx := h.New(t)
	const source, ttl = "bank", 2 * time.Second
	lay := fx.Layout(source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	loc := "s3://rtr/stores/bank"
	args := append(fx.IngestArgs(loc, source), "--interval", "200ms", "--compact-every", "0", "--lease-ttl", ttl.String(), "--standby")
	host := func() []string { return append(hostEnv(t, s3), "XDG_CACHE_HOME="+t.TempDir()) }
	holder := h.Run(t, host(), args...)
	var stderrs []func() string
	defer func() {
		if t.Failed() {
			for i, s := range stderrs {
				t.Logf("ingest %d's stderr:\n%s", i+1, s())
			}
		}
	}()
	stderrs = append(stderrs, holder.Stderr)
	ingesttest.WaitStderr(t, holder, "msg=resume ")
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	seen := ingesttest.Reads{}
	compare := func(what string) {
		t.Helper()
		now, err := ingesttest.RecordReads(t.Context(), loc, lay)
		if err != nil {
			t.Fatal(err)
		}
		if err := ingesttest.CompareReads(seen, now); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen = now
	}
	var took, lates []time.Duration
	for round := range 2 {
		standby := h.Run(t, host(), args...)
		stderrs = append(stderrs, standby.Stderr)
		ingesttest.WaitStderr(t, standby, "standby: another ingest holds the source")
		time.Sleep(1500 * time.Millisecond) // transfers, bindings and a renewal or two
		if strings.Contains(standby.Stderr(), "msg=resume ") {
			t.Fatalf("round %d: the standby resumed while the holder's lease was live:\n%s", round, standby.Stderr())
		}
		compare(fmt.Sprintf("round %d, before the kill", round))
		killed := time.Now()
		holder.Kill(t)
		expires := leaseExpiry(t, "rtr", "stores/bank/locks/"+source+".lease")
		ingesttest.WaitStderr(t, standby, "msg=resume ")
		took = append(took, time.Since(killed))
		late := time.Since(expires)
		lates = append(lates, late)
		if late > 2*time.Second {
			t.Errorf("round %d: the standby took over %s after the killed holder's lease expired (%s after the kill), want within 2 s", round, late, took[round])
		}
		compare(fmt.Sprintf("round %d, after the takeover", round))
		holder = standby
	}
	w.Halt(t)
	ingesttest.WaitEqual(t, fx, loc, lay, holder, 90*time.Second)
	ingesttest.WaitEqualLog(t, loc, lay, log, holder, 30*time.Second)
	if code := holder.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, holder.Stderr())
	}
	compare("at the end")
	rep, err := ingesttest.CheckTimes(t.Context(), loc, lay, log)
	if err != nil {
		t.Fatalf("check 2 (changes at their source time): %v", err)
	}
	// The last commits are the third holder's: epoch 3.
	st, err := store.Open(t.Context(), loc, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range lay.Collections() {
		sh, err := st.Shard(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := sh.Info(t.Context()); err != nil || info.Epoch != 3 {
			t.Errorf("collection %s: last commit by epoch %d (%v), want 3 (the second standby)", name, info.Epoch, err)
		}
	}
	t.Logf("%d transactions, %d bindings exact; takeovers %v after the kills, %v after the leases expired (lease %s)", log.Len(), rep.Bindings, took, lates, ttl)
}

// leaseExpiry reads the expiry of the lease object key in bucket (this
// process's AWS environment points at the server).
func leaseExpiry(t *testing.T, bucket, key string) time.Time {
	t.Helper()
	c, err := store.NewS3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.NewS3FS(c, bucket).ReadFile(key)
	if err != nil {
		t.Fatalf("read lease %s: %v", key, err)
	}
	var doc struct{ Expires string }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("lease %s: %v: %s", key, err, b)
	}
	at, err := time.Parse(time.RFC3339Nano, doc.Expires)
	if err != nil {
		t.Fatalf("lease %s: %v", key, err)
	}
	return at
}
