package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/PID/stat; 100 on every Linux architecture Go supports.
const clockTicks = 100

// ingestProc is one `rtrctl ingest` process. Its stderr is appended to
// the run's log file; logOffset is where its own lines begin.
type ingestProc struct {
	cmd       *exec.Cmd
	started   time.Time
	logOffset int64
	logFile   *os.File
	done      chan struct{}

	mu      sync.Mutex
	rss     int64 // last VmRSS, bytes
	hwm     int64 // largest VmHWM seen, bytes
	cpu     float64
	exitCPU float64
	exitErr error
}

// startIngest starts bin with args (JSON logs on stderr, appended to
// logPath) and extra environment.
func startIngest(bin string, args, env []string, logPath string) (*ingestProc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: open ingest log: %w", err)
	}
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: open ingest log: %w", err)
	}
	all := append([]string{"--log-format", "json", "--log-level", "info"}, args...)
	cmd := exec.Command(bin, all...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &ingestProc{cmd: cmd, logOffset: off, logFile: f, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: start %s ingest: %w", bin, err)
	}
	p.started = time.Now()
	go func() {
		p.exitErr = cmd.Wait()
		p.mu.Lock()
		if ps := cmd.ProcessState; ps != nil {
			p.exitCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
			// Not the rusage's maxrss: Linux counts in it the mm the
			// child ran in before exec, which after Go's vfork-style
			// clone is the parent's, so a bench process holding a
			// large in-process topic (10M records: 2.2 GiB) would be
			// reported as the ingest's peak.
		}
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *ingestProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *ingestProc) exitText() string {
	if !p.exited() {
		return "running"
	}
	if p.exitErr != nil {
		return p.exitErr.Error()
	}
	return "exit status 0"
}

// sample reads the process's memory and CPU time from /proc.
func (p *ingestProc) sample() {
	if p.exited() {
		return
	}
	pid := p.cmd.Process.Pid
	var rss, hwm int64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch k {
			case "VmRSS":
				rss = kib(v)
			case "VmHWM":
				hwm = kib(v)
			}
		}
	}
	var cpu float64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The command name may hold spaces: fields start after the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			// f[0] is field 3 (state); utime and stime are fields 14, 15.
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				s, _ := strconv.ParseInt(f[12], 10, 64)
				cpu = float64(u+s) / clockTicks
			}
		}
	}
	p.mu.Lock()
	if rss > 0 {
		p.rss = rss
	}
	p.hwm = max(p.hwm, hwm, rss)
	p.cpu = max(p.cpu, cpu)
	p.mu.Unlock()
}

func kib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n << 10
}

// peakRSS is the largest resident set seen: VmHWM, sampled every 20-100
// ms while the process runs, right before a kill and until it exits
// after a stop.
func (p *ingestProc) peakRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hwm
}

// cpuSeconds is user+system time: exact once exited, else the last sample.
func (p *ingestProc) cpuSeconds() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.cpu, p.exitCPU)
}

// kill sends SIGKILL and waits for the process to end.
func (p *ingestProc) kill() {
	if !p.exited() {
		p.sample()
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// stop sends SIGTERM (ingest commits what is complete and exits 0) and
// waits; after timeout it kills.
func (p *ingestProc) stop(timeout time.Duration) error {
	if p.exited() {
		return fmt.Errorf("bench: rtrctl ingest exited on its own (%s)", p.exitText())
	}
	p.sample()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.After(timeout)
	// Sampled until it exits: its shutdown (the last commit) counts in
	// its peak.
	for tick := time.NewTicker(fastEvery); ; {
		select {
		case <-p.done:
			tick.Stop()
		case <-tick.C:
			p.sample()
			continue
		case <-deadline:
			tick.Stop()
			p.kill()
			return fmt.Errorf("bench: rtrctl ingest did not stop within %s of SIGTERM", timeout)
		}
		break
	}
	if p.exitErr != nil {
		return fmt.Errorf("bench: rtrctl ingest after SIGTERM: %w", p.exitErr)
	}
	return nil
}

// findResume scans the JSON log lines of path from offset for the first
// one with msg == msg and returns its "from" attribute.
func findResume(path string, offset int64, msg string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"msg":"`+msg+`"`)) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) != nil || m["msg"] != msg {
			continue
		}
		switch v := m["from"].(type) {
		case string:
			return v, true
		case nil:
			return "", true
		default:
			return fmt.Sprint(v), true
		}
	}
	return "", false
}
