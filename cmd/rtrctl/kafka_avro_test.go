package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

const (
	avroUpsKey = `{"type":"record","name":"Key","fields":[{"name":"id","type":"string"}]}`
	avroUpsV1  = `{"type":"record","name":"Val","fields":[{"name":"v","type":"string"}]}`
	// v2 adds a field with a default: v1 records read with n = null.
	avroUpsV2 = `{"type":"record","name":"Val","fields":[{"name":"v","type":"string"},{"name":"n","type":["null","long"],"default":null}]}`
)

// TestKafkaAvroUpsertSIGKILL is TestKafkaUpsertSIGKILL with Avro keys and
// values (values alternating between two schema versions, read with the
// latest), produced with sr.Serde and hamba/avro, from a registry that
// wants basic auth (the password from a file): every readable binding
// equals the offset-order model after 5 SIGKILLs, and the store holds no
// password.
func TestKafkaAvroUpsertSIGKILL(t *testing.T) {
	const password = "registry-s3cret"
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{User: "rtr", Password: password})
	ks := reg.Serde(t, "ups-key", avroUpsKey)
	v1, v2 := reg.Serde(t, "ups-value", avroUpsV1), reg.Serde(t, "ups-value", avroUpsV2)
	pwFile := filepath.Join(t.TempDir(), "registry-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := 0
	dir := upsertSIGKILL(t, upsertCodec{
		args: []string{"--key-format", "avro", "--value-format", "avro", "--schema-registry", reg.URL,
			"--schema-registry-user", "rtr", "--schema-registry-password-file", pwFile},
		key: func(k string) ([]byte, string) {
			return ks.Encode(t, map[string]any{"id": k}), fmt.Sprintf(`{"id":%q}`, k)
		},
		value: func(v string) ([]byte, string) {
			if n++; n%2 == 0 {
				return v1.Encode(t, map[string]any{"v": v}), fmt.Sprintf(`{"n":null,"v":%q}`, v)
			}
			return v2.Encode(t, map[string]any{"v": v, "n": int64(n)}), fmt.Sprintf(`{"n":%d,"v":%q}`, n, v)
		},
	})
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), password) {
				t.Errorf("%s holds the registry password", path)
			}
		}
		return nil
	})
}

// TestKafkaAvroRecency is the recency seed scenario (TestKafkaRecency)
// for an Avro upsert topic: fetches are delayed, so a plain read right
// after producing misses the records, and a read as of wait-recent's
// time has exactly all of them.
func TestKafkaAvroRecency(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, st := recencyStore(t)
	const topic = "avrorec"
	k, cl := slowKafka(t, topic, 300*time.Millisecond)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	ks, vs := reg.Serde(t, topic+"-key", avroUpsKey), reg.Serde(t, topic+"-value", avroUpsV2)
	r, err := kafkafmt.NewRegistry(kafkafmt.RegistryConfig{URL: reg.URL})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := ingest.Run(ctx, ingest.NewKafka(ingest.KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert",
			KeyFormat: "avro", ValueFormat: "avro", Registry: r}), st, ingest.Options{})
		if err != nil && ctx.Err() == nil {
			t.Errorf("ingest: %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	produce := func(from, to int) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i <= to; i++ {
			id := strconv.Itoa(i)
			rec := &kgo.Record{Key: ks.Encode(t, map[string]any{"id": id}), Value: vs.Encode(t, map[string]any{"v": id, "n": map[string]any{"long": int64(i)}})}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	waitRecent := func() uint64 { return waitRecentTime(t, dir, "kafka."+topic) }
	produce(1, 2)
	n := 2
	if got := countRows(t, dir, topic, waitRecent()); got != n {
		t.Fatalf("warm-up: %d rows, want %d", got, n)
	}
	missed := 0
	for round := range 5 {
		produce(n+1, n+4)
		n += 4
		if got := countRows(t, dir, topic, 0); got < n {
			missed++
		}
		if got := countRows(t, dir, topic, waitRecent()); got != n {
			t.Fatalf("round %d: read as of wait-recent has %d rows, want exactly %d", round, got, n)
		}
	}
	if missed < 4 {
		t.Errorf("a plain read right after producing missed the records in only %d of 5 rounds; ingestion is not slowed enough to show recency", missed)
	}
}

// TestKafkaAvroFlags: unusable avro and decode error flags fail before
// anything connects, naming the flag to fix.
func TestKafkaAvroFlags(t *testing.T) {
	base := []string{"ingest", "--source", "kafka", "--brokers", "127.0.0.1:1", "--topics", "t", "--store", t.TempDir()}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"avro without a registry", []string{"--value-format", "avro"}, "--schema-registry"},
		{"bad policy", []string{"--on-decode-error", "ignore"}, "--on-decode-error fail, skip or inline"},
		{"registry not a URL", []string{"--value-format", "avro", "--schema-registry", "localhost:8081"}, "http://host:port"},
		{"TLS flags on http", []string{"--value-format", "avro", "--schema-registry", "http://127.0.0.1:1", "--schema-registry-ca", "ca.pem"}, "https://"},
		{"password without user", []string{"--value-format", "avro", "--schema-registry", "http://:pw@127.0.0.1:1"}, "--schema-registry-user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "", append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %s; want exit %d naming %s", code, stderr, exitUsage, tc.want)
			}
			if strings.Contains(stderr, "pw@") {
				t.Fatalf("stderr shows the password: %s", stderr)
			}
		})
	}
}

// TestKafkaAvroReplicateTLS: 'rtrctl replicate --value-format avro'
// against a registry over TLS with basic auth (the password from
// $RTR_SCHEMA_REGISTRY_PASSWORD) writes the decoded records; a wrong CA
// or password fails at once with the flag to fix.
func TestKafkaAvroReplicateTLS(t *testing.T) {
	k := testenv.SharedKafka(t)
	brokers := strings.Join(k.Brokers, ",")
	topic := fmt.Sprintf("avtls-%d", time.Now().UnixNano()) // the shared broker outlives a test
	cl := kafkaTestTopic(t, k.Brokers, topic, 1)
	certs := servers.TestCerts(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{User: "rtr", Password: "pw", TLS: certs.ServerTLS(false), ClientTLS: certs.ClientTLS("127.0.0.1")})
	vs := reg.Serde(t, topic+"-value", avroUpsV2)
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: topic, Key: []byte("a"), Value: vs.Encode(t, map[string]any{"v": "x", "n": map[string]any{"long": int64(5)}})},
		&kgo.Record{Topic: topic, Key: []byte("b"), Value: vs.Encode(t, map[string]any{"v": "y", "n": nil})}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envRegistryPassword, "pw")
	args := []string{"replicate", "--source", "kafka", "--brokers", brokers, "--topic", topic, "--key-format", "text",
		"--value-format", "avro", "--schema-registry", reg.URL, "--schema-registry-user", "rtr", "--stop-at", "0:2"}
	out, errOut, code := runCLI(t, "", append(args, "--schema-registry-ca", certs.CA)...)
	if code != 0 {
		t.Fatalf("replicate exited %d: %s", code, errOut)
	}
	r := pipe.NewReader(strings.NewReader(out), memory.DefaultAllocator)
	defer r.Close()
	var rows []string
	for {
		s, err := r.Next()
		if err != nil {
			break
		}
		if s.Header.Kind != pipe.KindData {
			continue
		}
		for {
			rec, err := s.NextRecord()
			if err != nil || rec == nil {
				break
			}
			cols, _, _, _ := pipe.SplitData(rec)
			for i := 0; i < int(rec.NumRows()); i++ {
				rows = append(rows, cols[2].ValueStr(i)+" "+cols[3].ValueStr(i))
			}
		}
	}
	if want := []string{`a {"n":5,"v":"x"}`, `b {"n":null,"v":"y"}`}; strings.Join(rows, "|") != strings.Join(want, "|") {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	for _, bad := range []struct {
		name string
		args []string
		want string
	}{
		{"untrusted certificate", []string{"--schema-registry-ca", certs.OtherCA}, "--schema-registry-ca"},
		{"wrong password", []string{"--schema-registry-ca", certs.CA, "--schema-registry-password-file", writeTemp(t, "nope\n")}, "--schema-registry-password-file"},
	} {
		start := time.Now()
		_, errOut, code := runCLI(t, "", append(args, bad.args...)...)
		if code == 0 || !strings.Contains(errOut, bad.want) || strings.Contains(errOut, "nope") {
			t.Errorf("%s: exit %d, stderr %s; want a failure naming %s (and no password)", bad.name, code, errOut, bad.want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %v, want a failure at once", bad.name, d)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
