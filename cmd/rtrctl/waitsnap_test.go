package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtrctl/rtrctl/internal/testenv"
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
	// One more wait-recent, its stderr a terminal: it draws the bar.
	tty := startOnTerminal(t, "wait-recent", "--store", dir, "--source-id", "pg", "--timeout", "60s")
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
	screen := tty.wait(t)
	if !strings.Contains(screen, "snapshot") || !strings.Contains(screen, "rows") {
		t.Errorf("wait-recent on a terminal drew no progress bar: %q", screen)
	}
	t.Logf("wait-recent waited %s for the snapshot", took.Round(time.Millisecond))
}

// openPTY opens a new pseudo-terminal: its controlling side (closed at
// t.Cleanup) and its terminal side (the caller closes it).
func openPTY(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("name the pseudo-terminal: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal's other end: %v", err)
	}
	return ptmx, pts
}

// terminalProc is rtrctl run with its stderr on a pseudo-terminal.
type terminalProc struct {
	cmd    *exec.Cmd
	screen *testenv.LogBuffer
	read   chan struct{}
}

// startOnTerminal starts rtrctl args with stderr on a new pseudo-terminal
// (stdout discarded) and reads what it draws there.
func startOnTerminal(t *testing.T, args ...string) *terminalProc {
	t.Helper()
	ptmx, pts := openPTY(t)
	defer pts.Close()
	p := &terminalProc{cmd: exec.Command(rtrctlBin(t), args...), screen: &testenv.LogBuffer{}, read: make(chan struct{})}
	p.cmd.Stderr = pts
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	go func() {
		defer close(p.read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			p.screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return p
}

// wait waits for the process to exit 0 and returns what it drew.
func (p *terminalProc) wait(t *testing.T) string {
	t.Helper()
	err := p.cmd.Wait()
	select { // what is still in the terminal's buffer
	case <-p.read:
	case <-time.After(200 * time.Millisecond):
	}
	if err != nil {
		t.Fatalf("rtrctl %v on a terminal: %v\n%s", p.cmd.Args[1:], err, p.screen.Bytes())
	}
	return string(p.screen.Bytes())
}
