package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

type myIngest struct {
	st     *store.Store
	cancel context.CancelFunc
	done   chan error

	mu       sync.Mutex
	sessions []uint32
}

func startMyIngest(t *testing.T, m *testenv.MariaDB, tables []string) *myIngest {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return startMyIngestOn(t, m, st, tables)
}

// startMyIngestOn is startMyIngest into st (a restart).
func startMyIngestOn(t *testing.T, m *testenv.MariaDB, st *store.Store, tables []string) *myIngest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &myIngest{st: st, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, NewMySQL(MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: tables,
			OnSession: func(id uint32) {
				r.mu.Lock()
				r.sessions = append(r.sessions, id)
				r.mu.Unlock()
			}}), st, Options{Interval: 20 * time.Millisecond, CompactEvery: -1})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *myIngest) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("ingest: %v", err)
	}
}

func (r *myIngest) lastSession() (uint32, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sessions) == 0 {
		return 0, 0
	}
	return r.sessions[len(r.sessions)-1], len(r.sessions)
}

// myDatabase is a new database on the shared MariaDB and a connection
// to it, closed when the test ends.
func myDatabase(t *testing.T) (*testenv.MariaDB, string, *client.Conn) {
	t.Helper()
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	c, err := m.Connect(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m, db, c
}

func myQuery(t *testing.T, c *client.Conn, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func myUpstream(t *testing.T, c *client.Conn) frontier.Frontier {
	t.Helper()
	r, err := c.Execute("SELECT @@global.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.GetString(0, 0)
	_, f, err := replicate.ParsePosition(true, s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// caughtUp waits for a binding covering up with every collection durable
// past it, and returns its time.
func (r *myIngest) caughtUp(t *testing.T, up frontier.Frontier, colls []string) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		bs, _, err := r.st.Bindings(t.Context(), "mysql")
		if err == nil {
			k := sort.Search(len(bs), func(i int) bool { return bs[i].Frontier.Covers(up) })
			if k < len(bs) {
				ok := true
				for _, c := range colls {
					sh, err := r.st.Shard(t.Context(), c)
					if err != nil || sh.Refresh(t.Context()) != nil || sh.Upper() <= bs[k].Time {
						ok = false
					}
				}
				if ok {
					return bs[k].Time
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("ingest did not catch up with %s", up)
	return 0
}

func (r *myIngest) rowsAt(t *testing.T, coll string, at uint64) []string {
	t.Helper()
	sh, err := r.st.Shard(t.Context(), coll)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := sh.ReadAsOf(t.Context(), at)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var out []string
	for i := 0; i < int(rec.NumRows()); i++ {
		var vals []string
		for j := 0; j < int(rec.NumCols())-1; j++ {
			vals = append(vals, rec.Column(j).ValueStr(i))
		}
		for range rec.Column(int(rec.NumCols()) - 1).(*array.Int64).Value(i) {
			out = append(out, strings.Join(vals, "|"))
		}
	}
	sort.Strings(out)
	return out
}

func selectRows(t *testing.T, c *client.Conn, q string) []string {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range r.RowNumber() {
		var vals []string
		for j := range r.ColumnNumber() {
			v, _ := r.GetString(i, j)
			vals = append(vals, v)
		}
		out = append(out, strings.Join(vals, "|"))
	}
	sort.Strings(out)
	return out
}

// TestMySQLIngestConnectionLost kills the ingest's replication connection
// while transactions stream: it reconnects from the last complete
// transaction and the store ends equal to the table, nothing lost or
// doubled.
func TestMySQLIngestConnectionLost(t *testing.T) {
	m, db, c := myDatabase(t)
	killer, err := m.Connect(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close()
	myQuery(t, c, "CREATE TABLE t (id int PRIMARY KEY, v int)", "INSERT INTO t VALUES (0, 0)")
	coll := db + ".t"
	r := startMyIngest(t, m, []string{coll})
	r.caughtUp(t, myUpstream(t, c), []string{coll})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, n := r.lastSession(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no replication session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	id := 0
	for round := range 4 {
		for range 30 {
			id++
			myQuery(t, c, "BEGIN", fmt.Sprintf("INSERT INTO t VALUES (%d, %d)", id, round), fmt.Sprintf("UPDATE t SET v = v + 1 WHERE id = %d", id/2), "COMMIT")
		}
		sid, n := r.lastSession()
		if _, err := killer.Execute(fmt.Sprintf("KILL %d", sid)); err != nil {
			t.Fatalf("kill %d: %v", sid, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for _, n2 := r.lastSession(); n2 <= n; _, n2 = r.lastSession() {
			if time.Now().After(deadline) {
				t.Fatal("no reconnect")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	at := r.caughtUp(t, myUpstream(t, c), []string{coll})
	got, want := r.rowsAt(t, coll, at), selectRows(t, c, "SELECT id, v FROM t")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("store differs from the table: %d rows vs %d", len(got), len(want))
	}
	_, n := r.lastSession()
	t.Logf("%d rows equal after %d sessions", len(got), n)
}

// TestMySQLIngestResnapshotInterrupted: a re-snapshot whose copy is
// interrupted, by its connection being killed or by the ingest being
// stopped, is not a definite error of the collection: it is copied again
// (at once, or after the restart) and the collection ends exact.
func TestMySQLIngestResnapshotInterrupted(t *testing.T) {
	m, db, c := myDatabase(t)
	locker, err := m.Connect(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	myQuery(t, c, "CREATE TABLE t (id int PRIMARY KEY, v int)", "INSERT INTO t VALUES (1, 1)")
	coll := db + ".t"
	colls := []string{coll}
	r := startMyIngest(t, m, colls)
	r.caughtUp(t, myUpstream(t, c), colls)
	// blockedCopy alters t under a table lock, so that the re-snapshot's
	// copy waits for the lock, and returns the copy's connection id.
	next := 1
	blockedCopy := func(alter string) int64 {
		t.Helper()
		next++
		myQuery(t, locker, "LOCK TABLES t WRITE", alter, fmt.Sprintf("INSERT INTO t (id, v) VALUES (%d, 2)", next))
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			res, err := c.Execute("SELECT id FROM information_schema.processlist WHERE state LIKE '%lock%' AND info LIKE CONCAT('%', ?, '%')", db)
			if err != nil {
				t.Fatal(err)
			}
			if res.RowNumber() > 0 {
				id, _ := res.GetInt(0, 0)
				return id
			}
		}
		res, _ := c.Execute("SELECT id, db, command, state, info FROM information_schema.processlist")
		t.Fatalf("no re-snapshot copy waits for the table lock: %v", res.Values)
		return 0
	}
	check := func(what, q string) {
		t.Helper()
		at := r.caughtUp(t, myUpstream(t, c), colls)
		got, want := r.rowsAt(t, coll, at), selectRows(t, c, q)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: the store holds %v, the table %v", what, got, want)
		}
	}
	id := blockedCopy("ALTER TABLE t ADD COLUMN w int")
	myQuery(t, c, fmt.Sprintf("KILL %d", id))
	myQuery(t, locker, "UNLOCK TABLES")
	check("after the copy's connection was killed", "SELECT id, v, IFNULL(w, '(null)') FROM t")
	blockedCopy("ALTER TABLE t ADD COLUMN x int")
	r.stop(t)
	myQuery(t, locker, "UNLOCK TABLES")
	r = startMyIngestOn(t, m, r.st, colls)
	check("after a restart during the copy", "SELECT id, v, IFNULL(w, '(null)'), IFNULL(x, '(null)') FROM t")
}

// TestMySQLResnapshotStagingFails is TestPGResnapshotStagingFails for
// MariaDB: a re-snapshot copy that cannot be staged fails the ingest and
// records nothing; the restart copies again, exactly.
func TestMySQLResnapshotStagingFails(t *testing.T) {
	m, db, c := myDatabase(t)
	myQuery(t, c, "CREATE TABLE t (id int PRIMARY KEY, v int)", "INSERT INTO t VALUES (1, 1)")
	coll := db + ".t"
	colls := []string{coll}
	r := startMyIngest(t, m, colls)
	r.caughtUp(t, myUpstream(t, c), colls)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, n := r.lastSession(); n > 0 {
			break // streaming: the copies directory was swept
		}
		if time.Now().After(deadline) {
			t.Fatal("no replication session")
		}
	}
	copies := filepath.Join(r.st.Dir(), "staged", "mysql", "copies")
	if err := os.RemoveAll(copies); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(copies), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copies, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	myQuery(t, c, "ALTER TABLE t ADD COLUMN w int", "INSERT INTO t VALUES (2, 2, 2)")
	select {
	case err := <-r.done:
		r.cancel()
		r.cancel = nil
		if err == nil || !strings.Contains(err.Error(), "stage the copy") {
			t.Fatalf("ingest with an unwritable copies directory: %v, want a staging error", err)
		}
		t.Logf("the ingest failed: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the ingest did not fail")
	}
	if err := os.Remove(copies); err != nil {
		t.Fatal(err)
	}
	r = startMyIngestOn(t, m, r.st, colls)
	at := r.caughtUp(t, myUpstream(t, c), colls)
	got, want := r.rowsAt(t, coll, at), selectRows(t, c, "SELECT id, v, IFNULL(w, '(null)') FROM t")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the restart: the store holds %v, the table %v", got, want)
	}
}

// TestMySQLIngestAltered: an ALTER TABLE ADD COLUMN re-snapshots the
// altered collection in the stream: it holds the table in its new
// columns; the other collection goes on.
func TestMySQLIngestAltered(t *testing.T) {
	m, db, c := myDatabase(t)
	myQuery(t, c, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)", "INSERT INTO a VALUES (1)", "INSERT INTO b VALUES (1)")
	colls := []string{db + ".a", db + ".b"}
	r := startMyIngest(t, m, colls)
	r.caughtUp(t, myUpstream(t, c), colls)
	myQuery(t, c, "ALTER TABLE a ADD COLUMN w int", "INSERT INTO a VALUES (2, 2)", "INSERT INTO b VALUES (2)")
	up := myUpstream(t, c)
	at := r.caughtUp(t, up, colls)
	if got := r.rowsAt(t, colls[0], at); strings.Join(got, ",") != strings.Join(selectRows(t, c, "SELECT id, IFNULL(w, '(null)') FROM a"), ",") {
		t.Fatalf("a after ADD COLUMN: %v, want %v", got, selectRows(t, c, "SELECT id, IFNULL(w, '(null)') FROM a"))
	}
	// b still follows the source.
	deadline := time.Now().Add(20 * time.Second)
	for {
		bs, _, _ := r.st.Bindings(t.Context(), "mysql")
		sh, _ := r.st.Shard(t.Context(), colls[1])
		if n := len(bs); n > 0 && bs[n-1].Frontier.Covers(up) && sh.Refresh(t.Context()) == nil && sh.Upper() > bs[n-1].Time {
			if got := r.rowsAt(t, colls[1], bs[n-1].Time); strings.Join(got, ",") != "1,2" {
				t.Fatalf("b: %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b did not follow")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
