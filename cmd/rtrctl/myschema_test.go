package main

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
)

// mySelectAll is readRows of a MariaDB table upstream, in its columns
// now.
func mySelectAll(t *testing.T, c *client.Conn, db, table string) map[string]int64 {
	t.Helper()
	r, err := c.Execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", db, table)
	if err != nil {
		t.Fatal(err)
	}
	var sel []string
	for i := range r.RowNumber() {
		n, _ := r.GetString(i, 0)
		sel = append(sel, "IFNULL(CAST("+myarrow.QuoteIdent(n)+" AS CHAR), '(null)')")
	}
	return myCountRows(t, c, "SELECT CONCAT_WS('|', "+strings.Join(sel, ", ")+") FROM "+myarrow.QuoteIdent(db)+"."+myarrow.QuoteIdent(table))
}

// myCountRows runs q, a SELECT of one string column, and counts each
// value.
func myCountRows(t *testing.T, c *client.Conn, q string) map[string]int64 {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i := range r.RowNumber() {
		v, _ := r.GetString(i, 0)
		out[v]++
	}
	return out
}

// connect is a connection to the fixture's database, closed at cleanup.
func (f *myFixture) connect(t *testing.T) *client.Conn {
	t.Helper()
	c, err := f.h.m.Connect(ctxT(t), f.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitLog waits until n more transactions are logged.
func waitLog(log *ingesttest.Log, n int) {
	for want := log.Len() + n; log.Len() < want; {
		time.Sleep(5 * time.Millisecond)
	}
}

// myExec runs qs on c.
func myExec(t *testing.T, c *client.Conn, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestMySQLIngestTypeChangesUnderLoad: under bank transfers over both
// tables, a column type change made while the ingest runs, one followed
// by a SIGKILL in the middle of its re-snapshot, and one made while the
// ingest is stopped are each a re-snapshot at the ALTER: every binding
// time reads exactly the upstream after the transactions it covers, the
// bank's sum holds at every time (a transaction over both tables is
// whole across each ALTER), and the other table keeps flowing.
func TestMySQLIngestTypeChangesUnderLoad(t *testing.T) {
	fx := (&myHarness{m: testenv.SharedMariaDB(t)}).New(t).(*myFixture)
	const source = "myload"
	lay := fx.Layout(source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	dir, args, p := startCaughtUp(t, fx, source)
	c := fx.connect(t)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	waitTxns := func(n int) { waitLog(log, n) }
	waitTxns(20)
	myExec(t, c, "ALTER TABLE acc_a MODIFY id bigint NOT NULL")
	ingesttest.WaitStderr(t, p, "re-snapshot done")
	waitTxns(20)
	// A SIGKILL once the re-snapshot of the next ALTER has started (its
	// log line names the ALTER's GTID); the log shows it was not done before.
	myExec(t, c, "ALTER TABLE acc_b MODIFY balance decimal(20,0) NOT NULL")
	r, err := c.Execute("SELECT @@last_gtid")
	if err != nil {
		t.Fatal(err)
	}
	gtid, _ := r.GetString(0, 0)
	ingesttest.WaitStderr(t, p, "at "+gtid)
	p.Kill(t)
	if strings.Count(p.Stderr(), "re-snapshot done") > 1 {
		t.Logf("the re-snapshot at %s was done before the SIGKILL", gtid)
	}
	waitTxns(20)
	p = runBin(t, nil, args...)
	waitTxns(20)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	// While stopped: rows in the old columns before the ALTER, then in
	// the new ones.
	waitTxns(20)
	myExec(t, c, "ALTER TABLE acc_a MODIFY id int NOT NULL")
	waitTxns(20)
	p = runBin(t, nil, args...)
	waitTxns(20)
	haltExact(t, w, p, dir, source, lay, log)
}

// haltExact stops the writer and, once the store has caught up, the
// ingest, and checks every binding (checkBindingsExact).
func haltExact(t *testing.T, w *ingesttest.Writer, p ingesttest.Proc, dir, source string, lay ingesttest.Layout, log *ingesttest.Log) {
	t.Helper()
	w.Halt(t)
	ingesttest.WaitEqualLog(t, dir, lay, log, p, 60*time.Second)
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	n := checkBindingsExact(t, dir, source, log)
	t.Logf("%d bindings read exactly the upstream after the transactions they cover, over %d transactions", n, log.Len())
}

// checkBindingsExact checks that the bank collections of source read,
// at every binding time, exactly the upstream after the logged
// transactions the binding's frontier covers (a transaction is never
// torn: both its tables at once). It reads contents as of each time
// (across generations, where a read of changes cannot go). It returns
// the number of bindings checked: those whose frontier the log places
// surely before or after each transaction's commit.
func checkBindingsExact(t *testing.T, dir, source string, log *ingesttest.Log) int {
	t.Helper()
	bs := storeBindings(t, dir, source)
	initial, txns := log.Read()
	n := 0
bindings:
	for _, b := range bs[1:] { // after time 0 (the snapshot, before the log)
		want := initial.Clone()
		for _, tx := range txns {
			if len(tx.Pos) != 1 {
				continue
			}
			lo, hi := frontier.Time{Partition: tx.Pos[0].Partition, Pos: tx.Pos[0].Lo}, frontier.Time{Partition: tx.Pos[0].Partition, Pos: tx.Pos[0].Hi}
			if b.Frontier.Beyond(lo) && !b.Frontier.Beyond(hi) {
				// The log knows the commit position only within [Lo, Hi]
				// (PostgreSQL: the WAL positions around the commit): this
				// binding may or may not cover it.
				continue bindings
			}
			if !b.Frontier.Beyond(hi) {
				continue
			}
			for _, set := range tx.Sets {
				if set.Op == ingesttest.Delete {
					delete(want[set.Coll], set.ID)
				} else {
					want[set.Coll][set.ID] = set.Balance
				}
			}
		}
		got := ingesttest.State{}
		for c := range want {
			rows, err := readRows(ctxT(t), dir, c, b.Time)
			if err != nil {
				t.Fatalf("binding %d (%s): read %s: %v", b.Time, b.Frontier, c, err)
			}
			got[c] = map[string]int64{}
			for row, m := range rows {
				id, bal, _ := strings.Cut(row, "|")
				v, err := strconv.ParseInt(bal, 10, 64)
				if m != 1 || err != nil {
					t.Fatalf("binding %d (%s): %s has row %s %d times", b.Time, b.Frontier, c, row, m)
				}
				got[c][id] = v
			}
		}
		if d := ingesttest.Diff(got, want); d != "" {
			t.Fatalf("binding %d (%s): the store is not the upstream after the transactions it covers: %s", b.Time, b.Frontier, d)
		}
		n++
	}
	return n
}

// TestMySQLIngestSchemaChanges: every kind of ALTER TABLE on a MariaDB
// table, made while the ingest runs and while it is stopped, is a
// re-snapshot of its collection at the ALTER: a read at the wait-recent
// answer after it equals the table upstream (SELECT in its columns then),
// every earlier such read is unchanged afterwards (reads before a change
// keep the old columns), the other table goes on, a SIGKILL replays every
// binding identically, and --resnapshot copies a collection again in the
// stream. A RENAME TABLE stops the collection with a definite error that
// names the fix.
func TestMySQLIngestSchemaChanges(t *testing.T) {
	fx := (&myHarness{m: testenv.SharedMariaDB(t)}).New(t).(*myFixture)
	const source = "mysc"
	dir, args, p := startCaughtUp(t, fx, source)
	c := fx.connect(t)
	colls := []string{fx.db + ".acc_a", fx.db + ".acc_b"}
	// seen: upstream contents (SELECT) at the wait-recent answers.
	seen := map[uint64]map[string]map[string]int64{}
	check := func(what string) uint64 {
		t.Helper()
		at := waitRecent(t, p, fx.h.m.URL(), dir, colls[0])
		snap := map[string]map[string]int64{}
		for _, coll := range colls {
			want := mySelectAll(t, c, fx.db, strings.TrimPrefix(coll, fx.db+"."))
			got, err := readRows(ctxT(t), dir, coll, at)
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("%s: %s as of %d: %v, %v\nwant (SELECT):\n%v\nstderr:\n%s", what, coll, at, got, err, want, p.Stderr())
			}
			snap[coll] = want
		}
		seen[at] = snap
		return at
	}
	recheck := func(what string) {
		t.Helper()
		for at, snap := range seen {
			for coll, want := range snap {
				if got, err := readRows(ctxT(t), dir, coll, at); err != nil || !maps.Equal(got, want) {
					t.Fatalf("%s: %s as of %d changed: %v, %v\nwas:\n%v", what, coll, at, got, err, want)
				}
			}
		}
	}
	check("caught up")

	// While the ingest runs, one ALTER kind after the other, each
	// followed by a transaction over both tables.
	both := func(set string) []string {
		return []string{"BEGIN", "UPDATE acc_a SET balance = balance + 1" + set + " WHERE id = 1", "UPDATE acc_b SET balance = balance - 1 WHERE id = 1", "COMMIT"}
	}
	for i, step := range []struct {
		what string
		ddl  string
		set  string
	}{
		{"ADD COLUMN with a default", "ALTER TABLE acc_a ADD COLUMN note varchar(10) NOT NULL DEFAULT 'n'", ", note = 'x'"},
		{"ADD COLUMN without a default", "ALTER TABLE acc_a ADD COLUMN extra int", ", extra = 3"},
		{"MODIFY (a type change)", "ALTER TABLE acc_a MODIFY extra bigint", ", extra = 4"},
		{"RENAME COLUMN", "ALTER TABLE acc_a RENAME COLUMN extra TO extra2", ", extra2 = 5"},
		{"DROP COLUMN", "ALTER TABLE acc_a DROP COLUMN note", ""},
		{"ADD COLUMN FIRST on the other table", "ALTER TABLE acc_b ADD COLUMN tag char(2) DEFAULT 'ab' FIRST", ""},
	} {
		began := time.Now()
		myExec(t, c, append([]string{step.ddl}, both(step.set)...)...)
		check(step.what)
		t.Logf("%s: readable in the new columns %s after the ALTER", step.what, time.Since(began).Round(time.Millisecond))
		if i == 2 {
			recheck("after " + step.what)
		}
	}
	recheck("after the changes while running")

	// While it is stopped: an ALTER, then changes in the new columns.
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
	myExec(t, c, "ALTER TABLE acc_a DROP COLUMN extra2", "INSERT INTO acc_a VALUES (100, 0)",
		"INSERT INTO acc_b VALUES ('zz', 101, 0)", "ALTER TABLE acc_b MODIFY tag varchar(5) DEFAULT 'cd'", "UPDATE acc_b SET tag = 'e' WHERE id = 2")
	p = runBin(t, nil, args...)
	check("after changes made while stopped")
	recheck("after changes made while stopped")

	// SIGKILL in the middle of a re-snapshot: every binding reads the
	// same afterwards.
	readsBefore := bindingReads(t, dir, source, colls...)
	myExec(t, c, "ALTER TABLE acc_a ADD COLUMN k int DEFAULT 9")
	ingesttest.WaitStderr(t, p, "re-snapshot")
	p.Kill(t)
	p = runBin(t, nil, args...)
	myExec(t, c, both(", k = 10")...)
	check("after a SIGKILL")
	readsAfter := bindingReads(t, dir, source, colls...)
	for at, want := range readsBefore {
		if got, ok := readsAfter[at]; ok && got != want {
			t.Fatalf("after the SIGKILL, the read at binding %d changed:\n%s\nwas:\n%s", at, got, want)
		}
	}
	recheck("after a SIGKILL")
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}

	// --resnapshot: copied again in the stream, reads before unchanged.
	myExec(t, c, "UPDATE acc_b SET balance = balance + 1 WHERE id = 5")
	p = runBin(t, nil, append(args, "--resnapshot", colls[1])...)
	ingesttest.WaitStderr(t, p, "re-snapshot done")
	check("after --resnapshot")
	recheck("after --resnapshot")

	// A table renamed: a definite error at the RENAME that names the fix;
	// the other table goes on.
	myExec(t, c, "RENAME TABLE acc_b TO acc_b2", "UPDATE acc_a SET balance = balance + 1 WHERE id = 2")
	at := waitRecent(t, p, fx.h.m.URL(), dir, colls[0])
	if got, err := readRows(ctxT(t), dir, colls[0], at); err != nil || !maps.Equal(got, mySelectAll(t, c, fx.db, "acc_a")) {
		t.Fatalf("%s after the other table was renamed: %v, %v", colls[0], got, err)
	}
	if _, err := readRows(ctxT(t), dir, colls[1], at); err == nil || !strings.Contains(err.Error(), "renamed") {
		t.Fatalf("%s as of %d after RENAME TABLE: %v, want its definite error", colls[1], at, err)
	}
	recheck("after RENAME TABLE")
	if code := p.Stop(t); code != 0 {
		t.Fatalf("ingest after SIGTERM: exit %d\nstderr:\n%s", code, p.Stderr())
	}
}

// TestMySQLIngestTablesPattern: with --tables 'db.*', a table created
// while the ingest runs under a write load is snapshotted in the stream
// at its CREATE and readable with exactly its rows at the wait-recent
// answer issued right after it; a table renamed into the database joins
// at its first change; a table dropped or renamed away stops with a
// definite error at its time; the others go on.
func TestMySQLIngestTablesPattern(t *testing.T) {
	fx := (&myHarness{m: testenv.SharedMariaDB(t)}).New(t).(*myFixture)
	const source = "mypat"
	lay := fx.Layout(source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	dir := t.TempDir() + "/store"
	args := []string{"ingest", "--source", "mysql", "--dsn", fx.h.m.URL(), "--tables", fx.db + ".*", "--store", dir, "--source-id", source, "--interval", "20ms"}
	p := runBin(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, p, 60*time.Second)
	c := fx.connect(t)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	exact := func(what, table string, at uint64) {
		t.Helper()
		want := mySelectAll(t, c, fx.db, table)
		if got, err := readRows(ctxT(t), dir, fx.db+"."+table, at); err != nil || !maps.Equal(got, want) {
			t.Fatalf("%s: %s as of %d: %v, %v; want (SELECT) %v\nstderr:\n%s", what, table, at, got, err, want, p.Stderr())
		}
	}
	began := time.Now()
	myExec(t, c, "CREATE TABLE newt (id int PRIMARY KEY, v varchar(5))", "INSERT INTO newt VALUES (1, 'a'), (2, 'b')")
	at := waitRecent(t, p, fx.h.m.URL(), dir, fx.db+".acc_a")
	took := time.Since(began)
	exact("created while running", "newt", at)
	t.Logf("a table created under load: readable with its rows at the wait-recent answer %s after the CREATE TABLE", took.Round(time.Millisecond))
	myExec(t, c, "UPDATE newt SET v = 'c' WHERE id = 1", "CREATE TABLE side (id int PRIMARY KEY)", "INSERT INTO side VALUES (7)")
	exact("created", "side", waitRecent(t, p, fx.h.m.URL(), dir, fx.db+".acc_a"))
	myExec(t, c, "RENAME TABLE side TO side2", "INSERT INTO side2 VALUES (8)")
	at = waitRecent(t, p, fx.h.m.URL(), dir, fx.db+".acc_a")
	exact("changed", "newt", at)
	exact("renamed into the pattern", "side2", at)
	if _, err := readRows(ctxT(t), dir, fx.db+".side", at); err == nil || !strings.Contains(err.Error(), "renamed") {
		t.Fatalf("side as of %d after RENAME TABLE: %v, want its definite error", at, err)
	}
	myExec(t, c, "DROP TABLE newt")
	at = waitRecent(t, p, fx.h.m.URL(), dir, fx.db+".acc_a")
	if _, err := readRows(ctxT(t), dir, fx.db+".newt", at); err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("newt as of %d after DROP TABLE: %v, want its definite error", at, err)
	}
	haltExact(t, w, p, dir, source, lay, log)
}

// TestMySQLIngestTwoDomains: the bank writer commits in GTID domain 1
// while the ALTERs come from domain 0, so the re-snapshot's held changes
// and its copy's position span two domains (each in its own sequence
// order, no order between them but the binlog's): every binding time
// still reads exactly the upstream after the transactions its frontier
// covers.
func TestMySQLIngestTwoDomains(t *testing.T) {
	// A server of its own: the shared one's position stays in one domain
	// for the other tests.
	fx := (&myHarness{m: testenv.StartMariaDB(t, testenv.MariaDBOptions{})}).New(t).(*myFixture)
	const source = "my2d"
	lay := fx.Layout(source)
	log := ingesttest.NewLog(ingesttest.InitialState(lay.Collections()))
	dir, args, p := startCaughtUp(t, fx, source)
	wc := fx.connect(t)
	myExec(t, wc, "SET SESSION gtid_domain_id = 1")
	fx.conn = wc // the writer's connection: its transactions in domain 1
	c := fx.connect(t)
	w := ingesttest.StartWriter(t, fx, log, ingesttest.WriterOptions{Pause: 3 * time.Millisecond})
	waitTxns := func(n int) { waitLog(log, n) }
	waitTxns(20)
	myExec(t, c, "ALTER TABLE acc_a MODIFY id bigint NOT NULL")
	waitTxns(30)
	myExec(t, c, "ALTER TABLE acc_b MODIFY balance decimal(20,0) NOT NULL")
	waitTxns(10)
	p.Kill(t)
	waitTxns(20)
	p = runBin(t, nil, args...)
	waitTxns(30)
	haltExact(t, w, p, dir, source, lay, log)
	if f := (&myDB{conn: c}).upstream(t); f.Len() != 2 {
		t.Fatalf("the server's GTID position %s, want two domains", f)
	}
}
