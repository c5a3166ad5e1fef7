package recency

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// State is what a running ingest lends its recency server.
type State struct {
	// Bindings are the source's durable bindings, ascending. The server
	// only reads them (a reclocker's Bindings() slice may be passed as
	// is: it is only ever appended to).
	Bindings []frontier.Binding
	// Progress is the source progress the ingest has seen (possibly not
	// yet bound).
	Progress frontier.Frontier
	// Durable is a system upper below which every collection of the
	// source is committed by this ingest (0: unknown; the server then
	// reads the store).
	Durable uint64
}

// ServerConfig configures a recency server inside an ingest.
type ServerConfig struct {
	Store  *store.Store
	Source string
	// Socket is the unix socket path; empty means SocketPath(store dir,
	// source); "-" means none (only in-process Wait).
	Socket string
	// Prober reads the upstream frontier; the server owns it (one
	// connection, reused by every probe round) and closes it, also when
	// StartServer fails.
	Prober probe.Prober
	// State returns the ingest's bindings, progress and durable upper.
	// With mint it first mints a binding of the pending progress at once
	// (the reclocker's Tick(now=true)), under the same lock the ingest
	// uses for its reclocker.
	State func(ctx context.Context, mint bool) (State, error)
	// Nudge asks the change stream to report its progress now (for
	// PostgreSQL: a standby status update with reply requested). Optional.
	Nudge func()
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// ProbeTimeout bounds one probe; zero means 5s.
	ProbeTimeout time.Duration
	// Poll is how often waiting targets are re-checked; zero means 2ms.
	Poll time.Duration
}

// Stats count what a server did.
type Stats struct {
	// Rounds is the number of successful probe rounds, Probes the number
	// of probes (failed ones included).
	Rounds, Probes int64
	// Answered waiters, bindings Minted for waiters, Nudges sent.
	Answered, Minted, Nudges int64
}

// Server serves wait-recent for one source of a running ingest: waiters
// that arrive while no probe is in flight start one; those that arrive
// during a probe share the next (a probe round), so many concurrent
// waiters cost a handful of probes over one upstream connection. Each
// waiter is answered as soon as a binding covers its upstream frontier and
// the source's collections are durable past it.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	socket string
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	probeKick chan struct{}
	watchKick chan struct{}

	mu          sync.Mutex
	queue       []*waiter // arrived, waiting for the next probe round
	targets     []*waiter // probed, waiting for a binding and durability
	last        State     // as last read
	probeErr    error     // of the last failed probe
	collections []string
	collAt      time.Time
	collAll     int // the store's collections when collections was read
	closed      bool

	rounds, probes, answered, minted, nudges atomic.Int64
}

type waiter struct {
	done     chan outcome // buffered 1
	finished atomic.Bool  // answered, timed out or gone

	// under Server.mu
	upstream *frontier.Frontier
	bound    *frontier.Binding
}

type outcome struct {
	res Result
	err error
}

// StartServer starts a recency server; it runs until ctx ends or Close.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Store == nil || cfg.Prober == nil || cfg.State == nil || cfg.Source == "" {
		return nil, errors.New("start recency server: Store, Source, Prober and State are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Millisecond
	}
	s := &Server{cfg: cfg, log: cfg.Logger, probeKick: make(chan struct{}, 1), watchKick: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if cfg.Socket != "-" {
		s.socket = cfg.Socket
		if s.socket == "" {
			s.socket = SocketPath(cfg.Store.Dir(), cfg.Source)
		}
		ln, err := listenUnix(s.socket)
		if err != nil {
			s.cancel()
			cfg.Prober.Close()
			return nil, fmt.Errorf("start recency server for %s: %w", cfg.Source, err)
		}
		s.ln = ln
		s.wg.Add(1)
		go s.accept()
	}
	s.wg.Add(2)
	go s.probeLoop()
	go s.watchLoop()
	return s, nil
}

// SocketPath is the default socket of a source's recency server: an
// absolute path DIR/sources/<source>.sock, or, when that is too long for
// a unix socket, a path in the temporary directory named by its hash.
func SocketPath(storeDir, source string) string {
	var b strings.Builder
	for _, c := range []byte(source) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	p := filepath.Join(storeDir, "sources", b.String()+".sock")
	if strings.Contains(storeDir, "://") {
		// A store on object storage (s3://): the socket is local to the
		// ingest's host, in the temporary directory.
		p = storeDir + "/sources/" + b.String()
	} else if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if len(p) < 100 && !strings.Contains(storeDir, "://") {
		return p
	}
	h := sha256.Sum256([]byte(p))
	return filepath.Join(os.TempDir(), "rtrctl-"+hex.EncodeToString(h[:8])+".sock")
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// The caller holds the source's lock, so a socket file left here is
	// a dead ingest's.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// Socket is the path the server listens on ("" for none).
func (s *Server) Socket() string { return s.socket }

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Rounds: s.rounds.Load(), Probes: s.probes.Load(), Answered: s.answered.Load(), Minted: s.minted.Load(), Nudges: s.nudges.Load()}
}

// Close stops the server, closes the socket (removing its file) and the
// prober. Waiters still waiting get an error; socket clients see their
// connection close and wait directly.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	if s.ln != nil {
		s.ln.Close()
	}
	s.wg.Wait()
	return s.cfg.Prober.Close()
}

var errServerStopped = errors.New("the ingest's recency server stopped")

// Wait waits for recency of the server's source, like the package's Wait
// but answered by the running ingest.
func (s *Server) Wait(ctx context.Context, timeout time.Duration) (Result, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	w := &waiter{done: make(chan outcome, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{}, errServerStopped
	}
	s.queue = append(s.queue, w)
	s.mu.Unlock()
	kick(s.probeKick)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case o := <-w.done:
		return o.res, o.err
	case <-t.C:
	case <-ctx.Done():
		w.finished.Store(true)
		return Result{}, fmt.Errorf("wait-recent %s: %w", s.cfg.Source, ctx.Err())
	case <-s.ctx.Done():
		w.finished.Store(true)
		return Result{}, errServerStopped
	}
	w.finished.Store(true)
	select {
	case o := <-w.done:
		return o.res, o.err
	default:
	}
	return Result{}, s.notRecent(w, fmt.Sprintf("timed out after %s", timeout))
}

func (s *Server) notRecent(w *waiter, reason string) *NotRecentError {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &NotRecentError{Source: s.cfg.Source, Reason: reason, Upstream: w.upstream, Running: true}
	if w.upstream == nil && s.probeErr != nil {
		e.ProbeError = s.probeErr.Error()
	}
	if n := len(s.last.Bindings); n > 0 {
		b := s.last.Bindings[n-1]
		e.Ingested, e.LastBinding, e.Age = &b.Frontier, b.Time, ageOf(time.Now(), b.Time)
	}
	if w.bound != nil {
		e.Bound, e.Durable = w.bound.Time, s.last.Durable
	}
	return e
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// probeLoop runs probe rounds: it takes every waiter queued so far, probes
// once, and hands them all that frontier. Waiters queued during the probe
// wait for the next round. A failed probe is retried (the waiters stay
// queued) until they time out.
func (s *Server) probeLoop() {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.probeKick:
		}
		for s.ctx.Err() == nil {
			s.mu.Lock()
			batch := live(s.queue)
			s.queue = nil
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			s.probes.Add(1)
			pstart := time.Now()
			pctx, cancel := context.WithTimeout(s.ctx, s.cfg.ProbeTimeout)
			res, err := s.cfg.Prober.Probe(pctx)
			cancel()
			s.log.Debug("recency: probe round", "waiters", len(batch), "upstream", res.Frontier, "took", time.Since(pstart), "error", err)
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				s.mu.Lock()
				if s.probeErr == nil {
					s.log.Warn("recency: probing the upstream failed; retrying", "error", err)
				}
				s.probeErr = err
				s.queue = append(batch, s.queue...)
				s.mu.Unlock()
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			s.rounds.Add(1)
			u := res.Frontier
			s.mu.Lock()
			s.probeErr = nil
			for _, w := range batch {
				w.upstream = &u
			}
			s.targets = append(s.targets, batch...)
			s.mu.Unlock()
			kick(s.watchKick)
		}
	}
}

func live(ws []*waiter) []*waiter {
	out := ws[:0:0]
	for _, w := range ws {
		if !w.finished.Load() {
			out = append(out, w)
		}
	}
	return out
}

// watchLoop answers probed waiters as bindings cover them and the store
// becomes durable past the binding.
func (s *Server) watchLoop() {
	defer s.wg.Done()
	var lastNudge time.Time
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		s.targets = live(s.targets)
		ts := append([]*waiter(nil), s.targets...)
		s.mu.Unlock()
		if len(ts) == 0 {
			select {
			case <-s.ctx.Done():
				return
			case <-s.watchKick:
			}
			continue
		}
		s.check(ts, &lastNudge)
		t.Reset(s.cfg.Poll)
		select {
		case <-s.ctx.Done():
			return
		case <-s.watchKick:
			if !t.Stop() {
				<-t.C
			}
		case <-t.C:
		}
	}
}

// check binds what it can, mints when the progress already covers a
// waiter, nudges the stream when it does not, and answers the durable.
func (s *Server) check(ts []*waiter, lastNudge *time.Time) {
	st, err := s.cfg.State(s.ctx, false)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("recency: read ingest state", "error", err)
		}
		return
	}
	bind := func(st State) (mint, behind bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.last = st
		for _, w := range ts {
			if w.bound != nil {
				continue
			}
			if k := firstCovering(st.Bindings, *w.upstream); k >= 0 {
				b := st.Bindings[k]
				w.bound = &b
			} else if st.Progress.Covers(*w.upstream) {
				mint = true
			} else {
				behind = true
			}
		}
		return mint, behind
	}
	mint, behind := bind(st)
	if mint {
		st, err = s.cfg.State(s.ctx, true)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("recency: mint a binding", "error", err)
			}
			return
		}
		s.minted.Add(1)
		_, behind = bind(st)
	}
	if behind && s.cfg.Nudge != nil && time.Since(*lastNudge) >= 20*time.Millisecond {
		s.cfg.Nudge()
		s.nudges.Add(1)
		*lastNudge = time.Now()
	}
	durable := st.Durable
	checkedStore := false
	for _, w := range ts {
		s.mu.Lock()
		b := w.bound
		s.mu.Unlock()
		if b == nil {
			continue
		}
		if durable <= b.Time && !checkedStore {
			checkedStore = true
			if d, err := s.storeDurable(); err == nil && d > durable {
				durable = d
			}
		}
		if durable > b.Time {
			s.log.Debug("recency: answer", "time", b.Time, "binding", b.Frontier, "upstream", *w.upstream)
			w.finished.Store(true)
			w.done <- outcome{res: Result{Time: b.Time, Upstream: *w.upstream, Binding: b.Frontier, Source: s.cfg.Source, Via: "daemon"}}
			s.answered.Add(1)
		}
	}
}

// storeDurable reads the least upper of the source's collections from the
// store (the collection list is re-read every few seconds, and at once
// when the store has a collection more or less: one an ingest added
// while it runs must not be missing from the least upper).
func (s *Server) storeDurable() (uint64, error) {
	all, err := s.cfg.Store.Collections(s.ctx)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	cs, at, n := s.collections, s.collAt, s.collAll
	s.mu.Unlock()
	if cs == nil || time.Since(at) > 5*time.Second || n != len(all) {
		cs, err = s.cfg.Store.SourceCollections(s.ctx, s.cfg.Source)
		if err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.collections, s.collAt, s.collAll = cs, time.Now(), len(all)
		s.mu.Unlock()
	}
	return durableUpper(s.ctx, s.cfg.Store, cs)
}

// Request is one line a client sends on the socket.
type Request struct {
	// TimeoutMS bounds the wait; 0 means DefaultTimeout.
	TimeoutMS int64 `json:"timeout_ms"`
}

// Response is the line the server answers each request with: Time,
// Upstream and Binding on success; Error otherwise, with NotRecent set
// when recency was not reached (a timeout).
type Response struct {
	Time      uint64             `json:"time,omitempty"`
	Upstream  *frontier.Frontier `json:"upstream,omitempty"`
	Binding   *frontier.Frontier `json:"binding,omitempty"`
	Error     string             `json:"error,omitempty"`
	NotRecent *NotRecentError    `json:"not_recent,omitempty"`
}

const maxRequestLine = 64 << 10

func (s *Server) accept() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			s.serveConn(c)
		}()
	}
}

// serveConn answers requests, one line each, in order, until the client
// closes the connection or the server stops.
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReaderSize(c, 4096)
	for {
		line, err := readLine(r)
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				return
			}
			continue
		}
		var resp Response
		var req Request
		if jerr := json.Unmarshal(line, &req); jerr != nil || req.TimeoutMS < 0 {
			resp.Error = fmt.Sprintf("bad request %q: want {\"timeout_ms\": N} on one line", truncate(string(line), 200))
		} else {
			res, werr := s.Wait(s.ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
			resp = toResponse(res, werr)
		}
		b, _ := json.Marshal(resp)
		if _, werr := c.Write(append(b, '\n')); werr != nil || err != nil {
			return
		}
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		frag, err := r.ReadSlice('\n')
		out = append(out, frag...)
		if len(out) > maxRequestLine {
			return nil, errors.New("request line too long")
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return out, err
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func toResponse(res Result, err error) Response {
	if err != nil {
		resp := Response{Error: err.Error()}
		var nr *NotRecentError
		if errors.As(err, &nr) {
			resp.NotRecent = nr
		}
		return resp
	}
	u, b := res.Upstream, res.Binding
	return Response{Time: res.Time, Upstream: &u, Binding: &b}
}

// askDaemon sends one request to the socket. answered is false when no
// server answered (no socket, refused, or the connection ended before the
// answer): the caller then waits directly.
func askDaemon(ctx context.Context, socket string, timeout time.Duration) (Result, bool, error) {
	if timeout <= 0 {
		timeout = time.Millisecond
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Result{}, false, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(timeout + 5*time.Second))
	req, _ := json.Marshal(Request{TimeoutMS: max(timeout.Milliseconds(), 1)})
	if _, err := c.Write(append(req, '\n')); err != nil {
		return Result{}, ctx.Err() != nil, err
	}
	line, err := readLine(bufio.NewReader(c))
	if ctx.Err() != nil {
		return Result{}, true, fmt.Errorf("wait-recent: %w", ctx.Err())
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return Result{}, false, err
	}
	return fromResponse(line, socket)
}

// fromResponse turns a server's answer into Wait's results.
func fromResponse(line []byte, where string) (Result, bool, error) {
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Result{}, true, fmt.Errorf("wait-recent: bad answer from the ingest's recency server at %s: %w", where, err)
	}
	if resp.NotRecent != nil {
		return Result{}, true, resp.NotRecent
	}
	if resp.Error != "" {
		if resp.Error == errServerStopped.Error() {
			return Result{}, false, errServerStopped
		}
		return Result{}, true, fmt.Errorf("wait-recent: the ingest's recency server: %s", resp.Error)
	}
	if resp.Upstream == nil || resp.Binding == nil || resp.Time == 0 {
		return Result{}, true, fmt.Errorf("wait-recent: incomplete answer from the ingest's recency server at %s: %s", where, truncate(string(line), 200))
	}
	return Result{Time: resp.Time, Upstream: *resp.Upstream, Binding: *resp.Binding}, true, nil
}
