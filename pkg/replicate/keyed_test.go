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
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/replicate"
)

// shorten cuts the long values of a rendered row: "big3-big3-..." becomes
// "big3-...(15000)".
func shorten(row string) string {
	parts := strings.Split(row, ",")
	for i, p := range parts {
		if len(p) > 40 {
			parts[i] = fmt.Sprintf("%s...(%d)", p[:5], len(p))
		}
	}
	return strings.Join(parts, ",")
}

// keyedStates is a KeyState func that starts every table that is not
// FULL with an empty state (the tests' tables are empty at the slot's
// start), keyed by key.
func keyedStates(key []string) (func(*pgarrow.Table) (*replicate.KeyState, error), map[string]*replicate.KeyState) {
	states := map[string]*replicate.KeyState{}
	return func(t *pgarrow.Table) (*replicate.KeyState, error) {
		if st := states[t.QualifiedName()]; st != nil || t.ReplicaIdentity == "full" {
			return st, nil
		}
		st, err := replicate.NewKeyState(t, key)
		if err != nil {
			return nil, err
		}
		states[t.QualifiedName()] = st
		return st, nil
	}, states
}

// TestReplicateKeyedIdentity streams a table with REPLICA IDENTITY DEFAULT
// (primary key id) and one with USING INDEX (a unique index on code)
// through a key state: updates that keep the key (no old row sent), that
// change it (the old key only), deletes, an unchanged TOASTed value (a
// large text not updated), and a row inserted, updated, re-keyed and
// deleted in one transaction. Every transaction's updates are exact, and
// the stream sums to SELECT * at the end.
func TestReplicateKeyedIdentity(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	for _, tc := range []struct {
		name, setup string
		key         []string
		ident       string
	}{
		{"default", `CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL, v text, big text);`, []string{"id"}, "DEFAULT"},
		{"using index", `CREATE TABLE t (id int NOT NULL, code text NOT NULL, v text, big text);
			CREATE UNIQUE INDEX t_code ON t (code); ALTER TABLE t REPLICA IDENTITY USING INDEX t_code;`, []string{"code"}, "USING INDEX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// big is stored out of line uncompressed, so that an update
			// not touching it sends it as unchanged ('u').
			d := newDB(t, pg, tc.setup+`ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL;`)
			ks, states := keyedStates(tc.key)
			cfg := d.cfg()
			cfg.KeyState = ks
			sink := newRecSink()
			r := start(t, cfg, sink)
			waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })

			big := func(n int) string { return fmt.Sprintf("big%d-...(%d)", n, 5*3000) }
			cases := []txnCase{
				{[]string{"INSERT INTO t VALUES (1, 'a', 'one', NULL), (2, 'b', 'two', NULL), (3, 'c', 'three', repeat('big3-', 3000))"},
					[]string{"1,a,one,<nil> +1", "2,b,two,<nil> +1", "3,c,three," + big(3) + " +1"}},
				// Neither key changes: no old row; big comes as unchanged.
				{[]string{"UPDATE t SET v = 'tres' WHERE id = 3"}, []string{"3,c,three," + big(3) + " -1", "3,c,tres," + big(3) + " +1"}},
				// The key of DEFAULT changes (id), the index's does not.
				{[]string{"UPDATE t SET id = 10 WHERE id = 1"}, []string{"1,a,one,<nil> -1", "10,a,one,<nil> +1"}},
				// The index's key changes (code), DEFAULT's does not; big
				// unchanged again.
				{[]string{"UPDATE t SET code = 'cc' WHERE id = 3"}, []string{"3,c,tres," + big(3) + " -1", "3,cc,tres," + big(3) + " +1"}},
				{[]string{"DELETE FROM t WHERE id = 2"}, []string{"2,b,two,<nil> -1"}},
				// A row's whole life in one transaction, and a delete of a
				// row with a TOASTed value.
				{[]string{"INSERT INTO t VALUES (4, 'd', 'four', repeat('big4-', 3000))", "UPDATE t SET v = 'vier' WHERE id = 4",
					"UPDATE t SET id = 40, code = 'dd' WHERE id = 4", "UPDATE t SET v = 'fier' WHERE id = 40", "DELETE FROM t WHERE id = 40",
					"DELETE FROM t WHERE id = 3", "INSERT INTO t VALUES (5, 'e', NULL, repeat('big5-', 3000))"},
					[]string{"4,d,four," + big(4) + " +1", "4,d,four," + big(4) + " -1", "4,d,vier," + big(4) + " +1",
						"4,d,vier," + big(4) + " -1", "40,dd,vier," + big(4) + " +1", "40,dd,vier," + big(4) + " -1", "40,dd,fier," + big(4) + " +1",
						"40,dd,fier," + big(4) + " -1", "3,cc,tres," + big(3) + " -1", "5,e,<nil>," + big(5) + " +1"}},
			}
			var afters []frontier.LSN
			for _, c := range cases {
				_, a := d.txn(t, c.stmts...)
				afters = append(afters, a)
			}
			waitFor(t, "progress past the last commit", func() bool { r.failIfDone(t); return sink.upper() >= afters[len(afters)-1] })
			if errs := sink.errs(); len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			byTime := map[frontier.LSN][]string{}
			var times []frontier.LSN
			var all []update
			for _, u := range sink.snapshot() {
				if _, ok := byTime[u.time]; !ok {
					times = append(times, u.time)
				}
				u.row = shorten(u.row)
				all = append(all, u)
				byTime[u.time] = append(byTime[u.time], fmt.Sprintf("%s %+d", u.row, u.diff))
			}
			if len(times) != len(cases) {
				t.Fatalf("updates at %d times, want %d: %v", len(times), len(cases), all)
			}
			for i, c := range cases {
				got, want := byTime[times[i]], slices.Clone(c.want)
				sort.Strings(got)
				sort.Strings(want)
				if !slices.Equal(got, want) {
					t.Errorf("txn %d (%s): got\n%q\nwant\n%q", i, c.stmts[0], got, want)
				}
			}
			// The stream sums to the table.
			var want []string
			rows, err := d.conn.Query(context.Background(), "SELECT id, code, v, big FROM t")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int32
				var code string
				var v, b *string
				if err := rows.Scan(&id, &code, &v, &b); err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("public.t %s x1", shorten(fmt.Sprintf("%d,%s,%s,%s", id, code, strOrNil(v), strOrNil(b)))))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			sort.Strings(want)
			if got := consolidate(all); !slices.Equal(got, want) {
				t.Errorf("the stream sums to\n%q\nSELECT says\n%q", got, want)
			}
			if st := states["public.t"]; st == nil || st.Len() != len(want) {
				t.Errorf("key state: %v, want %d keys", st, len(want))
			}
			if err := r.stop(t); err != context.Canceled {
				t.Errorf("StreamPG after cancel = %v", err)
			}
		})
	}
}

func strOrNil(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestReplicateKeyedRefusals: without a key state (rtrctl replicate) a
// table that is not FULL is refused at the start, with the fix and a
// pointer to rtrctl ingest; with one, only tables without a key are. A
// table that loses its key mid-stream stops with a definite error.
func TestReplicateKeyedRefusals(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	t.Run("standalone", func(t *testing.T) {
		d := newDB(t, pg, "CREATE TABLE pk (id int PRIMARY KEY);")
		wantErr(t, streamErr(t, d.cfg()), pg, `replica identity is not FULL for public.pk (DEFAULT) in publication pub`,
			`run: ALTER TABLE public.pk REPLICA IDENTITY FULL; (or use 'rtrctl ingest'`)
	})
	t.Run("keyless", func(t *testing.T) {
		d := newDB(t, pg, `CREATE TABLE pk (id int PRIMARY KEY); CREATE TABLE nokey (x int); CREATE TABLE nothing (id int PRIMARY KEY);
			ALTER TABLE nothing REPLICA IDENTITY NOTHING;`)
		cfg := d.cfg()
		cfg.KeyState, _ = keyedStates([]string{"id"})
		wantErr(t, streamErr(t, cfg), pg,
			`replica identity is not FULL for public.nokey (DEFAULT without a primary key), public.nothing (NOTHING) in publication pub, and they have no key`,
			`run: ALTER TABLE public.nokey REPLICA IDENTITY FULL; ALTER TABLE public.nothing REPLICA IDENTITY FULL; (or give them a primary key)`)
	})
	t.Run("key dropped", func(t *testing.T) {
		d := newDB(t, pg, "CREATE TABLE pk (id int PRIMARY KEY, v int);")
		cfg := d.cfg()
		cfg.KeyState, _ = keyedStates([]string{"id"})
		sink := newRecSink()
		r := start(t, cfg, sink)
		waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
		d.exec(t, "INSERT INTO pk VALUES (1, 1)")
		d.exec(t, "ALTER TABLE pk DROP CONSTRAINT pk_pkey")
		d.exec(t, "INSERT INTO pk VALUES (2, 2)") // PostgreSQL refuses updates now
		after := d.insertLSN(t)
		waitFor(t, "progress", func() bool { r.failIfDone(t); return sink.upper() >= after })
		errs := sink.errs()
		if len(errs) != 1 || !strings.Contains(errs[0].msg, "replica identity of public.pk is DEFAULT at ") ||
			!strings.Contains(errs[0].msg, "it has no primary key") || !strings.Contains(errs[0].msg, "run ALTER TABLE public.pk REPLICA IDENTITY FULL (or give it a primary key) and re-snapshot it") {
			t.Errorf("errors %v", errs)
		}
	})
}

// TestReplicateKeyedReconnect kills the walsender in the middle of a large
// transaction of updates to a DEFAULT table: the key state is taken back
// to what was emitted, and the stream still sums to the table.
func TestReplicateKeyedReconnect(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	d := newDB(t, pg, "CREATE TABLE r (id int PRIMARY KEY, n int);")
	ks, _ := keyedStates([]string{"id"})
	cfg := d.cfg()
	cfg.KeyState, cfg.FlushRows = ks, 500
	cfg.MaxBackoff = 200 * time.Millisecond
	sink := newRecSink()
	r := start(t, cfg, sink)
	waitFor(t, "initial progress", func() bool { return sink.upper() != 0 })
	d.exec(t, "INSERT INTO r SELECT g, 0 FROM generate_series(1, 3000) g")
	after := d.insertLSN(t)
	waitFor(t, "progress past the inserts", func() bool { return sink.upper() >= after })
	// Kill the walsender once the first part of the large transaction
	// has been handed over (FlushRows 500 of its 10,000 updates).
	killer := connect(t, d.dsn)
	var armed, killed atomic.Int32
	armed.Store(1)
	sink.mu.Lock()
	sink.onChange = func(string, arrow.Record) {
		if armed.CompareAndSwap(1, 0) {
			var n int32
			if err := killer.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, d.slot).Scan(&n); err != nil {
				t.Error(err)
			}
			killed.Store(n)
		}
	}
	sink.mu.Unlock()
	d.txn(t, "UPDATE r SET n = n + 1", "UPDATE r SET id = id + 10000 WHERE id % 2 = 0", "DELETE FROM r WHERE id % 3 = 0")
	d.exec(t, "UPDATE r SET n = n + 1 WHERE id < 100")
	after = d.insertLSN(t)
	waitFor(t, "progress past the last commit", func() bool { r.failIfDone(t); return sink.upper() >= after })
	if killed.Load() != 1 {
		t.Fatalf("the large transaction was not interrupted (%d walsenders terminated)", killed.Load())
	}
	if errs := sink.errs(); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	rows, err := d.conn.Query(context.Background(), "SELECT id, n FROM r")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id, n int32
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("public.r %d,%d x1", id, n))
	}
	sort.Strings(want)
	if got := consolidate(sink.snapshot()); !slices.Equal(got, want) {
		t.Errorf("after a reconnect the stream sums to %d rows, SELECT says %d; first differences: %s", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(got, want []string) string {
	var d []string
	g, w := map[string]bool{}, map[string]bool{}
	for _, s := range got {
		g[s] = true
	}
	for _, s := range want {
		w[s] = true
	}
	for _, s := range got {
		if !w[s] && len(d) < 5 {
			d = append(d, "extra "+s)
		}
	}
	for _, s := range want {
		if !g[s] && len(d) < 10 {
			d = append(d, "missing "+s)
		}
	}
	return strings.Join(d, "; ")
}
