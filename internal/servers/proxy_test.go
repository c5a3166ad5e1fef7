package servers

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every connection until EOF, then closes it.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// startProxy is NewProxy, closed at t.Cleanup.
func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg and reads it back, returning how long that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo differs")
	}
	c.SetDeadline(time.Time{})
	return time.Since(start)
}

func TestProxyForwards(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	roundTrip(t, c, []byte("hello"))
	roundTrip(t, c, big)
	if p.Conns() != 1 || p.Accepted() != 1 {
		t.Errorf("conns %d accepted %d, want 1 and 1", p.Conns(), p.Accepted())
	}
	// Half-close passes through: the echo server sees EOF and closes.
	c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("read to EOF: %v", err)
	}
}

func TestProxyLatency(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	base := roundTrip(t, c, []byte("x"))
	p.SetLatency(100 * time.Millisecond)
	if d := roundTrip(t, c, []byte("x")); d < 200*time.Millisecond {
		t.Errorf("round trip with 100ms each way took %v, want >= 200ms (without: %v)", d, base)
	}
	p.SetLatency(0)
	p.SetLatencyDir(ToClient, 150*time.Millisecond)
	if d := roundTrip(t, c, []byte("y")); d < 150*time.Millisecond {
		t.Errorf("round trip with 150ms to the client took %v, want >= 150ms", d)
	}
	// Latency is not a bandwidth limit: many chunks in flight share it.
	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	for range 20 {
		if _, err := c.Write([]byte("z")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := make([]byte, 20)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("pipelined chunks arrived after %v, want >= 200ms", d)
	}
}

// TestProxyLatencyManyChunks: latency is not a limit on how many chunks
// are in flight either. A stream of small writes (a binlog of small
// events) must all be in the proxy within one latency: a fixed window of
// chunks capped such a stream at window/latency chunks a second, and an
// ingest behind the proxy fell ever further behind a busy server.
func TestProxyLatencyManyChunks(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	p.SetLatencyDir(ToTarget, 3*time.Second)
	const n = 2000
	for range n {
		if _, err := c.Write([]byte("m")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	// Nothing is delivered yet (3 s), so every byte written is queued in
	// the proxy or still unread in the kernel.
	time.Sleep(200 * time.Millisecond)
	if q := p.queuedBytes(ToTarget); q < n {
		t.Errorf("%d of %d bytes written within the latency are in the proxy; it stopped reading", q, n)
	}
	got := make([]byte, n)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
}

func TestProxyBandwidth(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	p.SetBandwidth(100 << 10) // 100 KiB/s each way
	msg := bytes.Repeat([]byte("b"), 50<<10)
	// 50 KiB each way at 100 KiB/s: at least ~0.5 s (pipelined).
	if d := roundTrip(t, c, msg); d < 400*time.Millisecond {
		t.Errorf("50 KiB at 100 KiB/s took %v, want >= 400ms", d)
	}
	p.SetBandwidth(0)
	if d := roundTrip(t, c, msg); d > 2*time.Second {
		t.Errorf("unlimited again: 50 KiB took %v", d)
	}
}

func TestProxyCutRestore(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	p.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a cut connection succeeded")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("cut did not close the open connection")
	}
	// New connections are refused while cut.
	c2, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		c2.SetDeadline(time.Now().Add(5 * time.Second))
		c2.Write([]byte("x"))
		_, err = c2.Read(make([]byte, 1))
		c2.Close()
	}
	if err == nil {
		t.Fatal("a new connection passed through a cut proxy")
	}
	p.Restore()
	roundTrip(t, dial(t, p), []byte("after"))
	if n := p.Conns(); n != 1 {
		t.Errorf("%d connections open, want 1", n)
	}
}

func TestProxyStall(t *testing.T) {
	p := startProxy(t, echoServer(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	p.Stall()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 4)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read through a stalled proxy: %v, want a timeout", err)
	}
	// A new connection is accepted but goes nowhere.
	c2 := dial(t, p)
	c2.Write([]byte("new"))
	c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c2.Read(make([]byte, 3)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read on a new connection to a stalled proxy: %v, want a timeout", err)
	}
	p.Restore()
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after restore got %q, %v; want the held bytes", got, err)
	}
	got = make([]byte, 3)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "new" {
		t.Fatalf("new connection after restore got %q, %v", got, err)
	}
}

// TestProxyIndependent runs two proxies with different settings at once.
func TestProxyIndependent(t *testing.T) {
	target := echoServer(t)
	slow, fast := startProxy(t, target), startProxy(t, target)
	slow.SetLatency(150 * time.Millisecond)
	cs, cf := dial(t, slow), dial(t, fast)
	var ds, df time.Duration
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ds = roundTrip(t, cs, []byte("s")) }()
	go func() { defer wg.Done(); df = roundTrip(t, cf, []byte("f")) }()
	wg.Wait()
	if ds < 300*time.Millisecond || df >= 300*time.Millisecond {
		t.Errorf("slow proxy round trip %v (want >= 300ms), fast %v (want < 300ms)", ds, df)
	}
	fast.Cut()
	roundTrip(t, cs, []byte("still"))
}

func TestProxyDSN(t *testing.T) {
	p := startProxy(t, echoServer(t))
	got := p.DSN("postgres://u:p@127.0.0.1:5432/db?sslmode=disable")
	want := "postgres://u:p@" + p.Addr() + "/db?sslmode=disable"
	if got != want {
		t.Errorf("DSN = %q, want %q", got, want)
	}
}

// TestProxyRoundTrips: the round-trip clock counts a connection's
// handshake and each request answered in turn, and round trips taken at
// the same time on two connections once.
func TestProxyRoundTrips(t *testing.T) {
	p := startProxy(t, echoServer(t))
	ping := func(c net.Conn) {
		t.Helper()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, p)
	for i := 0; i < 3; i++ {
		ping(c)
	}
	if got := p.RoundTrips(); got != 4 {
		t.Fatalf("1 handshake + 3 pings: %d round trips, want 4", got)
	}
	// Two connections in lockstep: each step is one round trip on both.
	a, b := dial(t, p), dial(t, p)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); ping(a) }()
		go func() { defer wg.Done(); ping(b) }()
		wg.Wait()
	}
	if got := p.RoundTrips(); got < 8 || got > 10 {
		t.Fatalf("then 2 handshakes and 3 pings in parallel: %d round trips, want 8 (up to 10 as the handshakes race the pings)", got)
	}
}
