package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
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

// TestKafkaAvroEvolveSIGKILL: an Avro upsert topic whose value subject
// gets versions 2, 3 and 4 (each adds a field with a default) while the
// ingest runs, killed with SIGKILL right after the switches (within 30ms
// of the switch's log line: before or after its generation, its contents
// and the bindings around them are committed) and at random moments,
// and restarted: the collection has a generation per version, each from
// the first binding beyond a record of it, and every readable binding is
// exact against the offset-order model, in the columns of the version
// read then.
func TestKafkaAvroEvolveSIGKILL(t *testing.T) {
	const topic, versions, parts = "evo", 4, 3
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, topic, parts)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	// Version v: {v string, n2 ... nv: ["null","long"] default null}.
	schema := func(v int) string {
		fs := []string{`{"name":"v","type":"string"}`}
		for j := 2; j <= v; j++ {
			fs = append(fs, fmt.Sprintf(`{"name":"n%d","type":["null","long"],"default":null}`, j))
		}
		return `{"type":"record","name":"Val","fields":[` + strings.Join(fs, ",") + `]}`
	}
	ks := reg.Serde(t, topic+"-key", avroUpsKey)
	serdes := []*testenv.AvroSerde{nil, reg.Serde(t, topic+"-value", schema(1))}
	rnd := rand.New(rand.NewSource(11))
	var log []*kgo.Record
	version := map[*kgo.Record]int{} // 0: a tombstone
	key, value := map[*kgo.Record]string{}, map[*kgo.Record]string{}
	seq := map[*kgo.Record]int{} // the record's place in log
	at := recordAt
	reader := func(f frontier.Frontier) int { return readerAt(f, log, version) }
	switched, finished := 0, 0
	dir := kafkaSIGKILL(t, rnd, kafkaKill{
		brokers: strings.Join(k.Brokers, ","), topic: topic,
		args: []string{"--envelope", "upsert", "--state-cache", "1", "--key-format", "avro", "--value-format", "avro", "--schema-registry", reg.URL},
		produce: func(n int) {
			if len(serdes) <= versions && len(log) >= 150*len(serdes) {
				serdes = append(serdes, reg.Serde(t, topic+"-value", schema(len(serdes))))
			}
			for i := 0; i < n; i++ {
				kn := rnd.Intn(12)
				id := fmt.Sprintf("key%02d", kn)
				r := &kgo.Record{Topic: topic, Partition: int32(kn % parts), Key: ks.Encode(t, map[string]any{"id": id})}
				v := fmt.Sprintf("v%d", len(log))
				if rnd.Intn(6) != 0 { // else a tombstone
					// The latest version or the one before: producers
					// upgrade one by one.
					w := max(1, len(serdes)-1-rnd.Intn(2))
					rec := map[string]any{"v": v}
					for j := 2; j <= w; j++ {
						rec[fmt.Sprintf("n%d", j)] = map[string]any{"long": int64(len(log))}
					}
					r.Value, version[r] = serdes[w].Encode(t, rec), w
				}
				if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
					t.Fatal(err)
				}
				seq[r] = len(log)
				log = append(log, r)
				key[r], value[r] = fmt.Sprintf(`{"id":%q}`, id), v
			}
		},
		model: func(f frontier.Frontier) map[string]string {
			model := map[string]string{}
			rv := reader(f)
			for _, r := range log {
				if !f.Beyond(at(r)) {
					continue
				}
				if version[r] == 0 {
					delete(model, key[r])
					continue
				}
				row := map[string]any{"v": value[r]}
				for j := 2; j <= rv; j++ {
					row[fmt.Sprintf("n%d", j)] = nil
					if j <= version[r] {
						row[fmt.Sprintf("n%d", j)] = seq[r]
					}
				}
				b, _ := json.Marshal(row)
				model[key[r]] = string(b)
			}
			return model
		},
		read: readUpsertRows,
		killed: func(stderr string) {
			switched += strings.Count(stderr, "the collection's columns change")
			finished += strings.Count(stderr, "finished a switch of columns")
		},
		last:     func(string) {},
		rounds:   10,
		killWhen: func(stderr string) bool { return switchKill(stderr, log, version, len(serdes)) },
	})
	t.Logf("%d records; killed runs switched %d times, finished %d switches committed without their contents", len(log), switched, finished)
	checkVersionGenerations(t, dir, topic, reader, len(serdes)-1, versions)
}

// checkVersionGenerations checks, after a kafkaSIGKILL of topic in dir
// whose value subject got registered versions (want versions), that the
// collection has a generation per version, each from the first binding
// beyond a record of it (reader: the version read as of a frontier).
func checkVersionGenerations(t *testing.T, dir, topic string, reader func(frontier.Frontier) int, registered, versions int) {
	t.Helper()
	st, err := store.Open(context.Background(), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(context.Background(), "kafka."+topic)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{0}
	for i, b := range bs {
		if i > 0 && reader(b.Frontier) > reader(bs[i-1].Frontier) {
			want = append(want, b.Time)
		}
	}
	var got []uint64
	for _, g := range sh.Generations() {
		got = append(got, g.Start)
	}
	if registered != versions || !slices.Equal(got, want) {
		t.Fatalf("%d versions registered; generations from %v, want %v (the first binding beyond a record of each version)", registered, got, want)
	}
}

// recordAt is a record's source time.
func recordAt(r *kgo.Record) frontier.Time {
	return frontier.Time{Partition: strconv.Itoa(int(r.Partition)), Pos: uint64(r.Offset)}
}

// readerAt is the value version read as of frontier f: the latest one
// (version, by record of log) with a record below f.
func readerAt(f frontier.Frontier, log []*kgo.Record, version map[*kgo.Record]int) int {
	v := 1
	for _, r := range log {
		if version[r] > v && f.Beyond(recordAt(r)) {
			v = version[r]
		}
	}
	return v
}

// switchKill is a kafkaKill.killWhen for a topic whose value versions
// 1 to registered-1 (version, by record of log) are registered: a run is
// killed once it switched (or finished a switch), or when it has no
// version to switch to (every one has a record below where it started).
func switchKill(stderr string, log []*kgo.Record, version map[*kgo.Record]int, registered int) bool {
	if strings.Contains(stderr, "the collection's columns change") || strings.Contains(stderr, "finished a switch of columns") {
		return true
	}
	from := map[int32]int64{}
	for _, c := range consumeLine.FindAllStringSubmatch(stderr, -1) {
		p, _ := strconv.Atoi(c[2])
		from[int32(p)], _ = strconv.ParseInt(c[3], 10, 64)
	}
	below := map[int]bool{}
	for _, r := range log {
		if r.Offset < from[r.Partition] {
			below[version[r]] = true
		}
	}
	for v := 2; v < registered; v++ {
		if !below[v] {
			return false
		}
	}
	return true
}

// TestKafkaAvroRecency is the recency seed scenario (TestKafkaRecency)
// for an Avro upsert topic (registryRecency).
func TestKafkaAvroRecency(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	const topic = "avrorec"
	ks, vs := reg.Serde(t, topic+"-key", avroUpsKey), reg.Serde(t, topic+"-value", avroUpsV2)
	registryRecency(t, reg, topic, "avro", func(i int) *kgo.Record {
		id := strconv.Itoa(i)
		return &kgo.Record{Key: ks.Encode(t, map[string]any{"id": id}), Value: vs.Encode(t, map[string]any{"v": id, "n": map[string]any{"long": int64(i)}})}
	})
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
	rows := kafkaPipeRows(t, out)
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
