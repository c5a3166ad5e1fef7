package main

// Ingesting MariaDB tables whose row events are not FULL: sessions with
// binlog_row_image MINIMAL or NOBLOB write updates and deletes that carry
// only the primary key of the old row and inserts and updates that carry
// only the columns they set. The ingest keeps the current row per key
// (rebuilt from the store after a restart) to retract the old row
// exactly.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/replicate"
)

// imageFixture is the MariaDB bank fixture whose writer draws each
// transaction's binlog_row_image from images, and writes every insert as
// an insert under another key moved to its own, and every update as two
// key changes (away and back), so that the binlog has key changes in
// every form.
type imageFixture struct {
	*myFixture
	images []string
	rng    *rand.Rand
	counts map[string]int
}

func (f *imageFixture) Apply(ctx context.Context, sets []ingesttest.Set) ([]ingesttest.Pos, error) {
	if err := f.writer(ctx); err != nil {
		return nil, err
	}
	image := f.images[f.rng.IntN(len(f.images))]
	f.counts[image]++
	if _, err := f.conn.Execute("SET SESSION binlog_row_image = '" + image + "'"); err != nil {
		f.conn.Close()
		f.conn = nil
		return nil, err
	}
	var out []ingesttest.Set
	var extra []string
	for _, s := range sets {
		table := strings.TrimPrefix(s.Coll, f.db+".")
		switch s.Op {
		case ingesttest.Insert:
			extra = append(extra, fmt.Sprintf("INSERT INTO %s (id, balance) VALUES (%s + 1000000, %d)", table, s.ID, s.Balance),
				fmt.Sprintf("UPDATE %s SET id = id - 1000000 WHERE id = %s + 1000000", table, s.ID))
		case ingesttest.Update:
			extra = append(extra, fmt.Sprintf("UPDATE %s SET id = id + 2000000, balance = %d WHERE id = %s", table, s.Balance, s.ID),
				fmt.Sprintf("UPDATE %s SET id = id - 2000000 WHERE id = %s + 2000000", table, s.ID))
		default:
			out = append(out, s)
			continue
		}
	}
	return f.applySQL(out, extra)
}

// applySQL runs sets (bankSQL) and then the statements extra in one
// transaction on the writer's connection, each changing one row.
func (f *myFixture) applySQL(sets []ingesttest.Set, extra []string) ([]ingesttest.Pos, error) {
	qs := []string{"BEGIN"}
	for _, s := range sets {
		qs = append(qs, bankSQL(strings.TrimPrefix(s.Coll, f.db+"."), s))
	}
	qs = append(append(qs, extra...), "COMMIT", "SELECT @@last_gtid")
	return f.run(qs)
}

// TestMySQLIngestMinimalImageKillLoop: the suite's kill loop on MariaDB
// with the writer's sessions under binlog_row_image MINIMAL, NOBLOB and
// FULL in turn (drawn per transaction), every insert and update written
// as key changes: SIGKILLed 8 times, every binding reads identically
// after each kill, every binding time is exact for the transactions it
// covers, and the store equals the tables at the end. The key state is
// rebuilt from the store in the runs after the first MINIMAL event.
func TestMySQLIngestMinimalImageKillLoop(t *testing.T) {
	h := &myHarness{m: testenv.SharedMariaDB(t)}
	fx := &imageFixture{myFixture: h.New(t).(*myFixture), images: []string{"MINIMAL", "NOBLOB", "FULL"}, rng: rand.New(rand.NewPCG(1, 2)), counts: map[string]int{}}
	start := time.Now()
	keyLine := regexp.MustCompile(`msg="key state (?:rebuilt from the store|caught up from the store|reused)".*keys=(\d+)`)
	var lines []string
	r := ingesttest.KillLoop(t, h, fx, ingesttest.KillOptions{
		// No kill in the middle of the snapshot: a collection whose time-0
		// snapshot is not durable is snapshotted again and rewound to the
		// first binding, and a change that is not FULL cannot be rewound
		// (docs/mysql.md, Not done), as under PostgreSQL's DEFAULT.
		Source: "mysql", Kills: 8, MinRun: 200 * time.Millisecond, MaxRun: 1200 * time.Millisecond,
		Args: []string{"--interval", "30ms", "--compact-every", "1s"},
		Stderr: func(s string) {
			lines = append(lines, keyLine.FindAllString(s, -1)...)
			if strings.Contains(s, "definite error") {
				t.Errorf("a definite error:\n%s", s)
			}
		},
	})
	if len(lines) == 0 {
		t.Errorf("the key state was never rebuilt from the store")
	}
	last := ""
	if len(lines) > 0 {
		last = lines[len(lines)-1]
	}
	t.Logf("%d kills in %s, %d writer transactions %v, %d binding reads compared across kills, %d bindings checked; key state rebuilt %d times, last: %s",
		r.Kills, time.Since(start).Round(time.Millisecond), r.Txns, fx.counts, r.Reads, r.Times.Bindings, len(lines), last)
}

// imageSnap is the upstream after one transaction: its GTID's sequence
// number (domain 0) and the table's rows.
type imageSnap struct {
	seq  uint64
	rows map[string]int64
}

// imageTxn runs qs in one transaction under binlog_row_image image and
// returns its GTID's sequence number (domain 0).
func imageTxn(t *testing.T, c *client.Conn, image string, qs ...string) uint64 {
	t.Helper()
	myExec(t, c, "SET SESSION binlog_row_image = '"+image+"'")
	if len(qs) > 1 {
		qs = append(append([]string{"BEGIN"}, qs...), "COMMIT")
	}
	myExec(t, c, qs...)
	r, err := c.Execute("SELECT @@last_gtid")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := r.GetString(0, 0)
	_, up, err := replicate.ParsePosition(true, g)
	if err != nil {
		t.Fatal(err)
	}
	return up.Get("0") - 1
}

// imageTableRows is the rows of shop table r as the store prints them
// (ingesttest.Rows: blobs in base64), with column z when withZ.
func imageTableRows(t *testing.T, c *client.Conn, withZ bool) map[string]int64 {
	t.Helper()
	sel := "CONCAT_WS('|', id, k, IFNULL(note, '(null)'), tag, IFNULL(n, '(null)'), IFNULL(TO_BASE64(b), '(null)')"
	if withZ {
		sel += ", IFNULL(z, '(null)')"
	}
	return myCountRows(t, c, "SELECT "+sel+") FROM r")
}

// TestMySQLIngestMinimalImageTable: a table with a two-column primary
// key, TEXT and BLOB columns and defaults, written by sessions under
// binlog_row_image MINIMAL and NOBLOB while the ingest runs: inserts
// that leave defaulted columns out, updates of one column, of the BLOB,
// of part of the key and of many rows at once, deletes, several changes
// of one row in one transaction; an ALTER TABLE ADD COLUMN with a
// default in the middle (a re-snapshot whose key state is read from the
// copy), then changes of old and new rows; a SIGKILL and a restart (the
// key state read from the store). Every binding time reads exactly the
// table after the transactions it covers, the reads replay identically
// after the kill, and a table with a UNIQUE key but no primary key gets
// a definite error that names the fix at its first MINIMAL update.
func TestMySQLIngestMinimalImageTable(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE r (id int, k varchar(10), note text, tag varchar(8) NOT NULL DEFAULT 'x', n int DEFAULT 5, b blob, PRIMARY KEY (id, k))",
		"INSERT INTO r VALUES (1, 'a', 'one', 't1', 1, 'b1'), (2, 'a', NULL, 't2', NULL, NULL), (3, 'b', 'three', 't3', 3, '')",
		"CREATE TABLE nk (id int NOT NULL, v int, UNIQUE KEY (id))", "INSERT INTO nk VALUES (1, 1)")
	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name + ".r," + d.name + ".nk", "--store", dir, "--source-id", "mysql", "--interval", "20ms"}
	p := runBin(t, nil, args...)
	waitIngestReady(t, dir)
	c := d.connect(t)
	withZ, burst := false, false
	var snaps []imageSnap
	txn := func(image string, qs ...string) {
		t.Helper()
		seq := imageTxn(t, c, image, qs...)
		snaps = append(snaps, imageSnap{seq: seq, rows: imageTableRows(t, c, withZ)})
		if !burst {
			time.Sleep(30 * time.Millisecond) // a binding or so each
		}
	}
	work := func(round int) {
		id := 10 * (round + 1)
		txn("MINIMAL", fmt.Sprintf("INSERT INTO r (id, k) VALUES (%d, 'm')", id))
		txn("MINIMAL", fmt.Sprintf("INSERT INTO r (id, k, note, b) VALUES (%d, 'm', 'note', 'blob')", id+1))
		txn("MINIMAL", fmt.Sprintf("UPDATE r SET n = 42 WHERE id = %d", id))
		txn("MINIMAL", fmt.Sprintf("UPDATE r SET k = 'moved' WHERE id = %d", id+1))
		txn("MINIMAL", "UPDATE r SET n = IFNULL(n, 0) + 1 WHERE id < 5")
		txn("NOBLOB", fmt.Sprintf("UPDATE r SET tag = 'nb' WHERE id = %d", id+1))
		txn("NOBLOB", fmt.Sprintf("UPDATE r SET b = 'newblob' WHERE id = %d", id))
		txn("NOBLOB", fmt.Sprintf("INSERT INTO r (id, k, note) VALUES (%d, 'n', 'noblob')", id+2))
		txn("MINIMAL", fmt.Sprintf("INSERT INTO r (id, k) VALUES (%d, 't')", id+3),
			fmt.Sprintf("UPDATE r SET note = 'in txn' WHERE id = %d", id+3),
			fmt.Sprintf("UPDATE r SET id = %d WHERE id = %d", id+4, id+3),
			fmt.Sprintf("UPDATE r SET b = 'x' WHERE id = %d", id+4))
		txn("MINIMAL", fmt.Sprintf("DELETE FROM r WHERE id = %d", id+2))
		txn("NOBLOB", fmt.Sprintf("DELETE FROM r WHERE id = %d AND k = 'moved'", id+1))
		txn("FULL", fmt.Sprintf("UPDATE r SET note = 'full' WHERE id = %d", id))
		txn("MINIMAL", fmt.Sprintf("UPDATE r SET note = NULL, n = NULL WHERE id = %d", id))
	}
	work(0)
	// A column added while the ingest runs: a re-snapshot at the ALTER.
	// Changes right after it, so that some are in the copy and some are
	// after it.
	withZ, burst = true, true
	txn("FULL", "ALTER TABLE r ADD COLUMN z int DEFAULT 7")
	work(1)
	burst = false
	txn("MINIMAL", "UPDATE r SET z = 8 WHERE id = 1", "DELETE FROM r WHERE id = 2")
	ingesttest.WaitStderr(t, p, "re-snapshot done")
	if !regexp.MustCompile(`msg="re-snapshot done".*keys=\d+ bytes=\d+ bytes_per_key=\d+`).MatchString(p.Stderr()) {
		t.Errorf("the re-snapshot at the ALTER did not read the key state from the copy:\n%s", p.Stderr())
	}
	before := bindingReads(t, dir, "mysql", d.name+".r")
	p.Kill(t)
	p = runBin(t, nil, args...)
	work(2)
	// The table without a primary key: its MINIMAL update has the UNIQUE
	// key's column alone.
	myExec(t, c, "SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE nk SET v = 2 WHERE id = 1")
	txn("MINIMAL", "UPDATE r SET n = 99 WHERE id = 1") // the last, so that the store catches up past nk's update
	waitMyCaughtUp(t, dir, snaps[len(snaps)-1].seq, p)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	after := bindingReads(t, dir, "mysql", d.name+".r")
	for tm, rows := range before {
		if after[tm] != rows {
			t.Errorf("binding %d reads differently after the kill:\n%s\nnow:\n%s", tm, rows, after[tm])
		}
	}
	checked := checkImageSnaps(t, dir, d.name+".r", snaps)
	msg, err := ingesttest.CollectionError(ctxT(t), dir, d.name+".nk")
	if err != nil || !strings.Contains(msg, "has no primary key") || !strings.Contains(msg, "SET GLOBAL binlog_row_image = 'FULL'") || !strings.Contains(msg, "ADD PRIMARY KEY") {
		t.Errorf("the table without a primary key: error %q (%v), want one naming the fixes", msg, err)
	}
	stderr := p.Stderr()
	if !regexp.MustCompile(`msg="key state (?:rebuilt from the store|caught up from the store|reused)".*collection=` + regexp.QuoteMeta(d.name) + `.r key=id,k keys=\d+ `).MatchString(stderr) {
		t.Errorf("the restarted ingest did not read the key state of r from the store:\n%s", stderr)
	}
	if t.Failed() {
		t.Logf("stderr of the last run:\n%s", stderr)
	}
	t.Logf("%d transactions, %d bindings exact, %d compared across the kill; %s", len(snaps), checked, len(before),
		strings.Join(regexp.MustCompile(`msg="key state [^"]*".*`).FindAllString(stderr, -1), " | "))
}

// checkImageSnaps checks that every binding after time 0 of the store in
// dir reads collection coll as the table after the transactions (domain
// 0) it covers, and returns how many it checked.
func checkImageSnaps(t *testing.T, dir, coll string, snaps []imageSnap) int {
	t.Helper()
	checked := 0
	for _, b := range storeBindings(t, dir, "mysql")[1:] {
		var want map[string]int64
		for _, s := range snaps {
			if b.Frontier.Get("0") > s.seq {
				want = s.rows
			}
		}
		if want == nil {
			continue // before the first transaction: the snapshot's rows
		}
		got, err := readRows(ctxT(t), dir, coll, b.Time)
		if err != nil {
			t.Fatalf("binding %d (%s): %v", b.Time, b.Frontier, err)
		}
		if diff := ingesttest.Diff(ingesttest.Rows{"r": got}, ingesttest.Rows{"r": want}); diff != "" {
			t.Errorf("binding %d (%s): %s", b.Time, b.Frontier, diff)
		}
		checked++
	}
	return checked
}

// TestMySQLIngestMinimalKillDuringResnapshot: a SIGKILL while the
// re-snapshot after an ALTER TABLE of a table written under
// binlog_row_image MINIMAL is running (its key state comes from the
// copy, which is not rewound), at its start and a little into it, with
// writes before and after: every binding time reads exactly the table
// after the transactions it covers.
func TestMySQLIngestMinimalKillDuringResnapshot(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE q (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO q SELECT seq, seq, IF(seq % 2, 'n', NULL) FROM seq_1_to_50000")
	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "mysql", "--dsn", m.URL(), "--tables", d.name + ".q", "--store", dir, "--source-id", "mysql", "--interval", "20ms"}
	p := runBin(t, nil, args...)
	waitIngestReady(t, dir)
	c := d.connect(t)
	cols := []string{"id", "v", "IFNULL(note, '(null)')"}
	var snaps []imageSnap
	txn := func(qs ...string) {
		t.Helper()
		seq := imageTxn(t, c, "MINIMAL", qs...)
		snaps = append(snaps, imageSnap{seq: seq, rows: myCountRows(t, c, "SELECT CONCAT_WS('|', "+strings.Join(cols, ", ")+") FROM q")})
	}
	next := 100_000
	work := func() {
		n := next
		next += 10
		txn(fmt.Sprintf("INSERT INTO q (id, v) VALUES (%d, 1)", n))
		txn("UPDATE q SET v = v + 1 WHERE id < 6")
		txn(fmt.Sprintf("UPDATE q SET id = id + 1000000 WHERE id = %d", n/10-9000))
		txn("DELETE FROM q WHERE id = (SELECT min(id) FROM q WHERE id > 6)")
	}
	work()
	during := 0
	for i, ddl := range []string{"ALTER TABLE q ADD COLUMN z int DEFAULT 7", "ALTER TABLE q MODIFY v bigint NOT NULL", "ALTER TABLE q DROP COLUMN z"} {
		count := func(what string) int { return strings.Count(p.Stderr(), what) }
		started := count(`msg=re-snapshot `)
		switch i {
		case 0:
			cols = append(cols, "IFNULL(z, '(null)')")
		case 2:
			cols = cols[:3]
		}
		txn(ddl)
		for deadline := time.Now().Add(60 * time.Second); count(`msg=re-snapshot `) <= started; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) || p.Exited() {
				t.Fatalf("no re-snapshot after %q\nstderr:\n%s", ddl, p.Stderr())
			}
		}
		time.Sleep(time.Duration(i) * 15 * time.Millisecond) // at its start, then a little into it
		p.Kill(t)
		unfinished := count(`msg=re-snapshot `) > count(`msg="re-snapshot done"`)
		work()
		p = runBin(t, nil, args...)
		work()
		waitMyCaughtUp(t, dir, snaps[len(snaps)-1].seq, p)
		if unfinished && count(`msg="re-snapshot done"`) > 0 {
			during++ // killed before it was durable: done again
		}
	}
	if during == 0 {
		t.Errorf("no kill fell during a re-snapshot: the test did not test it")
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	checked := checkImageSnaps(t, dir, d.name+".q", snaps)
	if t.Failed() {
		t.Logf("stderr of the last run:\n%s", p.Stderr())
	}
	t.Logf("%d transactions, %d bindings exact; %d of 3 kills during a re-snapshot", len(snaps), checked, during)
}

// waitMyCaughtUp waits until the last binding of the store in dir (source
// mysql) covers domain 0's transaction seq.
func waitMyCaughtUp(t *testing.T, dir string, seq uint64, p ingesttest.Proc) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		bs := storeBindings(t, dir, "mysql")
		if b := bs[len(bs)-1]; b.Frontier.Get("0") > seq {
			return
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("the store did not catch up with %d\nstderr:\n%s", seq, p.Stderr())
		}
	}
}
