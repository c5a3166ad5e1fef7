package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

const (
	protoUpsKey = `syntax = "proto3"; package ups; message Key { string id = 1; }`
	// protoUpsV1 imports the message it holds through a reference.
	protoUpsNote = `syntax = "proto3"; package common; message Note { string text = 1; }`
	protoUpsV1   = `syntax = "proto3"; package ups; import "common/note.proto"; message Val { string v = 1; }`
	// v2 adds an optional field and a field of the imported message: v1
	// records read with n and note null.
	protoUpsV2 = `syntax = "proto3"; package ups; import "common/note.proto"; message Val { string v = 1; optional int64 n = 2; common.Note note = 3; }`
)

// protoUps registers the upsert test's schemas under topic's subjects and
// returns a key and a value encoder (values alternate between v1 and v2;
// each returns the bytes and the row as the store shows it).
func protoUps(t *testing.T, reg *testenv.Registry, topic string) (key func(string) ([]byte, string), value func(string) ([]byte, string)) {
	reg.ProtoSerde(t, "common/note.proto", protoUpsNote)
	ref := sr.SchemaReference{Name: "common/note.proto", Subject: "common/note.proto", Version: 1}
	ks := reg.ProtoSerde(t, topic+"-key", protoUpsKey)
	v1, v2 := reg.ProtoSerde(t, topic+"-value", protoUpsV1, ref), reg.ProtoSerde(t, topic+"-value", protoUpsV2, ref)
	setStr := func(m *dynamicpb.Message, field, v string) *dynamicpb.Message {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(field)), protoreflect.ValueOfString(v))
		return m
	}
	n := 0
	key = func(k string) ([]byte, string) {
		return ks.Encode(t, setStr(ks.New(t, "Key"), "id", k)), fmt.Sprintf(`{"id":%q}`, k)
	}
	value = func(v string) ([]byte, string) {
		if n++; n%2 == 0 {
			return v1.Encode(t, setStr(v1.New(t, "Val"), "v", v)), fmt.Sprintf(`{"n":null,"note":null,"v":%q}`, v)
		}
		m := setStr(v2.New(t, "Val"), "v", v)
		fs := m.Descriptor().Fields()
		m.Set(fs.ByName("n"), protoreflect.ValueOfInt64(int64(n)))
		note := dynamicpb.NewMessage(fs.ByName("note").Message())
		m.Set(fs.ByName("note"), protoreflect.ValueOfMessage(setStr(note, "text", "t"+v)))
		return v2.Encode(t, m), fmt.Sprintf(`{"n":%d,"note":{"text":"t%s"},"v":%q}`, n, v, v)
	}
	return key, value
}

// TestKafkaProtobufUpsertSIGKILL is TestKafkaUpsertSIGKILL with Protobuf
// keys and values (values alternating between two schema versions that
// import a message through a reference, read with the latest), produced
// with dynamicpb, proto.Marshal and sr's framing: every readable binding
// equals the offset-order model after 5 SIGKILLs.
func TestKafkaProtobufUpsertSIGKILL(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	key, value := protoUps(t, reg, "ups")
	upsertSIGKILL(t, upsertCodec{
		args: []string{"--key-format", "protobuf", "--value-format", "protobuf", "--schema-registry", reg.URL},
		key:  key, value: value,
	})
}

// TestKafkaProtobufRecency is the recency seed scenario for a Protobuf
// upsert topic (registryRecency).
func TestKafkaProtobufRecency(t *testing.T) {
	const topic = "protorec"
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	key, value := protoUps(t, reg, topic)
	registryRecency(t, reg, topic, "protobuf", func(i int) *kgo.Record {
		k, _ := key(strconv.Itoa(i))
		v, _ := value(strconv.Itoa(i))
		return &kgo.Record{Key: k, Value: v}
	})
}

// TestKafkaProtobufOnDecodeError: 'rtrctl replicate --value-format protobuf'
// over a topic with records that do not decode has a definite error at
// the first one under --on-decode-error fail, naming its offset, and
// skips them under skip; protobuf without a registry is a usage error naming the
// flag.
func TestKafkaProtobufOnDecodeError(t *testing.T) {
	k := testenv.SharedKafka(t)
	brokers := strings.Join(k.Brokers, ",")
	topic := fmt.Sprintf("protoerr-%d", time.Now().UnixNano()) // the shared broker outlives a test
	cl := kafkaTestTopic(t, k.Brokers, topic, 1)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	_, value := protoUps(t, reg, topic)
	good, _ := value("a")
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: topic, Key: []byte("1"), Value: good},
		&kgo.Record{Topic: topic, Key: []byte("2"), Value: []byte("not protobuf")},
		// Cut short: a last field (v) of 5 bytes with 1. (Cutting bytes off
		// a protobuf record may leave a valid one.)
		&kgo.Record{Topic: topic, Key: []byte("3"), Value: append(bytes.Clone(good), 0x0a, 5, 'x')}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	base := []string{"replicate", "--source", "kafka", "--brokers", brokers, "--topic", topic, "--key-format", "text",
		"--value-format", "protobuf", "--stop-at", "0:3"}
	_, stderr, code := runCLI(t, "", base...)
	if code != exitUsage || !strings.Contains(stderr, "--schema-registry") || !strings.Contains(stderr, "protobuf needs a schema registry") {
		t.Fatalf("no registry: exit %d, stderr %s", code, stderr)
	}
	base = append(base, "--schema-registry", reg.URL)
	want := `1 {"n":1,"note":{"text":"ta"},"v":"a"}`
	out, stderr, code := runCLI(t, "", base...)
	if !strings.Contains(stderr, "definite error") || !strings.Contains(stderr, "offset 1: value (format protobuf): bad magic byte") {
		t.Fatalf("fail policy: exit %d, stderr %s; want a definite decode error at offset 1", code, stderr)
	}
	if rows := kafkaPipeRows(t, out); len(rows) != 1 || rows[0] != want {
		t.Fatalf("fail policy rows %q, want only the record before the error", rows)
	}
	out, stderr, code = runCLI(t, "", append(base, "--on-decode-error", "skip")...)
	if code != 0 || strings.Contains(stderr, "definite error") {
		t.Fatalf("skip policy: exit %d: %s", code, stderr)
	}
	if rows := kafkaPipeRows(t, out); len(rows) != 1 || rows[0] != want {
		t.Fatalf("skip policy rows %q, want only the good record", rows)
	}
}

// kafkaPipeRows are the key and value ("key value") of the data rows of
// a Kafka replicate's pipe output.
func kafkaPipeRows(t *testing.T, out string) []string {
	t.Helper()
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
	return rows
}
