package servers

import (
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Direction is one way through a Proxy.
type Direction int

// The two directions of a proxied connection.
const (
	// ToTarget carries what the client sends to the target (for a proxy in
	// front of PostgreSQL: queries, standby status updates).
	ToTarget Direction = iota
	// ToClient carries what the target sends back (results, the
	// replication stream).
	ToClient
)

func (d Direction) String() string {
	if d == ToTarget {
		return "to target"
	}
	return "to client"
}

// Proxy is a TCP proxy for fault injection: it sits between a client (e.g.
// rtrctl ingest) and a target (e.g. PostgreSQL) and can add latency, limit
// bandwidth, cut connections and stall them. Each Proxy has its own
// settings, so several upstreams can lag differently at once. Settings
// apply to every connection, open or new, from the next chunk of bytes on.
//
//	p, err := servers.NewProxy("127.0.0.1:5432") // or testenv.StartProxy(t, ...)
//	defer p.Close()
//	p.SetLatency(300 * time.Millisecond) // every chunk, both directions
//	p.Cut()                              // close every connection, refuse new ones
//	p.Restore()
type Proxy struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	latency  [2]time.Duration
	bw       [2]int64     // bytes per second; 0 is unlimited
	nextFree [2]time.Time // token bucket: when the link is free again
	queued   [2]int64     // bytes read and not yet written, per direction
	cut      bool
	stalled  bool
	resume   chan struct{} // closed by Restore
	conns    map[*proxyConn]struct{}
	accepted int
	closed   bool
	wg       sync.WaitGroup
	// delivered is the round-trip clock: the greatest depth of a chunk
	// delivered to a client (RoundTrips).
	delivered int
}

type proxyConn struct {
	client net.Conn
	once   sync.Once
	done   chan struct{}
	// Round-trip depths (under Proxy.mu): floor is the depth of the
	// connection's TCP handshake, atTarget that of the last chunk
	// delivered to the target (what the target's chunks answer).
	floor, atTarget int

	mu     sync.Mutex
	target net.Conn
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.mu.Lock()
		if c.target != nil {
			c.target.Close()
		}
		c.mu.Unlock()
	})
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target (host:port). The caller closes it (testenv.StartProxy
// closes it at t.Cleanup).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, resume: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of bytes by d in both directions (so a
// round trip takes at least 2d longer).
func (p *Proxy) SetLatency(d time.Duration) {
	p.SetLatencyDir(ToTarget, d)
	p.SetLatencyDir(ToClient, d)
}

// SetLatencyDir delays every chunk of bytes going in direction dir by d.
// Chunks keep their order; a chunk read at time T is written at T+d or
// later.
func (p *Proxy) SetLatencyDir(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency[dir] = d
}

// SetBandwidth limits both directions to bytesPerSec each (shared by all
// connections of the proxy, like one link); 0 removes the limit.
func (p *Proxy) SetBandwidth(bytesPerSec int64) {
	p.SetBandwidthDir(ToTarget, bytesPerSec)
	p.SetBandwidthDir(ToClient, bytesPerSec)
}

// SetBandwidthDir limits direction dir to bytesPerSec; 0 removes the limit.
func (p *Proxy) SetBandwidthDir(dir Direction, bytesPerSec int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bw[dir] = max(bytesPerSec, 0)
}

// Cut closes every open connection and refuses new ones (accepted and
// closed at once) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.snapshotLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Stall stops forwarding without closing anything, like a network
// partition: open connections keep their sockets but no byte passes in
// either direction, and new connections are accepted but not connected to
// the target, until Restore. Bytes sent meanwhile are delivered after
// Restore (up to the socket buffers).
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Restore ends a Cut or a Stall.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.stalled = false, false
	close(p.resume)
	p.resume = make(chan struct{})
}

// Conns is the number of connections open through the proxy now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of connections accepted so far (refused ones
// included).
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// RoundTrips is a round-trip clock: how many round trips through the
// proxy, one after another, what was delivered so far took at least. It
// works as a Lamport clock over chunks: a chunk to the target (and a
// connection's TCP handshake, which a real link pays for) is one round
// trip deeper than the deepest chunk delivered to any client before it
// was read; a chunk to the client is as deep as the last one delivered to
// the target on its connection. Round trips taken at the same time on
// several connections count once, so it counts the round trips a client
// waited for, not the messages it sent; local work adds nothing. A test
// takes the difference of two readings.
func (p *Proxy) RoundTrips() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivered
}

// depthLocked is the depth of a chunk read now from dir's source.
func (p *Proxy) depthLocked(c *proxyConn, dir Direction) int {
	if dir == ToClient {
		return c.atTarget
	}
	return max(p.delivered, c.floor) + 1
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.snapshotLocked()
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
}

// DSN rewrites the host and port of a URL-form DSN (postgres://...,
// mysql://...) to the proxy's address.
func (p *Proxy) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		panic("servers: proxy DSN: not a URL-form DSN")
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port()))
	return u.String()
}

func (p *Proxy) snapshotLocked() []*proxyConn {
	out := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		if p.cut || p.closed {
			p.mu.Unlock()
			if tc, ok := nc.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, like a refused connection
			}
			nc.Close()
			continue
		}
		c := &proxyConn{client: nc, done: make(chan struct{})}
		c.floor = p.delivered + 1
		c.atTarget = c.floor
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// gate blocks while the proxy is stalled; it reports false when the
// connection ended (closed, or cut) meanwhile.
func (p *Proxy) gate(c *proxyConn) bool {
	for {
		p.mu.Lock()
		stalled, resume := p.stalled, p.resume
		p.mu.Unlock()
		if !stalled {
			select {
			case <-c.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-resume:
		case <-c.done:
			return false
		}
	}
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.gate(c) {
		return
	}
	tc, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.target = tc
	c.mu.Unlock()
	select {
	case <-c.done: // cut while dialing
		tc.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(c, ToTarget, c.client, tc) }()
	go func() { defer wg.Done(); p.pump(c, ToClient, tc, c.client) }()
	wg.Wait()
}

type chunk struct {
	b     []byte
	at    time.Time
	depth int // RoundTrips
}

// pump copies src to dst with the proxy's latency, bandwidth and stalls.
// At EOF it half-closes dst; on an error it closes the whole connection.
func (p *Proxy) pump(c *proxyConn, dir Direction, src, dst net.Conn) {
	// Latency delays each chunk by itself, as a link's propagation delay
	// does: how much is in flight is bounded by bytes (maxQueued), not by
	// a number of chunks, so a stream of small packets (a binlog of small
	// events) is not slowed to a chunk window per latency.
	ch := make(chan chunk, 1<<16)
	fc := newQueueLimit(maxQueued)
	go func() {
		defer close(ch)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !fc.acquire(c, n) {
					return
				}
				p.mu.Lock()
				p.queued[dir] += int64(n)
				depth := p.depthLocked(c, dir)
				p.mu.Unlock()
				select {
				case ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now(), depth: depth}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.close()
				}
				return
			}
		}
	}()
	for k := range ch {
		ok := p.deliver(c, dir, dst, k)
		p.addQueued(dir, -len(k.b))
		fc.release(len(k.b))
		if !ok {
			c.close()
			fc.release(0) // wake a reader waiting for room: it sees done
			for k := range ch {
				p.addQueued(dir, -len(k.b))
				fc.release(len(k.b))
			}
			return
		}
	}
	select {
	case <-c.done:
		return
	default:
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	} else {
		c.close()
	}
}

// maxQueued bounds the bytes one direction of a connection holds in
// flight.
const maxQueued = 64 << 20

// queueLimit counts the bytes a pump holds and makes its reader wait
// while they would exceed the limit.
type queueLimit struct {
	mu    sync.Mutex
	cond  *sync.Cond
	held  int
	limit int
}

func newQueueLimit(limit int) *queueLimit {
	q := &queueLimit{limit: limit}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// acquire waits until n more bytes fit (a chunk larger than the limit
// waits for an empty queue); false when the connection closed meanwhile.
func (q *queueLimit) acquire(c *proxyConn, n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.held > 0 && q.held+n > q.limit {
		select {
		case <-c.done:
			return false
		default:
		}
		q.cond.Wait()
	}
	q.held += n
	return true
}

func (q *queueLimit) release(n int) {
	q.mu.Lock()
	q.held -= n
	q.mu.Unlock()
	q.cond.Broadcast()
}

// addQueued counts bytes read from one side and not yet written to the
// other (queuedBytes, for tests).
func (p *Proxy) addQueued(dir Direction, n int) {
	p.mu.Lock()
	p.queued[dir] += int64(n)
	p.mu.Unlock()
}

// queuedBytes returns the bytes the proxy holds in flight in direction dir.
func (p *Proxy) queuedBytes(dir Direction) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued[dir]
}

// deliver writes one chunk after its latency, in bandwidth-sized pieces.
func (p *Proxy) deliver(c *proxyConn, dir Direction, dst net.Conn, k chunk) bool {
	p.mu.Lock()
	lat := p.latency[dir]
	p.mu.Unlock()
	if !sleepUntil(c, k.at.Add(lat)) {
		return false
	}
	// The clock moves before the bytes are written: the other side may
	// answer before Write returns.
	p.mu.Lock()
	if dir == ToClient {
		p.delivered = max(p.delivered, k.depth)
	} else {
		c.atTarget = k.depth
	}
	p.mu.Unlock()
	b := k.b
	for len(b) > 0 {
		if !p.gate(c) {
			return false
		}
		p.mu.Lock()
		bw := p.bw[dir]
		n := len(b)
		var due time.Time
		if bw > 0 {
			// Pieces of at most 1/50 s worth of bytes, so a slow link streams
			// rather than stalls.
			n = min(n, int(max(bw/50, 1)))
			start := time.Now()
			if p.nextFree[dir].After(start) {
				start = p.nextFree[dir]
			}
			due = start.Add(time.Duration(int64(n) * int64(time.Second) / bw))
			p.nextFree[dir] = due
		}
		p.mu.Unlock()
		if !due.IsZero() && !sleepUntil(c, due) {
			return false
		}
		if _, err := dst.Write(b[:n]); err != nil {
			return false
		}
		b = b[n:]
	}
	return true
}

func sleepUntil(c *proxyConn, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-c.done:
		return false
	}
}
