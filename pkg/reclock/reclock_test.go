package reclock

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// recorder is an Output that remembers everything, and checks that every
// data and error time has a durable binding in the store when it arrives.
type recorder struct {
	t      *testing.T
	st     *store.Store
	source string
	events []string
	rows   []row
}

type row struct {
	coll string
	id   int64
	t    uint64
	diff int64
}

func (r *recorder) durable(t uint64) {
	bs, _, err := r.st.Bindings(context.Background(), r.source)
	if err != nil {
		r.t.Fatalf("read bindings: %v", err)
	}
	for _, b := range bs {
		if b.Time == t {
			return
		}
	}
	r.t.Fatalf("output at system time %d before its binding was durable (bindings %v)", t, bs)
}

func (r *recorder) Binding(b frontier.Binding) error {
	r.durable(b.Time)
	r.events = append(r.events, fmt.Sprintf("binding %d %s", b.Time, b.Frontier))
	return nil
}

func (r *recorder) Data(coll string, schema *arrow.Schema, rec arrow.Record) error {
	ids := rec.Column(0).(*array.Int64)
	times := rec.Column(1).(*array.Uint64)
	diffs := rec.Column(2).(*array.Int64)
	if schema.Field(1).Name != pipe.ColTime || schema.Field(2).Name != pipe.ColDiff || schema.NumFields() != 3 {
		r.t.Fatalf("output schema %v", schema)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		r.durable(times.Value(i))
		r.rows = append(r.rows, row{coll, ids.Value(i), times.Value(i), diffs.Value(i)})
	}
	r.events = append(r.events, fmt.Sprintf("data %s %d rows", coll, rec.NumRows()))
	return nil
}

func (r *recorder) Error(coll string, t uint64, msg string) error {
	r.durable(t)
	r.events = append(r.events, fmt.Sprintf("error %s %d %s", coll, t, msg))
	return nil
}

func (r *recorder) Reset(coll string, t uint64, schema *arrow.Schema) error {
	r.durable(t)
	r.events = append(r.events, fmt.Sprintf("reset %s %d %v", coll, t, schema != nil))
	return nil
}

func (r *recorder) Progress(upper uint64) error {
	r.events = append(r.events, fmt.Sprintf("progress %d", upper))
	return nil
}

// clock is a settable wall clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func srcRecord(t *testing.T, d frontier.Domain, ups ...[3]int64) arrow.Record {
	t.Helper()
	h := pipe.Header{Kind: pipe.KindData, Collection: "public.t", Source: "pg", Domain: d}
	schema := pipe.DataSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, d, h.Metadata())
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, u := range ups { // id, source time, diff; partition "p<id%2>"
		b.Field(0).(*array.Int64Builder).Append(u[0])
		b.Field(1).(*array.Uint64Builder).Append(uint64(u[1]))
		b.Field(2).(*array.Int64Builder).Append(u[2])
		if d.Partitioned() {
			b.Field(3).(*array.StringBuilder).Append(partName(d, u[0]%2))
		}
	}
	return b.NewRecord()
}

// partName is srcRecord's partition k: p<k>, or for MySQL a server UUID.
func partName(d frontier.Domain, k int64) string {
	if d == frontier.DomainMySQL {
		return fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", k)
	}
	return fmt.Sprintf("p%d", k)
}

func openStore(t *testing.T, dir string) *store.Store {
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// feedLSN hands rc one record of updates (id, LSN, diff) of public.t.
func feedLSN(t *testing.T, rc *Reclocker, ups ...[3]int64) {
	t.Helper()
	rec := srcRecord(t, frontier.DomainLSN, ups...)
	defer rec.Release()
	if err := rc.Data(context.Background(), "public.t", rec); err != nil {
		t.Fatal(err)
	}
}

func lsn(n uint64) frontier.Frontier { return frontier.Single(frontier.DomainLSN, n) }

func TestAssignmentRule(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.UnixMilli(1_000_000)}
	out := &recorder{t: t, st: st, source: "pg"}
	rc, err := New(ctx, st, "pg", frontier.DomainLSN, out, Options{Now: clk.Now, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Snapshot rows at source time 0, then changes at 10 and 20.
	feed := func(rec arrow.Record) {
		if err := rc.Data(ctx, "public.t", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	feed(srcRecord(t, frontier.DomainLSN, [3]int64{1, 0, 1}, [3]int64{2, 0, 1}))
	if len(out.rows) != 0 {
		t.Fatal("data released before any binding")
	}
	if err := rc.SourceProgress(ctx, lsn(1)); err != nil { // time 0 complete
		t.Fatal(err)
	}
	feed(srcRecord(t, frontier.DomainLSN, [3]int64{3, 10, 1}, [3]int64{1, 20, -1}))
	clk.now = clk.now.Add(50 * time.Millisecond)
	if err := rc.SourceProgress(ctx, lsn(15)); err != nil {
		t.Fatal(err)
	}
	if len(rc.Bindings()) != 1 {
		t.Fatalf("a second binding was minted within the interval: %v", rc.Bindings())
	}
	clk.now = clk.now.Add(60 * time.Millisecond)
	if err := rc.Tick(ctx, false); err != nil {
		t.Fatal(err)
	}
	clk.now = clk.now.Add(200 * time.Millisecond)
	if err := rc.SourceProgress(ctx, lsn(21)); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"public.t", 1, 1_000_000, 1}, {"public.t", 2, 1_000_000, 1}, // F=1 is beyond 0
		{"public.t", 3, 1_000_110, 1},  // F=15 is beyond 10, not 20
		{"public.t", 1, 1_000_310, -1}, // F=21 is beyond 20
	}
	if !reflect.DeepEqual(out.rows, want) {
		t.Fatalf("rows %v\nwant %v\nevents %v", out.rows, want, out.events)
	}
	wantEvents := []string{
		"binding 1000000 0/1", "data public.t 2 rows", "progress 1000001",
		"binding 1000110 0/F", "data public.t 1 rows", "progress 1000111",
		"binding 1000310 0/15", "data public.t 1 rows", "progress 1000311",
	}
	if !reflect.DeepEqual(out.events, wantEvents) {
		t.Fatalf("events %v\nwant %v", out.events, wantEvents)
	}
}

func TestReplayIsDefinite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	input := func(rc *Reclocker, clk *clock) {
		steps := []struct {
			rec  [][3]int64
			prog uint64
		}{
			{[][3]int64{{1, 0, 1}, {2, 0, 1}}, 1},
			{[][3]int64{{3, 5, 1}}, 6},
			{[][3]int64{{1, 7, -1}, {4, 7, 1}}, 9},
			{[][3]int64{{5, 12, 1}}, 13},
		}
		for _, s := range steps {
			rec := srcRecord(t, frontier.DomainLSN, s.rec...)
			if err := rc.Data(ctx, "public.t", rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			clk.now = clk.now.Add(time.Second)
			if err := rc.SourceProgress(ctx, lsn(s.prog)); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := openStore(t, dir)
	clk := &clock{now: time.UnixMilli(5_000_000)}
	first := &recorder{t: t, st: st, source: "pg"}
	rc, err := New(ctx, st, "pg", frontier.DomainLSN, first, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	input(rc, clk)

	// Restart: a new process, a wall clock that went backwards, the same
	// input replayed from the start.
	st2 := openStore(t, dir)
	clk2 := &clock{now: time.UnixMilli(1_000)}
	second := &recorder{t: t, st: st2, source: "pg"}
	rc2, err := New(ctx, st2, "pg", frontier.DomainLSN, second, Options{Now: clk2.Now})
	if err != nil {
		t.Fatal(err)
	}
	input(rc2, clk2)
	if !reflect.DeepEqual(first.rows, second.rows) {
		t.Fatalf("replay assigned other times:\nfirst  %v\nsecond %v", first.rows, second.rows)
	}
	if len(rc2.Bindings()) != len(rc.Bindings()) {
		t.Fatalf("replay minted new bindings: %v", rc2.Bindings())
	}
	// The replay reports each binding's data complete, as the first run did.
	progress := func(evs []string) (out []string) {
		for _, e := range evs {
			if len(e) > 8 && e[:8] == "progress" {
				out = append(out, e)
			}
		}
		return out
	}
	if p1, p2 := progress(first.events), progress(second.events); !reflect.DeepEqual(p1, p2) {
		t.Fatalf("progress of the replay %v, of the first run %v", p2, p1)
	}

	// New progress after the replay: time keeps going forward although the
	// wall clock is far behind.
	rec := srcRecord(t, frontier.DomainLSN, [3]int64{6, 20, 1})
	if err := rc2.Data(ctx, "public.t", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := rc2.SourceProgress(ctx, lsn(21)); err != nil {
		t.Fatal(err)
	}
	last := second.rows[len(second.rows)-1]
	prev := first.rows[len(first.rows)-1]
	if last.id != 6 || last.t <= prev.t {
		t.Fatalf("new update at %d, not after %d", last.t, prev.t)
	}
}

func TestPartitionedDomain(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	clk := &clock{now: time.UnixMilli(7_000)}
	out := &recorder{t: t, st: st, source: "k"}
	rc, err := New(ctx, st, "k", frontier.DomainKafka, out, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// ids 1,3 are on partition p1, ids 2,4 on p0.
	rec := srcRecord(t, frontier.DomainKafka, [3]int64{1, 0, 1}, [3]int64{2, 0, 1}, [3]int64{3, 1, 1}, [3]int64{4, 1, 1})
	if err := rc.Data(ctx, "public.t", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	f, _ := frontier.New(frontier.DomainKafka, map[string]uint64{"p1": 2, "p0": 1})
	if err := rc.SourceProgress(ctx, f); err != nil {
		t.Fatal(err)
	}
	// p1 is complete through offset 1; p0 only through 0: id 4 waits.
	got := map[int64]bool{}
	for _, r := range out.rows {
		got[r.id] = true
	}
	if !got[1] || !got[2] || !got[3] || got[4] {
		t.Fatalf("released %v, want ids 1,2,3 only", out.rows)
	}
	clk.now = clk.now.Add(time.Second)
	f2, _ := frontier.New(frontier.DomainKafka, map[string]uint64{"p1": 2, "p0": 2})
	if err := rc.SourceProgress(ctx, f2); err != nil {
		t.Fatal(err)
	}
	if n := len(out.rows); n != 4 || out.rows[3].id != 4 || out.rows[3].t != 8_000 {
		t.Fatalf("rows %v", out.rows)
	}
}

func TestDomainMismatchAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	out := &recorder{t: t, st: st, source: "pg"}
	rc, err := New(ctx, st, "pg", frontier.DomainLSN, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.SourceProgress(ctx, lsn(5)); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, openStore(t, dir), "pg", frontier.DomainKafka, out, Options{})
	if err == nil {
		t.Fatal("a kafka reclocker on a source bound in lsn time was accepted")
	}
}

// TestResetKeepsItsPlace: a reset is released at its binding in the order
// it came among the data of its source time (the rows before it are the
// ones it supersedes), and one already bound (a replay) goes out at once.
func TestResetKeepsItsPlace(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	clk := &clock{now: time.UnixMilli(2_000_000)}
	out := &recorder{t: t, st: st, source: "pg"}
	rc, err := New(ctx, st, "pg", frontier.DomainLSN, out, Options{Now: clk.Now, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	feed := func(ups ...[3]int64) { feedLSN(t, rc, ups...) }
	feed([3]int64{1, 5, 1})
	feed([3]int64{2, 10, 1})
	if err := rc.Reset(ctx, "public.t", frontier.Time{Pos: 10}, nil); err != nil {
		t.Fatal(err)
	}
	feed([3]int64{3, 10, 1})
	if len(out.events) != 0 {
		t.Fatalf("released before a binding: %v", out.events)
	}
	clk.now = clk.now.Add(time.Second)
	if err := rc.SourceProgress(ctx, lsn(6)); err != nil { // binds 5, not 10
		t.Fatal(err)
	}
	clk.now = clk.now.Add(time.Second)
	if err := rc.SourceProgress(ctx, lsn(11)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"binding 2001000 0/6", "data public.t 1 rows", "progress 2001001",
		"binding 2002000 0/B", "data public.t 1 rows", "reset public.t 2002000 false", "data public.t 1 rows", "progress 2002001",
	}
	if !reflect.DeepEqual(out.events, want) {
		t.Fatalf("events %v\nwant %v", out.events, want)
	}
	// A replayed reset is bound already: out at once, at its time.
	out.events = nil
	if err := rc.Reset(ctx, "public.t", frontier.Time{Pos: 10}, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"reset public.t 2002000 false"}; !reflect.DeepEqual(out.events, want) {
		t.Fatalf("replayed reset: %v, want %v", out.events, want)
	}
}

// TestStagedUpdatesMatchHeld feeds the same updates, resets and progress
// to a reclocker that holds everything in memory and to one that stages
// every pending record (a budget of one byte): the consolidated output
// and the place of the reset are the same, the staged files are gone once
// everything is bound, and a new reclocker sweeps stray ones.
func TestStagedUpdatesMatchHeld(t *testing.T) {
	ctx := context.Background()
	run := func(budget int64) (map[row]int64, []string, *store.Store) {
		st := openStore(t, t.TempDir())
		clk := &clock{now: time.UnixMilli(3_000_000)}
		out := &recorder{t: t, st: st, source: "pg"}
		rc, err := New(ctx, st, "pg", frontier.DomainLSN, out, Options{Now: clk.Now, Interval: time.Millisecond, MemoryBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		feed := func(ups ...[3]int64) { feedLSN(t, rc, ups...) }
		// One transaction at 5 in three records (row 1 twice, canceling
		// once), one at 8, a reset at 8, more at 8 and 12; the first
		// binding (F=9) splits the stage, the second binds the rest.
		feed([3]int64{3, 5, 1}, [3]int64{1, 5, 1})
		feed([3]int64{1, 5, 1}, [3]int64{2, 5, 1})
		feed([3]int64{2, 5, -1}, [3]int64{4, 8, 1})
		if err := rc.Reset(ctx, "public.t", frontier.Time{Pos: 8}, nil); err != nil {
			t.Fatal(err)
		}
		feed([3]int64{5, 8, 1}, [3]int64{6, 12, 1})
		feed([3]int64{7, 12, 1})
		for _, p := range []uint64{9, 13} {
			clk.now = clk.now.Add(time.Second)
			if err := rc.SourceProgress(ctx, lsn(p)); err != nil {
				t.Fatal(err)
			}
		}
		sum := map[row]int64{}
		for _, r := range out.rows {
			k := r
			k.diff = 0
			if sum[k] += r.diff; sum[k] == 0 {
				delete(sum, k)
			}
		}
		var resets []string
		for _, e := range out.events {
			if len(e) > 5 && e[:5] == "reset" {
				resets = append(resets, e)
			}
		}
		rc.Close()
		return sum, resets, st
	}
	held, heldResets, _ := run(-1)
	staged, stagedResets, st := run(1)
	if !reflect.DeepEqual(held, staged) {
		t.Fatalf("staged output %v\nheld output %v", staged, held)
	}
	if len(held) != 6 || !reflect.DeepEqual(heldResets, stagedResets) || len(heldResets) != 1 {
		t.Fatalf("resets staged %v, held %v; rows %v", stagedResets, heldResets, held)
	}
	dir := filepath.Join(st.Dir(), "staged", "pg")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("nothing was staged: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("staged files left after everything was bound: %v", left)
	}
	// A crash leaves staged files: the next reclocker sweeps them.
	if err := os.WriteFile(filepath.Join(dir, "stray.arrow"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, st, "pg", frontier.DomainLSN, &recorder{t: t, st: st, source: "pg"}, Options{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("stray staged files not swept: %v", left)
	}
}

// TestStagedPartitioned: in a partitioned domain (MySQL GTIDs) staged
// updates are staged per partition, and a binding releases those of the
// partitions it is beyond, as held ones would be.
func TestStagedPartitioned(t *testing.T) {
	ctx := context.Background()
	run := func(budget int64) []row {
		st := openStore(t, t.TempDir())
		clk := &clock{now: time.UnixMilli(4_000_000)}
		out := &recorder{t: t, st: st, source: "my"}
		rc, err := New(ctx, st, "my", frontier.DomainMySQL, out, Options{Now: clk.Now, Interval: time.Millisecond, MemoryBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		// id%2 picks the partition: p0 at 3 and 9, p1 at 4.
		rec := srcRecord(t, frontier.DomainMySQL, [3]int64{2, 3, 1}, [3]int64{1, 4, 1}, [3]int64{4, 9, 1})
		if err := rc.Data(ctx, "public.t", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		p0, p1 := partName(frontier.DomainMySQL, 0), partName(frontier.DomainMySQL, 1)
		for _, f := range []map[string]uint64{{p0: 4, p1: 5}, {p0: 10, p1: 5}} {
			clk.now = clk.now.Add(time.Second)
			fr, err := frontier.New(frontier.DomainMySQL, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.SourceProgress(ctx, fr); err != nil {
				t.Fatal(err)
			}
		}
		if budget > 0 {
			if _, err := os.Stat(filepath.Join(st.Dir(), "staged", "my")); err != nil {
				t.Fatalf("nothing was staged: %v", err)
			}
			if left, _ := os.ReadDir(filepath.Join(st.Dir(), "staged", "my")); len(left) != 0 {
				t.Fatalf("staged files left after everything was bound: %v", left)
			}
		}
		slices.SortFunc(out.rows, func(a, b row) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.id, b.id)) })
		return out.rows
	}
	held, staged := run(-1), run(1)
	if !reflect.DeepEqual(held, staged) || len(held) != 3 || held[1].t != held[0].t || held[2].t == held[0].t {
		t.Fatalf("staged %v, held %v", staged, held)
	}
}

// TestPartitionedReplayBindsNoLess: after a restart, a partitioned
// source's replay can be ahead of the last durable binding in one
// partition and behind it in another; no binding is minted until progress
// covers that binding (a binding less than the last is refused by the
// store, and would end the ingest).
func TestPartitionedReplayBindsNoLess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	clk := &clock{now: time.UnixMilli(7_000)}
	out := &recorder{t: t, st: st, source: "k"}
	rc, err := New(ctx, st, "k", frontier.DomainKafka, out, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	at := func(p0, p1 uint64) frontier.Frontier {
		f, _ := frontier.New(frontier.DomainKafka, map[string]uint64{"p0": p0, "p1": p1})
		return f
	}
	if err := rc.SourceProgress(ctx, at(49, 33)); err != nil {
		t.Fatal(err)
	}
	// Restart: the replay is behind in p0 and ahead in p1.
	st2 := openStore(t, dir)
	out2 := &recorder{t: t, st: st2, source: "k"}
	rc2, err := New(ctx, st2, "k", frontier.DomainKafka, out2, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.now = clk.now.Add(time.Second)
	if err := rc2.SourceProgress(ctx, at(39, 70)); err != nil {
		t.Fatalf("progress behind the last binding in one partition: %v", err)
	}
	if err := rc2.Tick(ctx, true); err != nil {
		t.Fatalf("tick: %v", err)
	}
	clk.now = clk.now.Add(time.Second)
	if err := rc2.SourceProgress(ctx, at(50, 70)); err != nil {
		t.Fatal(err)
	}
	bs, _, err := st2.Bindings(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if last := bs[len(bs)-1].Frontier; len(bs) != 2 || !last.Equal(at(50, 70)) {
		t.Fatalf("bindings %v, want the first and then one at p0:50,p1:70", bs)
	}
}
