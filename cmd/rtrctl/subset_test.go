package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/ingesttest"
	"github.com/rtrctl/rtrctl/pkg/frontier"
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
	fx, db := newPGBank(t)
	fx.slot = db.newSlotName(t)
	lay := fx.Layout("pg")
	a, b := lay.Collections()[0], lay.Collections()[1]
	dir := t.TempDir() + "/store"
	args := append(fx.IngestArgs(dir, "pg"), "--interval", "20ms")

	// 1. Every table, durable past a transaction of both.
	p := startProc(t, nil, args...)
	log := bankLog(lay)
	applyLogged(t, fx, log, ingesttest.Set{Coll: a, ID: "1", Balance: 999}, ingesttest.Set{Coll: b, ID: "1", Balance: 1001})
	ingesttest.WaitEqualLog(t, dir, lay, log, binProc{p}, 60*time.Second)
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("first ingest: exit %d\n%s", code, p.stderr.Bytes())
	}
	bDurable := collectionFrontier(t, dir, b)

	// 2. Only a, while both tables change.
	p = startProc(t, nil, append(args, "--tables", a)...)
	model := log.Current()
	for i := 0; i < 30; i++ {
		id := fmt.Sprint(i%ingesttest.Accounts + 1)
		model[a][id]--
		model[b][id]++
		if _, err := fx.Apply(ctxT(t), []ingesttest.Set{{Coll: a, ID: id, Balance: model[a][id]}, {Coll: b, ID: id, Balance: model[b][id]}}); err != nil {
			t.Fatal(err)
		}
	}
	target := db.insertLSN(t)
	deadline := time.Now().Add(60 * time.Second)
	for collectionFrontier(t, dir, a) < target {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the subset ingest did not follow %s to %s\n%s", a, target, p.stderr.Bytes())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // status updates (acknowledgements) go out every second
	if got := db.slotConfirmed(t, fx.slot); got > bDurable {
		t.Errorf("the subset ingest confirmed the slot to %s, past %s where %s (not read) is durable", got, bDurable, b)
	}
	if !strings.Contains(string(p.stderr.Bytes()), b) {
		t.Errorf("the subset ingest did not say which collection holds the slot back:\n%s", p.stderr.Bytes())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("subset ingest: exit %d\n%s", code, p.stderr.Bytes())
	}

	// 3. Every table again: it resumes and b catches up exactly.
	p = startProc(t, nil, args...)
	ingesttest.WaitEqual(t, fx, dir, lay, binProc{p}, 60*time.Second)
}
