package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func kafkaTestTopic(t testing.TB, brokers []string, topic string, partitions int32) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

var consumeLine = regexp.MustCompile(`kafka consume.* topic=(\S+) partition=(\d+) from=(\d+)`)
var resumeLine = regexp.MustCompile(`msg=resume .*from=(\S*) durable_upper`)

var stateLine = regexp.MustCompile(`msg="upsert state (created|reused|caught up|rebuilt)"`)

// TestKafkaUpsertSIGKILL: an upsert ingest (a separate rtrctl process) is
// SIGKILLed at random moments while a producer writes random puts and
// deletes over a small key space, and restarted (kafkaSIGKILL), with no
// room for a state cache: every restart reuses or catches up the state
// on disk.
func TestKafkaUpsertSIGKILL(t *testing.T) {
	text := func(s string) ([]byte, string) { return []byte(s), s }
	upsertSIGKILL(t, upsertCodec{args: []string{"--key-format", "text", "--value-format", "text"}, key: text, value: text})
}

// upsertCodec is how upsertSIGKILL's records are written and how the
// store shows them: key and value return a record's bytes and the
// column's ValueStr of it.
type upsertCodec struct {
	args       []string // the ingest's format flags
	key, value func(s string) ([]byte, string)
}

// upsertSIGKILL is TestKafkaUpsertSIGKILL with the formats of c; it
// returns the store's directory.
func upsertSIGKILL(t *testing.T, c upsertCodec) string {
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, "ups", 3)
	rnd := rand.New(rand.NewSource(7))
	var log []*kgo.Record
	shown := map[*kgo.Record][2]string{}
	var outcomes []string
	dir := kafkaSIGKILL(t, rnd, kafkaKill{
		brokers: strings.Join(k.Brokers, ","), topic: "ups",
		// No room for a cache: every batch drops each key whose change
		// is folded into the state on disk, and lookups go there.
		args: append([]string{"--envelope", "upsert", "--state-cache", "1"}, c.args...),
		produce: func(n int) {
			for i := 0; i < n; i++ {
				key := fmt.Sprintf("key%02d", rnd.Intn(12))
				h := fnv.New32a()
				h.Write([]byte(key))
				kb, ks := c.key(key)
				r := &kgo.Record{Topic: "ups", Partition: int32(h.Sum32() % 3), Key: kb}
				show := [2]string{ks}
				if rnd.Intn(5) != 0 {
					r.Value, show[1] = c.value(fmt.Sprintf("v%d", len(log)))
				}
				shown[r] = show
				if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
					t.Fatal(err)
				}
				log = append(log, r)
			}
		},
		model: func(f frontier.Frontier) map[string]string {
			model := map[string]string{}
			for _, r := range log {
				if f.Beyond(frontier.Time{Partition: strconv.Itoa(int(r.Partition)), Pos: uint64(r.Offset)}) {
					if r.Value == nil {
						delete(model, shown[r][0])
					} else {
						model[shown[r][0]] = shown[r][1]
					}
				}
			}
			return model
		},
		read: readUpsertRows,
		killed: func(stderr string) {
			if m := stateLine.FindStringSubmatch(stderr); m != nil {
				outcomes = append(outcomes, m[1])
			}
		},
		last: func(stderr string) {
			if m := stateLine.FindStringSubmatch(stderr); m == nil || m[1] != "reused" && m[1] != "caught up" {
				t.Errorf("the last run did not reuse its state on disk:\n%s", stderr)
			}
		},
	})
	reused := 0
	for _, o := range outcomes {
		if o == "reused" || o == "caught up" {
			reused++
		}
	}
	if reused == 0 {
		t.Errorf("the state was reused after %d of %d kills: %v", reused, len(outcomes), outcomes)
	}
	t.Logf("%d records; upsert state at the starts: %v", len(log), outcomes)
	return dir
}

// readUpsertRows renders the rows (key, value, _diff) of an upsert
// collection's read by key (kafkaKill.read).
func readUpsertRows(rec arrow.Record) (map[string]string, []string) {
	got := map[string]string{}
	var multi []string
	keys, vals, diffs := rec.Column(0), rec.Column(1), rec.Column(2).(*array.Int64)
	for i := 0; i < int(rec.NumRows()); i++ {
		if diffs.Value(i) != 1 {
			multi = append(multi, fmt.Sprintf("key %s has multiplicity %d", keys.ValueStr(i), diffs.Value(i)))
		}
		got[keys.ValueStr(i)] = vals.ValueStr(i)
	}
	return got, multi
}

// kafkaKill is a topic whose ingest kafkaSIGKILL kills.
type kafkaKill struct {
	brokers, topic string
	// args are the ingest's envelope and format flags.
	args []string
	// produce writes n more records to the topic.
	produce func(n int)
	// model is the collection as of the records below f, each row
	// rendered as a string by its key.
	model func(f frontier.Frontier) map[string]string
	// read renders a store read as model does, and says which rows do
	// not have multiplicity 1.
	read func(rec arrow.Record) (map[string]string, []string)
	// killed, when set, gets the stderr of each killed run; last gets the
	// last run's (default: it must have rebuilt its state from the store).
	killed, last func(stderr string)
	// rounds is the number of killed runs (default 5); killWhen, when
	// set, holds each kill until it is true of the run's stderr, then
	// kills it within 30ms.
	rounds   int
	killWhen func(stderr string) bool
}

// kafkaSIGKILL runs the ingest of kk.topic as a separate rtrctl process,
// SIGKILLed 5 times at random moments while kk.produce writes, and
// restarted; a last run catches up and stops. At every readable binding
// time the store equals kk.model (the records below the binding's
// frontier, applied in offset order); every restart resumes from the
// store's durable frontier, not from the topic's beginning, and the last
// run rebuilt its state from the store (or passes kk.last). It returns
// the store's directory.
func kafkaSIGKILL(t *testing.T, rnd *rand.Rand, kk kafkaKill) string {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"ingest", "--source", "kafka", "--brokers", kk.brokers, "--topics", kk.topic}, kk.args...)
	args = append(args, "--store", dir, "--interval", "20ms", "--compact-every", "0")
	resumedPast0 := 0
	rounds := kk.rounds
	if rounds == 0 {
		rounds = 5
	}
	source := "kafka." + kk.topic
	// bindings is how many bindings the store has (0 before it exists).
	bindings := func() int {
		st, err := store.Open(context.Background(), dir, store.Options{MustExist: true})
		if err != nil {
			return 0
		}
		bs, _, err := st.Bindings(context.Background(), source)
		if err != nil {
			return 0
		}
		return len(bs)
	}
	for round := 0; round < rounds; round++ {
		had := bindings()
		p := startProc(t, nil, args...)
		// Produce while it runs, then kill it at a random moment once it
		// has bound something of its own (on a loaded machine a run can
		// otherwise die before its first commit, and the last run binds
		// everything in one or two).
		deadline := time.Now().Add(time.Duration(150+rnd.Intn(300)) * time.Millisecond)
		for time.Now().Before(deadline) {
			kk.produce(5)
			time.Sleep(time.Duration(rnd.Intn(15)) * time.Millisecond)
		}
		waitFor(t, func() bool { return consumeLine.MatchString(string(p.stderr.Bytes())) }, p)
		waitFor(t, func() bool { return bindings() > had }, p)
		if kk.killWhen != nil {
			waitFor(t, func() bool { return kk.killWhen(string(p.stderr.Bytes())) }, p)
			time.Sleep(time.Duration(rnd.Intn(30)) * time.Millisecond)
		}
		p.kill(t)
		// Where did it start? The resume frontier, partition by partition.
		out := string(p.stderr.Bytes())
		if kk.killed != nil {
			kk.killed(out)
		}
		m := resumeLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("round %d: no resume line in:\n%s", round, out)
		}
		resume, err := frontier.Parse(frontier.DomainKafka, strings.Trim(m[1], `"`))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range consumeLine.FindAllStringSubmatch(out, -1) {
			off, _ := strconv.ParseUint(c[3], 10, 64)
			if off != resume.Get(c[2]) {
				t.Errorf("round %d: partition %s consumed from %d, but the store's durable frontier is %s", round, c[2], off, resume)
			}
			if off > 0 {
				resumedPast0++
			}
		}
	}
	if resumedPast0 == 0 {
		t.Fatal("no restart resumed past offset 0")
	}
	// A last run catches up and stops cleanly.
	kk.produce(20)
	p := startProc(t, nil, args...)
	st, err := store.Open(context.Background(), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "", "frontier", "--source", "kafka", "--brokers", kk.brokers, "--topic", kk.topic)
	if code != 0 {
		t.Fatalf("frontier: %d %s", code, errOut)
	}
	upstream, err := frontier.Parse(frontier.DomainKafka, strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		bs, _, err := st.Bindings(context.Background(), source)
		if err != nil || len(bs) == 0 || !bs[len(bs)-1].Frontier.Covers(upstream) {
			return false
		}
		sh, err := st.Shard(context.Background(), kk.topic)
		return err == nil && sh.Upper() > bs[len(bs)-1].Time
	}, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("ingest exited %d:\n%s", code, string(p.stderr.Bytes()))
	}
	if kk.last != nil {
		kk.last(string(p.stderr.Bytes()))
	} else if !strings.Contains(string(p.stderr.Bytes()), "upsert state rebuilt from the store") {
		t.Errorf("the last run did not rebuild its state from the store:\n%s", string(p.stderr.Bytes()))
	}

	// Every readable binding against the model.
	ctx := context.Background()
	bs, _, err := st.Bindings(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(ctx, kk.topic)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, b := range bs {
		if b.Time >= sh.Upper() {
			break
		}
		model := kk.model(b.Frontier)
		rec, err := sh.ReadAsOf(ctx, b.Time)
		if err != nil {
			t.Fatal(err)
		}
		got, multi := kk.read(rec)
		rec.Release()
		for _, m := range multi {
			t.Errorf("binding %d: %s", b.Time, m)
		}
		if fmt.Sprint(got) != fmt.Sprint(model) {
			t.Fatalf("binding %d (%s): store %v, model %v", b.Time, b.Frontier, got, model)
		}
		checked++
	}
	if last := bs[len(bs)-1].Frontier; !last.Covers(upstream) {
		t.Errorf("last binding %s does not cover the upstream %s", last, upstream)
	}
	t.Logf("%d bindings checked against the model, %d partition starts past 0", checked, resumedPast0)
	if checked < 5 {
		t.Errorf("only %d bindings checked", checked)
	}
	return dir
}

func waitFor(t *testing.T, cond func() bool, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within 20s; rtrctl stderr:\n%s", string(p.stderr.Bytes()))
		}
		if p.exited() {
			t.Fatalf("rtrctl exited (%d):\n%s", p.cmd.ProcessState.ExitCode(), string(p.stderr.Bytes()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKafkaReplicatePipe: 'rtrctl replicate --source kafka' writes the
// records as a pipe and stops once progress covers --stop-at, which
// 'rtrctl frontier' printed; a topic ending in a commit marker still gets
// there.
func TestKafkaReplicatePipe(t *testing.T) {
	k := testenv.SharedKafka(t)
	brokers := strings.Join(k.Brokers, ",")
	topic := fmt.Sprintf("rp-%d", time.Now().UnixNano()) // the shared broker outlives a test
	kafkaTestTopic(t, k.Brokers, topic, 2)
	tx, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("rtr-"+topic))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx := context.Background()
	for i, commit := range []bool{true, false, true} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprintf(`{"i":%d}`, i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	fout, ferr, code := runCLI(t, "", "frontier", "--source", "kafka", "--brokers", brokers, "--topic", topic)
	if code != 0 {
		t.Fatalf("frontier: %s", ferr)
	}
	if strings.TrimSpace(fout) != "0:4,1:2" {
		t.Errorf("upstream frontier %q, want 0:4,1:2 (a record and a marker per transaction)", fout)
	}
	out, errOut, code := runCLI(t, "", "replicate", "--source", "kafka", "--brokers", brokers, "--topic", topic,
		"--key-format", "text", "--value-format", "json", "--stop-at", strings.TrimSpace(fout))
	if code != 0 {
		t.Fatalf("replicate exited %d: %s", code, errOut)
	}
	r := pipe.NewReader(bytes.NewReader([]byte(out)), memory.DefaultAllocator)
	defer r.Close()
	var rows []string
	var last frontier.Frontier
	for {
		s, err := r.Next()
		if err != nil {
			break
		}
		switch s.Header.Kind {
		case pipe.KindData:
			if s.Header.Source != "kafka."+topic || s.Header.Collection != topic || s.Header.Domain != frontier.DomainKafka {
				t.Errorf("data header %+v", s.Header)
			}
			for {
				rec, err := s.NextRecord()
				if err != nil || rec == nil {
					break
				}
				cols, times, diffs, parts := pipe.SplitData(rec)
				for i := 0; i < int(rec.NumRows()); i++ {
					rows = append(rows, fmt.Sprintf("%s %s @%s:%d %+d", cols[2].ValueStr(i), cols[3].ValueStr(i), parts.Value(i), times.Value(i), diffs.Value(i)))
				}
			}
		case pipe.KindProgress:
			if last, err = s.ReadProgress(); err != nil {
				t.Fatal(err)
			}
		}
	}
	sort.Strings(rows)
	want := []string{`k0 {"i":0} @0:0 +1`, `k2 {"i":2} @0:2 +1`}
	if strings.Join(rows, "|") != strings.Join(want, "|") {
		t.Errorf("rows %q, want %q", rows, want)
	}
	if last.String() != "0:4,1:2" {
		t.Errorf("last progress %s, want 0:4,1:2", last)
	}
}

// TestKafkaIngestCLIError: malformed JSON is a definite error that 'rtrctl
// read' reports, while the other topic of the same ingest goes on.
func TestKafkaIngestCLIError(t *testing.T) {
	k := testenv.SharedKafka(t)
	brokers := strings.Join(k.Brokers, ",")
	bad, good := fmt.Sprintf("cli-bad-%d", time.Now().UnixNano()), fmt.Sprintf("cli-good-%d", time.Now().UnixNano())
	cl := kafkaTestTopic(t, k.Brokers, bad, 1)
	kafkaTestTopic(t, k.Brokers, good, 1)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: bad, Value: []byte(`{"ok":1}`)}, &kgo.Record{Topic: bad, Value: []byte(`not json`)},
		&kgo.Record{Topic: good, Value: []byte(`{"n":1}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startProc(t, nil, "ingest", "--source", "kafka", "--brokers", brokers, "--topics", bad+","+good, "--value-format", "json",
		"--store", dir, "--interval", "20ms", "--compact-every", "0")
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		sh, err := st.Shard(ctx, bad)
		if err != nil {
			return false
		}
		in, err := sh.Info(ctx)
		return err == nil && len(in.Errors) > 0
	}, p)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: good, Value: []byte(`{"n":2}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		out, _, code := runCLI(t, "", "read", dir, good, "--format", "csv")
		return code == 0 && strings.Contains(out, `{""n"":2}`)
	}, p)
	_, errOut, code := runCLI(t, "", "read", dir, bad)
	if code == 0 || !strings.Contains(errOut, "malformed JSON") || !strings.Contains(errOut, "offset 1") {
		t.Errorf("read cli-bad: exit %d, stderr %s", code, errOut)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("ingest exited %d:\n%s", code, string(p.stderr.Bytes()))
	}
}
