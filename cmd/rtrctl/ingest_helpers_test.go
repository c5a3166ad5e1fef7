package main

// Helpers of the ingest integration tests (ingest_test.go): the rtrctl
// binary run as a separate process, a bank-and-orders workload, and a
// checker that walks a store through every binding time.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// --- the rtrctl binary -----------------------------------------------------

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binDirPrefix names the temporary directories holding the test binary,
// one per test process (suffix: its pid).
const binDirPrefix = "rtrctl-test-bin-"

// rtrctlBin builds ./cmd/rtrctl once per test binary and returns the path
// of the executable. Directories of earlier test processes that are gone
// are removed first.
func rtrctlBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		tmp := os.TempDir()
		if ents, err := os.ReadDir(tmp); err == nil {
			for _, e := range ents {
				if pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), binDirPrefix)); err == nil && strings.HasPrefix(e.Name(), binDirPrefix) && pid != os.Getpid() {
					if syscall.Kill(pid, 0) != nil {
						os.RemoveAll(filepath.Join(tmp, e.Name()))
					}
				}
			}
		}
		dir := filepath.Join(tmp, binDirPrefix+strconv.Itoa(os.Getpid()))
		if binErr = os.MkdirAll(dir, 0o755); binErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		binPath = filepath.Join(dir, "rtrctl")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/rtrctl: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is an rtrctl process.
type proc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	stdout *lockedBuffer
	done   chan struct{}
}

// startProc starts rtrctl with args (and extra environment); it gets
// SIGKILL when the test ends or the test process dies.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(rtrctlBin(t), args...)
	p := &proc{cmd: cmd, stderr: &lockedBuffer{}, stdout: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.done })
	return p
}

func (p *proc) signal(s syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(s)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end and returns its exit status (-1 for
// death by a signal).
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.signal(syscall.SIGKILL)
		<-p.done
		t.Fatalf("rtrctl %v did not exit within %s\nstderr:\n%s", p.cmd.Args[1:], timeout, p.stderr.bytes())
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill sends SIGKILL and waits. It fails the test if the process had
// already exited on its own.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("rtrctl %v exited with status %d before it was killed\nstderr:\n%s", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), p.stderr.bytes())
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// --- the database ----------------------------------------------------------

// ingestDB is a fresh database with a publication "rtr" and a slot name
// (unique in the cluster, dropped at cleanup; created by ingest or by the
// test).
type ingestDB struct {
	dsn  string
	conn *pgx.Conn
}

func newIngestDB(t *testing.T, ddl ...string) *ingestDB {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	db := &ingestDB{dsn: dsn, conn: conn}
	execAll(t, conn, ddl...)
	return db
}

// newSlotName returns a cluster-wide unique slot name, dropped at cleanup
// (registered now, so it runs after the cleanup of processes started later).
func (db *ingestDB) newSlotName(t *testing.T) string {
	t.Helper()
	slot := fmt.Sprintf("rtr_ing_%d_%d", os.Getpid(), rand.Uint64()%1e9)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var n int
			err := db.conn.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not drop slot %s", slot)
	})
	return slot
}

// createSlot creates slot and returns its start (confirmed_flush_lsn).
func (db *ingestDB) createSlot(t *testing.T, slot string) frontier.LSN {
	t.Helper()
	execAll(t, db.conn, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
	return db.slotConfirmed(t, slot)
}

func (db *ingestDB) slotConfirmed(t *testing.T, slot string) frontier.LSN {
	t.Helper()
	var s string
	if err := db.conn.QueryRow(ctxT(t), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil {
		t.Fatalf("read slot %s: %v", slot, err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (db *ingestDB) insertLSN(t *testing.T) frontier.LSN {
	t.Helper()
	return pgLSN(t, ctxT(t), db.conn, "pg_current_wal_insert_lsn")
}

// tableRows reads a table as row strings (columns as text, joined by |)
// with their multiplicities.
func (db *ingestDB) tableRows(t *testing.T, table string, cols []string) map[string]int64 {
	t.Helper()
	var sel []string
	for _, c := range cols {
		sel = append(sel, c+"::text")
	}
	rows, err := db.conn.Query(ctxT(t), "SELECT "+strings.Join(sel, " || '|' || ")+" FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out[s]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// --- the bank-and-orders workload -------------------------------------------

const (
	bankAccounts = 40
	bankStart    = 1000
)

var bankDDL = []string{
	"CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)",
	"CREATE TABLE orders (id bigint PRIMARY KEY, nlines int NOT NULL, customer text NOT NULL)",
	"CREATE TABLE order_lines (order_id bigint, line int, amount int NOT NULL, PRIMARY KEY (order_id, line))",
	"ALTER TABLE accounts REPLICA IDENTITY FULL",
	"ALTER TABLE orders REPLICA IDENTITY FULL",
	"ALTER TABLE order_lines REPLICA IDENTITY FULL",
	fmt.Sprintf("INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g", bankStart, bankAccounts),
	"INSERT INTO orders SELECT g, 3, 'c' || g FROM generate_series(1, 300) g",
	"INSERT INTO order_lines SELECT o, l, o * l FROM generate_series(1, 300) o, generate_series(1, 3) l",
	"CREATE PUBLICATION rtr FOR TABLE accounts, orders, order_lines",
}

// bankCollections are the collections of the workload, with the number of
// leading columns that form the primary key.
var bankCollections = []collSpec{
	{"public.accounts", 1, []string{"id", "balance"}},
	{"public.order_lines", 2, []string{"order_id", "line", "amount"}},
	{"public.orders", 1, []string{"id", "nlines", "customer"}},
}

type collSpec struct {
	name string
	key  int
	cols []string
}

// bankWriter runs transactions until stopped: transfers between accounts
// (the sum of balances stays bankAccounts*bankStart), new orders with
// their lines (the header stores the number of lines), an added line
// (header updated in the same transaction), and deleted orders.
type bankWriter struct {
	stop    context.CancelFunc
	done    chan struct{}
	err     error
	txns    int
	counter map[string]int
}

func startBankWriter(t *testing.T, dsn string, pause time.Duration) *bankWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &bankWriter{stop: cancel, done: make(chan struct{}), counter: map[string]int{}}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		orders := []int64{}
		for i := int64(1); i <= 300; i++ {
			orders = append(orders, i)
		}
		next := int64(1000)
		rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
		for ctx.Err() == nil {
			var kind string
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				switch r := rng.IntN(100); {
				case r < 55:
					kind = "transfer"
					a, b := 1+rng.IntN(bankAccounts), 1+rng.IntN(bankAccounts)
					amt := 1 + rng.IntN(50)
					if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - $2 WHERE id = $1", a, amt); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $2 WHERE id = $1", b, amt)
					return err
				case r < 85:
					kind = "order"
					next++
					n := 1 + rng.IntN(5)
					if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1, $2, $3)", next, n, fmt.Sprintf("c%d", next)); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO order_lines SELECT $1, l, l * 7 FROM generate_series(1, $2::int) l", next, n); err != nil {
						return err
					}
					orders = append(orders, next)
					return nil
				case r < 93 && len(orders) > 0:
					kind = "add line"
					o := orders[rng.IntN(len(orders))]
					if _, err := tx.Exec(ctx, "INSERT INTO order_lines SELECT $1, max(line) + 1, 1 FROM order_lines WHERE order_id = $1", o); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE orders SET nlines = nlines + 1 WHERE id = $1", o)
					return err
				default:
					if len(orders) == 0 {
						return nil
					}
					kind = "delete order"
					i := rng.IntN(len(orders))
					o := orders[i]
					orders = append(orders[:i], orders[i+1:]...)
					if _, err := tx.Exec(ctx, "DELETE FROM order_lines WHERE order_id = $1", o); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "DELETE FROM orders WHERE id = $1", o)
					return err
				}
			})
			if err != nil {
				if ctx.Err() == nil {
					w.err = err
				}
				return
			}
			w.txns++
			w.counter[kind]++
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

// failed reports a write error (the writer has stopped).
func (w *bankWriter) failed(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
		if w.err != nil {
			t.Fatalf("writer: %v", w.err)
		}
	default:
	}
}

// halt stops the writer and fails the test on a write error.
func (w *bankWriter) halt(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

// bankState checks the workload's invariants incrementally, change by
// change.
type bankState struct {
	balance int64
	header  map[string]int64 // order id -> nlines, for orders whose header is present
	lines   map[string]int64 // order id -> number of lines present
	broken  map[string]bool  // orders whose header disagrees with their lines
}

func newBankState() *bankState {
	return &bankState{header: map[string]int64{}, lines: map[string]int64{}, broken: map[string]bool{}}
}

func (b *bankState) apply(coll string, row []string, diff int64) {
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	var o string
	switch coll {
	case "public.accounts":
		b.balance += diff * atoi(row[1])
		return
	case "public.orders":
		o = row[0]
		if diff > 0 {
			b.header[o] = atoi(row[1])
		} else if b.header[o] == atoi(row[1]) {
			delete(b.header, o)
		}
	case "public.order_lines":
		o = row[0]
		b.lines[o] += diff
		if b.lines[o] == 0 {
			delete(b.lines, o)
		}
	default:
		return
	}
	n, ok := b.header[o]
	if ok && n == b.lines[o] || !ok && b.lines[o] == 0 {
		delete(b.broken, o)
	} else {
		b.broken[o] = true
	}
}

// check returns a description of what is wrong, or "".
func (b *bankState) check() string {
	var msgs []string
	if want := int64(bankAccounts * bankStart); b.balance != want {
		msgs = append(msgs, fmt.Sprintf("sum of balances %d, want %d", b.balance, want))
	}
	if len(b.broken) > 0 {
		var some []string
		for o := range b.broken {
			some = append(some, fmt.Sprintf("order %s: header says %d lines, %d present", o, b.header[o], b.lines[o]))
			if len(some) == 3 {
				break
			}
		}
		msgs = append(msgs, fmt.Sprintf("%d orders incomplete (%s)", len(b.broken), strings.Join(some, "; ")))
	}
	return strings.Join(msgs, "; ")
}

// --- walking a store through its binding times -----------------------------

// contents is a collection's contents at one time, kept incrementally:
// multiplicity per row and per key, and an order-independent hash
// (the sum over rows of multiplicity * fnv64(row)).
type contents struct {
	spec    collSpec
	rows    map[string]int64
	keys    map[string]int64
	badRows map[string]bool // multiplicity not 0 or 1
	badKeys map[string]bool // key present more than once (or negatively)
	hash    uint64
}

func newContents(spec collSpec) *contents {
	return &contents{spec: spec, rows: map[string]int64{}, keys: map[string]int64{}, badRows: map[string]bool{}, badKeys: map[string]bool{}}
}

func rowHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func (c *contents) apply(row string, diff int64) {
	c.rows[row] += diff
	if m := c.rows[row]; m == 0 {
		delete(c.rows, row)
		delete(c.badRows, row)
	} else if m != 1 {
		c.badRows[row] = true
	} else {
		delete(c.badRows, row)
	}
	key := strings.Join(strings.SplitN(row, "|", c.spec.key+1)[:c.spec.key], "|")
	c.keys[key] += diff
	if m := c.keys[key]; m == 0 || m == 1 {
		delete(c.badKeys, key)
		if m == 0 {
			delete(c.keys, key)
		}
	} else {
		c.badKeys[key] = true
	}
	c.hash += uint64(diff) * rowHash(row)
}

func (c *contents) problems() string {
	var msgs []string
	for r := range c.badRows {
		msgs = append(msgs, fmt.Sprintf("row %s has multiplicity %d", r, c.rows[r]))
		break
	}
	for k := range c.badKeys {
		msgs = append(msgs, fmt.Sprintf("key %s present %d times", k, c.keys[k]))
		break
	}
	return strings.Join(msgs, "; ")
}

// storeWalk is the result of walking a store.
type storeWalk struct {
	bindings []frontier.Binding
	// readable are the bindings whose time every collection can be read at.
	readable []frontier.Binding
	uppers   map[string]uint64
	// hashes: time -> hash of every collection's contents at that time.
	hashes map[uint64]string
	// last: the contents at the last readable binding time.
	last map[string]*contents
	// asOfReads counts the ReadAsOf cross-checks done.
	asOfReads int
}

func userRow(cols []arrow.Array, i int) (string, []string) {
	vals := make([]string, len(cols))
	for c, a := range cols {
		if a.IsNull(i) {
			vals[c] = "(null)"
		} else {
			vals[c] = a.ValueStr(i)
		}
	}
	return strings.Join(vals, "|"), vals
}

func splitRead(rec arrow.Record) (user []arrow.Array, times *array.Uint64, diffs *array.Int64) {
	for i, f := range rec.Schema().Fields() {
		switch f.Name {
		case "_time":
			times = rec.Column(i).(*array.Uint64)
		case "_diff":
			diffs = rec.Column(i).(*array.Int64)
		default:
			user = append(user, rec.Column(i))
		}
	}
	return
}

// readAsOf reads a collection at t as row -> multiplicity.
func readAsOf(ctx context.Context, sh *store.Shard, t uint64) (map[string]int64, error) {
	rec, err := sh.ReadAsOf(ctx, t)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	user, _, diffs := splitRead(rec)
	out := map[string]int64{}
	for i := 0; i < int(rec.NumRows()); i++ {
		r, _ := userRow(user, i)
		out[r] += diffs.Value(i)
	}
	return out, nil
}

type change struct {
	coll string
	row  string
	vals []string
	time uint64
	diff int64
}

// walkOpts are the checks of walkStore beyond the built-in ones.
type walkOpts struct {
	// asOf says at which readable bindings (index i of n) to compare the
	// replayed contents with Shard.ReadAsOf; nil: none.
	asOf func(i, n int) bool
	// onChange sees every update, in time order.
	onChange func(coll string, vals []string, diff int64)
	// check is called at every readable binding with the contents; it
	// returns what is wrong, or "".
	check func(b frontier.Binding, cs map[string]*contents) string
}

// walkStore reads the store's bindings for source and every collection's
// updates, and replays them binding time by binding time (every readable
// one). At each it checks that no row or key has a multiplicity other than
// one and that every update sits at a binding time, then runs the checks
// of opts. A store without the source's bindings or shards yet gives an
// empty walk.
func walkStore(t *testing.T, dir, source string, specs []collSpec, opts walkOpts) *storeWalk {
	t.Helper()
	ctx := ctxT(t)
	w := &storeWalk{uppers: map[string]uint64{}, hashes: map[uint64]string{}, last: map[string]*contents{}}
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if errors.Is(err, store.ErrNoStore) {
		return w
	}
	if err != nil {
		t.Fatal(err)
	}
	bs, _, err := st.Bindings(ctx, source)
	if errors.Is(err, store.ErrNotFound) {
		return w
	}
	if err != nil {
		t.Fatalf("bindings: %v", err)
	}
	w.bindings = bs
	for i := 1; i < len(bs); i++ {
		if bs[i].Time <= bs[i-1].Time || !bs[i].Frontier.Covers(bs[i-1].Frontier) {
			t.Fatalf("bindings %d and %d do not grow: %v then %v", i-1, i, bs[i-1], bs[i])
		}
	}
	shards := map[string]*store.Shard{}
	minUpper, maxSince := uint64(1<<63), uint64(0)
	for _, s := range specs {
		sh, err := st.Shard(ctx, s.name)
		if errors.Is(err, store.ErrNotFound) {
			return w
		}
		if err != nil {
			t.Fatalf("shard %s: %v", s.name, err)
		}
		if err := sh.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		shards[s.name] = sh
		w.uppers[s.name] = sh.Upper()
		minUpper = min(minUpper, sh.Upper())
		maxSince = max(maxSince, sh.Since())
	}
	for _, b := range bs {
		if b.Time >= maxSince && b.Time < minUpper {
			w.readable = append(w.readable, b)
		}
	}
	if len(w.readable) == 0 {
		return w
	}
	lastT := w.readable[len(w.readable)-1].Time
	times := map[uint64]bool{}
	for _, b := range bs {
		times[b.Time] = true
	}
	// Every collection's updates up to the last readable time: its
	// contents as of since, then its changes after.
	var chs []change
	for _, s := range specs {
		sh := shards[s.name]
		base, err := sh.ReadAsOf(ctx, sh.Since())
		if err != nil {
			t.Fatalf("read %s as of since: %v", s.name, err)
		}
		user, _, diffs := splitRead(base)
		for i := 0; i < int(base.NumRows()); i++ {
			r, vals := userRow(user, i)
			chs = append(chs, change{s.name, r, vals, sh.Since(), diffs.Value(i)})
		}
		base.Release()
		rec, err := sh.Changes(ctx, sh.Since(), lastT)
		if err != nil {
			t.Fatalf("changes of %s: %v", s.name, err)
		}
		user, tms, diffs := splitRead(rec)
		for i := 0; i < int(rec.NumRows()); i++ {
			if !times[tms.Value(i)] {
				t.Errorf("%s has an update at %d, which is no binding time", s.name, tms.Value(i))
			}
			r, vals := userRow(user, i)
			chs = append(chs, change{s.name, r, vals, tms.Value(i), diffs.Value(i)})
		}
		rec.Release()
	}
	sort.SliceStable(chs, func(i, j int) bool { return chs[i].time < chs[j].time })
	cs := map[string]*contents{}
	for _, s := range specs {
		cs[s.name] = newContents(s)
	}
	k := 0
	for i, b := range w.readable {
		for ; k < len(chs) && chs[k].time <= b.Time; k++ {
			cs[chs[k].coll].apply(chs[k].row, chs[k].diff)
			if opts.onChange != nil {
				opts.onChange(chs[k].coll, chs[k].vals, chs[k].diff)
			}
		}
		var hs []string
		for _, s := range specs {
			c := cs[s.name]
			if p := c.problems(); p != "" {
				t.Fatalf("%s at binding %d (time %d, frontier %s): %s", s.name, i, b.Time, b.Frontier, p)
			}
			hs = append(hs, strconv.FormatUint(c.hash, 16))
		}
		w.hashes[b.Time] = strings.Join(hs, ",")
		if opts.check != nil {
			if msg := opts.check(b, cs); msg != "" {
				t.Fatalf("at binding %d (time %d, frontier %s): %s", i, b.Time, b.Frontier, msg)
			}
		}
		if opts.asOf != nil && opts.asOf(i, len(w.readable)) {
			for _, s := range specs {
				got, err := readAsOf(ctx, shards[s.name], b.Time)
				if err != nil {
					t.Fatalf("read %s as of %d: %v", s.name, b.Time, err)
				}
				w.asOfReads++
				if !equalRows(got, cs[s.name].rows) {
					t.Fatalf("%s as of %d: ReadAsOf gives %d rows, the replayed updates %d rows: %s", s.name, b.Time, len(got), len(cs[s.name].rows), rowsDiff(got, cs[s.name].rows))
				}
			}
		}
	}
	w.last = cs
	return w
}

func equalRows(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rowsDiff describes up to five differences between got and want.
func rowsDiff(got, want map[string]int64) string {
	var d []string
	for k, v := range got {
		if want[k] != v {
			d = append(d, fmt.Sprintf("%s: %d, want %d", k, v, want[k]))
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("%s: missing, want %d", k, v))
		}
	}
	sort.Strings(d)
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("... %d differences", len(d)))
	}
	return strings.Join(d, "; ")
}

// --- status -----------------------------------------------------------------

// statusOf runs `rtrctl status DIR --output json` in-process.
func statusOf(t *testing.T, dir string, args ...string) statusJSON {
	t.Helper()
	stdout, stderr, code := runCLI(t, "", append([]string{"status", dir, "--output", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("rtrctl status: exit %d\n%s", code, stderr)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("decode status %q: %v", stdout, err)
	}
	return s
}

// durableLSN is the store's durable source frontier: the least frontier
// over the collections (0 when one has none).
func durableLSN(s statusJSON) frontier.LSN {
	var least frontier.LSN
	for i, c := range s.Collections {
		var p frontier.LSN
		if c.Frontier != nil {
			p = frontier.LSN(c.Frontier.Pos())
		}
		if i == 0 || p < least {
			least = p
		}
	}
	return least
}

// waitCaughtUp waits until every collection's frontier in the store is at
// or beyond the upstream insert position read now. An idle server can
// leave the replication stream at a WAL page boundary below it, so WAL is
// written to an unpublished table now and then while waiting.
func waitCaughtUp(t *testing.T, db *ingestDB, dir string, running *proc) frontier.LSN {
	t.Helper()
	target := db.insertLSN(t)
	execAll(t, db.conn, "CREATE TABLE IF NOT EXISTS nudge (x int)")
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		if running != nil && running.exited() {
			t.Fatalf("ingest exited with status %d while catching up\nstderr:\n%s", running.cmd.ProcessState.ExitCode(), running.stderr.bytes())
		}
		st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
		if err == nil {
			if d, ok := storeDurable(t, st); ok && d >= target {
				return target
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not reach upstream %s within 60 s\nstderr:\n%s", target, tail(running))
		}
		if i%20 == 19 {
			execAll(t, db.conn, "INSERT INTO nudge VALUES (1)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(p *proc) string {
	if p == nil {
		return ""
	}
	b := p.stderr.bytes()
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// storeDurable computes the durable frontier from the store directly
// (the source "pg"): the frontier of the last binding below the least upper.
func storeDurable(t *testing.T, st *store.Store) (frontier.LSN, bool) {
	t.Helper()
	ctx := ctxT(t)
	bs, _, err := st.Bindings(ctx, "pg")
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, false
		}
		t.Fatal(err)
	}
	names, err := st.Collections(ctx)
	if err != nil || len(names) == 0 {
		return 0, false
	}
	least := uint64(1 << 63)
	for _, n := range names {
		sh, err := st.Shard(ctx, n)
		if err != nil {
			return 0, false
		}
		if err := sh.Refresh(ctx); err != nil {
			return 0, false
		}
		least = min(least, sh.Upper())
	}
	k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= least })
	if k == 0 {
		return 0, true
	}
	return frontier.LSN(bs[k-1].Frontier.Pos()), true
}
