package recency

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// The server's logic is tested here against a fake source: an upstream
// whose position moves on its own, a prober that takes a while, and an
// ingest that follows the upstream and mints bindings. The real thing
// (PostgreSQL, rtrctl ingest, the socket) is tested in cmd/rtrctl.

type fakeUpstream struct {
	pos atomic.Uint64
}

type fakeProber struct {
	up       *fakeUpstream
	delay    time.Duration
	fail     atomic.Bool
	calls    atomic.Int64
	inflight atomic.Int64
	maxIn    atomic.Int64
}

func (p *fakeProber) Probe(ctx context.Context) (probe.Result, error) {
	p.calls.Add(1)
	n := p.inflight.Add(1)
	defer p.inflight.Add(-1)
	if n > p.maxIn.Load() {
		p.maxIn.Store(n)
	}
	pos := p.up.pos.Load() // what is visible when the probe starts
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
		return probe.Result{}, ctx.Err()
	}
	if p.fail.Load() {
		return probe.Result{}, errors.New("connection refused")
	}
	return probe.Result{Frontier: frontier.Single(frontier.DomainLSN, pos), Native: "x", Flavor: "fake"}, nil
}

func (p *fakeProber) Close() error { return nil }

// fakeIngest follows the upstream after a lag (when not stopped) and mints
// a binding every interval or at once when asked.
type fakeIngest struct {
	up      *fakeUpstream
	mu      sync.Mutex
	bs      []frontier.Binding
	prog    frontier.Frontier
	stopped atomic.Bool
	minted  int
}

func (f *fakeIngest) run(ctx context.Context, lag, interval time.Duration) {
	last := time.Now()
	for ctx.Err() == nil {
		time.Sleep(lag)
		if f.stopped.Load() {
			continue
		}
		f.mu.Lock()
		f.prog = frontier.Single(frontier.DomainLSN, f.up.pos.Load())
		if time.Since(last) >= interval {
			f.mintLocked()
			last = time.Now()
		}
		f.mu.Unlock()
	}
}

func (f *fakeIngest) mintLocked() {
	if f.prog.IsEmpty() || (len(f.bs) > 0 && f.bs[len(f.bs)-1].Frontier.Covers(f.prog)) {
		return
	}
	t := uint64(time.Now().UnixMilli())
	if n := len(f.bs); n > 0 && t <= f.bs[n-1].Time {
		t = f.bs[n-1].Time + 1
	}
	f.bs = append(f.bs, frontier.Binding{Time: t, Frontier: f.prog})
	f.minted++
}

func (f *fakeIngest) state(ctx context.Context, mint bool) (State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mint {
		f.mintLocked()
	}
	var durable uint64
	if n := len(f.bs); n > 0 {
		durable = f.bs[n-1].Time + 1
	}
	return State{Bindings: f.bs, Progress: f.prog, Durable: durable}, nil
}

func startFake(t *testing.T, probeDelay time.Duration, socket string) (*Server, *fakeUpstream, *fakeProber, *fakeIngest) {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	up := &fakeUpstream{}
	up.pos.Store(100)
	p := &fakeProber{up: up, delay: probeDelay}
	ing := &fakeIngest{up: up}
	ctx, cancel := context.WithCancel(context.Background())
	go ing.run(ctx, 2*time.Millisecond, 100*time.Millisecond)
	var nudges atomic.Int64
	s, err := StartServer(ctx, ServerConfig{Store: st, Source: "src", Socket: socket, Prober: p, State: ing.state, Nudge: func() { nudges.Add(1) }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); cancel() })
	return s, up, p, ing
}

// TestServerBatches: 200 concurrent waiters while the upstream moves cost
// a handful of probes, never two at once, and every answer covers what was
// visible when its waiter arrived.
func TestServerBatches(t *testing.T) {
	s, up, p, _ := startFake(t, 20*time.Millisecond, "-")
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				up.pos.Add(10)
			}
		}
	}()
	defer close(stop)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%20) * 5 * time.Millisecond)
			before := up.pos.Load()
			res, err := s.Wait(context.Background(), 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if res.Upstream.Pos() < before || !res.Binding.Covers(res.Upstream) {
				errs <- errors.New("stale answer")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("200 waiters: %d probes (%d rounds), %d bindings minted for waiters, %d nudges; at most %d probe(s) in flight", p.calls.Load(), st.Rounds, st.Minted, st.Nudges, p.maxIn.Load())
	if p.maxIn.Load() != 1 {
		t.Errorf("%d probes in flight at once, want 1", p.maxIn.Load())
	}
	// Arrivals span ~100ms and a probe takes 20ms: a round per probe, so
	// about 100/20 + 1 probes; allow generous slack.
	if c := p.calls.Load(); c > 20 {
		t.Errorf("%d probes for 200 waiters, want a handful", c)
	}
	if st.Answered != n {
		t.Errorf("answered %d, want %d", st.Answered, n)
	}
}

// TestServerMintsAtOnce: a waiter whose frontier the progress already
// covers gets a binding minted at once, not after the (100ms) interval.
func TestServerMintsAtOnce(t *testing.T) {
	s, up, _, ing := startFake(t, 0, "-")
	if _, err := s.Wait(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for range 10 {
		up.pos.Add(5)
		time.Sleep(10 * time.Millisecond) // progress follows within ~2ms
		start := time.Now()
		if _, err := s.Wait(context.Background(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if s.Stats().Minted == 0 {
		t.Errorf("no binding minted for a waiter")
	}
	t.Logf("worst wait %v with a 100ms mint interval", worst)
}

// TestServerTimeout: an ingest that stopped following gives a
// NotRecentError with both frontiers and exit code 3.
func TestServerTimeout(t *testing.T) {
	s, up, _, ing := startFake(t, 0, "-")
	if _, err := s.Wait(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ing.stopped.Store(true)
	up.pos.Add(1000)
	_, err := s.Wait(context.Background(), 200*time.Millisecond)
	var nr *NotRecentError
	if !errors.As(err, &nr) || !errors.Is(err, ErrNotRecent) || nr.ExitCode() != 3 {
		t.Fatalf("err = %v, want a NotRecentError", err)
	}
	msg := err.Error()
	for _, want := range []string{"timed out after 200ms", "upstream at 0/44C", "ingested up to 0/64", "an ingest is running"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// TestServerProbeRetry: a probe that fails is retried; waiters are
// answered once the upstream is back, or time out saying why.
func TestServerProbeRetry(t *testing.T) {
	s, _, p, _ := startFake(t, 0, "-")
	p.fail.Store(true)
	_, err := s.Wait(context.Background(), 300*time.Millisecond)
	var nr *NotRecentError
	if !errors.As(err, &nr) || nr.Upstream != nil || !strings.Contains(err.Error(), "probe failed: connection refused") {
		t.Fatalf("err = %v, want a NotRecentError naming the probe failure", err)
	}
	go func() { time.Sleep(200 * time.Millisecond); p.fail.Store(false) }()
	if _, err := s.Wait(context.Background(), 5*time.Second); err != nil {
		t.Fatalf("after the upstream came back: %v", err)
	}
}

// TestServerSocket speaks the line protocol.
func TestServerSocket(t *testing.T) {
	sock := SocketPath(t.TempDir(), "src")
	s, _, _, _ := startFake(t, 0, sock)
	if s.Socket() != sock {
		t.Fatalf("socket %q, want %q", s.Socket(), sock)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) Response {
		t.Helper()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		b, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return resp
	}
	if resp := ask(`{"timeout_ms":5000}`); resp.Error != "" || resp.Time == 0 || resp.Upstream == nil || resp.Binding == nil || !resp.Binding.Covers(*resp.Upstream) {
		t.Fatalf("answer %+v", resp)
	}
	if resp := ask(`hello`); !strings.Contains(resp.Error, "bad request") {
		t.Fatalf("bad request answered %+v", resp)
	}
	if resp := ask(`{}`); resp.Error != "" || resp.Time == 0 {
		t.Fatalf("default timeout answered %+v", resp)
	}
	// The client side.
	res, answered, err := askDaemon(context.Background(), sock, time.Second)
	if err != nil || !answered || res.Time == 0 {
		t.Fatalf("askDaemon: %+v %v %v", res, answered, err)
	}
	s.Close()
	if _, answered, _ := askDaemon(context.Background(), sock, time.Second); answered {
		t.Fatal("a closed server answered")
	}
}

func TestSocketPath(t *testing.T) {
	if p := SocketPath("/tmp/s", "pg"); p != "/tmp/s/sources/pg.sock" {
		t.Errorf("short: %s", p)
	}
	long := "/tmp/" + strings.Repeat("d", 120)
	p := SocketPath(long, "pg")
	if len(p) >= 100 || !strings.HasPrefix(p, "/tmp/rtrctl-") || p != SocketPath(long, "pg") || p == SocketPath(long, "other") {
		t.Errorf("long: %s", p)
	}
}

func TestFirstCovering(t *testing.T) {
	var bs []frontier.Binding
	for i, pos := range []uint64{10, 20, 20, 35} {
		bs = append(bs, frontier.Binding{Time: uint64(100 + i), Frontier: frontier.Single(frontier.DomainLSN, pos)})
	}
	for _, tc := range []struct {
		u    uint64
		want int
	}{{0, 0}, {10, 0}, {11, 1}, {20, 1}, {21, 3}, {35, 3}, {36, -1}} {
		if got := firstCovering(bs, frontier.Single(frontier.DomainLSN, tc.u)); got != tc.want {
			t.Errorf("u=%d: %d, want %d", tc.u, got, tc.want)
		}
	}
}

func TestNotRecentMessage(t *testing.T) {
	up := frontier.Single(frontier.DomainLSN, 0x16B3748)
	in := frontier.Single(frontier.DomainLSN, 0x16A0000)
	e := &NotRecentError{Source: "pg", Reason: "timed out after 10s", Upstream: &up, Ingested: &in, LastBinding: 1732900000000, Age: 12 * time.Second}
	want := "wait-recent pg: timed out after 10s: upstream at 0/16B3748, ingested up to 0/16A0000 (last binding at 1732900000000, 12s ago), no ingest is running"
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
	if e.Hint() == "" || e.ExitCode() != ExitNotRecent {
		t.Error("no hint or wrong exit code")
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back NotRecentError
	if err := json.Unmarshal(b, &back); err != nil || back.Error() != want {
		t.Errorf("JSON round trip: %v\n%s", err, back.Error())
	}
}

// TestServerHTTP answers over loopback HTTP with the socket's protocol.
func TestServerHTTP(t *testing.T) {
	s, _, _, _ := startFake(t, 0, "-")
	if _, err := s.ListenHTTP("0.0.0.0:0", false); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("a non-loopback address was accepted: %v", err)
	}
	addr, err := s.ListenHTTP("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	res, answered, err := askHTTP(context.Background(), addr, 5*time.Second)
	if err != nil || !answered || res.Time == 0 || !res.Binding.Covers(res.Upstream) {
		t.Fatalf("askHTTP: %+v %v %v", res, answered, err)
	}
	r, err := http.Get("http://" + addr + HTTPPath + "?timeout_ms=bogus")
	if err != nil {
		t.Fatal(err)
	}
	var resp Response
	json.NewDecoder(r.Body).Decode(&resp)
	r.Body.Close()
	if !strings.Contains(resp.Error, "bad timeout_ms") {
		t.Fatalf("bad timeout answered %+v", resp)
	}
	s.Close()
	if _, answered, _ := askHTTP(context.Background(), addr, time.Second); answered {
		t.Fatal("a closed server answered over HTTP")
	}
}
