package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/store"
)

// TestWaitRecentDuringSnapshot: wait-recent and read --recent issued
// while the initial snapshot of a table runs (slowed by a proxy's
// bandwidth limit to a few seconds) wait for it and answer with a time
// as of which the rows committed before they were issued are all there;
// their stderr, not a terminal, gets no progress bar.
func TestWaitRecentDuringSnapshot(t *testing.T) {
	const rows = 60000
	u := rrNewUpstream(t, "items")
	u.insert(t, u.conn, 1, rows)
	execAll(t, u.conn, "ANALYZE items")
	u.proxy.SetBandwidth(400 << 10)
	dir := t.TempDir() + "/store"
	rrStartIngestNoWait(t, u, dir, "pg")
	progress := filepath.Join(dir, "staged", "pg", "snapshot", store.SnapshotProgressName)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(progress); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot did not start within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// status shows the snapshot, though the source has no binding yet.
	s := statusOf(t, dir)
	var sn *snapshotStatus
	for _, src := range s.Sources {
		if src.Name == "pg" {
			sn = src.Snapshot
		}
	}
	if sn == nil || !sn.Running || len(sn.Tables) != 1 || sn.Tables[0].Name != u.table || sn.Tables[0].EstimatedRows != rows || sn.Tables[0].Chunks < 1 {
		t.Errorf("status during the snapshot: %+v, want it running with %s of about %d rows", sn, u.table, rows)
	}
	text, _, _ := runCLI(t, "", "status", dir)
	if !strings.Contains(text, "SNAPSHOT") || !strings.Contains(text, u.table) {
		t.Errorf("status text during the snapshot has no SNAPSHOT section:\n%s", text)
	}
	u.insert(t, u.conn, rows+1, rows+10) // committed while the snapshot runs
	began := time.Now()
	var wg sync.WaitGroup
	var recent, recentErr string
	var recentCode int
	wg.Add(1)
	go func() {
		defer wg.Done()
		recent, recentErr, recentCode = runCLI(t, "", "read", dir, u.table, "--recent", "--timeout", "60s", "--format", "csv")
	}()
	at, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", "", "--timeout", "60s")
	took := time.Since(began)
	wg.Wait()
	if code != exitOK {
		t.Fatalf("wait-recent during the snapshot: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(progress); err == nil {
		t.Errorf("wait-recent answered while the snapshot still runs")
	}
	for _, src := range statusOf(t, dir).Sources {
		if src.Snapshot != nil {
			t.Errorf("status after the snapshot still shows it: %+v", src.Snapshot)
		}
	}
	ids := rrReadIDs(t, dir, u.table, at)
	if !rrIsPrefix(ids, rows+10) {
		t.Fatalf("as of wait-recent's %d: %d rows, want exactly 1..%d", at, len(ids), rows+10)
	}
	if recentCode != exitOK {
		t.Fatalf("read --recent during the snapshot: exit %d: %s", recentCode, recentErr)
	}
	if n := strings.Count(recent, "\n") - 1; n < rows+10 {
		t.Errorf("read --recent during the snapshot sees %d rows, want at least %d", n, rows+10)
	}
	for _, s := range []string{stderr, recentErr} {
		if strings.Contains(s, "snapshot") {
			t.Errorf("progress on a stderr that is not a terminal: %q", s)
		}
	}
	t.Logf("wait-recent waited %s for the snapshot", took.Round(time.Millisecond))
}
