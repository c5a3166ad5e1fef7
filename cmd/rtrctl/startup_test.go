package main

// Recency while an ingest starts, and permanent errors on the direct path:
// the README's recipe `rtrctl ingest ... & t=$(rtrctl wait-recent ...)`
// runs as written, and a wrong password fails at once.

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// runTimed runs rtrctl to its end and returns stdout, stderr, the exit
// status and how long it took.
func runTimed(t *testing.T, env []string, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	t0 := time.Now()
	p := startProc(t, env, args...)
	code := p.wait(t, 120*time.Second)
	return string(p.stdout.Bytes()), string(p.stderr.Bytes()), code, time.Since(t0)
}

// dropIdleSlots drops the slots of u's database no ingest uses (each new
// store makes its own).
func dropIdleSlots(t *testing.T, u *rrUpstream) {
	t.Helper()
	if _, err := u.conn.Exec(t.Context(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active"); err != nil {
		t.Fatal(err)
	}
}

// TestWaitRecentAtIngestStart: `ingest & wait-recent` (or `read --recent`)
// with nothing in between, 20 times, each into a new store: the waiter
// finds no store, then no source, then a snapshot running, and waits for
// each instead of failing; the time it prints holds every row.
func TestWaitRecentAtIngestStart(t *testing.T) {
	u := rrNewUpstream(t, "start_t")
	u.insert(t, u.conn, 1, 200)
	const runs = 20
	var took []time.Duration
	for i := range runs {
		dir := t.TempDir() + "/store" // not there yet
		ing := startProc(t, nil, "--log-level", "warn", "ingest", "--source", "pg", "--dsn", u.dsn, "--publication", "pub", "--store", dir, "--interval", "50ms")
		var stdout, stderr string
		var code int
		var el time.Duration
		if i%2 == 0 {
			stdout, stderr, code, el = runTimed(t, nil, "wait-recent", "--store", dir, "--timeout", "60s")
		} else {
			stdout, stderr, code, el = runTimed(t, nil, "read", dir, u.table, "--recent", "--timeout", "60s", "--format", "csv")
		}
		if code != exitOK {
			t.Fatalf("run %d: exit %d\n%s\ningest:\n%s", i, code, stderr, ing.stderr.Bytes())
		}
		took = append(took, el)
		var ids int
		if i%2 == 0 {
			ts, err := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64)
			if err != nil {
				t.Fatalf("run %d: wait-recent printed %q", i, stdout)
			}
			ids = len(rrReadIDs(t, dir, u.table, ts))
		} else {
			ids = strings.Count(stdout, "\n") - 1
		}
		if ids != 200 {
			t.Errorf("run %d: %d rows as of the recent time, want 200", i, ids)
		}
		ing.signal(syscall.SIGTERM)
		if c := ing.wait(t, 30*time.Second); c != exitOK {
			t.Fatalf("run %d: ingest exit %d\n%s", i, c, ing.stderr.Bytes())
		}
		dropIdleSlots(t, u)
	}
	p50, p99 := rrPercentiles(took)
	t.Logf("%d of %d runs succeeded; wait from ingest start p50 %v, max %v", runs, runs, p50, p99)
}

// TestWaitRecentNoIngestTimesOut: a store nobody creates, and a store
// without a source, wait until --timeout and exit 3 saying why.
func TestWaitRecentNoIngestTimesOut(t *testing.T) {
	dir := t.TempDir() + "/never"
	for _, args := range [][]string{
		{"wait-recent", "--store", dir, "--timeout", "300ms"},
		{"read", dir, "public.t", "--recent", "--timeout", "300ms"},
	} {
		_, stderr, code, el := runTimed(t, nil, args...)
		if code != exitRecencyWait || !strings.Contains(stderr, "no store in") || el < 300*time.Millisecond {
			t.Errorf("%v: exit %d after %v, want 3 after the timeout, naming the missing store:\n%s", args, code, el, stderr)
		}
	}
	empty := t.TempDir()
	if _, err := store.Open(t.Context(), empty, store.Options{}); err != nil {
		t.Fatal(err)
	}
	_, stderr, code, _ := runTimed(t, nil, "wait-recent", "--store", empty, "--timeout", "300ms")
	if code != exitRecencyWait || !strings.Contains(stderr, "has no source yet") {
		t.Errorf("wait-recent on a store without a source: exit %d, want 3:\n%s", code, stderr)
	}
}

// TestDirectPathPermanentErrors: on the direct path (no ingest answers) a
// wrong password fails at once with exit 1 and a hint naming
// authentication, for --dsn and for the recorded upstream (password from
// PGPASSWORD), through wait-recent, read --recent and status; so does a
// MariaDB one. The bound asserted is far below the --timeout; the time
// measured is logged.
func TestDirectPathPermanentErrors(t *testing.T) {
	u := rrNewUpstream(t, "perm_t")
	u.insert(t, u.conn, 1, 10)
	dir := t.TempDir()
	ing := startProc(t, nil, "--log-level", "warn", "ingest", "--source", "pg", "--dsn", u.dsn, "--publication", "pub", "--store", dir, "--interval", "50ms", "--slot", "rtr_perm_"+rrRandom())
	if _, stderr, code, _ := runTimed(t, nil, "wait-recent", "--store", dir, "--timeout", "60s"); code != exitOK {
		t.Fatalf("wait-recent: exit %d\n%s", code, stderr)
	}
	ing.signal(syscall.SIGTERM)
	ing.wait(t, 30*time.Second)
	dropIdleSlots(t, u)
	const secret = "wrong-pw-4471"
	wrong := strings.Replace(u.dsn, ":"+u.pg.Password+"@", ":"+secret+"@", 1)
	maria := testenv.SharedMariaDB(t)
	myWrong := fmt.Sprintf("%s:%s@tcp(%s)/", maria.User, secret, maria.Addr())
	myDir := t.TempDir()
	fakeSource(t, myDir, "mysql", "mysql", map[string]string{"dsn": "mysql://" + maria.User + "@" + maria.Addr() + "/"}, mariadbAt(t, 1))
	const timeout = 30 * time.Second
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"wait-recent --dsn", nil, []string{"wait-recent", "--store", dir, "--source", "pg", "--dsn", wrong, "--wait-for-ingest"}},
		{"wait-recent recorded", []string{"PGPASSWORD=" + secret}, []string{"wait-recent", "--store", dir, "--wait-for-ingest"}},
		{"read --recent recorded", []string{"PGPASSWORD=" + secret}, []string{"read", dir, u.table, "--recent"}},
		{"status --dsn", nil, []string{"status", dir, "--dsn", wrong}},
		{"status --probe-recorded", []string{"PGPASSWORD=" + secret}, []string{"status", dir, "--probe-recorded"}},
		{"mariadb wait-recent --dsn", nil, []string{"wait-recent", "--store", myDir, "--source", "mysql", "--dsn", myWrong, "--wait-for-ingest"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if args[0] != "status" {
				args = append(args, "--timeout", timeout.String())
			}
			_, stderr, code, el := runTimed(t, c.env, args...)
			t.Logf("%s: exit %d after %v (timeout %v)", c.name, code, el.Round(time.Millisecond), timeout)
			if code != exitError || !strings.Contains(stderr, "authentication failed") || !strings.Contains(stderr, "hint: check the user and password") {
				t.Errorf("exit %d, want 1 naming authentication with a hint:\n%s", code, stderr)
			}
			if el > 5*time.Second {
				t.Errorf("took %v: a permanent error was retried (timeout %v)", el, timeout)
			}
			if strings.Contains(stderr, secret) {
				t.Errorf("stderr holds the password:\n%s", stderr)
			}
		})
	}
}
