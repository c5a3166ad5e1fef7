package ingest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// The value versions of an append-only topic that evolves: v2 promotes n
// (int to long) and adds color with a default; v3 promotes n again (to
// double) and label (string to bytes), drops drop and adds qty with a
// default.
var noneEvolveSchemas = map[int]string{
	1: `{"type":"record","name":"Ev","fields":[{"name":"n","type":"int"},{"name":"label","type":"string"},{"name":"drop","type":"long"}]}`,
	2: `{"type":"record","name":"Ev","fields":[{"name":"n","type":"long"},{"name":"label","type":"string"},{"name":"drop","type":"long"},{"name":"color","type":"string","default":"red"}]}`,
	3: `{"type":"record","name":"Ev","fields":[{"name":"n","type":"double"},{"name":"label","type":"bytes"},{"name":"color","type":"string","default":"red"},{"name":"qty","type":"int","default":7}]}`,
}

// noneEvolveValue is record i's value written with version v.
func noneEvolveValue(i, v int) map[string]any {
	switch v {
	case 1:
		return map[string]any{"n": int32(i), "label": fmt.Sprint("l", i), "drop": int64(-i)}
	case 2:
		return map[string]any{"n": int64(i), "label": fmt.Sprint("l", i), "drop": int64(-i), "color": "blue"}
	}
	return map[string]any{"n": float64(i) + 0.5, "label": []byte(fmt.Sprint("b", i)), "color": "green", "qty": int32(i % 5)}
}

// noneEvolveShow is how the collection shows record i written with
// version w when read with version reader (reader >= w), as Arrow prints
// a struct: JSON, keys sorted, bytes in base64. Avro's resolution: added
// fields take their defaults, numbers and string/bytes are promoted,
// fields the reader lacks are dropped.
func noneEvolveShow(i, w, reader int) string {
	v := noneEvolveValue(i, w)
	out := map[string]any{"n": v["n"]}
	label := v["label"]
	if reader >= 3 {
		if s, ok := label.(string); ok {
			label = []byte(s)
		}
		out["label"] = base64.StdEncoding.EncodeToString(label.([]byte))
	} else {
		out["label"] = label
	}
	if reader <= 2 {
		out["drop"] = v["drop"]
	}
	if reader >= 2 {
		out["color"] = "red"
		if c, ok := v["color"]; ok {
			out["color"] = c
		}
	}
	if reader >= 3 {
		out["qty"] = int32(7)
		if q, ok := v["qty"]; ok {
			out["qty"] = q
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// noneEvolveLog is what a test produced: each record with its index and
// the version it was written with.
type noneEvolveLog struct {
	recs []*kgo.Record
	ver  map[*kgo.Record][2]int // index, version
}

func (l *noneEvolveLog) add(t testing.TB, cl *kgo.Client, topic string, parts int, vs map[int]*testenv.AvroSerde, v int) {
	t.Helper()
	i := len(l.recs)
	r := &kgo.Record{Topic: topic, Partition: int32(i % parts), Key: []byte(fmt.Sprint("k", i)), Value: vs[v].Encode(t, noneEvolveValue(i, v))}
	produce(t, cl, r)
	if l.ver == nil {
		l.ver = map[*kgo.Record][2]int{}
	}
	l.recs = append(l.recs, r)
	l.ver[r] = [2]int{i, v}
}

// noneEvolveTopic starts a broker and a registry, creates topic with v1
// of its value subject and opens a store.
func noneEvolveTopic(t *testing.T, topic string, parts int32) (*testenv.Kafka, *testenv.Registry, map[int]*testenv.AvroSerde, *kgo.Client, *store.Store) {
	t.Helper()
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	createTopic(t, k.Brokers, topic, parts)
	vs := map[int]*testenv.AvroSerde{1: reg.Serde(t, topic+"-value", noneEvolveSchemas[1])}
	return k, reg, vs, producer(t, k.Brokers), openStore(t)
}

// TestKafkaIngestAvroEvolveNone: an append-only topic read with v1 of its
// value subject; v2, then v3 are registered while the ingest runs (and
// across a restart) and producers write them among v1 records. At the
// first record of each later version the collection gets a new generation
// (from the first binding beyond it) holding every record so far in that
// version's columns (Avro resolution: defaults, promotions, a removed
// field dropped), then the records from it on; every binding reads exact
// against the offset-order model in the columns of the version in force
// then, so earlier times read as before.
func TestKafkaIngestAvroEvolveNone(t *testing.T) {
	const topic, parts = "nev", 2
	k, reg, vs, cl, st := noneEvolveTopic(t, topic, parts)
	var l noneEvolveLog
	write := func(count int, versions ...int) {
		for i := 0; i < count; i++ {
			l.add(t, cl, topic, parts, vs, versions[i%len(versions)])
		}
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(t, reg)}
	write(30, 1)
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	vs[2] = reg.Serde(t, topic+"-value", noneEvolveSchemas[2])
	write(10, 1)
	time.Sleep(100 * time.Millisecond)
	write(20, 1, 2)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	write(10, 2)
	run = startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	vs[3] = reg.Serde(t, topic+"-value", noneEvolveSchemas[3])
	write(30, 1, 3, 2)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	checkNoneEvolved(t, st, topic, &l, 3)
}

// checkNoneEvolved checks an append-only collection of l's records: a
// generation per version from the first binding beyond a record of it,
// with that version as its reader, and every readable binding exact.
func checkNoneEvolved(t *testing.T, st *store.Store, topic string, l *noneEvolveLog, versions int) {
	t.Helper()
	ctx := context.Background()
	sh := shardOf(t, st, topic)
	bs, _, err := st.Bindings(ctx, KafkaSourceID("", topic))
	if err != nil {
		t.Fatal(err)
	}
	below := func(b frontier.Binding, r *kgo.Record) bool {
		return b.Frontier.Beyond(frontier.Time{Partition: fmt.Sprint(r.Partition), Pos: uint64(r.Offset)})
	}
	// The reader at a binding: the latest version of a record below it.
	readerAt := func(b frontier.Binding) int {
		v := 1
		for _, r := range l.recs {
			if below(b, r) {
				v = max(v, l.ver[r][1])
			}
		}
		return v
	}
	var want []uint64
	for i, b := range bs {
		if v := readerAt(b); i == 0 || v != readerAt(bs[i-1]) {
			want = append(want, b.Time)
		}
	}
	want[0] = 0
	gs := sh.Generations()
	var got []uint64
	for _, g := range gs {
		got = append(got, g.Start)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(gs) != versions {
		t.Fatalf("generations start at %v, want %v (the first binding beyond a record of each of %d versions)", got, want, versions)
	}
	for i, g := range gs {
		if md, _ := g.Schema.Metadata().GetValue(mdKafkaValueSchema); !strings.Contains(md, fmt.Sprintf("version %d ", i+1)) {
			t.Fatalf("generation %d's reader is %q, want version %d", i, md, i+1)
		}
	}
	checked := 0
	for _, b := range bs {
		if b.Time >= sh.Upper() {
			break
		}
		reader := readerAt(b)
		var lines []string
		for _, r := range l.recs {
			if below(b, r) {
				iv := l.ver[r]
				lines = append(lines, fmt.Sprintf("partition=%d offset=%d key=%q value=%s header_keys=[] header_values=[]",
					r.Partition, r.Offset, r.Key, noneEvolveShow(iv[0], iv[1], reader)))
			}
		}
		sameLines(t, fmt.Sprintf("binding %d (%s), version %d", b.Time, b.Frontier, reader), readAt(t, st, topic, b.Time, "timestamp"), lines)
		checked++
	}
	if checked < 3 {
		t.Fatalf("only %d bindings checked", checked)
	}
	t.Logf("%d bindings match the model", checked)
}

// TestKafkaIngestAvroEvolveNoneReplay: a run killed after the binding
// beyond the first v2 record was made and before its data was committed
// (the store made so by hand: a clean stop, then that binding). The
// restart replays it, and may read records of the other partition that
// the first run read after the switch before the switching record: the
// reset at the binding supersedes them, so they are read again with the
// new reader. The binding holds every record below it in v2's columns.
func TestKafkaIngestAvroEvolveNoneReplay(t *testing.T) {
	const topic, parts = "nevr", 2
	k, reg, vs, cl, st := noneEvolveTopic(t, topic, parts)
	var l noneEvolveLog
	for i := 0; i < 10; i++ {
		l.add(t, cl, topic, parts, vs, 1)
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(t, reg)}
	run := startIngest(t, st, cfg)
	_, durable := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	// The switching record in partition 1, then v1 records in partition
	// 0 (a fetch hands partition 0 over first), all in the binding.
	vs[2] = reg.Serde(t, topic+"-value", noneEvolveSchemas[2])
	for _, v := range []int{2, 1, 1, 1, 1, 1, 1, 2, 1} {
		if len(l.recs)%parts == 0 && v == 2 {
			l.add(t, cl, topic, parts, vs, 1)
		}
		l.add(t, cl, topic, parts, vs, v)
	}
	ctx := context.Background()
	source := KafkaSourceID("", topic)
	sh := shardOf(t, st, topic)
	_, remapUpper, err := st.Bindings(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	if remapUpper != sh.Upper() {
		t.Fatalf("remap upper %d, data upper %d: the store is not as a clean stop leaves it", remapUpper, sh.Upper())
	}
	end := frontier.KafkaOffsets(map[int32]int64{0: int64(durable.Get("0")) + 4, 1: int64(durable.Get("1")) + 4})
	if _, err := st.AppendBindings(ctx, source, remapUpper, remapUpper+1, []frontier.Binding{{Time: remapUpper, Frontier: end}}); err != nil {
		t.Fatal(err)
	}
	run = startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	checkNoneEvolved(t, st, topic, &l, 2)
}

// TestKafkaIngestAvroEvolveNoneIncompatible: a later version that cannot
// read the reader's records (a field added without a default) stays a
// definite error of an append-only topic at its first record, naming
// --value-schema-version; the collection keeps one generation.
func TestKafkaIngestAvroEvolveNoneIncompatible(t *testing.T) {
	const topic = "nevi"
	k, reg, vs, cl, st := noneEvolveTopic(t, topic, 1)
	var l noneEvolveLog
	for i := 0; i < 5; i++ {
		l.add(t, cl, topic, 1, vs, 1)
	}
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(t, reg)})
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	src, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	src.SetCompatibility(t.Context(), sr.SetCompatibility{Level: sr.CompatNone}, topic+"-value")
	v2 := reg.Serde(t, topic+"-value", strings.Replace(noneEvolveSchemas[1], `]}`, `,{"name":"x","type":"int"}]}`, 1))
	produce(t, cl, &kgo.Record{Topic: topic, Value: v2.Encode(t, map[string]any{"n": int32(5), "label": "l", "drop": int64(0), "x": int32(1)})})
	waitDefinite(t, st, topic, "partition 0 offset 5: value (format avro): written with schema id 2 (subject nevi-value version 2), a later version that cannot be the reader")
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if gs := shardOf(t, st, topic).Generations(); len(gs) != 1 {
		t.Fatalf("%d generations, want one", len(gs))
	}
}

// TestKafkaIngestAvroEvolveNoneGenerationAtUpper: an append-only switch
// killed after its generation was committed and before its contents were
// (made by hand: a binding beyond the first v2 record and the generation
// at its time, the data upper there): the restart finishes the switch
// from the store before it reads anything, every record before it
// re-expressed, exact against the model.
func TestKafkaIngestAvroEvolveNoneGenerationAtUpper(t *testing.T) {
	const topic = "nevg"
	k, reg, vs, cl, st := noneEvolveTopic(t, topic, 1)
	var l noneEvolveLog
	for i := 0; i < 12; i++ {
		l.add(t, cl, topic, 1, vs, 1)
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(t, reg)}
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	vs[2] = reg.Serde(t, topic+"-value", noneEvolveSchemas[2])
	for _, v := range []int{2, 1, 2, 1, 2} {
		l.add(t, cl, topic, 1, vs, v)
	}
	killedSwitch(t, st, reg, topic, vs[2].ID, frontier.KafkaOffsets(map[int32]int64{0: 14}))
	restartFinishing(t, st, k, cfg)
	checkNoneEvolved(t, st, topic, &l, 2)
}

// BenchmarkKafkaAvroNoneSwitch: the cost of an append-only topic's switch
// of the value reader over 100k rows: from producing the first v2 record
// to the store holding the new generation (every row streamed from the
// store, re-expressed, staged and committed), against the same for one
// more v1 record (no switch).
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaAvroNoneSwitch -benchtime 3x
func BenchmarkKafkaAvroNoneSwitch(b *testing.B) {
	const rows = 100_000
	k := testenv.StartKafka(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	var vs map[int]*testenv.AvroSerde
	var cl *kgo.Client
	switchBench(b, k, "nsw", func(b *testing.B, topic string) KafkaConfig {
		vs = map[int]*testenv.AvroSerde{1: reg.Serde(b, topic+"-value", noneEvolveSchemas[1])}
		cl = producer(b, k.Brokers, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(50_000))
		ctx := context.Background()
		for n := 0; n < rows; n++ {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint("k", n)), Value: vs[1].Encode(b, noneEvolveValue(n, 1))}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(b, reg)}
	}, func(b *testing.B, topic string, switched bool) {
		v := 1
		if switched {
			vs[2], v = reg.Serde(b, topic+"-value", noneEvolveSchemas[2]), 2
		}
		produce(b, cl, &kgo.Record{Topic: topic, Value: vs[v].Encode(b, noneEvolveValue(rows, v))})
	})
}

// TestKafkaIngestAvroEvolveNoneInline: --on-decode-error inline on an
// append-only topic that switches to v2: the value column is {decoded,
// decode_error, raw} with decoded in each version's type; in the new
// generation the rows before have decoded re-expressed in v2's type, and
// a record that did not decode keeps its error and bytes.
func TestKafkaIngestAvroEvolveNoneInline(t *testing.T) {
	const topic = "nevin"
	k, reg, vs, cl, st := noneEvolveTopic(t, topic, 1)
	var l noneEvolveLog
	for i := 0; i < 4; i++ {
		l.add(t, cl, topic, 1, vs, 1)
	}
	produce(t, cl, &kgo.Record{Topic: topic, Value: []byte(`{"not":"avro"}`)}) // offset 4
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "none", ValueFormat: "avro", Registry: avroRegistry(t, reg),
		OnDecodeError: kafkafmt.PolicyInline}
	run := startIngest(t, st, cfg)
	before, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	vs[2] = reg.Serde(t, topic+"-value", noneEvolveSchemas[2])
	l.recs = append(l.recs, nil) // offset 4
	for _, v := range []int{2, 1} {
		l.add(t, cl, topic, 1, vs, v)
	}
	after, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if gs := shardOf(t, st, topic).Generations(); len(gs) != 2 {
		t.Fatalf("%d generations, want 2", len(gs))
	}
	bad := base64.StdEncoding.EncodeToString([]byte(`{"not":"avro"}`))
	for _, c := range []struct {
		at     uint64
		reader int
		rows   int
	}{{before, 1, 5}, {after, 2, 7}} {
		var want []string
		for off, r := range l.recs[:c.rows] {
			value := fmt.Sprintf(`{"decode_error":"bad magic byte 0x7b (want 0: the bytes are not Confluent-framed Avro; the bytes format takes any bytes)","decoded":null,"raw":"%s"}`, bad)
			key := "null"
			if r != nil {
				iv := l.ver[r]
				key, value = fmt.Sprintf("%q", r.Key), fmt.Sprintf(`{"decode_error":null,"decoded":%s,"raw":null}`, noneEvolveShow(iv[0], iv[1], c.reader))
			}
			want = append(want, fmt.Sprintf("partition=0 offset=%d key=%s value=%s header_keys=[] header_values=[]", off, key, value))
		}
		sameLines(t, fmt.Sprintf("as of %d (version %d)", c.at, c.reader), readAt(t, st, topic, c.at, "timestamp"), want)
	}
}
