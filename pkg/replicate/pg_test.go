package replicate_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow/pgarrowtest"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

const abSetup = `
CREATE TABLE a (id int PRIMARY KEY, v text); ALTER TABLE a REPLICA IDENTITY FULL;
CREATE TABLE b (id int NOT NULL, w int); ALTER TABLE b REPLICA IDENTITY FULL;`

func (d *db) cfg() replicate.PGConfig {
	return replicate.PGConfig{Upstream: upstream.MustParsePostgres(d.dsn), Publication: d.pub, Slot: d.slot, NoAck: true, StatusInterval: 100 * time.Millisecond}
}

type txnCase struct {
	stmts []string
	want  []string // "coll row diff"
}

func TestReplicateChanges(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, abSetup)
	confirmed0 := d.confirmed(t)
	sink := newRecSink()
	r := start(t, d.cfg(), sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
	if got := sink.progress[0]; got != confirmed0 {
		t.Errorf("first progress %s, want the slot's confirmed_flush_lsn %s", got, confirmed0)
	}

	cases := []txnCase{
		{[]string{"INSERT INTO a VALUES (1, 'one'), (2, 'two')"}, []string{"public.a 1,one +1", "public.a 2,two +1"}},
		{[]string{"UPDATE a SET v = 'uno' WHERE id = 1"}, []string{"public.a 1,one -1", "public.a 1,uno +1"}},
		{[]string{"DELETE FROM a WHERE id = 2"}, []string{"public.a 2,two -1"}},
		{[]string{"INSERT INTO b VALUES (10, 100)", "UPDATE a SET v = NULL WHERE id = 1", "UPDATE b SET w = w + 1"},
			[]string{"public.a 1,<nil> +1", "public.a 1,uno -1", "public.b 10,100 -1", "public.b 10,101 +1", "public.b 10,100 +1"}},
		{[]string{"INSERT INTO a VALUES (3, 'x')", "DELETE FROM a WHERE id = 3"}, []string{"public.a 3,x +1", "public.a 3,x -1"}},
	}
	var befores, afters []frontier.LSN
	for _, c := range cases {
		b, a := d.txn(t, c.stmts...)
		befores, afters = append(befores, b), append(afters, a)
	}
	last := afters[len(afters)-1]
	waitFor(t, "progress past the last commit", func() bool { return sink.upper() >= last })
	r.failIfDone(t)

	byTime := map[frontier.LSN][]string{}
	var times []frontier.LSN
	for _, u := range sink.snapshot() {
		if _, ok := byTime[u.time]; !ok {
			times = append(times, u.time)
		}
		byTime[u.time] = append(byTime[u.time], fmt.Sprintf("%s %s %+d", u.coll, u.row, u.diff))
	}
	if len(times) != len(cases) {
		t.Fatalf("updates at %d distinct times, want %d: %v", len(times), len(cases), sink.snapshot())
	}
	sink.mu.Lock()
	progress := append([]frontier.LSN(nil), sink.progress...)
	sink.mu.Unlock()
	for i, c := range cases {
		tm := times[i]
		if tm < befores[i] || tm >= afters[i] {
			t.Errorf("txn %d: time %s not within [%s, %s): not its commit LSN", i, tm, befores[i], afters[i])
		}
		got := byTime[tm]
		sort.Strings(got)
		want := slices.Clone(c.want)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("txn %d at %s: got %q, want %q", i, tm, got, want)
		}
		// Some progress lands after the commit and no later than the insert
		// position after it: the commit's end LSN.
		ok := false
		for _, p := range progress {
			if p > tm && p <= afters[i] {
				ok = true
			}
		}
		if !ok {
			t.Errorf("txn %d at %s: no progress in (%s, %s]: %v", i, tm, tm, afters[i], progress)
		}
	}
	// Progress never claims a time before an update still to come.
	if len(sink.late) > 0 {
		t.Errorf("updates below reported progress: %q", sink.late)
	}
	if err := r.stop(t); err != context.Canceled {
		t.Errorf("StreamPG after cancel = %v, want context.Canceled", err)
	}
	if c := d.confirmed(t); c != confirmed0 {
		t.Errorf("NoAck: confirmed_flush_lsn moved from %s to %s", confirmed0, c)
	}
	// Relations: one per table, with their types and NOT NULL from the catalog.
	var rels []string
	for _, tb := range sink.relations {
		var fs []string
		for _, f := range tb.Fields() {
			fs = append(fs, fmt.Sprintf("%s:%s:%v", f.Name, f.Type, f.Nullable))
		}
		rels = append(rels, tb.QualifiedName()+"("+strings.Join(fs, " ")+")")
	}
	sort.Strings(rels)
	if want := []string{"public.a(id:int32:false v:utf8:true)", "public.b(id:int32:false w:int32:true)"}; !slices.Equal(rels, want) {
		t.Errorf("relations %q, want %q", rels, want)
	}
}

func TestReplicateAck(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, abSetup)
	confirmed0 := d.confirmed(t)

	t.Run("no Ack never confirms", func(t *testing.T) {
		cfg := d.cfg()
		cfg.NoAck = false
		sink := newRecSink()
		r := start(t, cfg, sink)
		_, after := d.txn(t, "INSERT INTO a VALUES (1, 'x')")
		waitFor(t, "progress", func() bool { return sink.upper() >= after })
		time.Sleep(5 * cfg.StatusInterval) // several status updates
		r.stop(t)
		if c := d.confirmed(t); c != confirmed0 {
			t.Errorf("confirmed_flush_lsn moved from %s to %s without Ack", confirmed0, c)
		}
	})

	t.Run("Ack confirms min(durable, progress)", func(t *testing.T) {
		var durable atomic.Uint64
		cfg := d.cfg()
		cfg.NoAck = false
		cfg.StartLSN = 0
		cfg.Ack = func(context.Context) (frontier.LSN, error) { return frontier.LSN(durable.Load()), nil }
		sink := newRecSink()
		r := start(t, cfg, sink)
		// It starts from the slot again: the first run confirmed nothing.
		waitFor(t, "the earlier insert again", func() bool { return len(sink.snapshot()) == 1 })
		b1, a1 := d.txn(t, "INSERT INTO a VALUES (2, 'y')")
		waitFor(t, "progress", func() bool { return sink.upper() >= a1 })
		// Durable below the progress: the slot goes exactly there.
		mid := b1
		durable.Store(uint64(mid))
		waitFor(t, "confirm at durable", func() bool { return d.confirmed(t) == mid })
		// Durable beyond anything streamed: the slot stops at the progress.
		durable.Store(uint64(frontier.LSN(1) << 62))
		waitFor(t, "confirm at progress", func() bool { c := d.confirmed(t); return c >= a1 && c <= sink.upper() })
		r.stop(t)
		if c := d.confirmed(t); c > sink.upper() {
			t.Errorf("confirmed %s beyond the last progress %s", c, sink.upper())
		}
	})
}

func TestReplicateStartStop(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, abSetup)
	for i := 1; i <= 3; i++ {
		d.txn(t, fmt.Sprintf("INSERT INTO a VALUES (%d, 'v%d')", i, i))
	}
	end := d.insertLSN(t)
	// A first pass learns the commit LSNs and the progress after each.
	all := newRecSink()
	cfg := d.cfg()
	cfg.StopAt = end - 1 // every commit below the insert position
	if err := replicate.StreamPG(t.Context(), cfg, all); err != nil {
		t.Fatal(err)
	}
	us := all.snapshot()
	if len(us) != 3 {
		t.Fatalf("got %v", us)
	}
	if all.upper() < end {
		t.Errorf("stopped with progress %s, not beyond StopAt %s", all.upper(), end-1)
	}
	// StopAt = the second commit: exactly two transactions.
	two := newRecSink()
	cfg.StopAt = us[1].time
	if err := replicate.StreamPG(t.Context(), cfg, two); err != nil {
		t.Fatal(err)
	}
	if got := two.snapshot(); len(got) != 2 || got[1].time != us[1].time {
		t.Errorf("StopAt %s: got %v", cfg.StopAt, got)
	}
	// StopAt one below the third commit: also two.
	cfg.StopAt = us[2].time - 1
	two = newRecSink()
	if err := replicate.StreamPG(t.Context(), cfg, two); err != nil {
		t.Fatal(err)
	}
	if got := two.snapshot(); len(got) != 2 {
		t.Errorf("StopAt %s: got %v", cfg.StopAt, got)
	}
	if u := two.upper(); u <= cfg.StopAt || u > us[2].time {
		t.Errorf("StopAt %s: final progress %s, want in (StopAt, third commit]", cfg.StopAt, u)
	}
	// StartLSN between the first and second commit: from the second on.
	cfg.StartLSN, cfg.StopAt = us[0].time+1, end-1
	rest := newRecSink()
	if err := replicate.StreamPG(t.Context(), cfg, rest); err != nil {
		t.Fatal(err)
	}
	if got := rest.snapshot(); len(got) != 2 || got[0].time != us[1].time {
		t.Errorf("StartLSN %s: got %v", cfg.StartLSN, got)
	}
}

func TestReplicateTypes(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, pgarrowtest.Setup+`ALTER TABLE every REPLICA IDENTITY FULL;
		CREATE TABLE toast (id int PRIMARY KEY, big text, doc jsonb, n int); ALTER TABLE toast REPLICA IDENTITY FULL;`)
	sink := newRecSink()
	start(t, d.cfg(), sink)
	for _, q := range pgarrowtest.Inserts {
		d.exec(t, q)
	}
	// A large incompressible value (an md5 chain, ~45 kB) is stored out of
	// line; an update of another column sends it as "unchanged TOAST".
	d.exec(t, `INSERT INTO toast SELECT 1, string_agg(md5(i::text), '' ORDER BY i), jsonb_build_object('k', string_agg(md5((-i)::text), '')), 0 FROM generate_series(1, 1400) i`)
	d.exec(t, `UPDATE toast SET n = n + 1`)
	d.exec(t, `UPDATE every SET i2 = 7 WHERE id = 1`)
	d.exec(t, `DELETE FROM every WHERE id = 3`)
	after := d.insertLSN(t)
	waitFor(t, "progress", func() bool { return sink.upper() >= after })

	var big, doc string
	if err := d.conn.QueryRow(t.Context(), "SELECT big, doc::text FROM toast").Scan(&big, &doc); err != nil {
		t.Fatal(err)
	}
	var ext int
	if err := d.conn.QueryRow(t.Context(), "SELECT pg_column_size(big) FROM toast").Scan(&ext); err != nil || ext < 8192 {
		t.Fatalf("big value is %d bytes stored (%v); want > 8 kB so it is TOASTed out of line", ext, err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	rows := sink.values["public.every"]
	// 3 inserts, update -1/+1 of row 1, delete of row 3.
	if len(rows) != 6 {
		t.Fatalf("every: %d updates, want 6", len(rows))
	}
	check := func(i int, want []any, diff int64) {
		t.Helper()
		got := rows[i]
		for c := range want {
			if fmt.Sprintf("%T %#v", got[c], got[c]) != fmt.Sprintf("%T %#v", want[c], want[c]) {
				t.Errorf("update %d column %s = %#v, want %#v", i, pgarrowtest.Columns[c], got[c], want[c])
			}
		}
		if got[len(got)-1] != diff {
			t.Errorf("update %d diff %v, want %d", i, got[len(got)-1], diff)
		}
	}
	for i, want := range pgarrowtest.Expected {
		check(i, want, +1)
	}
	updated := slices.Clone(pgarrowtest.Expected[0])
	updated[1] = int16(7)
	check(3, pgarrowtest.Expected[0], -1)
	check(4, updated, +1)
	check(5, pgarrowtest.Expected[2], -1)

	trows := sink.values["public.toast"]
	if len(trows) != 3 {
		t.Fatalf("toast: %d updates, want 3", len(trows))
	}
	for i, want := range []struct {
		n    int32
		diff int64
	}{{0, 1}, {0, -1}, {1, 1}} {
		r := trows[i]
		if r[1] != big || r[2] != doc || r[3] != want.n || r[5] != want.diff {
			t.Errorf("toast update %d: big %d bytes (want %d), doc %d bytes (want %d), n %v, diff %v; want n %d diff %d",
				i, len(fmt.Sprint(r[1])), len(big), len(fmt.Sprint(r[2])), len(doc), r[3], r[5], want.n, want.diff)
		}
	}
}

// TestReplicateIdleProgress measures how fast progress reaches
// pg_current_wal_insert_lsn() read at time T, with no writes and with
// writes only to a table outside the publication.
func TestReplicateIdleProgress(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, abSetup+"CREATE TABLE unpublished (x int);")
	d.exec(t, "DROP PUBLICATION pub")
	d.exec(t, "CREATE PUBLICATION pub FOR TABLE a, b")
	cfg := d.cfg()
	cfg.StatusInterval = time.Second // the default
	sink := newRecSink()
	start(t, cfg, sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
	measure := func(name string, write func()) {
		var lat []time.Duration
		for i := 0; i < 5; i++ {
			write()
			target := d.insertLSN(t)
			t0 := time.Now()
			waitFor(t, fmt.Sprintf("%s: progress to reach %s", name, target), func() bool { return sink.upper() >= target })
			lat = append(lat, time.Since(t0))
			time.Sleep(150 * time.Millisecond)
		}
		slices.Sort(lat)
		t.Logf("idle progress (%s): progress reached the insert LSN in min %v, median %v, max %v", name, lat[0], lat[len(lat)/2], lat[len(lat)-1])
	}
	measure("no writes", func() {})
	measure("unpublished writes, synchronous_commit=off", func() {
		d.exec(t, "SET synchronous_commit = off")
		d.exec(t, "INSERT INTO unpublished VALUES (1)")
	})
	measure("unpublished writes, synchronous_commit=on", func() {
		d.exec(t, "SET synchronous_commit = on")
		d.exec(t, "INSERT INTO unpublished VALUES (1)")
	})
	if n := len(sink.snapshot()); n != 0 {
		t.Errorf("%d updates from unpublished writes", n)
	}
}

func TestReplicateTruncateAndSchemaChanges(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	var setup strings.Builder
	for _, n := range []string{"tr", "added", "dropped", "retyped", "ident", "ok"} {
		fmt.Fprintf(&setup, "CREATE TABLE %s (id int, v int); ALTER TABLE %s REPLICA IDENTITY FULL;", n, n)
	}
	d := newDB(t, pg, setup.String())
	sink := newRecSink()
	r := start(t, d.cfg(), sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
	all := "INSERT INTO tr VALUES (1, 1); INSERT INTO added VALUES (1, 1); INSERT INTO dropped VALUES (1, 1); INSERT INTO retyped VALUES (1, 1); INSERT INTO ident VALUES (1, 1); INSERT INTO ok VALUES (1, 1)"
	d.exec(t, all)
	d.exec(t, "TRUNCATE tr")
	trLSN := d.insertLSN(t)
	d.exec(t, "ALTER TABLE added ADD COLUMN c text; ALTER TABLE dropped DROP COLUMN v; ALTER TABLE retyped ALTER COLUMN v TYPE bigint; ALTER TABLE ident REPLICA IDENTITY DEFAULT")
	d.exec(t, "INSERT INTO tr VALUES (2, 2); INSERT INTO added VALUES (2, 2, 'c'); INSERT INTO dropped VALUES (2); INSERT INTO retyped VALUES (2, 2); INSERT INTO ident VALUES (2, 2); INSERT INTO ok VALUES (2, 2)")
	d.exec(t, "INSERT INTO ok VALUES (3, 3); INSERT INTO added VALUES (3, 3, 'c')")
	after := d.insertLSN(t)
	waitFor(t, "progress", func() bool { r.failIfDone(t); return sink.upper() >= after })

	errs := map[string]sinkError{}
	for _, e := range sink.errs() {
		if _, dup := errs[e.coll]; dup {
			t.Errorf("second error for %s: %s", e.coll, e.msg)
		}
		errs[e.coll] = e
	}
	for coll, want := range map[string]string{
		"public.added":   "column c added to public.added at ",
		"public.dropped": "column v dropped from public.dropped at ",
		"public.retyped": "column v of public.retyped changed type from integer",
		"public.ident":   "replica identity of public.ident is DEFAULT",
	} {
		e, ok := errs[coll]
		if !ok {
			t.Errorf("no error for %s", coll)
			continue
		}
		if !strings.Contains(e.msg, want) || !(strings.Contains(e.msg, "re-snapshot")) {
			t.Errorf("error of %s = %q, want it to contain %q and say to re-snapshot", coll, e.msg, want)
		}
		if !strings.Contains(e.msg, e.at.String()) {
			t.Errorf("error of %s does not name its LSN %s: %q", coll, e.at, e.msg)
		}
	}
	if e, ok := errs["public.tr"]; ok {
		t.Errorf("unexpected error for public.tr: %s", e.msg)
	}
	// The TRUNCATE is a reset at its commit LSN, and the table goes on.
	if rs := sink.resetsOf(); len(rs) != 1 || rs[0].coll != "public.tr" || rs[0].at >= trLSN || rs[0].at == 0 {
		t.Errorf("resets %+v, want one of public.tr at the TRUNCATE's commit LSN (below %s)", rs, trLSN)
	}
	if e, ok := errs["public.ok"]; ok {
		t.Errorf("unexpected error for public.ok: %s", e.msg)
	}
	if !strings.Contains(errs["public.ident"].msg, `ALTER TABLE public.ident REPLICA IDENTITY FULL`) {
		t.Errorf("ident error lacks the fix: %q", errs["public.ident"].msg)
	}
	// Changes: every table's first row; then only ok goes on (rows 2, 3).
	got := map[string][]string{}
	for _, u := range sink.snapshot() {
		got[u.coll] = append(got[u.coll], u.row)
	}
	for coll, want := range map[string][]string{
		"public.tr": {"1,1", "2,2"}, "public.added": {"1,1"}, "public.dropped": {"1,1"}, "public.retyped": {"1,1"}, "public.ident": {"1,1"},
		"public.ok": {"1,1", "2,2", "3,3"},
	} {
		if !slices.Equal(got[coll], want) {
			t.Errorf("%s: rows %q, want %q", coll, got[coll], want)
		}
	}
}

// TestReplicateReconnect kills the walsender between transactions and in
// the middle of a large one: nothing is lost and nothing repeated.
func TestReplicateReconnect(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, "CREATE TABLE r (id int PRIMARY KEY, txn int); ALTER TABLE r REPLICA IDENTITY FULL;")
	killer := connect(t, d.dsn)
	kill := func() int {
		var n int
		err := killer.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, d.slot).Scan(&n)
		if err != nil {
			t.Error(err)
		}
		return n
	}
	cfg := d.cfg()
	cfg.FlushRows = 1000
	cfg.MaxBackoff = 200 * time.Millisecond
	sink := newRecSink()
	const bigTxn = 1000
	var killedMid atomic.Int32
	sink.onChange = func(coll string, rec arrow.Record) {
		// Kill the connection once, after the first 1000 rows of the large
		// transaction (txn 1000) have been handed over.
		if rec.NumRows() > 0 && rec.Column(1).(interface{ Value(int) int32 }).Value(0) == bigTxn && killedMid.Load() == 0 {
			killedMid.Store(int32(kill()))
		}
	}
	r := start(t, cfg, sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
	// 20 small transactions with a kill after the 10th.
	for i := 1; i <= 20; i++ {
		d.exec(t, fmt.Sprintf("INSERT INTO r SELECT %d * 100 + g, %d FROM generate_series(1, 3) g", i, i))
		if i == 10 {
			after := d.insertLSN(t)
			waitFor(t, "progress", func() bool { return sink.upper() >= after })
			if n := kill(); n != 1 {
				t.Fatalf("terminated %d walsenders, want 1", n)
			}
		}
	}
	// One large transaction, killed in the middle.
	d.exec(t, fmt.Sprintf("INSERT INTO r SELECT 1000000 + g, %d FROM generate_series(1, 5000) g", bigTxn))
	after := d.insertLSN(t)
	waitFor(t, "progress past the large transaction", func() bool { return sink.upper() >= after })
	r.failIfDone(t)
	if len(sink.late) > 0 {
		t.Errorf("updates below reported progress: %q", sink.late)
	}
	if killedMid.Load() != 1 {
		t.Fatalf("the large transaction was not interrupted (%d)", killedMid.Load())
	}
	// Exactly the table's rows, each once, each at one time per txn.
	rows, err := d.conn.Query(t.Context(), "SELECT id, txn FROM r")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id, txn int
		rows.Scan(&id, &txn)
		want = append(want, fmt.Sprintf("public.r %d,%d x1", id, txn))
	}
	sort.Strings(want)
	us := sink.snapshot()
	if got := consolidate(us); !slices.Equal(got, want) {
		t.Errorf("consolidated stream has %d rows, table %d", len(got), len(want))
	}
	if len(us) != len(want) {
		t.Errorf("%d updates for %d rows: duplicates", len(us), len(want))
	}
	timeOf := map[string]frontier.LSN{}
	for _, u := range us {
		txn := strings.Split(u.row, ",")[1]
		if tm, ok := timeOf[txn]; ok && tm != u.time {
			t.Errorf("txn %s at two times %s and %s", txn, tm, u.time)
		}
		timeOf[txn] = u.time
	}
}

// TestReplicateLargeTxnMemory streams one transaction of 100,000 rows of
// ~500 bytes (50 MB of text) and checks that the live heap stays far below
// the transaction's size: it is never held whole.
func TestReplicateLargeTxnMemory(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, "CREATE TABLE big (id int, pad text); ALTER TABLE big REPLICA IDENTITY FULL;")
	sink := &countSink{gcEvery: 1}
	cfg := d.cfg()
	r := start(t, cfg, sink)
	d.exec(t, "INSERT INTO big SELECT g, repeat(md5(g::text), 15) FROM generate_series(1, 100000) g")
	after := d.insertLSN(t)
	waitFor(t, "the large transaction", func() bool { return frontier.LSN(sink.upper.Load()) >= after })
	r.failIfDone(t)
	if n := sink.rows.Load(); n != 100000 {
		t.Fatalf("got %d rows", n)
	}
	peak := sink.peakHeap.Load()
	t.Logf("large txn: 100000 rows, 48 MB of text, %d records; peak live heap %.1f MiB", sink.records.Load(), float64(peak)/(1<<20))
	if sink.records.Load() < 10 {
		t.Errorf("%d records for 100000 rows: not flushed every 8192 rows", sink.records.Load())
	}
	if peak > 32<<20 {
		t.Errorf("peak live heap %d MiB while streaming a 48 MB transaction: is it buffered?", peak>>20)
	}
}
