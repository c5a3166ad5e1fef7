package main

// The acceptance test of ingesting tables with REPLICA IDENTITY DEFAULT
// (the primary key): a random workload of inserts, updates with and
// without key changes, deletes, and rows whose whole life is one
// transaction, under an ingest SIGKILLed again and again. The store must
// be exact at every binding time, not only at the end.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
)

var keyedDDL = []string{
	// note is stored out of line uncompressed: a long one is left out of
	// every update that does not set it (pgoutput's unchanged TOAST).
	"CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text NOT NULL)",
	"ALTER TABLE accounts ALTER COLUMN note SET STORAGE EXTERNAL",
	"CREATE TABLE items (sku text, n int, qty int NOT NULL, PRIMARY KEY (sku, n))",
	fmt.Sprintf("INSERT INTO accounts SELECT g, %d, CASE WHEN g %% 2 = 1 THEN repeat('n' || g || '-', 800) ELSE '' END FROM generate_series(1, %d) g", keyedStart, keyedAccounts),
	"INSERT INTO items SELECT 's' || (g % 5), g, g FROM generate_series(1, 30) g",
	"CREATE PUBLICATION rtr FOR TABLE accounts, items",
}

// keyedLayout is where the tables land in the store: source "pg", items
// keyed by its first two columns.
var keyedLayout = ingesttest.Layout{Atomic: true,
	Sources: []ingesttest.SourceColls{{ID: "pg", Collections: []string{"public.accounts", "public.items"}}},
	Keys:    map[string]int{"public.items": 2}}

// keyedColumns are the tables' columns, in order.
var keyedColumns = map[string][]string{"public.accounts": {"id", "balance", "note"}, "public.items": {"sku", "n", "qty"}}

// keyedArgs are the ingest arguments for db's publication rtr.
func keyedArgs(db *ingestDB, slot, dir string, extra ...string) []string {
	return append([]string{"ingest", "--source", "pg", "--dsn", db.dsn, "--publication", "rtr", "--slot", slot, "--store", dir}, extra...)
}

// keyedCaughtUp waits until the store is durable past the upstream's
// insert position now.
func keyedCaughtUp(t *testing.T, db *ingestDB, dir string, p *proc) {
	t.Helper()
	past := map[string][]ingesttest.Pos{"pg": {{Hi: uint64(db.insertLSN(t)) - 1}}}
	ingesttest.WaitDurable(t, dir, past, binProc{p}, 60*time.Second)
}

// keyedModel is the upstream's contents as ingesttest.Rows has them.
type keyedModel map[string]map[string]int64

// The keyed workload's accounts: how many, and the balance each starts
// with.
const (
	keyedAccounts = 40
	keyedStart    = 1000
)

func (m keyedModel) apply(ds []keyedDelta, sign int64) {
	for _, d := range ds {
		rows := m[d.coll]
		rows[d.row] += sign * d.diff
		if rows[d.row] == 0 {
			delete(rows, d.row)
		}
	}
}

type keyedDelta struct {
	coll, row string
	diff      int64
}

// keyedTxn is a committed transaction: its commit LSN c satisfies
// before <= c < after.
type keyedTxn struct {
	kind          string
	before, after frontier.LSN
	deltas        []keyedDelta
}

// keyedWriter runs the workload on one connection, keeping the model.
type keyedWriter struct {
	stop    context.CancelFunc
	done    chan struct{}
	err     error
	initial keyedModel
	txns    []keyedTxn // read after done, or by the writer goroutine
	mu      chan struct{}
	counter map[string]int
}

func (w *keyedWriter) log() []keyedTxn {
	w.mu <- struct{}{}
	defer func() { <-w.mu }()
	return append([]keyedTxn(nil), w.txns...)
}

func note(id int) string {
	if id%2 == 0 {
		return ""
	}
	return strings.Repeat(fmt.Sprintf("n%d-", id), 800)
}

func startKeyedWriter(t *testing.T, db *ingestDB, pause time.Duration) *keyedWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctxT(t), db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	type account struct {
		balance int64
		note    string
	}
	accounts := map[int]account{}
	for i := 1; i <= keyedAccounts; i++ {
		accounts[i] = account{keyedStart, note(i)}
	}
	items := map[string]int{} // "sku|n" -> qty
	for g := 1; g <= 30; g++ {
		items[fmt.Sprintf("s%d|%d", g%5, g)] = g
	}
	accRow := func(id int) string { a := accounts[id]; return fmt.Sprintf("%d|%d|%s", id, a.balance, a.note) }
	itemRow := func(k string) string { return fmt.Sprintf("%s|%d", k, items[k]) }
	w := &keyedWriter{stop: cancel, done: make(chan struct{}), mu: make(chan struct{}, 1), counter: map[string]int{},
		initial: keyedModel{"public.accounts": {}, "public.items": {}}}
	for id := range accounts {
		w.initial["public.accounts"][accRow(id)] = 1
	}
	for k := range items {
		w.initial["public.items"][itemRow(k)] = 1
	}
	// A transaction once begun is seen through, and logged: stopping the
	// writer (ctx) must not leave a committed one out of the log.
	tctx := context.Background()
	lsn := func() (frontier.LSN, error) {
		var s string
		if err := conn.QueryRow(tctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			return 0, err
		}
		l, err := frontier.ParseLSN(s)
		// The stream's progress on an idle server stops at the end of
		// the last record, not past the next page's header.
		return probe.VisibleInsertLSN(l, 8192, 16<<20), err
	}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
		nextID, nextN := 1000, 1000
		pickAcc := func() int {
			ids := slicesSorted(accounts)
			return ids[rng.IntN(len(ids))]
		}
		pickItem := func() string {
			ks := slicesSorted(items)
			if len(ks) == 0 {
				return ""
			}
			return ks[rng.IntN(len(ks))]
		}
		split := func(k string) (string, int) {
			sku, n, _ := strings.Cut(k, "|")
			i, _ := strconv.Atoi(n)
			return sku, i
		}
		for ctx.Err() == nil {
			var ds []keyedDelta
			acc := func(id int, diff int64) { ds = append(ds, keyedDelta{"public.accounts", accRow(id), diff}) }
			item := func(k string, diff int64) { ds = append(ds, keyedDelta{"public.items", itemRow(k), diff}) }
			var kind string
			before, err := lsn()
			if err == nil {
				err = pgx.BeginFunc(tctx, conn, func(tx pgx.Tx) error {
					exec := func(sql string, args ...any) error {
						tag, err := tx.Exec(tctx, sql, args...)
						if err == nil && tag.RowsAffected() != 1 {
							err = fmt.Errorf("%s %v: %d rows", sql, args, tag.RowsAffected())
						}
						return err
					}
					switch r := rng.IntN(100); {
					case r < 40: // a transfer: neither key changes, notes stay
						kind = "transfer"
						a, b := pickAcc(), pickAcc()
						for b == a {
							b = pickAcc()
						}
						amt := int64(1 + rng.IntN(50))
						acc(a, -1)
						acc(b, -1)
						accounts[a] = account{accounts[a].balance - amt, accounts[a].note}
						accounts[b] = account{accounts[b].balance + amt, accounts[b].note}
						acc(a, +1)
						acc(b, +1)
						if err := exec("UPDATE accounts SET balance = $1 WHERE id = $2", accounts[a].balance, a); err != nil {
							return err
						}
						return exec("UPDATE accounts SET balance = $1 WHERE id = $2", accounts[b].balance, b)
					case r < 55: // a new account number: the key changes
						kind = "renumber"
						a := pickAcc()
						nextID++
						acc(a, -1)
						accounts[nextID] = accounts[a]
						delete(accounts, a)
						acc(nextID, +1)
						return exec("UPDATE accounts SET id = $1 WHERE id = $2", nextID, a)
					case r < 65: // close an account, open another with its balance
						kind = "close and open"
						a := pickAcc()
						nextID++
						acc(a, -1)
						accounts[nextID] = account{accounts[a].balance, note(nextID)}
						delete(accounts, a)
						acc(nextID, +1)
						if err := exec("DELETE FROM accounts WHERE id = $1", a); err != nil {
							return err
						}
						return exec("INSERT INTO accounts VALUES ($1, $2, $3)", nextID, accounts[nextID].balance, accounts[nextID].note)
					case r < 75:
						kind = "new item"
						nextN++
						k := fmt.Sprintf("s%d|%d", rng.IntN(5), nextN)
						items[k] = rng.IntN(100)
						item(k, +1)
						sku, n := split(k)
						return exec("INSERT INTO items VALUES ($1, $2, $3)", sku, n, items[k])
					case r < 85:
						kind = "item qty"
						k := pickItem()
						item(k, -1)
						items[k]++
						item(k, +1)
						sku, n := split(k)
						return exec("UPDATE items SET qty = qty + 1 WHERE sku = $1 AND n = $2", sku, n)
					case r < 91:
						kind = "item rekey"
						k := pickItem()
						nextN++
						nk := fmt.Sprintf("s%d|%d", rng.IntN(5), nextN)
						item(k, -1)
						items[nk] = items[k]
						delete(items, k)
						item(nk, +1)
						sku, n := split(k)
						nsku, nn := split(nk)
						return exec("UPDATE items SET sku = $1, n = $2 WHERE sku = $3 AND n = $4", nsku, nn, sku, n)
					case r < 95:
						kind = "item delete"
						k := pickItem()
						item(k, -1)
						delete(items, k)
						sku, n := split(k)
						return exec("DELETE FROM items WHERE sku = $1 AND n = $2", sku, n)
					default: // a row's life in one transaction
						kind = "item life"
						nextN++
						k := fmt.Sprintf("life|%d", nextN)
						sku, n := split(k)
						if err := exec("INSERT INTO items VALUES ($1, $2, 1)", sku, n); err != nil {
							return err
						}
						if err := exec("UPDATE items SET qty = 2 WHERE sku = $1 AND n = $2", sku, n); err != nil {
							return err
						}
						nextN++
						if err := exec("UPDATE items SET n = $1 WHERE sku = $2 AND n = $3", nextN, sku, n); err != nil {
							return err
						}
						nk := fmt.Sprintf("life|%d", nextN)
						if rng.IntN(2) == 0 {
							return exec("DELETE FROM items WHERE sku = $1 AND n = $2", sku, nextN)
						}
						items[nk] = 2
						item(nk, +1)
						return nil
					}
				})
			}
			var after frontier.LSN
			if err == nil {
				after, err = lsn()
			}
			if err != nil {
				w.err = err // the test fails: the model is not restored
				return
			}
			w.mu <- struct{}{}
			w.txns = append(w.txns, keyedTxn{kind: kind, before: before, after: after, deltas: ds})
			w.counter[kind]++
			<-w.mu
			if pause > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}
	}()
	t.Cleanup(func() { w.stop(); <-w.done })
	return w
}

func slicesSorted[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func (w *keyedWriter) halt(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

func (w *keyedWriter) failed(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
		if w.err != nil {
			t.Fatalf("writer: %v", w.err)
		}
	default:
	}
}

// exactCheck is a keyedWalk check, called at the bindings in time order,
// that the contents at every binding are the upstream's after exactly the
// transactions below its frontier: those surely below it (after <= F),
// plus possibly the one the frontier falls in. The snapshot's binding
// (frontier 1, time 0 standing for the slot's start) may be any state of
// the log. matched counts the bindings checked.
func exactCheck(log []keyedTxn, initial keyedModel, matched *int, more func() []keyedTxn) func(frontier.Binding, ingesttest.Rows) error {
	model := keyedModel{}
	for c, rows := range initial {
		model[c] = maps.Clone(rows)
	}
	k := 0 // transactions applied to model
	return func(b frontier.Binding, rows ingesttest.Rows) error {
		f := frontier.LSN(b.Frontier.Pos())
		lo, hi := 0, len(log)
		if f > 1 {
			lo, hi = 0, 0
			for _, tx := range log {
				if tx.after <= f {
					lo++
				}
				if tx.before < f {
					hi++
				}
			}
		}
		for ; k < lo; k++ {
			model.apply(log[k].deltas, +1)
		}
		equal := func() bool {
			for c, want := range model {
				if !maps.Equal(rows[c], want) {
					return false
				}
			}
			return true
		}
		start := k
		for !equal() {
			if k >= hi {
				d := ingesttest.Diff(rows, ingesttest.Rows(model))
				// Diagnosis: is the store at a later state of the log as it
				// is now (the log was read too early), or at none?
				ahead := -1
				later := more()
				for j := k; j < len(later) && j < k+200 && ahead < 0; j++ {
					model.apply(later[j].deltas, +1)
					if equal() {
						ahead = j + 1
					}
				}
				var kinds []string
				for j := max(0, start-3); j < len(later) && j < start+3; j++ {
					kinds = append(kinds, fmt.Sprintf("%d:%s[%s,%s)", j, later[j].kind, later[j].before, later[j].after))
				}
				return fmt.Errorf("the contents are none of the upstream's states after %d..%d transactions (of %d logged; state after %d of the %d logged now: %v; around: %s); against %d: %s",
					start, hi, len(log), ahead, len(later), ahead >= 0, strings.Join(kinds, " "), k, shortDiff(d))
			}
			model.apply(log[k].deltas, +1)
			k++
		}
		*matched++
		return nil
	}
}

// keyedWalk walks the store in dir (ingesttest.Walk: at every readable
// binding no row or key twice, every change at a binding time, the
// replayed contents equal to a read as of the time at the last binding
// and every 50th) with check at every binding, and returns the reads, the
// last readable binding and its contents (nil when there is none).
func keyedWalk(t *testing.T, dir string, lay ingesttest.Layout, check func(frontier.Binding, ingesttest.Rows) error) (ingesttest.Reads, frontier.Binding, ingesttest.Rows) {
	t.Helper()
	var last frontier.Binding
	var rows ingesttest.Rows
	reads, err := ingesttest.Walk(ctxT(t), dir, lay, ingesttest.WalkOptions{
		AsOf: func(i, n int) bool { return i == n-1 || i%50 == 0 },
		Visit: func(_ string, b frontier.Binding, rs ingesttest.Rows) error {
			last, rows = b, rs
			if check == nil {
				return nil
			}
			return check(b, rs)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return reads, last, rows
}

// checkSelect checks that rows are the upstream's tables (SELECT of their
// columns).
func checkSelect(t *testing.T, db *ingestDB, rows ingesttest.Rows, columns map[string][]string) {
	t.Helper()
	if rows == nil {
		t.Fatalf("the store has no readable binding")
	}
	for c, cols := range columns {
		want := ingesttest.Rows{c: db.selectRows(t, c, cols...)}
		if d := ingesttest.Diff(ingesttest.Rows{c: rows[c]}, want); d != "" {
			t.Errorf("%s: the store at the end differs from SELECT *: %s", c, shortDiff(d))
		}
	}
}

// TestIngestKeyedIdentityKillLoop is the acceptance test of REPLICA
// IDENTITY DEFAULT: two tables with primary keys (one of two columns) and
// the default identity, a random workload with key changes, deletes and a
// long TOASTed column left unchanged by most updates, and an ingest
// SIGKILLed 10 times at random moments (the first ones just after its
// snapshot). After every kill the store is exact at every
// binding time; at the end it equals SELECT * of the tables.
func TestIngestKeyedIdentityKillLoop(t *testing.T) {
	start := time.Now()
	db := newPGDB(t, keyedDDL...)
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"
	writer := startKeyedWriter(t, db, 2*time.Millisecond)
	// --state-cache 1: the key states' overlays spill to disk at every
	// hand-over (replicate.Backing), so every lookup of a row the stream
	// did not just change is read from disk.
	args := keyedArgs(db, slot, dir, "--interval", "30ms", "--compact-every", "1s", "--state-cache", "1")
	seen := ingesttest.Reads{}
	const kills = 10
	var matched, rebuilt int
	keyLine := regexp.MustCompile(`msg="key state (?:rebuilt from the store|caught up from the store|reused)".*collection=(\S+).*keys=(\d+)`)
	var lastKeyLines []string
	var spilled string
	for k := 0; k <= kills; k++ {
		p := startProc(t, nil, args...)
		if k == kills {
			writer.halt(t)
			keyedCaughtUp(t, db, dir, p)
			p.signal(syscall.SIGTERM)
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("final ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
			}
		} else {
			d := time.Duration(200+rand.IntN(1300)) * time.Millisecond
			if k < 2 {
				// Just after the snapshot, or after a resume. (Not in the
				// middle of the snapshot's commits: a table whose
				// snapshot is not durable when others' are cannot be
				// snapshotted again exactly under DEFAULT, see
				// docs/replicate.md; pkg/snapshot tests that case.)
				ingesttest.WaitStderr(t, binProc{p}, "msg=resume ")
				d = time.Duration(rand.IntN(60)) * time.Millisecond
			}
			time.Sleep(d)
			p.kill(t)
			writer.failed(t)
			// A transaction committed before the kill may not be logged
			// yet: the writer logs it before it starts the next one.
			for n := len(writer.log()); len(writer.log()) <= n; {
				writer.failed(t)
				time.Sleep(time.Millisecond)
			}
		}
		if k == kills {
			spilled = string(p.stderr.Bytes())
		}
		if ls := keyLine.FindAllString(string(p.stderr.Bytes()), -1); len(ls) > 0 {
			rebuilt++
			lastKeyLines = ls
		}
		if strings.Contains(string(p.stderr.Bytes()), "definite error") {
			t.Fatalf("run %d: a definite error\nstderr:\n%s", k, p.stderr.Bytes())
		}
		reads, last, rows := keyedWalk(t, dir, keyedLayout, exactCheck(writer.log(), writer.initial, &matched, writer.log))
		if err := ingesttest.CompareReads(seen, reads); err != nil {
			t.Fatalf("run %d: after a restart: %v", k, err)
		}
		seen = reads
		if k == kills {
			checkSelect(t, db, rows, keyedColumns)
			if log := writer.log(); frontier.LSN(last.Frontier.Pos()) < log[len(log)-1].after {
				t.Errorf("the last readable binding %v is below the last transaction", last)
			}
		}
	}
	if rebuilt < kills/2 {
		t.Errorf("the key state was read from the store in %d of %d runs", rebuilt, kills+1)
	}
	if !strings.Contains(spilled, "msg=\"key state spilled to disk\"") {
		t.Errorf("no key state spilled to disk (stderr of the last run):\n%s", spilled)
	}
	t.Logf("%d kills in %s; %d transactions %v; %d binding times checked exact against the log; key state read from the store in %d runs, last: %s",
		kills, time.Since(start).Round(time.Millisecond), len(writer.log()), writer.counter, matched, rebuilt, strings.Join(lastKeyLines, " | "))
}

// TestIngestIdentityBecomesDefault: a table ingested under REPLICA
// IDENTITY FULL (no key state) is altered to DEFAULT while the ingest
// runs. The stream meets the change, the ingest resumes once more with the
// table's rows by key read from the store, and the store follows the
// updates, key changes and deletes after it exactly.
func TestIngestIdentityBecomesDefault(t *testing.T) {
	db := newPGDB(t,
		"CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)", "ALTER TABLE t REPLICA IDENTITY FULL",
		"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g",
		"CREATE PUBLICATION rtr FOR TABLE t")
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"
	p := startProc(t, nil, keyedArgs(db, slot, dir, "--interval", "30ms")...)
	keyedCaughtUp(t, db, dir, p)
	execAll(t, db.conn, "UPDATE t SET v = 'full' WHERE id = 1", "ALTER TABLE t REPLICA IDENTITY DEFAULT",
		"UPDATE t SET v = 'x' WHERE id < 5", "UPDATE t SET id = id + 100 WHERE id IN (6, 8)", "DELETE FROM t WHERE id = 7",
		"BEGIN; INSERT INTO t VALUES (50, 'y'); UPDATE t SET id = 51 WHERE id = 50; UPDATE t SET v = 'z' WHERE id = 51; COMMIT")
	keyedCaughtUp(t, db, dir, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	stderr := string(p.stderr.Bytes())
	if !strings.Contains(stderr, "transient failure; retrying") || !strings.Contains(stderr, "the replica identity of public.t is DEFAULT in the stream") ||
		!regexp.MustCompile(`msg="key state rebuilt from the store".*collection=public.t identity=default key=id keys=20 `).MatchString(stderr) {
		t.Errorf("the ingest did not resume with the key state of public.t:\n%s", stderr)
	}
	lay := ingesttest.Layout{Atomic: true, Sources: []ingesttest.SourceColls{{ID: "pg", Collections: []string{"public.t"}}}}
	_, _, rows := keyedWalk(t, dir, lay, nil)
	checkSelect(t, db, rows, map[string][]string{"public.t": {"id", "v"}})
}

// shortDiff cuts the long notes out of a diff.
func shortDiff(s string) string {
	return regexp.MustCompile(`(n\d+-){3,}`).ReplaceAllStringFunc(s, func(m string) string { return fmt.Sprintf("%s...(%d)", m[:6], len(m)) })
}

// keyedSnap is the upstream after one transaction: the insert position
// before it and after its commit, and the table's rows (SELECT *).
type keyedSnap struct {
	before, after frontier.LSN
	rows          map[string]int64
}

// startKeyedTable makes table k with setup in a database of its own,
// published, and starts an ingest of it that has caught up.
func startKeyedTable(t *testing.T, setup ...string) (db *ingestDB, dir string, args []string, p *proc) {
	t.Helper()
	db = newPGDB(t, append(setup, "CREATE PUBLICATION rtr FOR TABLE k")...)
	dir = t.TempDir() + "/store"
	args = keyedArgs(db, db.newSlotName(t), dir, "--interval", "20ms")
	p = startProc(t, nil, args...)
	keyedCaughtUp(t, db, dir, p)
	return db, dir, args, p
}

// snapTxn runs qs in one transaction and returns table k after it, with
// the WAL insert positions before and after.
func snapTxn(t *testing.T, db *ingestDB, qs ...string) keyedSnap {
	t.Helper()
	before := db.insertLSN(t)
	if len(qs) > 1 {
		qs = append(append([]string{"BEGIN"}, qs...), "COMMIT")
	}
	execAll(t, db.conn, qs...)
	return keyedSnap{before: before, after: db.insertLSN(t), rows: selectAll(t, db, "k")}
}

// kWriter writes to table k of the kill tests, each transaction recorded
// with snapTxn; next is the first key work inserts (above the table's).
type kWriter struct {
	db    *ingestDB
	next  int
	snaps []keyedSnap
}

func (w *kWriter) txn(t *testing.T, qs ...string) {
	t.Helper()
	w.snaps = append(w.snaps, snapTxn(t, w.db, qs...))
}

// work is an insert, an update, a key change and a delete, each a
// transaction.
func (w *kWriter) work(t *testing.T) {
	t.Helper()
	n := w.next
	w.next += 10
	w.txn(t, fmt.Sprintf("INSERT INTO k (a, b, v) VALUES (%d, 'x', 1)", n))
	w.txn(t, "UPDATE k SET v = v + 1 WHERE a < 6")
	w.txn(t, fmt.Sprintf("UPDATE k SET a = a + 1000000 WHERE a = %d", n/10-9000))
	w.txn(t, "DELETE FROM k WHERE a = (SELECT min(a) FROM k WHERE a > 6)")
}

// TestIngestKeyedSchemaChanges: a table with REPLICA IDENTITY DEFAULT
// (a two-column primary key, a TOASTed column) whose columns change while
// the ingest runs: ADD COLUMN with a default, DROP COLUMN and a type
// change, each followed at once by updates (with and without key
// changes, leaving the TOASTed column unchanged), deletes and inserts of
// old and new rows, some inside the re-snapshot's copy and some after
// it; then a SIGKILL and a restart. Each change is a re-snapshot at its
// commit whose key state is read from the copy: every binding time reads
// exactly the table after the transactions it covers (SELECT * after
// each), reads replay identically after the kill, and the store ends
// equal to the table.
func TestIngestKeyedSchemaChanges(t *testing.T) {
	db, dir, args, p := startKeyedTable(t,
		"CREATE TABLE k (a int, b text, v int NOT NULL, note text, PRIMARY KEY (a, b))",
		"ALTER TABLE k ALTER COLUMN note SET STORAGE EXTERNAL",
		"INSERT INTO k SELECT g, 'b' || (g % 3), g, CASE WHEN g % 2 = 1 THEN repeat('n' || g || '-', 800) END FROM generate_series(1, 20) g")
	var snaps []keyedSnap
	txn := func(burst bool, qs ...string) {
		t.Helper()
		snaps = append(snaps, snapTxn(t, db, qs...))
		if !burst {
			time.Sleep(30 * time.Millisecond) // a binding or so each
		}
	}
	next := 100
	work := func(burst bool) {
		n := next
		next += 10
		txn(burst, fmt.Sprintf("INSERT INTO k (a, b, v) VALUES (%d, 'x', 1)", n))
		txn(burst, "UPDATE k SET v = v + 1 WHERE a < 6")                       // the TOASTed note unchanged
		txn(burst, fmt.Sprintf("UPDATE k SET a = a + 1000 WHERE a = %d", n-9)) // a key change (absent in the first round)
		txn(burst, "UPDATE k SET b = b || 'm' WHERE a = 3")
		txn(burst, "DELETE FROM k WHERE a = (SELECT min(a) FROM k WHERE a > 6 AND a < 100)")
		txn(burst, fmt.Sprintf("INSERT INTO k (a, b, v) VALUES (%d, 'y', 2)", n+1),
			fmt.Sprintf("UPDATE k SET a = %d WHERE a = %d", n+2, n+1), "UPDATE k SET v = v * 2 WHERE a = 1")
	}
	work(false)
	changes := []string{
		"ALTER TABLE k ADD COLUMN c int NOT NULL DEFAULT 7",
		"ALTER TABLE k DROP COLUMN note",
		"ALTER TABLE k ALTER COLUMN v TYPE bigint",
	}
	for i, ddl := range changes {
		// The change in the same transaction as a write, and writes right
		// after it: some are in the copy, some after it.
		txn(true, ddl, "UPDATE k SET v = v + 100 WHERE a = 2")
		work(true)
		if i == 0 {
			txn(false, "UPDATE k SET c = 8 WHERE a = 1", fmt.Sprintf("INSERT INTO k (a, b, v, c) VALUES (%d, 'z', 3, 9)", next))
		}
		for deadline := time.Now().Add(60 * time.Second); strings.Count(string(p.stderr.Bytes()), `msg="re-snapshot done"`) <= i; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) || p.exited() {
				t.Fatalf("no re-snapshot after %q\nstderr:\n%s", ddl, p.stderr.Bytes())
			}
		}
		work(false)
	}
	if n := strings.Count(string(p.stderr.Bytes()), `msg="re-snapshot done"`); n != len(changes) || !strings.Contains(string(p.stderr.Bytes()), "bytes_per_key=") {
		t.Errorf("%d re-snapshots with a key state read from the copy, want %d:\n%s", n, len(changes), p.stderr.Bytes())
	}
	keyedCaughtUp(t, db, dir, p)
	before := bindingReads(t, dir, "pg", "public.k")
	p.kill(t)
	firstStderr := string(p.stderr.Bytes())
	p = startProc(t, nil, args...)
	work(false)
	keyedCaughtUp(t, db, dir, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	if strings.Contains(string(p.stderr.Bytes()), "definite error") {
		t.Errorf("a definite error:\n%s", p.stderr.Bytes())
	}
	after := bindingReads(t, dir, "pg", "public.k")
	for at, rows := range before {
		if after[at] != rows {
			t.Errorf("binding %d reads differently after the kill:\n%s\nnow:\n%s", at, shortDiff(rows), shortDiff(after[at]))
		}
	}
	checked := checkKeyedSnaps(t, db, dir, snaps)
	if t.Failed() {
		for i, s := range snaps {
			t.Logf("txn %d: %s..%s", i+1, s.before, s.after)
		}
		t.Logf("stderr before the kill:\n%s", firstStderr)
	}
	t.Logf("%d transactions, %d bindings exact, %d compared across the kill", len(snaps), checked, len(before))
}

// checkKeyedSnaps checks that every binding of the store reads table k
// exactly as one of snaps: the table after the transactions surely below
// its frontier, or also the one the frontier may fall in; and that the
// store ends equal to the table. It returns the bindings checked.
func checkKeyedSnaps(t *testing.T, db *ingestDB, dir string, snaps []keyedSnap) int {
	t.Helper()
	checked := 0
	bs := storeBindings(t, dir, "pg")
	for _, b := range bs[1:] {
		f := frontier.LSN(b.Frontier.Pos())
		lo, hi := 0, 0
		for _, s := range snaps {
			if s.after <= f {
				lo++
			}
			if s.before < f {
				hi++
			}
		}
		hi = max(hi, lo) // a transaction that wrote nothing has before == after
		if hi == 0 {
			continue // before the first transaction
		}
		got, err := readRows(ctxT(t), dir, "public.k", b.Time)
		if err != nil {
			t.Fatalf("binding %d (%s): %v", b.Time, b.Frontier, err)
		}
		ok := false
		for j := max(lo, 1); j <= hi && !ok; j++ {
			ok = maps.Equal(got, snaps[j-1].rows)
		}
		if !ok {
			t.Errorf("binding %d (%s): none of the table's states after %d..%d transactions: %s", b.Time, b.Frontier, lo, hi,
				shortDiff(ingesttest.Diff(ingesttest.Rows{"k": got}, ingesttest.Rows{"k": snaps[max(lo, 1)-1].rows})))
		}
		checked++
	}
	if got, want := readLatest(t, dir, "public.k", bs), selectAll(t, db, "k"); !maps.Equal(got, want) {
		t.Errorf("at the end the store differs from SELECT *: %s", shortDiff(ingesttest.Diff(ingesttest.Rows{"k": got}, ingesttest.Rows{"k": want})))
	}
	return checked
}

// readLatest reads collection at the last of bindings bs.
func readLatest(t *testing.T, dir, collection string, bs []frontier.Binding) map[string]int64 {
	t.Helper()
	rows, err := readRows(ctxT(t), dir, collection, bs[len(bs)-1].Time)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestIngestKeyedKillDuringResnapshot: a SIGKILL while the re-snapshot
// of a REPLICA IDENTITY DEFAULT table after a schema change is running
// (right at its start, and a little into it), with writes before and
// after: the restarted ingest resumes before the change, reads its key
// state from the store in the old columns, re-snapshots again, and every
// binding time reads exactly one of the table's states.
func TestIngestKeyedKillDuringResnapshot(t *testing.T) {
	db, dir, args, p := startKeyedTable(t,
		"CREATE TABLE k (a int, b text, v int NOT NULL, PRIMARY KEY (a, b))",
		"INSERT INTO k SELECT g, 'b' || (g % 3), g FROM generate_series(1, 100000) g")
	w := &kWriter{db: db, next: 100_000}
	txn, work := func(qs ...string) { t.Helper(); w.txn(t, qs...) }, func() { t.Helper(); w.work(t) }
	work()
	during := 0 // kills before the re-snapshot was durable
	var stderrs []string
	changes := []string{
		"ALTER TABLE k ADD COLUMN c int NOT NULL DEFAULT 7",
		"ALTER TABLE k ALTER COLUMN v TYPE bigint",
		"ALTER TABLE k DROP COLUMN c",
	}
	for i, ddl := range changes {
		count := func(what string) int { return strings.Count(string(p.stderr.Bytes()), what) }
		started := count(`msg=re-snapshot `)
		txn(ddl, "UPDATE k SET v = v + 100 WHERE a = 2")
		for deadline := time.Now().Add(60 * time.Second); count(`msg=re-snapshot `) <= started; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) || p.exited() {
				t.Fatalf("no re-snapshot after %q\nstderr:\n%s", ddl, p.stderr.Bytes())
			}
		}
		time.Sleep(time.Duration(i) * 40 * time.Millisecond) // at its start, then into it
		p.kill(t)
		unfinished := count(`msg=re-snapshot `) > count(`msg="re-snapshot done"`)
		stderrs = append(stderrs, string(p.stderr.Bytes()))
		work()
		p = startProc(t, nil, args...)
		work()
		keyedCaughtUp(t, db, dir, p)
		if unfinished && count(`msg="re-snapshot done"`) > 0 {
			during++ // killed before it was durable: done again
		}
	}
	if during == 0 {
		t.Errorf("no kill fell during a re-snapshot: the test did not test it")
	}
	defer func() {
		if t.Failed() {
			t.Logf("the killed ingests' stderr:\n%s", strings.Join(stderrs, "\n---\n"))
		}
	}()
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	if strings.Contains(string(p.stderr.Bytes()), "definite error") {
		t.Errorf("a definite error:\n%s", p.stderr.Bytes())
	}
	checked := checkKeyedSnaps(t, db, dir, w.snaps)
	kept := strings.Count(strings.Join(append(stderrs, string(p.stderr.Bytes())), ""), "the copy kept before a restart")
	t.Logf("%d transactions, %d bindings exact; %d of %d kills during a re-snapshot, %d copies kept before a kill handed over again", len(w.snaps), checked, during, len(changes), kept)
}

// TestIngestKillDuringStagedResnapshot: SIGKILLs during the re-snapshots
// of a REPLICA IDENTITY FULL table of 150k rows (16 MB) after three
// column changes, with --txn-memory 256 KiB so that each copy is staged
// in several runs: twice while the copy is being staged (some runs in the
// store, the copy not done), and once just after it was handed over, with
// writes before and after each kill. The restarted ingest removes the killed copy's
// staged files, re-snapshots again, and every binding time reads exactly
// one of the table's states; no staged copy file is left at the end.
func TestIngestKillDuringStagedResnapshot(t *testing.T) {
	db, dir, args, p := startKeyedTable(t,
		"CREATE TABLE k (a int PRIMARY KEY, b text, v int NOT NULL)", "ALTER TABLE k REPLICA IDENTITY FULL",
		"INSERT INTO k SELECT g, repeat('b', 100) || g, g FROM generate_series(1, 150000) g")
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	// The ingest reaches PostgreSQL through a proxy: while a copy is to be
	// killed, the proxy slows it to seconds and, at the kill point, stalls
	// it, so the kill falls mid-copy however loaded the machine is.
	u, err := url.Parse(db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.StartProxy(t, u.Host)
	for i := range args {
		if i > 0 && args[i-1] == "--dsn" {
			args[i] = px.DSN(db.dsn)
		}
	}
	args = append(args, "--txn-memory", "262144")
	p = startProc(t, nil, args...)
	copies := filepath.Join(dir, "staged", "pg", "copies")
	staged := func() int {
		es, _ := os.ReadDir(copies)
		n := 0
		for _, e := range es {
			if strings.HasSuffix(e.Name(), ".arrow") {
				n++
			}
		}
		return n
	}
	w := &kWriter{db: db, next: 1_000_000}
	txn, work := func(qs ...string) { t.Helper(); w.txn(t, qs...) }, func() { t.Helper(); w.work(t) }
	work()
	var stderrs []string
	defer func() {
		if t.Failed() {
			t.Logf("the killed ingests' stderr:\n%s", strings.Join(stderrs, "\n---\n"))
		}
	}()
	midCopy, strays := 0, 0
	// The first two kills aim at the copy while it is staged, the last at
	// just after its hand-over.
	for i, ddl := range []string{"ALTER TABLE k ADD COLUMN c int NOT NULL DEFAULT 7", "ALTER TABLE k ALTER COLUMN v TYPE bigint", "ALTER TABLE k DROP COLUMN c"} {
		count := func(what string) int { return strings.Count(string(p.stderr.Bytes()), what) }
		started, done := count(`msg=re-snapshot `), count(`msg="re-snapshot done"`)
		if i < 2 {
			px.SetBandwidthDir(testenv.ToClient, 4<<20) // the 16 MB copy takes about 4 s
		}
		txn(ddl, "UPDATE k SET v = v + 100 WHERE a = 2")
		deadline := time.Now().Add(60 * time.Second)
		ready := func() bool { return count(`msg=re-snapshot `) > started && staged() > 0 }
		if i == 2 {
			ready = func() bool { return count(`msg="re-snapshot done"`) > done }
		}
		for ; !ready(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) || p.exited() {
				t.Fatalf("re-snapshot after %q: not at the kill point\nstderr:\n%s", ddl, p.stderr.Bytes())
			}
		}
		if i < 2 {
			px.Stall()
		}
		p.kill(t)
		px.Restore()
		px.SetBandwidth(0)
		if i < 2 && count(`msg="re-snapshot done"`) == done {
			midCopy++
			strays += staged()
		}
		stderrs = append(stderrs, string(p.stderr.Bytes()))
		work()
		p = startProc(t, nil, args...)
		work()
		keyedCaughtUp(t, db, dir, p)
	}
	if midCopy == 0 || strays == 0 {
		t.Errorf("no kill fell while a copy was staged (%d kills mid-copy, %d staged files left by them): the test did not test it", midCopy, strays)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.stderr.Bytes())
	}
	stderr := string(p.stderr.Bytes())
	if strings.Contains(stderr, "definite error") {
		t.Errorf("a definite error:\n%s", stderr)
	}
	runs := regexp.MustCompile(`msg="re-snapshot done".* runs=(\d+)`).FindStringSubmatch(strings.Join(append(stderrs, stderr), ""))
	if runs == nil || runs[1] == "0" || runs[1] == "1" {
		t.Errorf("a re-snapshot was not staged in several runs: %v", runs)
	}
	checked := checkKeyedSnaps(t, db, dir, w.snaps)
	if n := staged(); n > 0 {
		t.Errorf("%d staged copy files left at the end (the killed copy's %d were not swept, or a commit left its own)", n, strays)
	}
	t.Logf("%d transactions, %d bindings exact; %d of 2 kills while a copy was staged, its %d staged files swept", len(w.snaps), checked, midCopy, strays)
}
