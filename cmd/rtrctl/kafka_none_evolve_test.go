package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// noneEvolveSchema is version v of an append-only topic's value: v2
// promotes n (int to long) and adds a2 with a default; v3 promotes n
// (to double) and v (string to bytes) and adds a3; v4 drops a2 and adds
// a4.
func noneEvolveSchema(v int) string {
	fs := map[int][]string{
		1: {`{"name":"v","type":"string"}`, `{"name":"n","type":"int"}`},
		2: {`{"name":"v","type":"string"}`, `{"name":"n","type":"long"}`, `{"name":"a2","type":"string","default":"x2"}`},
		3: {`{"name":"v","type":"bytes"}`, `{"name":"n","type":"double"}`, `{"name":"a2","type":"string","default":"x2"}`,
			`{"name":"a3","type":["null","long"],"default":null}`},
		4: {`{"name":"v","type":"bytes"}`, `{"name":"n","type":"double"}`, `{"name":"a3","type":["null","long"],"default":null}`,
			`{"name":"a4","type":"int","default":4}`},
	}[v]
	return `{"type":"record","name":"Val","fields":[` + strings.Join(fs, ",") + `]}`
}

// noneEvolveRecord is the value of the record at seq s written with
// version w, and how it reads with version rv >= w (as Arrow prints a
// struct: JSON, keys sorted, bytes in base64): Avro's resolution gives
// added fields their defaults, promotes numbers and strings, drops what
// rv lacks.
func noneEvolveRecord(s, w, rv int) (map[string]any, string) {
	rec := map[string]any{"v": fmt.Sprint("v", s)}
	var n any = int32(s)
	switch {
	case w >= 3:
		rec["v"], n = []byte(fmt.Sprint("v", s)), float64(s)+0.5
	case w == 2:
		n = int64(s)
	}
	rec["n"] = n
	if w == 2 || w == 3 {
		rec["a2"] = fmt.Sprint("y", s)
	}
	if w >= 3 {
		rec["a3"] = map[string]any{"long": int64(s)}
	}
	if w >= 4 {
		rec["a4"] = int32(s % 3)
	}
	row := map[string]any{"v": fmt.Sprint("v", s), "n": n}
	if rv >= 3 {
		row["v"] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint("v", s)))
	}
	if rv == 2 || rv == 3 {
		row["a2"] = "x2"
		if a, ok := rec["a2"]; ok {
			row["a2"] = a
		}
	}
	if rv >= 3 {
		row["a3"] = nil
		if w >= 3 {
			row["a3"] = s
		}
	}
	if rv >= 4 {
		row["a4"] = 4
		if a, ok := rec["a4"]; ok {
			row["a4"] = a
		}
	}
	b, _ := json.Marshal(row)
	return rec, string(b)
}

// TestKafkaAvroNoneEvolveSIGKILL: an append-only Avro topic (envelope
// none) whose value subject gets versions 2, 3 and 4 (promotions, added
// fields with defaults, a dropped field) while the ingest runs, killed
// with SIGKILL right after the switches (within 30ms of the switch's log
// line: while it waits for the rows before it to be durable, streams them
// from the store or re-expresses them, or after its generation is
// committed without its contents) and at random moments, and restarted:
// the collection has a generation per version, each from the first
// binding beyond a record of it, and every readable binding holds every
// record below it, exact against the offset-order model in the columns of
// the version read then.
func TestKafkaAvroNoneEvolveSIGKILL(t *testing.T) {
	const topic, versions, parts = "nevo", 4, 3
	k := testenv.StartKafka(t)
	cl := kafkaTestTopic(t, k.Brokers, topic, parts)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	serdes := []*testenv.AvroSerde{nil, reg.Serde(t, topic+"-value", noneEvolveSchema(1))}
	rnd := rand.New(rand.NewSource(17))
	var log []*kgo.Record
	version := map[*kgo.Record]int{}
	seq := map[*kgo.Record]int{}
	at := recordAt
	reader := func(f frontier.Frontier) int { return readerAt(f, log, version) }
	switched, finished := 0, 0
	dir := kafkaSIGKILL(t, rnd, kafkaKill{
		brokers: strings.Join(k.Brokers, ","), topic: topic,
		args: []string{"--envelope", "none", "--value-format", "avro", "--schema-registry", reg.URL},
		produce: func(n int) {
			if len(serdes) <= versions && len(log) >= 150*len(serdes) {
				serdes = append(serdes, reg.Serde(t, topic+"-value", noneEvolveSchema(len(serdes))))
			}
			for i := 0; i < n; i++ {
				// The latest version or the one before: producers upgrade
				// one by one.
				w := max(1, len(serdes)-1-rnd.Intn(2))
				rec, _ := noneEvolveRecord(len(log), w, w)
				r := &kgo.Record{Topic: topic, Partition: int32(rnd.Intn(parts)), Key: []byte(fmt.Sprint("k", len(log))), Value: serdes[w].Encode(t, rec)}
				if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
					t.Fatal(err)
				}
				seq[r], version[r] = len(log), w
				log = append(log, r)
			}
		},
		model: func(f frontier.Frontier) map[string]string {
			model := map[string]string{}
			rv := reader(f)
			for _, r := range log {
				if f.Beyond(at(r)) {
					_, show := noneEvolveRecord(seq[r], version[r], rv)
					model[fmt.Sprintf("%d,%d %s", r.Partition, r.Offset, r.Key)] = show
				}
			}
			return model
		},
		read: readNoneRows,
		killed: func(stderr string) {
			switched += strings.Count(stderr, "the collection's columns change")
			finished += strings.Count(stderr, "finished a switch of columns")
		},
		last:     func(string) {},
		rounds:   8,
		killWhen: func(stderr string) bool { return switchKill(stderr, log, version, len(serdes)) },
	})
	t.Logf("%d records; killed runs switched %d times, finished %d switches committed without their contents", len(log), switched, finished)
	checkVersionGenerations(t, dir, topic, reader, len(serdes)-1, versions)
}

// readNoneRows renders the rows of an append-only collection's read by
// "partition,offset key" (kafkaKill.read).
func readNoneRows(rec arrow.Record) (map[string]string, []string) {
	col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
	parts, offs, keys, vals := col("partition").(*array.Int32), col("offset").(*array.Int64), col("key").(*array.Binary), col("value")
	diffs := col("_diff").(*array.Int64)
	got := map[string]string{}
	var multi []string
	for i := 0; i < int(rec.NumRows()); i++ {
		id := fmt.Sprintf("%d,%d %s", parts.Value(i), offs.Value(i), keys.Value(i))
		if diffs.Value(i) != 1 {
			multi = append(multi, fmt.Sprintf("record %s has multiplicity %d", id, diffs.Value(i)))
		}
		got[id] = vals.ValueStr(i)
	}
	return got, multi
}

// BenchmarkKafkaAvroNoneSwitchRSS: the peak RSS (/usr/bin/time -f %M) of
// an rtrctl ingest whose one job is an append-only topic's switch of
// columns over 1M and 3M rows already in the store (a first run ingests
// them with v1, the store is compacted, as a long-running ingest keeps
// it; v2 is registered, one v2 record produced, and a second run
// switches): the contents are streamed from the store (a row group of
// each sorted run in memory) and staged, so the peak does not grow with
// the rows.
//
//	go test ./cmd/rtrctl -run '^$' -bench BenchmarkKafkaAvroNoneSwitchRSS -benchtime 1x
func BenchmarkKafkaAvroNoneSwitchRSS(b *testing.B) {
	for _, rows := range []int{1_000_000, 3_000_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				k := testenv.StartKafka(b)
				reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
				const topic = "nrss"
				cl := kafkaTestTopic(b, k.Brokers, topic, 1)
				v1 := reg.Serde(b, topic+"-value", noneEvolveSchema(1))
				ctx := context.Background()
				for n := 0; n < rows; n++ {
					rec, _ := noneEvolveRecord(n, 1, 1)
					cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(n)), Value: v1.Encode(b, rec)}, nil)
				}
				if err := cl.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				dir := b.TempDir()
				args := []string{"ingest", "--source", "kafka", "--brokers", strings.Join(k.Brokers, ","), "--topics", topic,
					"--envelope", "none", "--value-format", "avro", "--schema-registry", reg.URL, "--store", dir, "--interval", "20ms"}
				first := rssRun(b, dir, topic, int64(rows), 1, args)
				// As a long-running ingest's compactions keep it: the read
				// of the rows holds a row group of each sorted run.
				if _, errOut, code := runCLI(b, "", "store", "compact", dir, "--retain", "1000h"); code != 0 {
					b.Fatalf("store compact: %s", errOut)
				}
				v2 := reg.Serde(b, topic+"-value", noneEvolveSchema(2))
				rec, _ := noneEvolveRecord(rows, 2, 2)
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v2.Encode(b, rec)}).FirstErr(); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				second := rssRun(b, dir, topic, int64(rows)+1, 2, args)
				b.ReportMetric(time.Since(start).Seconds(), "s/switch-run")
				b.ReportMetric(float64(first)/1024, "MiB-rss-ingest")
				b.ReportMetric(float64(second)/1024, "MiB-rss-switch")
			}
		})
	}
}

// rssRun runs rtrctl with args under /usr/bin/time until the store in dir
// has topic's rows below offset end committed in gens generations, stops
// it, and returns its peak RSS in KiB.
func rssRun(b *testing.B, dir, topic string, end int64, gens int, args []string) int {
	b.Helper()
	out := filepath.Join(b.TempDir(), "rss")
	cmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", out, rtrctlBin(b)}, args...)...)
	var stderr testenv.LogBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := false
	for deadline := time.Now().Add(10 * time.Minute); !done && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := store.Open(context.Background(), dir, store.Options{MustExist: true})
		if err != nil {
			continue
		}
		bs, _, err := st.Bindings(context.Background(), "kafka."+topic)
		sh, serr := st.Shard(context.Background(), topic)
		done = err == nil && serr == nil && len(bs) > 0 && int64(bs[len(bs)-1].Frontier.Get("0")) >= end &&
			sh.Upper() > bs[len(bs)-1].Time && len(sh.Generations()) == gens
	}
	// Stop rtrctl (time's child) cleanly; time then writes its peak.
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	for _, f := range strings.Fields(string(kids)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	if err := cmd.Wait(); err != nil || !done {
		b.Fatalf("ingest (done %v): %v\n%s", done, err, stderr.Bytes())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	kb, err := strconv.Atoi(strings.TrimSpace(string(got)))
	if err != nil {
		b.Fatalf("rss %q: %v", got, err)
	}
	return kb
}
