package recency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// HTTPPath is where the recency server answers over HTTP:
// GET /wait-recent?timeout_ms=N returns the same JSON Response as the unix
// socket's line protocol (status 200; failures are in the body).
const HTTPPath = "/wait-recent"

// ServeHTTP answers GET HTTPPath?timeout_ms=N.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != HTTPPath {
		http.Error(w, "not found: ask GET "+HTTPPath+"?timeout_ms=N", http.StatusNotFound)
		return
	}
	var resp Response
	timeout := int64(0)
	if v := r.URL.Query().Get("timeout_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			resp.Error = fmt.Sprintf("bad timeout_ms %q: want milliseconds", truncate(v, 50))
		}
		timeout = n
	}
	if resp.Error == "" {
		ctx, cancel := context.WithCancel(r.Context())
		stop := context.AfterFunc(s.ctx, cancel)
		res, err := s.Wait(ctx, time.Duration(timeout)*time.Millisecond)
		stop()
		cancel()
		resp = toResponse(res, err)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// ListenHTTP serves ServeHTTP on addr, a loopback address unless
// allowRemote, until the server closes. It returns the address listened on
// (useful with port 0).
func (s *Server) ListenHTTP(addr string, allowRemote bool) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen http %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); !allowRemote && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("listen http: %s is not a loopback address; the recency endpoint listens on loopback only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen http: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		srv.Serve(ln)
	}()
	context.AfterFunc(s.ctx, func() { srv.Close() })
	return ln.Addr().String(), nil
}

// askHTTP asks a recency server over HTTP (addr host:port). answered is
// false when no server answered.
func askHTTP(ctx context.Context, addr string, timeout time.Duration) (Result, bool, error) {
	if timeout <= 0 {
		timeout = time.Millisecond
	}
	cl := http.Client{Timeout: timeout + 5*time.Second}
	url := "http://" + addr + HTTPPath + "?timeout_ms=" + strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Result{}, false, err
	}
	r, err := cl.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, true, fmt.Errorf("wait-recent: %w", ctx.Err())
		}
		return Result{}, false, err
	}
	defer r.Body.Close()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestLine))
	if err != nil || r.StatusCode != http.StatusOK || len(bytes.TrimSpace(body)) == 0 {
		return Result{}, false, errors.Join(err, fmt.Errorf("recency endpoint %s answered %s", addr, r.Status))
	}
	return fromResponse(body, addr)
}
