package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// TestReadRecent is the seed scenario through `rtrctl read --recent`: with
// ingestion slowed by the proxy, a plain read right after a commit misses
// the new rows and a recent read sees exactly all of them.
func TestReadRecent(t *testing.T) {
	u := rrNewUpstream(t, "items")
	dir := t.TempDir()
	rrStartIngest(t, u, dir, "pg")
	u.insert(t, u.conn, 1, 3)
	if _, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", ""); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	u.proxy.SetLatencyDir(testenv.ToClient, 300*time.Millisecond)
	writer, err := pgx.Connect(t.Context(), u.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	n := 3
	for round := range 5 {
		u.insert(t, writer, n+1, n+4)
		n += 4
		plain, stderr, code := runCLI(t, "", "read", dir, u.table, "--format", "csv")
		if code != exitOK {
			t.Fatalf("round %d: plain read: exit %d: %s", round, code, stderr)
		}
		if rows := strings.Count(plain, "\n") - 1; rows >= n {
			t.Fatalf("round %d: the plain read already sees %d rows; the proxy does not slow ingestion enough", round, rows)
		}
		recent, stderr, code := runCLI(t, "", "read", dir, u.table, "--recent", "--timeout", "20s", "--format", "csv")
		if code != exitOK {
			t.Fatalf("round %d: read --recent: exit %d: %s", round, code, stderr)
		}
		if rows := strings.Count(recent, "\n") - 1; rows != n {
			t.Fatalf("round %d: read --recent sees %d rows, want exactly %d:\n%s", round, rows, n, recent)
		}
	}
	_, stderr, code := runCLI(t, "", "read", dir, u.table, "--recent", "--as-of", "5")
	if code != exitUsage || !strings.Contains(stderr, "--recent excludes") {
		t.Fatalf("--recent with --as-of: exit %d, %s", code, stderr)
	}
}
