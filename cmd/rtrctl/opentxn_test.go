package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestWaitRecentOpenTransaction: a transaction that has written WAL and
// stays open leaves pg_current_wal_insert_lsn() beyond the flushed WAL,
// which is all a walsender sends. Nothing else flushes it until the next
// commit or running-transactions record (about every 15 s), so a probe
// that returned the insert position made wait-recent wait that long. Each
// round commits a row (synchronously or not), then writes in the open
// transaction; wait-recent, through the daemon and directly, must answer
// promptly with a time whose read holds the committed row.
func TestWaitRecentOpenTransaction(t *testing.T) {
	for _, async := range []bool{false, true} {
		name := map[bool]string{false: "synchronous_commit=on", true: "synchronous_commit=off"}[async]
		t.Run(name, func(t *testing.T) {
			u := rrNewUpstream(t, "orders")
			execAll(t, u.conn, "CREATE TABLE scratch (id int, pad text)")
			if async {
				execAll(t, u.conn, "SET synchronous_commit = off")
			}
			dir := t.TempDir()
			rrStartIngest(t, u, dir, "pg")
			u.insert(t, u.conn, 1, 1)
			if _, stderr, code := rrWaitRecent(t, dir, "pg", "daemon", ""); code != exitOK {
				t.Fatalf("warm-up wait-recent: exit %d: %s", code, stderr)
			}

			open, err := pgx.Connect(t.Context(), u.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Close(context.Background())
			tx, err := open.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())

			var durs []time.Duration
			for i := 2; i <= 21; i++ {
				u.insert(t, u.conn, i, i)
				if _, err := tx.Exec(t.Context(), "INSERT INTO scratch SELECT g, repeat('x', 100) FROM generate_series(1, 10) g"); err != nil {
					t.Fatal(err)
				}
				mode := []string{"daemon", "direct"}[i%2]
				start := time.Now()
				ts, stderr, code := rrWaitRecent(t, dir, "pg", mode, u.dsn, "--timeout", "30s")
				d := time.Since(start)
				if code != exitOK {
					t.Fatalf("round %d (%s): wait-recent exit %d after %v: %s", i, mode, code, d, stderr)
				}
				// The bound is loose on purpose (a shared machine); before
				// the fix each call took 10-21 s.
				if d > 5*time.Second {
					t.Errorf("round %d (%s): wait-recent took %v with a transaction open", i, mode, d)
				}
				durs = append(durs, d)
				if ids := rrReadIDs(t, dir, u.table, ts); !rrIsPrefix(ids, i) {
					t.Fatalf("round %d: read as of %d has %v, want 1..%d", i, ts, ids, i)
				}
			}
			p50, p99 := rrPercentiles(durs)
			slices.Sort(durs)
			t.Logf("%s, a writing transaction open: %d calls, p50 %v, p99 %v, max %v", name, len(durs), p50, p99, durs[len(durs)-1])
		})
	}
}
