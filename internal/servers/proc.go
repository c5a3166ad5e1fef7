package servers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultStartTimeout bounds how long a Launch waits for a server to accept
// connections when ctx has no earlier deadline.
const defaultStartTimeout = 120 * time.Second

// stopTimeout bounds a graceful shutdown before the server is killed.
const stopTimeout = 60 * time.Second

// bindAttempts is how often a server start is retried with a new port when
// another process took the port between picking and binding it.
const bindAttempts = 5

// MissingBinaryError reports a server binary that is not installed.
type MissingBinaryError struct {
	Binary  string   // e.g. "initdb"
	Package string   // the Debian package that ships it
	Looked  []string // where it was looked for
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("%s not found (looked in %s and PATH); install the Debian package %s: run scripts/install-deps.sh as root",
		e.Binary, strings.Join(e.Looked, ", "), e.Package)
}

// findBinary returns the first executable named name in dirs, else in PATH.
func findBinary(name, pkg string, dirs ...string) (string, error) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var looked []string
	for _, d := range dirs {
		if d != "" {
			looked = append(looked, d)
		}
	}
	return "", &MissingBinaryError{Binary: name, Package: pkg, Looked: looked}
}

// randomPassword returns 24 hex characters: safe in URLs, key=value DSNs and
// SQL string literals without quoting.
func randomPassword() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random: %v", err)) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Callers retry with a new port when the server then fails to bind it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAs is the unprivileged account a server runs under when we are root.
type runAs struct {
	uid, gid uint32
	name     string
}

// lookupRunAs returns the account named name when the process is root and nil
// otherwise (servers then run as the current user).
func lookupRunAs(name, pkg string) (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %q (servers refuse to run as root, so they run as %q; it is created by the Debian package %s, run scripts/install-deps.sh): %w", name, name, pkg, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of %q: %w", name, err)
	}
	return &runAs{uid: uint32(uid), gid: uint32(gid), name: name}, nil
}

// chownTree gives dir and everything below it to ra (a no-op for nil ra).
func chownTree(dir string, ra *runAs) error {
	if ra == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(ra.uid), int(ra.gid))
	})
}

// checkTraversable fails when ra cannot reach dir because some parent
// directory denies it search permission.
func checkTraversable(dir string, ra *runAs) error {
	if ra == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		allowed := mode&0o001 != 0 ||
			(ok && st.Uid == ra.uid && mode&0o100 != 0) ||
			(ok && st.Gid == ra.gid && mode&0o010 != 0)
		if !allowed {
			return fmt.Errorf("directory %s (mode %#o) is not searchable by user %s, who runs the server; "+
				"run: chmod o+x %s (or use a directory whose parents others may search, e.g. under /tmp)", p, mode, ra.name, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// procOptions say how a server process is attached to its parent.
type procOptions struct {
	// Detached servers outlive the launching process: their own session,
	// no parent-death signal.
	detached bool
	runAs    *runAs
	dir      string // working directory
	logPath  string // stdout and stderr are appended here
	env      []string
}

// command builds a server command according to po.
func command(po procOptions, path string, args ...string) (*exec.Cmd, func(), error) {
	logf, err := os.OpenFile(po.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = po.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), po.env...)
	attr := &syscall.SysProcAttr{}
	if po.detached {
		attr.Setsid = true
	} else {
		// Own process group, so a ^C to the test's terminal does not
		// reach the server before the test's cleanup stops it.
		attr.Setpgid = true
		attr.Pdeathsig = syscall.SIGKILL
	}
	if po.runAs != nil {
		attr.Credential = &syscall.Credential{Uid: po.runAs.uid, Gid: po.runAs.gid}
	}
	cmd.SysProcAttr = attr
	return cmd, func() { logf.Close() }, nil
}

// runTool runs a setup program (initdb, mariadb-install-db) to completion
// and returns its output on failure.
func runTool(ctx context.Context, po procOptions, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = po.dir
	cmd.Env = append(os.Environ(), po.env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if po.runAs != nil {
		attr.Credential = &syscall.Credential{Uid: po.runAs.uid, Gid: po.runAs.gid}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run %s: %w\n%s", filepath.Base(path), err, tail(out.Bytes(), 40))
	}
	return nil
}

// server is a started server process that this process waits for.
type server struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	err    error         // exit status, valid after done
	closer func()
}

func startServer(po procOptions, path string, args ...string) (*server, error) {
	cmd, closer, err := command(po, path, args...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		closer()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(path), err)
	}
	s := &server{cmd: cmd, done: make(chan struct{}), closer: closer}
	go func() {
		s.err = cmd.Wait()
		closer()
		close(s.done)
	}()
	return s, nil
}

// exited reports whether the process has exited.
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to stopTimeout (or ctx) for the exit, and kills
// the process if it is still there.
func (s *server) stop(ctx context.Context, sig syscall.Signal) error {
	if s.exited() {
		return nil
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal server: %w", err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	case <-timer.C:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("server pid %d did not stop after %v; killed it", s.cmd.Process.Pid, stopTimeout)
}

// readTail returns the last lines of the file at path, for error messages.
func readTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const maxBytes = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(fi.Size()-maxBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return tail(b, lines)
}

func tail(b []byte, lines int) string {
	s := strings.TrimRight(string(b), "\n")
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// withStartDeadline bounds ctx by defaultStartTimeout.
func withStartDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, defaultStartTimeout)
}

// pollUntil calls try every interval until it succeeds, the server exits,
// or ctx ends. It returns the last error of try on failure.
func pollUntil(ctx context.Context, s *server, try func(context.Context) error) error {
	var last error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = try(attemptCtx)
		cancel()
		if last == nil {
			return nil
		}
		if s != nil && s.exited() {
			return fmt.Errorf("server exited early (%v): %w", s.err, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w (last attempt: %w)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pidAlive reports whether a process with this pid exists.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// waitPidGone polls until pid is gone or ctx ends.
func waitPidGone(ctx context.Context, pid int) error {
	for pidAlive(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for pid %d to exit: %w", pid, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
