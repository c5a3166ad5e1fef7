package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/replicate"
)

// myResumeModel is what a MariaDB writer did, transaction by transaction:
// the rows of big (by id) and of nopk (by a) after each, to compute the
// tables at any GTID position.
type myResumeModel struct {
	mu   sync.Mutex
	big  map[int64]string
	nopk map[int64]string
	log  []myResumeTxn
}

// myResumeTxn is one transaction of the writer: its GTID sequence number
// in domain 0 and what it did to one row (row "" deletes it).
type myResumeTxn struct {
	seq   uint64
	nopk  bool
	key   int64
	row   string
	moved int64 // an update of the key: the row's old key (deleted)
}

// apply applies the transaction to the tables' rows.
func (x myResumeTxn) apply(big, nopk map[int64]string) {
	tb := big
	if x.nopk {
		tb = nopk
	}
	if x.moved != 0 {
		delete(tb, x.moved)
	}
	if x.row == "" {
		delete(tb, x.key)
	} else {
		tb[x.key] = x.row
	}
}

// at returns the tables after the transactions below next (a binding's
// domain-0 progress), as ingesttest.Rows.
func (m *myResumeModel) at(initBig, initNopk map[int64]string, next uint64) ingesttest.Rows {
	m.mu.Lock()
	log := m.log
	m.mu.Unlock()
	big, nopk := maps.Clone(initBig), maps.Clone(initNopk)
	for _, x := range log {
		if x.seq >= next {
			break
		}
		x.apply(big, nopk)
	}
	out := ingesttest.Rows{"big": {}, "nopk": {}}
	for _, r := range big {
		out["big"][r]++
	}
	for _, r := range nopk {
		out["nopk"][r]++
	}
	return out
}

// TestMySQLIngestSnapshotResume: rtrctl ingest of MariaDB gets SIGKILL at
// about half of the initial snapshot of a 300k-row keyed table and a 20k-row
// table without a primary key (one chunk, copied last), while a writer
// updates, inserts, deletes and moves rows to the last key range, during
// the copy and while no ingest runs. The restart copies only the chunks
// the first run did not finish (at most 60% of the rows, the table
// without a key whole) in a consistent snapshot of its own, rewinds each
// chunk to the first run's position, and every binding checked (the
// first, time 0 at that position, and others after the restart) reads
// exactly the tables after the transactions its frontier covers; at the
// end the store equals SELECT * at a wait-recent time.
func TestMySQLIngestSnapshotResume(t *testing.T) {
	const rows, nopkRows = 300000, 20000
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t,
		"CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, name varchar(40) NOT NULL)",
		"CREATE TABLE nopk (a bigint NOT NULL, b varchar(40) NOT NULL)",
		fmt.Sprintf("INSERT INTO big SELECT seq, seq %% 1000, CONCAT('row ', seq) FROM seq_1_to_%d", rows),
		fmt.Sprintf("INSERT INTO nopk SELECT seq, CONCAT('b ', seq) FROM seq_1_to_%d", nopkRows),
		"ANALYZE TABLE big, nopk",
	)
	initBig, initNopk := map[int64]string{}, map[int64]string{}
	for i := int64(1); i <= rows; i++ {
		initBig[i] = fmt.Sprintf("%d|%d|row %d", i, i%1000, i)
	}
	for i := int64(1); i <= nopkRows; i++ {
		initNopk[i] = fmt.Sprintf("%d|b %d", i, i)
	}
	model := &myResumeModel{big: maps.Clone(initBig), nopk: maps.Clone(initNopk)}

	dir := t.TempDir() + "/store"
	big, nopk := d.name+".big", d.name+".nopk"
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", big + "," + nopk, "--store", dir, "--source-id", "mysql",
		"--interval", "50ms", "--compact-every", "0", "--progress-interval", "1ns", "--parallel", "2"}
	first, deadline := startPlanned(t, args, dir, "mysql")

	// Writes all through the snapshot once it is planned, each a
	// transaction of its own.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := d.connect(t)
		myResumeWriter(t, w, model, rows, nopkRows, stop)
	}()
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()

	doneRows := killAtHalf(t, first, dir, "mysql", []string{big, nopk}, deadline)
	time.Sleep(200 * time.Millisecond) // writes while no ingest runs
	second, frac, log := resumeSnapshot(t, args, dir, "mysql", doneRows)
	if strings.Contains(log, "copying anew") {
		t.Errorf("the restart copied anew though every change was FULL:\n%s", log)
	}
	if frac > 0.6 {
		t.Errorf("the second run copied %.1f%% of the rows again, want at most 60%%", 100*frac)
	}
	if !regexp.MustCompile(`msg="snapshot rewound".* rewound=[1-9]`).MatchString(log) {
		t.Errorf("nothing was rewound; the test's writes did not overlap the snapshot:\n%s", log)
	}
	time.Sleep(300 * time.Millisecond) // writes after the snapshot too
	halt()
	model.mu.Lock()
	t.Logf("%d writes", len(model.log))
	model.mu.Unlock()

	// Exact at a wait-recent time after the last write.
	stdout, stderr, code := runCLI(t, "", "wait-recent", "--store", dir, "--source-id", "mysql", "--output", "json", "--timeout", "60s")
	if code != exitOK {
		t.Fatalf("wait-recent: exit %d: %s", code, stderr)
	}
	var res recency.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || !res.Binding.Covers(res.Upstream) || res.Upstream.Domain() != frontier.DomainMariaDB {
		t.Fatalf("wait-recent: %s (%v), want a binding covering a MariaDB position", stdout, err)
	}
	at := res.Time
	for _, tb := range []string{"big", "nopk"} {
		got, err := readRows(ctxT(t), dir, d.name+"."+tb, at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := ingesttest.Diff(ingesttest.Rows{tb: got}, ingesttest.Rows{tb: mySelectAll(t, d.conn, d.name, tb)}); diff != "" {
			t.Errorf("%s at %d differs from SELECT *: %s", tb, at, diff)
		}
	}
	second.signal(syscall.SIGTERM)
	if code := second.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("second ingest after SIGTERM: exit %d\nstderr:\n%s", code, second.stderr.Bytes())
	}
	checkSnapshotRemoved(t, dir, "mysql")

	// Known positions: the first binding (time 0, the first run's
	// snapshot position, whose rows were copied by two runs), and a few
	// bindings after it, each the tables after the transactions below
	// its frontier.
	bs := storeBindings(t, dir, "mysql")
	pick := []int{0}
	for _, k := range []int{len(bs) / 4, len(bs) / 2, len(bs) - 1} {
		if k > pick[len(pick)-1] {
			pick = append(pick, k)
		}
	}
	for _, k := range pick {
		b := bs[k]
		want := model.at(initBig, initNopk, b.Frontier.Get("0"))
		got := ingesttest.Rows{}
		for _, tb := range []string{"big", "nopk"} {
			r, err := readRows(ctxT(t), dir, d.name+"."+tb, b.Time)
			if err != nil {
				t.Fatal(err)
			}
			got[tb] = r
		}
		if diff := ingesttest.Diff(got, want); diff != "" {
			t.Errorf("binding %d of %d (%d, %s): %s", k, len(bs), b.Time, b.Frontier, diff)
		}
	}
	t.Logf("%d bindings, %d checked against the writer's model; first at %s", len(bs), len(pick), bs[0].Frontier)
}

// myResumeWriter changes big (updates, inserts, deletes, moves to the
// last key range) and nopk (inserts, updates) on w until stop, one
// transaction at a time, recording each in model.
func myResumeWriter(t *testing.T, w *client.Conn, model *myResumeModel, rows, nopkRows int64, stop <-chan struct{}) {
	next, nextA := rows, nopkRows
	for {
		select {
		case <-stop:
			return
		default:
		}
		model.mu.Lock()
		x := myResumeTxn{}
		var q string
		id := rand.Int64N(rows) + 1
		switch op := rand.IntN(6); op {
		case 0:
			q = fmt.Sprintf("UPDATE big SET n = n + 1 WHERE id = %d", id)
			if r, ok := model.big[id]; ok {
				f := strings.SplitN(r, "|", 3)
				n, _ := strconv.Atoi(f[1])
				x.key, x.row = id, fmt.Sprintf("%d|%d|%s", id, n+1, f[2])
			}
		case 1:
			next++
			q = fmt.Sprintf("INSERT INTO big VALUES (%d, 7, 'new %d')", next, next)
			x.key, x.row = next, fmt.Sprintf("%d|7|new %d", next, next)
		case 2:
			q = fmt.Sprintf("DELETE FROM big WHERE id = %d", id)
			if _, ok := model.big[id]; ok {
				x.key = id
			}
		case 3: // into the last key range, copied last
			to := id + 2*rows
			q = fmt.Sprintf("UPDATE big SET id = %d WHERE id = %d", to, id)
			if r, ok := model.big[id]; ok {
				f := strings.SplitN(r, "|", 2)
				x.key, x.row, x.moved = to, fmt.Sprintf("%d|%s", to, f[1]), id
			}
		case 4:
			nextA++
			q = fmt.Sprintf("INSERT INTO nopk VALUES (%d, 'b %d')", nextA, nextA)
			x.nopk, x.key, x.row = true, nextA, fmt.Sprintf("%d|b %d", nextA, nextA)
		default:
			a := rand.Int64N(nextA) + 1
			q = fmt.Sprintf("UPDATE nopk SET b = CONCAT(b, 'x') WHERE a = %d", a)
			x.nopk, x.key, x.row = true, a, model.nopk[a]+"x"
		}
		if _, err := w.Execute(q); err != nil {
			model.mu.Unlock()
			t.Error(err)
			return
		}
		r, err := w.Execute("SELECT @@last_gtid")
		if err != nil {
			model.mu.Unlock()
			t.Error(err)
			return
		}
		g, _ := r.GetString(0, 0)
		_, up, err := replicate.ParsePosition(true, g)
		if err != nil {
			model.mu.Unlock()
			t.Error(err)
			return
		}
		x.seq = up.Get("0") - 1
		if x.key != 0 {
			x.apply(model.big, model.nopk)
			model.log = append(model.log, x)
		}
		model.mu.Unlock()
		time.Sleep(200 * time.Microsecond)
	}
}

// TestMySQLIngestSnapshotResumeAnew: a change that cannot be rewound (an
// update under binlog_row_image MINIMAL, whose old row lacks columns)
// made to the snapshotted table while the ingest is down after a SIGKILL
// at half of its snapshot: the restart cannot take the resumed chunks back
// to the first run's position, says so, drops them and copies anew at a
// position of its own, and the table ends exact.
func TestMySQLIngestSnapshotResumeAnew(t *testing.T) {
	const rows = 120000
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t,
		"CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, name varchar(40) NOT NULL)",
		fmt.Sprintf("INSERT INTO big SELECT seq, seq %% 1000, CONCAT('row ', seq) FROM seq_1_to_%d", rows),
		"ANALYZE TABLE big",
	)
	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name + ".big", "--store", dir, "--source-id", "mysql",
		"--interval", "50ms", "--compact-every", "0", "--progress-interval", "1ns"}
	first, deadline := startPlanned(t, args, dir, "mysql")
	doneRows := killAtHalf(t, first, dir, "mysql", []string{d.name + ".big"}, deadline)
	imageTxn(t, d.conn, "MINIMAL", "UPDATE big SET n = n + 1 WHERE id = 7")
	myExec(t, d.conn, "SET SESSION binlog_row_image = 'FULL'")
	second, frac, log := resumeSnapshot(t, args, dir, "mysql", doneRows)
	if !strings.Contains(log, "copying anew") || frac != 1 {
		t.Errorf("the restart did not copy anew (%.1f%% copied):\n%s", 100*frac, log)
	}
	waitIngestReady(t, dir)
	got, err := readRows(ctxT(t), dir, d.name+".big", storeBindings(t, dir, "mysql")[0].Time)
	if err != nil {
		t.Fatal(err)
	}
	if diff := ingesttest.Diff(ingesttest.Rows{"big": got}, ingesttest.Rows{"big": mySelectAll(t, d.conn, d.name, "big")}); diff != "" {
		t.Errorf("time 0 differs from SELECT *: %s", diff)
	}
	second.signal(syscall.SIGTERM)
	if code := second.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("second ingest after SIGTERM: exit %d\nstderr:\n%s", code, second.stderr.Bytes())
	}
	checkSnapshotRemoved(t, dir, "mysql")
}
