package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// collectionFrontier is the source frontier the store holds collection
// durably to (0 when it has none).
func collectionFrontier(t *testing.T, dir, collection string) frontier.LSN {
	t.Helper()
	for _, c := range statusOf(t, dir).Collections {
		if c.Name == collection && c.Frontier != nil {
			return frontier.LSN(c.Frontier.Pos())
		}
	}
	return 0
}

// TestIngestTablesSubsetHoldsTheSlot: an ingest of a --tables subset of
// the publication acknowledges the slot no further than the collections of
// the source it does not read, so a later ingest of every table resumes
// where the store ends (it used to fail for ever with "replication slot
// is past the start position", having lost the other tables' changes).
func TestIngestTablesSubsetHoldsTheSlot(t *testing.T) {
	db := newIngestDB(t,
		"CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"ALTER TABLE a REPLICA IDENTITY FULL", "ALTER TABLE b REPLICA IDENTITY FULL",
		"CREATE PUBLICATION rtr FOR TABLE a, b",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 20) g", "INSERT INTO b SELECT g, 0 FROM generate_series(1, 20) g")
	slot := db.newSlotName(t)
	dir := t.TempDir() + "/store"

	// 1. Every table.
	p := startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "20ms")...)
	waitCaughtUp(t, db, dir, p)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("first ingest: exit %d\n%s", code, p.stderr.bytes())
	}
	bDurable := collectionFrontier(t, dir, "public.b")

	// 2. Only a, while both tables change.
	p = startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "20ms", "--tables", "public.a")...)
	for i := 0; i < 30; i++ {
		execAll(t, db.conn, fmt.Sprintf("BEGIN; UPDATE a SET v = v + 1 WHERE id = %d; UPDATE b SET v = v + 1 WHERE id = %d; COMMIT", i%20+1, i%20+1))
	}
	target := db.insertLSN(t)
	deadline := time.Now().Add(60 * time.Second)
	for collectionFrontier(t, dir, "public.a") < target {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the subset ingest did not follow public.a to %s\n%s", target, tail(p))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // status updates (acknowledgements) go out every second
	if got := db.slotConfirmed(t, slot); got > bDurable {
		t.Errorf("the subset ingest confirmed the slot to %s, past %s where public.b (not read) is durable", got, bDurable)
	}
	if !strings.Contains(string(p.stderr.bytes()), "public.b") {
		t.Errorf("the subset ingest did not say which collection holds the slot back:\n%s", p.stderr.bytes())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("subset ingest: exit %d\n%s", code, p.stderr.bytes())
	}

	// 3. Every table again: it resumes and b catches up exactly.
	p = startProc(t, nil, ingestArgs(db, slot, dir, "--interval", "20ms")...)
	waitCaughtUp(t, db, dir, p)
	for _, tab := range []string{"a", "b"} {
		want := db.tableRows(t, tab, []string{"id", "v"})
		got := storeRows(t, dir, "public."+tab)
		if !equalRows(got, want) {
			t.Errorf("public.%s after the full ingest: %s", tab, rowsDiff(got, want))
		}
	}
}

// storeRows reads collection as of its durable upper, in tableRows' form.
func storeRows(t *testing.T, dir, collection string) map[string]int64 {
	t.Helper()
	st, err := store.Open(ctxT(t), dir, store.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.Shard(ctxT(t), collection)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Refresh(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	rows, err := readAsOf(ctxT(t), sh, sh.Upper()-1)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
