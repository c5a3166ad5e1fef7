// Package retry decides whether an upstream failure is worth retrying and
// runs the retry loop that every source (PostgreSQL, MySQL/MariaDB, Kafka)
// shares.
//
// Transient classifies an error by its chain (errors.As/Is), so errors
// must be wrapped with %w all the way up: a cause flattened into a string
// no longer looks transient. Permanent and MarkTransient let a caller
// override the classification; the outermost marker in the chain wins.
//
// Do retries an operation with exponential backoff while its errors are
// transient, for at most Policy.For of consecutive failures. An operation
// that gets somewhere (a replication stream that started) reports it with
// Progress, which ends the run of failures.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rtrctl/rtrctl/internal/dsn"
)

// marked carries an explicit classification of err.
type marked struct {
	err       error
	transient bool
	soon      time.Duration // transient: cap on the next wait; 0 = none
}

func (e *marked) Error() string { return e.err.Error() }
func (e *marked) Unwrap() error { return e.err }

// MarkTransient wraps err so that Transient reports true for it (unless a
// Permanent marker wraps it further out). A nil err stays nil.
func MarkTransient(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, transient: true}
}

// Permanent wraps err so that Transient reports false for it (unless a
// MarkTransient marker wraps it further out). A nil err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err}
}

// Soon marks err transient and caps the wait before the next attempt at
// wait: for a condition expected to clear in a moment (a replication slot
// still held by a walsender that is going away).
func Soon(err error, wait time.Duration) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, transient: true, soon: wait}
}

// GaveUpError is what Do returns when failures lasted longer than
// Policy.For. It is not transient: the caller's retry budget is spent.
type GaveUpError struct {
	What     string
	For      time.Duration // how long the failures lasted
	Attempts int
	Err      error // the last failure
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("%s: giving up after %d attempts over %v: %v", e.What, e.Attempts, e.For.Round(time.Millisecond), e.Err)
}
func (e *GaveUpError) Unwrap() error { return e.Err }

// Transient reports whether err is worth retrying: the upstream may answer
// differently later (network errors, connection refused/reset, EOF,
// PostgreSQL classes 08 and 57 and 53300, MySQL connection errors and
// server-shutdown codes, Kafka retriable errors / broker loss). Errors
// wrapped by Permanent are never transient; errors wrapped by MarkTransient
// always are. Known permanent causes (authentication failures, a missing
// database or slot, a purged binlog) win over transient ones in the same
// chain. nil, context.Canceled and context.DeadlineExceeded are not
// transient, nor are the errors of this machine's files (a full disk, a
// path that cannot be written): retrying does not clear them, and an
// ingest that exits with one says what to fix.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if m, ok := errors.AsType[*marked](err); ok {
		return m.transient
	}
	if _, ok := errors.AsType[*GaveUpError](err); ok {
		return false
	}
	if knownPermanent(err) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// A bare context error is the caller's own deadline; a timeout of
		// the network is a net.Error (checked below via the sources).
		if !pgTimeout(err) {
			return false
		}
	}
	return pgTransient(err) || mysqlTransient(err) || kafkaTransient(err) || netTransient(err)
}

// IsPermanent reports whether err is known not to clear by retrying: it is
// wrapped by Permanent (outermost), or it is a known permanent cause
// (authentication, missing database or slot, purged binlog, Kafka
// authorization). An error that is neither transient nor permanent is
// unknown; sources decide what to do with those.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if m, ok := errors.AsType[*marked](err); ok {
		return !m.transient
	}
	if _, ok := errors.AsType[*GaveUpError](err); ok {
		return true
	}
	return knownPermanent(err)
}

func knownPermanent(err error) bool {
	return pgPermanent(err) || mysqlPermanent(err) || kafkaPermanent(err) || TLSRejected(err)
}

// netTransient: errors of the network and of a connection that broke.
func netTransient(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ENETDOWN) || errors.Is(err, syscall.ENETRESET) ||
		errors.Is(err, syscall.EHOSTDOWN) || errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok {
		if errno, ok := ne.(syscall.Errno); ok {
			// An errno is a net.Error whether it came from a socket or a
			// file (a full disk, a path that is not a directory): only the
			// network's own (above) and the ones the kernel calls
			// temporary (EINTR, EAGAIN, EMFILE...) are worth retrying.
			return errno.Temporary() || errno.Timeout()
		}
		return true
	}
	return false
}

// Policy says how Do retries.
type Policy struct {
	For     time.Duration // how long a run of failures may last before giving up; 0 = unlimited
	Initial time.Duration // first wait, default 100ms
	Max     time.Duration // cap, default 10s
	Logger  *slog.Logger  // each retry logged at Warn with the (password-free) error, attempt, wait; nil: slog.Default()
	What    string        // what is retried, for the log ("replicate postgres")
	// Secrets are removed from logged error text (belt and braces: errors
	// should not carry passwords in the first place).
	Secrets []string
	// Healthy is how long an attempt must run after reporting Progress for
	// its failure to start the backoff from Initial again; 0 means 30s.
	// (Progress always ends the run of failures that For bounds.)
	Healthy time.Duration
}

type progressKey struct{}

// tracker is what Progress reports into.
type tracker struct{ at atomic.Int64 } // unix nanos of the last Progress; 0 = none

// Progress tells the Do running the operation with ctx that the current
// attempt got somewhere (connected and streaming): a failure after it
// starts a new run of failures. Without a Do in ctx it does nothing. It is
// safe to call from any goroutine.
func Progress(ctx context.Context) {
	if t, ok := ctx.Value(progressKey{}).(*tracker); ok {
		t.at.Store(time.Now().UnixNano())
	}
}

// Do runs op until it returns nil, a non-transient error, ctx ends, or
// failures have lasted longer than p.For. It returns nil, op's error as it
// is (non-transient), ctx's error, or a *GaveUpError wrapping the last
// failure.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error) error {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Second
	}
	if p.Max < p.Initial {
		p.Initial = p.Max
	}
	if p.Healthy <= 0 {
		p.Healthy = 30 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	if p.What == "" {
		p.What = "operation"
	}
	tr := &tracker{}
	octx := context.WithValue(ctx, progressKey{}, tr)
	wait := p.Initial
	var since time.Time // first failure of the current run
	attempts := 0       // failures in the current run
	for {
		tr.at.Store(0)
		err := op(octx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Transient(err) {
			return err
		}
		now := time.Now()
		if at := tr.at.Load(); at != 0 {
			// The attempt got somewhere: this failure starts a new run.
			since, attempts = time.Time{}, 0
			if now.Sub(time.Unix(0, at)) >= p.Healthy {
				wait = p.Initial
			}
		}
		if since.IsZero() {
			since = now
		}
		attempts++
		if p.For > 0 && now.Sub(since) >= p.For {
			return &GaveUpError{What: p.What, For: now.Sub(since), Attempts: attempts, Err: err}
		}
		d := wait
		if m, ok := errors.AsType[*marked](err); ok && m.soon > 0 {
			d = min(d, m.soon)
		}
		if p.For > 0 {
			// Do not sleep past the deadline only to give up after it.
			d = min(d, max(p.For-now.Sub(since), time.Millisecond))
		}
		p.Logger.Warn(p.What+": transient failure; retrying", "attempt", attempts, "in", d, "failing_for", now.Sub(since).Round(time.Millisecond), "error", dsn.Scrub(err.Error(), p.Secrets...))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, p.Max)
	}
}
