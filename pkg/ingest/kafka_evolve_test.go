package ingest

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// evolveLog is what an evolution test produced: each record, with the
// version of the value schema it was written with (0 for a tombstone),
// its key's id and its n.
type evolveLog struct {
	recs []*kgo.Record
	by   map[*kgo.Record]evolved
}

type evolved struct {
	version int
	id      string
	n       int64
}

// add produces an upsert record of key kn in partition kn%parts: a
// tombstone (v 0), or n written with version v (avroValueV1 or V2).
func (l *evolveLog) add(t testing.TB, cl *kgo.Client, topic string, parts int, keys *testenv.AvroSerde, vs map[int]*testenv.AvroSerde, kn, v int, n int64) {
	t.Helper()
	id := fmt.Sprintf("k%d", kn)
	r := &kgo.Record{Topic: topic, Partition: int32(kn % parts), Key: keys.Encode(t, map[string]any{"id": id})}
	switch v {
	case 1:
		r.Value = vs[1].Encode(t, map[string]any{"n": n, "tags": []any{"a", id}})
	case 2:
		r.Value = vs[2].Encode(t, map[string]any{"n": n, "tags": []any{}, "price": map[string]any{"bytes.decimal": ratOf(n, 100)}})
	}
	produce(t, cl, r)
	if l.by == nil {
		l.by = map[*kgo.Record]evolved{}
	}
	l.recs = append(l.recs, r)
	l.by[r] = evolved{version: v, id: id, n: n}
}

// TestKafkaIngestAvroEvolve: an upsert topic read with v1 of its value
// subject; v2 (a field added with a default) is registered while the
// ingest runs and producers write both. The collection switches to v2 at
// the first binding holding a v2 record: a new generation whose rows are
// every key in v2's columns (v1 values with the default), so reads before
// it show v1's columns and after it v2's, every binding exact against the
// offset-order model; a restart reads on with v2 (the collection's
// reader, not the latest at start) and the key state follows the
// generation (kept on disk across it).
func TestKafkaIngestAvroEvolve(t *testing.T) {
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	const topic, parts = "ev", 2
	createTopic(t, k.Brokers, topic, parts)
	keys := reg.Serde(t, topic+"-key", avroKey)
	vs := map[int]*testenv.AvroSerde{1: reg.Serde(t, topic+"-value", avroValueV1)}
	cl := producer(t, k.Brokers)
	st := openStore(t)
	var l evolveLog
	rnd := uint64(3)
	next := func(n uint64) int { rnd = rnd*6364136223846793005 + 1442695040888963407; return int((rnd >> 33) % n) }
	n := int64(0)
	write := func(count int, versions []int) {
		for i := 0; i < count; i++ {
			n++
			l.add(t, cl, topic, parts, keys, vs, next(8), versions[next(uint64(len(versions)))], n)
		}
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert", KeyFormat: "avro", ValueFormat: "avro",
		Registry: avroRegistry(t, reg), StateCache: 1 << 10} // a tiny cache: the state is read from disk
	write(30, []int{0, 1, 1, 1})
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	vs[2] = reg.Serde(t, topic+"-value", avroValueV2)
	write(20, []int{1}) // v1 producers go on: no switch yet
	time.Sleep(100 * time.Millisecond)
	write(40, []int{0, 1, 2, 2})
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	write(20, []int{0, 1, 2})
	run = startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	checkEvolved(t, st, topic, &l)
}

// TestKafkaIngestAvroEvolveInline is TestKafkaIngestAvroEvolve with
// --on-decode-error inline: the value column is {decoded, decode_error,
// raw} and switches with its reader (decoded takes v2's type), and a
// value that does not decode keeps its bytes and error across the switch.
func TestKafkaIngestAvroEvolveInline(t *testing.T) {
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	const topic, parts = "evi", 2
	createTopic(t, k.Brokers, topic, parts)
	keys := reg.Serde(t, topic+"-key", avroKey)
	vs := map[int]*testenv.AvroSerde{1: reg.Serde(t, topic+"-value", avroValueV1)}
	cl := producer(t, k.Brokers)
	st := openStore(t)
	var l evolveLog
	bad := map[*kgo.Record]bool{}
	n := int64(0)
	write := func(versions ...int) {
		for i, v := range versions {
			n++
			l.add(t, cl, topic, parts, keys, vs, i%5, v, n)
			time.Sleep(30 * time.Millisecond) // bindings between them
		}
	}
	badValue := func(kn int) {
		r := &kgo.Record{Topic: topic, Partition: int32(kn % parts), Key: keys.Encode(t, map[string]any{"id": fmt.Sprintf("k%d", kn)}), Value: []byte(`{"not":"avro"}`)}
		produce(t, cl, r)
		l.recs = append(l.recs, r)
		l.by[r] = evolved{version: -1, id: fmt.Sprintf("k%d", kn)}
		bad[r] = true
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert", KeyFormat: "avro", ValueFormat: "avro",
		Registry: avroRegistry(t, reg), OnDecodeError: kafkafmt.PolicyInline}
	write(1, 1, 1, 0, 1, 1, 1)
	badValue(7)
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	vs[2] = reg.Serde(t, topic+"-value", avroValueV2)
	write(2, 1, 2, 1, 0, 2)
	badValue(8)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	msg := "bad magic byte 0x7b (want 0: the bytes are not Confluent-framed Avro; the bytes format takes any bytes)"
	raw := base64.StdEncoding.EncodeToString([]byte(`{"not":"avro"}`))
	checkEvolvedWith(t, st, topic, &l, func(r *kgo.Record, v2reader bool) (string, string) {
		wrap := func(s string) string { return fmt.Sprintf(`{"decode_error":null,"decoded":%s,"raw":null}`, s) }
		if bad[r] {
			return wrap(fmt.Sprintf(`{"id":%q}`, l.by[r].id)), fmt.Sprintf(`{"decode_error":%q,"decoded":null,"raw":%q}`, msg, raw)
		}
		key, value := l.show(r, v2reader)
		if value == "" {
			return wrap(key), ""
		}
		return wrap(key), wrap(value)
	})
}

// checkEvolved checks a collection of l's records: two generations, the
// second from the first binding beyond a v2 record, with v2 as its
// reader, and every binding exact against the model.
func checkEvolved(t *testing.T, st *store.Store, topic string, l *evolveLog) {
	t.Helper()
	checkEvolvedWith(t, st, topic, l, l.show)
}

// checkEvolvedWith is checkEvolved with show printing a record as the
// collection shows it, read with v1 or (v2reader) v2.
func checkEvolvedWith(t *testing.T, st *store.Store, topic string, l *evolveLog, show func(r *kgo.Record, v2reader bool) (string, string)) {
	t.Helper()
	ctx := context.Background()
	sh, err := st.Shard(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctx, KafkaSourceID("", topic))
	if err != nil {
		t.Fatal(err)
	}
	var switchAt uint64
	for _, b := range bs {
		if slices.ContainsFunc(l.recs, func(r *kgo.Record) bool {
			return l.by[r].version == 2 && b.Frontier.Beyond(frontier.Time{Partition: fmt.Sprint(r.Partition), Pos: uint64(r.Offset)})
		}) {
			switchAt = b.Time
			break
		}
	}
	gs := sh.Generations()
	if len(gs) != 2 || gs[1].Start != switchAt {
		var starts []uint64
		for _, g := range gs {
			starts = append(starts, g.Start)
		}
		t.Fatalf("generations start at %v, want 0 and %d (the first binding beyond a v2 record)", starts, switchAt)
	}
	if md, _ := gs[1].Schema.Metadata().GetValue(mdKafkaValueSchema); !strings.Contains(md, "version 2") {
		t.Fatalf("the new generation's reader is %q, want version 2", md)
	}
	if md, _ := gs[0].Schema.Metadata().GetValue(mdKafkaValueSchema); !strings.Contains(md, "version 1") {
		t.Fatalf("the first generation's reader is %q, want version 1", md)
	}
	checkUpsertModelAt(t, st, KafkaSourceID("", topic), topic, l.recs, func(r *kgo.Record, at uint64) (string, string) {
		return show(r, at >= switchAt)
	})
}

// show prints r as the collection shows it, read with v1 or (v2reader)
// v2: v1 values read with v2 get price's default (null).
func (l *evolveLog) show(r *kgo.Record, v2reader bool) (string, string) {
	e := l.by[r]
	key := fmt.Sprintf(`{"id":%q}`, e.id)
	switch {
	case e.version == 0:
		return key, ""
	case e.version == 1 && !v2reader:
		return key, fmt.Sprintf(`{"n":%d,"tags":["a","%s"]}`, e.n, e.id)
	case e.version == 1:
		return key, fmt.Sprintf(`{"n":%d,"price":null,"tags":["a","%s"]}`, e.n, e.id)
	}
	// As Arrow prints a decimal(9, 2).
	price := new(big.Float).SetPrec(128).Quo(new(big.Float).SetInt64(e.n), big.NewFloat(100)).Text('g', 9)
	return key, fmt.Sprintf(`{"n":%d,"price":"%s","tags":[]}`, e.n, price)
}

// evolveTopic starts a broker and a registry, creates topic (one
// partition) with v1 of its value subject and opens a store.
func evolveTopic(t *testing.T, topic string) (*testenv.Kafka, *testenv.Registry, *testenv.AvroSerde, map[int]*testenv.AvroSerde, *kgo.Client, *store.Store) {
	t.Helper()
	k := testenv.StartKafka(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	createTopic(t, k.Brokers, topic, 1)
	keys := reg.Serde(t, topic+"-key", avroKey)
	vs := map[int]*testenv.AvroSerde{1: reg.Serde(t, topic+"-value", avroValueV1)}
	return k, reg, keys, vs, producer(t, k.Brokers), openStore(t)
}

// TestKafkaIngestAvroEvolveIncompatible: a later version that cannot read
// the reader's records (a field added without a default) is a definite
// error at the first record written with it; reads before it stay exact.
func TestKafkaIngestAvroEvolveIncompatible(t *testing.T) {
	const topic = "inc"
	k, reg, keys, vs, cl, st := evolveTopic(t, topic)
	var l evolveLog
	for i := 0; i < 10; i++ {
		l.add(t, cl, topic, 1, keys, vs, i%4, 1, int64(i))
	}
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert", KeyFormat: "avro", ValueFormat: "avro",
		Registry: avroRegistry(t, reg)})
	before, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	src, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	src.SetCompatibility(t.Context(), sr.SetCompatibility{Level: sr.CompatNone}, topic+"-value")
	v3 := reg.Serde(t, topic+"-value", strings.Replace(avroValueV1, `]}`, `,{"name":"x","type":"int"}]}`, 1))
	produce(t, cl, &kgo.Record{Topic: topic, Key: keys.Encode(t, map[string]any{"id": "k9"}), Value: v3.Encode(t, map[string]any{"n": int64(10), "tags": []any{}, "x": 1})})
	l.add(t, cl, topic, 1, keys, vs, 1, 1, 11)
	waitDefinite(t, st, topic, "partition 0 offset 10: value (format avro): written with schema id 3 (subject inc-value version 2), a later version that cannot be the reader")
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	var want []string
	model := map[string]string{}
	for _, r := range l.recs[:10] {
		k, v := l.show(r, false)
		model[k] = v
	}
	for k, v := range model {
		want = append(want, "key="+k+" value="+v)
	}
	sameLines(t, "before the incompatible version", readAt(t, st, topic, before), want)
	if gs := shardOf(t, st, topic).Generations(); len(gs) > 1 {
		t.Fatalf("%d generations, want one", len(gs))
	}
}

// waitDefinite waits until the collection's latest time reads as the
// definite error msg (a prefix of it) and returns that error.
func waitDefinite(t *testing.T, st *store.Store, coll, msg string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sh, err := st.Shard(ctx, coll)
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		rec, err := sh.ReadAsOf(ctx, sh.Upper()-1)
		if err != nil {
			if !strings.Contains(err.Error(), msg) {
				t.Fatalf("read: %v, want %q", err, msg)
			}
			return
		}
		rec.Release()
		if time.Now().After(deadline) {
			t.Fatalf("no definite error %q", msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKafkaIngestDebeziumAddColumn: Debezium change events of a table
// that gains an optional column (ALTER TABLE ADD COLUMN upstream; the
// events after it carry the new column in their schema): the collection
// switches to the new columns at the first such event, a new generation
// in which the rows before have null there; reads before show the old
// columns. A restart reads the new columns from the store. A column
// dropped then is a definite error at its offset. The same through
// JsonConverter's JSON and AvroConverter's Avro (where the new column is
// a second version of the value schema).
func TestKafkaIngestDebeziumAddColumn(t *testing.T) {
	for _, format := range []string{"json", "avro"} {
		t.Run(format, func(t *testing.T) { testDebeziumAddColumn(t, format) })
	}
}

func testDebeziumAddColumn(t *testing.T, format string) {
	k := testenv.StartKafka(t)
	const topic = "customers"
	createTopic(t, k.Brokers, topic, 1)
	cl := producer(t, k.Brokers)
	tb := testenv.DebeziumCustomers("postgresql")
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "debezium", KeyFormat: format, ValueFormat: format}
	var reg *testenv.Registry
	if format == "avro" {
		reg = testenv.StartRegistry(t, testenv.RegistryOptions{})
		cfg.Registry = avroRegistry(t, reg)
		src, err := sr.NewClient(sr.URLs(reg.URL))
		if err != nil {
			t.Fatal(err)
		}
		src.SetCompatibility(t.Context(), sr.SetCompatibility{Level: sr.CompatNone}, topic+"-value") // the column dropped below
	}
	serdes := map[string][2]*testenv.AvroSerde{} // by the value schema
	pos := int64(0)
	event := func(op string, after testenv.Row) *kgo.Record {
		pos++
		if format == "json" {
			return &kgo.Record{Topic: topic, Key: tb.KeyOf(after), Value: tb.Event(op, nil, after, pos, 1559033904863+pos)}
		}
		vs := tb.AvroValueSchema()
		s, ok := serdes[vs]
		if !ok {
			s = [2]*testenv.AvroSerde{reg.Serde(t, topic+"-key", tb.AvroKeySchema()), reg.Serde(t, topic+"-value", vs)}
			serdes[vs] = s
		}
		return &kgo.Record{Topic: topic, Key: s[0].Encode(t, tb.AvroKey(after)), Value: s[1].Encode(t, tb.AvroEvent(op, nil, after, pos, 1559033904863+pos))}
	}
	person := func(id int, first string) testenv.Row {
		return testenv.Row{"id": id, "first_name": first, "last_name": "K", "email": fmt.Sprintf("%d@x.org", id)}
	}
	produce(t, cl, event("r", person(1001, "Sally")), event("r", person(1002, "George")), event("c", person(1003, "Anne")))
	st := openStore(t)
	run := startIngest(t, st, cfg)
	before, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	tb.Columns = append(tb.Columns, testenv.DebeziumColumn{Name: "phone", Schema: map[string]any{"type": "string", "optional": true}})
	withPhone := person(1002, "George")
	withPhone["phone"] = "555"
	produce(t, cl, event("u", withPhone), event("c", person(1004, "Bob")))
	after, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "before the new column", readAt(t, st, topic, before), []string{
		"id=1001 first_name=Sally last_name=K email=1001@x.org",
		"id=1002 first_name=George last_name=K email=1002@x.org",
		"id=1003 first_name=Anne last_name=K email=1003@x.org",
	})
	sameLines(t, "after the new column", readAt(t, st, topic, after), []string{
		"id=1001 first_name=Sally last_name=K email=1001@x.org phone=null",
		"id=1002 first_name=George last_name=K email=1002@x.org phone=555",
		"id=1003 first_name=Anne last_name=K email=1003@x.org phone=null",
		"id=1004 first_name=Bob last_name=K email=1004@x.org phone=null",
	})
	gs := shardOf(t, st, topic).Generations()
	if len(gs) != 2 || gs[1].Start <= before || gs[1].Start > after {
		t.Fatalf("generations %v, want a second one in (%d, %d]", gs, before, after)
	}
	// A restart: the state and columns from the store.
	sally := person(1001, "Sal")
	sally["phone"] = "777"
	produce(t, cl, event("u", sally))
	run = startIngest(t, st, cfg)
	at, _ := waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "after a restart", readAt(t, st, topic, at), []string{
		"id=1001 first_name=Sal last_name=K email=1001@x.org phone=777",
		"id=1002 first_name=George last_name=K email=1002@x.org phone=555",
		"id=1003 first_name=Anne last_name=K email=1003@x.org phone=null",
		"id=1004 first_name=Bob last_name=K email=1004@x.org phone=null",
	})
	if format == "avro" && len(serdes) != 2 {
		t.Fatalf("%d value schemas registered, want 2", len(serdes))
	}

	// A column dropped: the collection cannot follow.
	tb.Columns = slices.DeleteFunc(tb.Columns, func(c testenv.DebeziumColumn) bool { return c.Name == "email" })
	produce(t, cl, event("u", testenv.Row{"id": 1003, "first_name": "Anne", "last_name": "K", "phone": "1"}))
	run = startIngest(t, st, cfg)
	waitDefinite(t, st, topic, "partition 0 offset 6: the table's columns changed (an ALTER TABLE upstream?) in a way the collection cannot follow (column email is gone)")
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

func shardOf(t testing.TB, st *store.Store, coll string) *store.Shard {
	t.Helper()
	sh, err := st.Shard(context.Background(), coll)
	if err == nil {
		err = sh.Refresh(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// BenchmarkKafkaAvroSwitch: the cost of a switch of the value reader
// over an upsert state of 100k keys (on disk, the ingest's default
// cache): from producing the first v2 record to the store holding the new
// generation (every key re-expressed from the state, committed), against
// the same for one more v1 record (no switch).
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaAvroSwitch -benchtime 3x
func BenchmarkKafkaAvroSwitch(b *testing.B) {
	const keys = 100_000
	k := testenv.StartKafka(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	var ks *testenv.AvroSerde
	var vs map[int]*testenv.AvroSerde
	var cl *kgo.Client
	switchBench(b, k, "sw", func(b *testing.B, topic string) KafkaConfig {
		ks = reg.Serde(b, topic+"-key", avroKey)
		vs = map[int]*testenv.AvroSerde{1: reg.Serde(b, topic+"-value", avroValueV1)}
		cl = producer(b, k.Brokers, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(50_000))
		ctx := context.Background()
		for n := 0; n < keys; n++ {
			id := fmt.Sprintf("key-%06d", n)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: ks.Encode(b, map[string]any{"id": id}),
				Value: vs[1].Encode(b, map[string]any{"n": int64(n), "tags": []any{"a"}})}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert",
			KeyFormat: "avro", ValueFormat: "avro", Registry: avroRegistry(b, reg)}
	}, func(b *testing.B, topic string, switched bool) {
		v := 1
		if switched {
			vs[2], v = reg.Serde(b, topic+"-value", avroValueV2), 2
		}
		var l evolveLog
		l.add(b, cl, topic, 1, ks, vs, 7, v, keys)
	})
}

// switchBench runs the two sub-benchmarks of a switch of columns,
// v1-record and v2-switch. Each iteration creates a topic (named prefix
// and a number), fill produces its records and returns the ingest's
// config, the ingest catches up, then last produces one more record
// (switched: of a new version) and the time until the store has it (and,
// switched, a second generation) is reported as ms/switch.
func switchBench(b *testing.B, k *testenv.Kafka, prefix string, fill func(b *testing.B, topic string) KafkaConfig, last func(b *testing.B, topic string, switched bool)) {
	quiet := quietLog()
	topics := 0
	for _, switched := range []bool{false, true} {
		name := "v1-record"
		if switched {
			name = "v2-switch"
		}
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			for i := 0; i < b.N; i++ {
				topics++
				topic := fmt.Sprintf("%s%d", prefix, topics)
				createTopic(b, k.Brokers, topic, 1)
				cfg := fill(b, topic)
				cfg.Logger = quiet
				st := openStore(b)
				run := startIngest(b, st, cfg, Options{Interval: 20 * time.Millisecond, Logger: quiet})
				waitCaughtUp(b, st, k.Brokers, "", topic, 2*time.Minute)
				start := time.Now()
				last(b, topic, switched)
				waitCaughtUp(b, st, k.Brokers, "", topic, 2*time.Minute)
				took += time.Since(start)
				if err := run.stop(b); err != nil {
					b.Fatal(err)
				}
				if gs := shardOf(b, st, topic).Generations(); switched != (len(gs) == 2) {
					b.Fatalf("%d generations", len(gs))
				}
			}
			b.ReportMetric(took.Seconds()*1000/float64(b.N), "ms/switch")
		})
	}
}

// TestKafkaIngestAvroEvolveGenerationAtUpper: a switch killed after its
// generation was committed and before its contents were (the store made
// so by hand: a binding beyond the first v2 record and the generation at
// its time, the data upper there): the restart finishes the switch at
// that binding (the generation is verified, not a second one), with
// every key of the state re-expressed, exact against the model.
func TestKafkaIngestAvroEvolveGenerationAtUpper(t *testing.T) {
	const topic = "gau"
	k, reg, keys, vs, cl, st := evolveTopic(t, topic)
	var l evolveLog
	for i := 0; i < 20; i++ {
		l.add(t, cl, topic, 1, keys, vs, i%6, []int{0, 1, 1}[i%3], int64(i))
	}
	cfg := KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert", KeyFormat: "avro", ValueFormat: "avro", Registry: avroRegistry(t, reg)}
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	vs[2] = reg.Serde(t, topic+"-value", avroValueV2)
	for i := 20; i < 30; i++ {
		l.add(t, cl, topic, 1, keys, vs, i%6, []int{2, 1, 0}[i%3], int64(i))
	}

	// What a run killed inside the switch's commit leaves.
	killedSwitch(t, st, reg, topic, vs[2].ID, frontier.KafkaOffsets(map[int32]int64{0: 25}))

	restartFinishing(t, st, k, cfg)
	checkEvolved(t, st, topic, &l)
}

// killedSwitch makes st what a switch of topic's value reader to version
// 2 (schema id) killed inside its commit leaves after a clean stop: a
// binding at the data upper with frontier end, and the generation there
// whose value column is version 2's, the data upper not past it.
func killedSwitch(t *testing.T, st *store.Store, reg *testenv.Registry, topic string, id int, end frontier.Frontier) {
	t.Helper()
	ctx := context.Background()
	source := KafkaSourceID("", topic)
	sh := shardOf(t, st, topic)
	_, remapUpper, err := st.Bindings(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	at := sh.Upper()
	if remapUpper != at {
		t.Fatalf("remap upper %d, data upper %d: the store is not as a clean stop leaves it", remapUpper, at)
	}
	if _, err := st.AppendBindings(ctx, source, remapUpper, at+1, []frontier.Binding{{Time: at, Frontier: end}}); err != nil {
		t.Fatal(err)
	}
	v2, err := kafkafmt.NewAvro(ctx, kafkafmt.AvroConfig{Registry: avroRegistry(t, reg), Subject: topic + "-value", Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	md := sh.Schema().Metadata()
	mk, mv := slices.Clone(md.Keys()), slices.Clone(md.Values())
	mv[md.FindKey(mdKafkaValueSchema)] = fmt.Sprintf("subject %s-value version 2 id %d", topic, id)
	nmd := arrow.NewMetadata(mk, mv)
	fields := slices.Clone(sh.Schema().Fields())
	fields[sh.Schema().FieldIndices("value")[0]].Type = v2.Type()
	if _, err := sh.NewGeneration(ctx, at, arrow.NewSchema(fields, &nmd)); err != nil {
		t.Fatal(err)
	}
}

// restartFinishing runs the ingest of cfg's topic until it caught up and
// checks that it finished a switch committed without its contents.
func restartFinishing(t *testing.T, st *store.Store, k *testenv.Kafka, cfg KafkaConfig) {
	t.Helper()
	var out strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	run := startIngest(t, st, cfg)
	waitCaughtUp(t, st, k.Brokers, "", cfg.Topics[0], 20*time.Second)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "finished a switch of columns") {
		t.Fatalf("the restart did not finish the switch:\n%s", out.String())
	}
}
