package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// --- helpers ---------------------------------------------------------------

func createTopic(t testing.TB, brokers []string, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func producer(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// ingestRun is a RunKafka in the background.
type ingestRun struct {
	cancel context.CancelFunc
	done   chan error
}

func startIngest(t testing.TB, st *store.Store, cfg KafkaConfig, opts ...Options) *ingestRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &ingestRun{cancel: cancel, done: make(chan error, 1)}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 300 * time.Millisecond
	}
	if o.CompactEvery == 0 {
		o.CompactEvery = -1
	}
	go func() { r.done <- Run(ctx, NewKafka(cfg), st, o) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *ingestRun) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("ingest did not stop within 30s")
	}
	return nil
}

func openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Retain: -1})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitCaughtUp waits until the store holds everything visible upstream in
// topic (the probe's last stable offsets) and returns the binding time
// that covers it.
func waitCaughtUp(t testing.TB, st *store.Store, brokers []string, prefix, topic string, within time.Duration) (uint64, frontier.Frontier) {
	t.Helper()
	p, err := probe.NewKafka(upstream.ParseKafka(strings.Join(brokers, ",")), []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	res, err := p.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := KafkaSourceID(prefix, topic)
	deadline := time.Now().Add(within)
	var last frontier.Frontier
	for time.Now().Before(deadline) {
		bs, _, err := st.Bindings(ctx, src)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Frontier.Covers(res.Frontier) {
				sh, err := st.Shard(ctx, topic)
				if err == nil && sh.Upper() > b.Time {
					return b.Time, b.Frontier
				}
				break
			}
		}
		if len(bs) > 0 {
			last = bs[len(bs)-1].Frontier
		}
		time.Sleep(5 * time.Millisecond) // BenchmarkKafkaIngest times to here

	}
	t.Fatalf("topic %s not ingested within %s: upstream %s, last binding %s", topic, within, res.Frontier, last)
	return 0, frontier.Frontier{}
}

// render prints the user columns of a store read, one line per row (with
// its multiplicity when not 1), sorted.
func render(rec arrow.Record, skip ...string) []string {
	var out []string
	s := rec.Schema()
	for i := 0; i < int(rec.NumRows()); i++ {
		var f []string
		var diff int64 = 1
		for c := 0; c < int(rec.NumCols()); c++ {
			name := s.Field(c).Name
			col := rec.Column(c)
			switch {
			case name == "_diff":
				diff = col.(*array.Int64).Value(i)
				continue
			case strings.HasPrefix(name, "_") || contains(skip, name):
				continue
			case col.IsNull(i):
				f = append(f, name+"=null")
			case col.DataType().ID() == arrow.BINARY:
				f = append(f, fmt.Sprintf("%s=%q", name, col.(*array.Binary).Value(i)))
			case col.DataType().ID() == arrow.LIST:
				l := col.(*array.List)
				lo, hi := l.ValueOffsets(i)
				var vs []string
				for j := lo; j < hi; j++ {
					switch v := l.ListValues().(type) {
					case *array.String:
						vs = append(vs, v.Value(int(j)))
					case *array.Binary:
						if v.IsNull(int(j)) {
							vs = append(vs, "null")
						} else {
							vs = append(vs, string(v.Value(int(j))))
						}
					}
				}
				f = append(f, name+"=["+strings.Join(vs, ",")+"]")
			default:
				f = append(f, name+"="+col.ValueStr(i))
			}
		}
		line := strings.Join(f, " ")
		if diff != 1 {
			line += fmt.Sprintf(" x%d", diff)
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func readAt(t testing.TB, st *store.Store, coll string, at uint64, skip ...string) []string {
	t.Helper()
	sh, err := st.Shard(context.Background(), coll)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := sh.ReadAsOf(context.Background(), at)
	if err != nil {
		t.Fatalf("read %s as of %d: %v", coll, at, err)
	}
	defer rec.Release()
	return render(rec, skip...)
}

func sameLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got:\n  %s\n want:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// --- tests -----------------------------------------------------------------

// TestKafkaIngestKcat ingests records that kcat, an independent client
// (librdkafka), produced with keys and headers.
func TestKafkaIngestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is needed (apt-get install kcat): %v", err)
	}
	k := testenv.StartKafka(t)
	b := strings.Join(k.Brokers, ",")
	createTopic(t, k.Brokers, "kc", 2)
	for _, c := range []struct {
		part, input string
		headers     []string
	}{
		{"0", "k1:v1\nk2:value two\n", []string{"h1=v1", "h2=x=y"}},
		{"1", "k3:héllo\n", []string{"only=1"}},
	} {
		args := []string{"-P", "-b", b, "-t", "kc", "-K:", "-p", c.part}
		for _, h := range c.headers {
			args = append(args, "-H", h)
		}
		cmd := exec.Command(kcat, args...)
		cmd.Stdin = strings.NewReader(c.input)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat %v: %v\n%s", args, err, out)
		}
	}
	st := openStore(t)
	startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"kc"}, KeyFormat: "text", ValueFormat: "text"})
	at, f := waitCaughtUp(t, st, k.Brokers, "", "kc", 20*time.Second)
	if f.String() != "0:2,1:1" {
		t.Errorf("binding frontier %s, want 0:2,1:1", f)
	}
	got := readAt(t, st, "kc", at, "timestamp")
	sameLines(t, "kcat records", got, []string{
		"partition=0 offset=0 key=k1 value=v1 header_keys=[h1,h2] header_values=[v1,x=y]",
		"partition=0 offset=1 key=k2 value=value two header_keys=[h1,h2] header_values=[v1,x=y]",
		"partition=1 offset=0 key=k3 value=héllo header_keys=[only] header_values=[1]",
	})
	// Timestamps are kcat's produce times.
	sh, _ := st.Shard(context.Background(), "kc")
	rec, err := sh.ReadAsOf(context.Background(), at)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	ts := rec.Column(4).(*array.Timestamp)
	for i := 0; i < ts.Len(); i++ {
		if d := time.Since(time.UnixMilli(int64(ts.Value(i)))); d < 0 || d > time.Hour {
			t.Errorf("row %d: timestamp %v is not a recent produce time", i, time.UnixMilli(int64(ts.Value(i))))
		}
	}
	info, err := st.ReadSourceInfo("kafka.kc")
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != "kafka" || info.Upstream["brokers"] != b || info.Upstream["topic"] != "kc" {
		t.Errorf("source info %+v", info)
	}
}

// TestKafkaIngestTransactions: committed transactions arrive, aborted ones
// never do, and progress reaches the end offsets although every partition
// ends in a transaction marker.
func TestKafkaIngestTransactions(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "tx", 3)
	cl := producer(t, k.Brokers, kgo.TransactionalID("rtr-tx-test"), kgo.DefaultProduceTopic("tx"))
	ctx := context.Background()
	var want []string
	st := openStore(t)
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"tx"}, ValueFormat: "text"})
	for i := 0; i < 9; i++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		commit := i%3 != 1 && i != 8 // the last transaction aborts
		for p := int32(0); p < 3; p++ {
			for j := 0; j < 2; j++ {
				v := fmt.Sprintf("txn%d-p%d-%d", i, p, j)
				produce(t, cl, &kgo.Record{Partition: p, Value: []byte(v)})
				if commit {
					want = append(want, "value="+v)
				}
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "tx")
	if err != nil {
		t.Fatal(err)
	}
	at, f := waitCaughtUp(t, st, k.Brokers, "", "tx", 20*time.Second)
	// 9 transactions of 2 records and a marker each, per partition.
	for p := int32(0); p < 3; p++ {
		end, _ := ends.Lookup("tx", p)
		if end.Offset != 27 || f.Get(fmt.Sprint(p)) != 27 {
			t.Errorf("partition %d: end offset %d, ingested to %d; want both 27", p, end.Offset, f.Get(fmt.Sprint(p)))
		}
	}
	sameLines(t, "committed records", readAt(t, st, "tx", at, "key", "partition", "offset", "timestamp", "header_keys", "header_values"), want)
	if err := run.stop(t); err != nil {
		t.Fatalf("ingest: %v", err)
	}
}

// TestKafkaIngestFormats: envelope none with json, text and bytes values;
// a malformed JSON value is a definite error of its collection while the
// other topic of the same ingest goes on.
func TestKafkaIngestFormats(t *testing.T) {
	k := testenv.StartKafka(t)
	for _, tp := range []string{"fj", "fj2", "ft", "fb"} {
		createTopic(t, k.Brokers, tp, 1)
	}
	cl := producer(t, k.Brokers)
	r := func(topic, key string, value []byte) *kgo.Record {
		var kb []byte
		if key != "" {
			kb = []byte(key)
		}
		return &kgo.Record{Topic: topic, Key: kb, Value: value}
	}
	produce(t, cl, r("fj", `"k"`, []byte(`{"a":1}`)))
	produce(t, cl, r("fj2", `7`, []byte(`[1,2]`)), r("fj2", "", nil))
	produce(t, cl, r("ft", "", []byte("plain text")))
	produce(t, cl, r("fb", "\x00\xff", []byte{0xff, 0x00, 'x'}))

	st := openStore(t)
	startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"fj", "fj2"}, KeyFormat: "json", ValueFormat: "json"})
	// The bad record comes after the first one is bound: an error holds
	// from the time that binds it, with every record bound with it.
	waitCaughtUp(t, st, k.Brokers, "", "fj", 20*time.Second)
	produce(t, cl, r("fj", `"k"`, []byte(`{"a":`)), r("fj", `"k"`, []byte(`{"b":2}`)))
	at2, _ := waitCaughtUp(t, st, k.Brokers, "", "fj2", 20*time.Second)
	sameLines(t, "fj2", readAt(t, st, "fj2", at2, "partition", "timestamp", "header_keys", "header_values"),
		[]string{"offset=0 key=7 value=[1,2]", "offset=1 key=null value=null"})
	// fj: the first record is readable before the error's time; from the
	// error on, reads fail with it.
	waitCaughtUp(t, st, k.Brokers, "", "fj", 20*time.Second)
	sh, err := st.Shard(context.Background(), "fj")
	if err != nil {
		t.Fatal(err)
	}
	info, err := sh.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Errors) != 1 || !strings.Contains(info.Errors[0].Message, "offset 1") || !strings.Contains(info.Errors[0].Message, "malformed JSON") {
		t.Fatalf("fj errors: %+v", info.Errors)
	}
	_, err = sh.ReadAsOf(context.Background(), sh.Upper()-1)
	var de *store.DefiniteError
	if !errors.As(err, &de) || !strings.Contains(de.Message, "malformed JSON") {
		t.Fatalf("read fj after the error: %v, want a definite error", err)
	}
	sameLines(t, "fj before its error", readAt(t, st, "fj", info.Errors[0].Time-1, "partition", "timestamp", "header_keys", "header_values"),
		[]string{`offset=0 key="k" value={"a":1}`})
	// The other topic goes on after the error.
	produce(t, cl, r("fj2", `8`, []byte(`{"later":true}`)))
	at2, _ = waitCaughtUp(t, st, k.Brokers, "", "fj2", 20*time.Second)
	sameLines(t, "fj2 after fj's error", readAt(t, st, "fj2", at2, "partition", "timestamp", "header_keys", "header_values"),
		[]string{"offset=0 key=7 value=[1,2]", "offset=1 key=null value=null", `offset=2 key=8 value={"later":true}`})

	st2 := openStore(t)
	startIngest(t, st2, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"ft"}, KeyFormat: "text", ValueFormat: "text"})
	at, _ := waitCaughtUp(t, st2, k.Brokers, "", "ft", 20*time.Second)
	sameLines(t, "ft", readAt(t, st2, "ft", at, "partition", "offset", "timestamp", "header_keys", "header_values"), []string{"key=null value=plain text"})

	st3 := openStore(t)
	startIngest(t, st3, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"fb"}})
	at, _ = waitCaughtUp(t, st3, k.Brokers, "", "fb", 20*time.Second)
	sameLines(t, "fb", readAt(t, st3, "fb", at, "partition", "offset", "timestamp", "header_keys", "header_values"), []string{`key="\x00\xff" value="\xff\x00x"`})
}

// TestKafkaIngestErrors: a missing topic and a restart with another
// envelope fail with clear errors; a second ingest of a topic is refused.
func TestKafkaIngestErrors(t *testing.T) {
	k := testenv.SharedKafka(t)
	st := openStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := Run(ctx, NewKafka(KafkaConfig{Upstream: k.Upstream(), Topics: []string{"no-such-topic-xyz"}}), st, Options{CompactEvery: -1})
	if err == nil || !strings.Contains(err.Error(), `topic "no-such-topic-xyz" does not exist`) {
		t.Fatalf("missing topic: %v", err)
	}

	topic := fmt.Sprintf("env-switch-%d", time.Now().UnixNano()) // the shared broker outlives a test
	createTopic(t, k.Brokers, topic, 1)
	produce(t, producer(t, k.Brokers), &kgo.Record{Topic: topic, Key: []byte("a"), Value: []byte("1")})
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}})
	waitCaughtUp(t, st, k.Brokers, "", topic, 20*time.Second)
	err = Run(ctx, NewKafka(KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}}), st, Options{CompactEvery: -1})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second ingest: %v, want ErrLocked", err)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	err = Run(ctx, NewKafka(KafkaConfig{Upstream: k.Upstream(), Topics: []string{topic}, Envelope: "upsert"}), st, Options{CompactEvery: -1})
	if err == nil || !strings.Contains(err.Error(), "different schema") && !strings.Contains(err.Error(), "--envelope none") {
		t.Fatalf("restart with another envelope: %v", err)
	}
}

// TestKafkaIngestUpsertRestart: random puts and deletes over a small key
// space, ingest cancelled and restarted several times. At every binding
// the store equals the model (records applied in offset order up to the
// binding's frontier), and a restart resumes where the store ends instead
// of reading the topic from its beginning.
func TestKafkaIngestUpsertRestart(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "up", 2)
	cl := producer(t, k.Brokers)
	st := openStore(t)
	var log []*kgo.Record // everything produced, with offsets
	rnd := uint64(42)
	next := func(n uint64) uint64 { rnd = rnd*6364136223846793005 + 1442695040888963407; return (rnd >> 33) % n }
	var starts []map[int32]int64
	var mu sync.Mutex
	var logs []*stateLog
	for round := 0; round < 4; round++ {
		start := map[int32]int64{}
		starts = append(starts, start)
		// No room for a cache (StateCache 1): lookups go to the state on
		// disk, which restarts reuse.
		logs = append(logs, &stateLog{})
		run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"up"}, Envelope: "upsert", KeyFormat: "text", ValueFormat: "text",
			StateCache: 1, Logger: slog.New(logs[round]),
			OnStart: func(topic string, p int32, off int64) { mu.Lock(); start[p] = off; mu.Unlock() }})
		for i := 0; i < 60; i++ {
			key := fmt.Sprintf("k%d", next(8))
			var val []byte
			if next(4) != 0 {
				val = []byte(fmt.Sprintf("v%d-%d", round, i))
			}
			// A key always goes to the same partition, as the default
			// partitioner does.
			r := &kgo.Record{Topic: "up", Partition: int32(key[1]-'0') % 2, Key: []byte(key), Value: val}
			produce(t, cl, r)
			log = append(log, r)
			if i == 30 && round%2 == 1 {
				time.Sleep(50 * time.Millisecond) // let some bindings happen mid-round
			}
		}
		if round < 3 {
			// Stop at a random moment after it started reading (a loaded
			// machine may take longer than the produce to get there):
			// sometimes before it caught up.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := len(start)
				mu.Unlock()
				if n == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: the ingest did not start reading within 20s", round)
				}
			}
			time.Sleep(time.Duration(next(150)) * time.Millisecond)
			if err := run.stop(t); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			continue
		}
		waitCaughtUp(t, st, k.Brokers, "", "up", 20*time.Second)
		if err := run.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	// Restarts resumed from the store, not from offset 0.
	resumed := 0
	for i, s := range starts[1:] {
		for _, off := range s {
			if off > 0 {
				resumed++
			}
		}
		if len(s) != 2 {
			t.Errorf("round %d: start offsets %v", i+1, s)
		}
	}
	if resumed == 0 {
		t.Errorf("no restart resumed past offset 0: %v", starts)
	}
	var outcomes []string
	for _, l := range logs {
		outcomes = append(outcomes, l.outcome())
	}
	// The first run creates the state; restarts reuse it or catch it up
	// (the stream folds commits while it runs; what it had not folded when
	// stopped is caught up), never rebuild it.
	if outcomes[0] != "created" {
		t.Errorf("first run: upsert state %s, want created", outcomes[0])
	}
	for i, o := range outcomes[1:] {
		if o != "reused" && o != "caught up" {
			t.Errorf("restart %d: upsert state %q, want reused or caught up (all: %v)", i+1, o, outcomes)
		}
	}
	checkUpsertModel(t, st, "kafka.up", "up", log)
}

// stateLog is a slog.Handler that keeps the upsert state's outcome at
// the start (the message "upsert state <how>").
type stateLog struct {
	mu  sync.Mutex
	how string
}

func (l *stateLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *stateLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *stateLog) WithGroup(string) slog.Handler            { return l }
func (l *stateLog) Handle(_ context.Context, r slog.Record) error {
	if how, ok := strings.CutPrefix(r.Message, "upsert state "); ok && !strings.Contains(how, ":") {
		l.mu.Lock()
		l.how = how
		l.mu.Unlock()
	}
	return nil
}

// outcome is the outcome logged.
func (l *stateLog) outcome() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.how
}

// checkUpsertModel compares the collection at every binding time with the
// model: the records below the binding's frontier applied in offset order.
func checkUpsertModel(t *testing.T, st *store.Store, source, coll string, log []*kgo.Record) {
	t.Helper()
	checkUpsertModelAs(t, st, source, coll, log, func(r *kgo.Record) (string, string) { return string(r.Key), string(r.Value) })
}

// checkUpsertModelAs is checkUpsertModel with show rendering a record's
// key and value as the collection's rows print them.
func checkUpsertModelAs(t *testing.T, st *store.Store, source, coll string, log []*kgo.Record, show func(*kgo.Record) (key, value string)) {
	t.Helper()
	checkUpsertModelAt(t, st, source, coll, log, func(r *kgo.Record, _ uint64) (string, string) { return show(r) })
}

// checkUpsertModelAt is checkUpsertModelAs with rows that print as of a
// binding's time (the columns of the generation in force then).
func checkUpsertModelAt(t *testing.T, st *store.Store, source, coll string, log []*kgo.Record, show func(r *kgo.Record, at uint64) (key, value string)) {
	t.Helper()
	ctx := context.Background()
	bs, _, err := st.Bindings(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(ctx, coll)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, b := range bs {
		if b.Time >= sh.Upper() {
			break
		}
		model := map[string]string{}
		for _, r := range log {
			if b.Frontier.Beyond(frontier.Time{Partition: fmt.Sprint(r.Partition), Pos: uint64(r.Offset)}) {
				k, v := show(r, b.Time)
				if r.Value == nil {
					delete(model, k)
				} else {
					model[k] = v
				}
			}
		}
		var want []string
		for k, v := range model {
			want = append(want, "key="+k+" value="+v)
		}
		sameLines(t, fmt.Sprintf("binding %d (%s)", b.Time, b.Frontier), readAt(t, st, coll, b.Time), want)
		checked++
	}
	if checked < 3 {
		t.Fatalf("only %d bindings checked", checked)
	}
	t.Logf("%d bindings match the model", checked)
}

// BenchmarkKafkaIngest compares the ingest rate of 100-byte records from
// kfake with a raw franz-go consumer reading the same topic from the same
// broker: envelope none, and upsert over 100k keys. Each iteration reads
// the whole topic into a fresh store, until the store's bindings cover
// the topic's last stable offsets and the data below them is durable.
//
// Two topic sizes: with 1M records the raw consumer is done in about 130
// ms, so an ingest's fixed costs weigh heavily: up to one binding
// interval (100 ms) between its last record and the binding that covers
// it, and that binding's commit. 4M records measure the rate an ingest
// sustains.
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngest -benchtime 4x
func BenchmarkKafkaIngest(b *testing.B) {
	const keys, partitions = 100_000, 4
	k := testenv.StartKafka(b)
	for _, size := range []struct {
		name    string
		records int
	}{{"1M", 1_000_000}, {"4M", 4_000_000}} {
		topic := "bench" + size.name
		produceBench(b, k.Brokers, topic, size.records, keys, partitions)
		b.Run(size.name, func(b *testing.B) {
			benchKafkaIngest(b, k.Brokers, topic, size.records, partitions, nil, KafkaConfig{Envelope: "none"}, KafkaConfig{Envelope: "upsert"})
		})
	}
}

// BenchmarkKafkaIngestDistinct is BenchmarkKafkaIngest's upsert over
// mostly distinct keys (2M records drawn from 2M keys: about 1.26M keys)
// with a 32 MiB state cache, so most keys live only in the state on disk:
// the cost of the cache's misses, evictions and the folds.
//
//	go test ./pkg/ingest -run '^$' -bench BenchmarkKafkaIngestDistinct -benchtime 2x
func BenchmarkKafkaIngestDistinct(b *testing.B) {
	const records, partitions = 2_000_000, 4
	k := testenv.StartKafka(b)
	produceBench(b, k.Brokers, "distinct", records, records, partitions)
	var took time.Duration
	for i := 0; i < b.N; i++ {
		st := openStore(b)
		start := time.Now()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		run := startIngest(b, st, KafkaConfig{Upstream: upstream.ParseKafka(strings.Join(k.Brokers, ",")), Topics: []string{"distinct"}, Envelope: "upsert",
			StateCache: 32 << 20, Logger: quiet}, Options{Interval: 100 * time.Millisecond, Logger: quiet})
		waitCaughtUp(b, st, k.Brokers, "", "distinct", 5*time.Minute)
		took += time.Since(start)
		if err := run.stop(b); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(st.Dir()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(records*b.N)/took.Seconds(), "records/s")
}

// produceBench writes records 100-byte records over keys keys to a new
// topic; a key always goes to one partition, as with Kafka's key hashing.
func produceBench(b *testing.B, brokers []string, topic string, records, keys, partitions int) {
	createTopic(b, brokers, topic, int32(partitions))
	cl := producer(b, brokers, kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(50_000))
	ctx := context.Background()
	rnd := uint64(1)
	value := make([]byte, 100)
	for i := 0; i < records; i++ {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		k := int((rnd >> 33) % uint64(keys))
		key := []byte(fmt.Sprintf("key-%06d", k))
		v := append([]byte(nil), value...)
		copy(v, fmt.Sprintf("value %d", i))
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(k % partitions), Key: key, Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchKafkaIngest measures a raw franz-go consumer (read_committed) that
// calls decode on each record (nil: only counts them), then an ingest of
// each of cfgs (their envelope names the sub-benchmark), against it.
func benchKafkaIngest(b *testing.B, brokers []string, topic string, records, partitions int, decode func(*kgo.Record), cfgs ...KafkaConfig) {
	ctx := context.Background()
	var rates = map[string]float64{}
	// Each rate is over all iterations of its sub-benchmark.
	b.Run("raw", func(b *testing.B) {
		var took time.Duration
		n := 0
		for i := 0; i < b.N; i++ {
			start := time.Now()
			offs := map[int32]kgo.Offset{}
			for p := int32(0); p < int32(partitions); p++ {
				offs[p] = kgo.NewOffset().AtStart()
			}
			c, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			if err != nil {
				b.Fatal(err)
			}
			bytes := 0
			got := 0
			for got < records {
				fs := c.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					got++
					bytes += len(r.Key) + len(r.Value)
					if decode != nil {
						decode(r)
					}
				})
			}
			took += time.Since(start)
			n += got
			c.Close()
		}
		rates["raw"] = float64(n) / took.Seconds()
		b.ReportMetric(rates["raw"], "records/s")
	})
	for _, cfg := range cfgs {
		env := cfg.Envelope
		b.Run(env, func(b *testing.B) {
			var took time.Duration
			for i := 0; i < b.N; i++ {
				st := openStore(b)
				start := time.Now()
				cfg.Upstream, cfg.Topics, cfg.Logger = upstream.ParseKafka(strings.Join(brokers, ",")), []string{topic}, slog.New(slog.NewTextHandler(io.Discard, nil))
				run := startIngest(b, st, cfg, Options{Interval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				waitCaughtUp(b, st, brokers, "", topic, 5*time.Minute)
				took += time.Since(start)
				if err := run.stop(b); err != nil {
					b.Fatal(err)
				}
				// The next iteration's store is as new, and the disk does
				// not fill up with the iterations of a long run.
				if err := os.RemoveAll(st.Dir()); err != nil {
					b.Fatal(err)
				}
			}
			rates[env] = float64(records*b.N) / took.Seconds()
			b.ReportMetric(rates[env], "records/s")
			if rates["raw"] > 0 {
				b.ReportMetric(rates[env]/rates["raw"], "x-raw")
			}
		})
	}
}

// TestKafkaUpsertReplayAcrossBindings: a restart finds a binding made
// before the crash whose data never became durable, and it falls between
// two updates of one key that now arrive in one fetch. The replay binds
// each record by the old binding as before: netting (one retraction and
// insertion per key per batch) must not move the first update past it.
func TestKafkaUpsertReplayAcrossBindings(t *testing.T) {
	k := testenv.StartKafka(t)
	createTopic(t, k.Brokers, "ups", 1)
	cl := producer(t, k.Brokers)
	ctx := context.Background()
	for _, v := range []string{"v1", "v2", "v3"} {
		r := &kgo.Record{Topic: "ups", Partition: 0, Key: []byte("k"), Value: []byte(v)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	st := openStore(t)
	// The crashed run bound offsets 0 and 1 at t1 and died before their
	// data was committed.
	t1 := uint64(time.Now().Add(-time.Minute).UnixMilli())
	src := KafkaSourceID("", "ups")
	if _, err := st.AppendBindings(ctx, src, 0, t1+1, []frontier.Binding{{Time: t1, Frontier: frontier.KafkaOffsets(map[int32]int64{0: 2})}}); err != nil {
		t.Fatal(err)
	}
	run := startIngest(t, st, KafkaConfig{Upstream: k.Upstream(), Topics: []string{"ups"}, Envelope: "upsert",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t2, _ := waitCaughtUp(t, st, k.Brokers, "", "ups", time.Minute)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(ctx, "ups")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   uint64
		want string
	}{{t1, `[key="k" value="v2"]`}, {t2, `[key="k" value="v3"]`}} {
		rec, err := sh.ReadAsOf(ctx, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(render(rec)); got != c.want {
			t.Errorf("as of %d: %s, want %s", c.at, got, c.want)
		}
		rec.Release()
	}
}
