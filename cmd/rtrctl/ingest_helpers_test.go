package main

// Helpers of the ingest integration tests (ingest_test.go): the rtrctl
// binary run as a separate process, the conformance suite's bank fixture
// with its replication slots, and status. The workload, the checks of a
// store and the wait for the upstream are internal/ingesttest's.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// --- the rtrctl binary -----------------------------------------------------

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binDirPrefix names the temporary directories holding the test binary,
// one per test process (suffix: its pid).
const binDirPrefix = "rtrctl-test-bin-"

// rtrctlBin builds ./cmd/rtrctl once per test binary and returns the path
// of the executable. Directories of earlier test processes that are gone
// are removed first.
func rtrctlBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		tmp := os.TempDir()
		if ents, err := os.ReadDir(tmp); err == nil {
			for _, e := range ents {
				if pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), binDirPrefix)); err == nil && strings.HasPrefix(e.Name(), binDirPrefix) && pid != os.Getpid() {
					if syscall.Kill(pid, 0) != nil {
						os.RemoveAll(filepath.Join(tmp, e.Name()))
					}
				}
			}
		}
		dir := filepath.Join(tmp, binDirPrefix+strconv.Itoa(os.Getpid()))
		if binErr = os.MkdirAll(dir, 0o755); binErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		binPath = filepath.Join(dir, "rtrctl")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/rtrctl: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is an rtrctl process.
type proc struct {
	cmd    *exec.Cmd
	stderr *testenv.LogBuffer
	stdout *testenv.LogBuffer
	done   chan struct{}
}

// startProc starts rtrctl with args (and extra environment); it gets
// SIGKILL when the test ends or the test process dies.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(rtrctlBin(t), args...)
	p := &proc{cmd: cmd, stderr: &testenv.LogBuffer{}, stdout: &testenv.LogBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.done })
	return p
}

func (p *proc) signal(s syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(s)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end and returns its exit status (-1 for
// death by a signal).
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.signal(syscall.SIGKILL)
		<-p.done
		t.Fatalf("rtrctl %v did not exit within %s\nstderr:\n%s", p.cmd.Args[1:], timeout, p.stderr.Bytes())
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill sends SIGKILL and waits. It fails the test if the process had
// already exited on its own.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("rtrctl %v exited with status %d before it was killed\nstderr:\n%s", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), p.stderr.Bytes())
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// --- the database ----------------------------------------------------------

// ingestDB is a connection to a database, for its replication slots and
// reading its tables.
type ingestDB struct {
	dsn  string
	conn *pgx.Conn
}

// newPGBank is the conformance suite's PostgreSQL fixture (the bank
// tables public.acc_a and public.acc_b, publication rtr) in a fresh
// database of the shared server, and that database for the slot helpers.
func newPGBank(t *testing.T) (*pgFixture, *ingestDB) {
	t.Helper()
	fx := (&pgHarness{pg: testenv.SharedPostgres(t)}).New(t).(*pgFixture)
	return fx, openIngestDB(t, fx.dsn)
}

// newPGDB is a fresh database of the shared server with ddl run.
func newPGDB(t *testing.T, ddl ...string) *ingestDB {
	t.Helper()
	return openIngestDB(t, testenv.SharedPostgres(t).CreateDatabase(t), ddl...)
}

// openIngestDB connects to the database dsn (until the test ends) and
// runs ddl.
func openIngestDB(t *testing.T, dsn string, ddl ...string) *ingestDB {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	execAll(t, conn, ddl...)
	return &ingestDB{dsn: dsn, conn: conn}
}

// selectRows reads table as rows the way ingesttest.Rows has a
// collection's: cols as text joined by "|", a null as "(null)" ->
// multiplicity.
func (db *ingestDB) selectRows(t *testing.T, table string, cols ...string) map[string]int64 {
	t.Helper()
	var sel []string
	for _, c := range cols {
		sel = append(sel, "coalesce("+c+"::text, '(null)')")
	}
	rows, err := db.conn.Query(ctxT(t), "SELECT "+strings.Join(sel, " || '|' || ")+" FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, v := range vals {
		out[v]++
	}
	return out
}

// newSlotName returns a cluster-wide unique slot name, dropped at cleanup
// (registered now, so it runs after the cleanup of processes started later).
func (db *ingestDB) newSlotName(t *testing.T) string {
	t.Helper()
	slot := fmt.Sprintf("rtr_ing_%d_%d", os.Getpid(), rand.Uint64()%1e9)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			var n int
			err := db.conn.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not drop slot %s", slot)
	})
	return slot
}

// createSlot creates slot and returns its start (confirmed_flush_lsn).
func (db *ingestDB) createSlot(t *testing.T, slot string) frontier.LSN {
	t.Helper()
	execAll(t, db.conn, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
	return db.slotConfirmed(t, slot)
}

func (db *ingestDB) slotConfirmed(t *testing.T, slot string) frontier.LSN {
	t.Helper()
	var s string
	if err := db.conn.QueryRow(ctxT(t), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil {
		t.Fatalf("read slot %s: %v", slot, err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (db *ingestDB) insertLSN(t *testing.T) frontier.LSN {
	t.Helper()
	return pgLSN(t, ctxT(t), db.conn, "pg_current_wal_insert_lsn")
}

// --- status -----------------------------------------------------------------

// statusOf runs `rtrctl status DIR --output json` in-process.
func statusOf(t *testing.T, dir string, args ...string) statusJSON {
	t.Helper()
	stdout, stderr, code := runCLI(t, "", append([]string{"status", dir, "--output", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("rtrctl status: exit %d\n%s", code, stderr)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("decode status %q: %v", stdout, err)
	}
	return s
}

// durableLSN is the store's durable source frontier: the least frontier
// over the collections (0 when one has none).
func durableLSN(s statusJSON) frontier.LSN {
	var least frontier.LSN
	for i, c := range s.Collections {
		var p frontier.LSN
		if c.Frontier != nil {
			p = frontier.LSN(c.Frontier.Pos())
		}
		if i == 0 || p < least {
			least = p
		}
	}
	return least
}

// durablePos is the store's durable frontier of source (0 while there is
// none).
func durablePos(ctx context.Context, dir, source string) (frontier.LSN, error) {
	st, err := store.Open(ctx, dir, store.Options{MustExist: true})
	if err != nil {
		return 0, err
	}
	d, err := st.DurableFrontier(ctx, source)
	if err != nil || d.IsEmpty() {
		return 0, err
	}
	return frontier.LSN(d.Pos()), nil
}
