package retry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
)

// deep wraps err the way the sources do: %w several times and a hint.
func deep(err error) error {
	err = fmt.Errorf("connect to postgres://rtr:xxxxx@127.0.0.1:5432/db: %w", err)
	err = hint.Wrap(err, "is it running?")
	err = fmt.Errorf("replicate postgres: %w", err)
	return fmt.Errorf("ingest: %w", err)
}

func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"} }
	my := func(code uint16) error { return &mysql.MyError{Code: code, Message: "m"} }
	tests := []struct {
		name      string
		err       error
		transient bool
		permanent bool
	}{
		{"nil", nil, false, false},
		{"plain error", errors.New("boom"), false, false},
		{"context canceled", context.Canceled, false, false},
		{"deadline exceeded", context.DeadlineExceeded, false, false},
		{"EOF", io.EOF, true, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, false},
		{"connection refused", refused, true, false},
		{"connection reset", os.NewSyscallError("read", syscall.ECONNRESET), true, false},
		{"broken pipe", syscall.EPIPE, true, false},
		{"net.ErrClosed", net.ErrClosed, true, false},
		{"dns error", &net.DNSError{Err: "no such host", Name: "db"}, true, false},
		{"pg admin shutdown 57P01", pg("57P01"), true, false},
		{"pg cannot connect now 57P03", pg("57P03"), true, false},
		{"pg connection failure 08006", pg("08006"), true, false},
		{"pg too many connections 53300", pg("53300"), true, false},
		{"pg auth 28P01", pg("28P01"), false, true},
		{"pg no pg_hba entry 28000", pg("28000"), false, true},
		{"pg no database 3D000", pg("3D000"), false, true},
		{"pg slot missing 42704", pg("42704"), false, true},
		{"pg slot invalidated 55000", &pgconn.PgError{Code: "55000", Message: "can no longer get changes from replication slot \"s\"", Detail: "This slot has been invalidated because it exceeded the maximum reserved size."}, false, true},
		{"pg other 55000", &pgconn.PgError{Code: "55000", Message: "other"}, false, false},
		{"pg syntax error", pg("42601"), false, false},
		{"pg conn closed", fmt.Errorf("receive: %w", pgconn.ErrConnClosed), true, false},
		{"mysql server shutdown 1053", my(1053), true, false},
		{"mysql connection killed 1927", my(1927), true, false},
		{"mysql too many connections 1040", my(1040), true, false},
		{"mysql server gone 2006", my(2006), true, false},
		{"mysql lost 2013", my(2013), true, false},
		{"mysql access denied 1045", my(1045), false, true},
		{"mysql unknown database 1049", my(1049), false, true},
		{"mysql binlog purged 1236", my(1236), false, true},
		{"mysql syntax error 1064", my(1064), false, false},
		{"go-mysql bad conn", fmt.Errorf("io.ReadFull(header) failed. err %v: %w", io.EOF, mysql.ErrBadConn), true, false},
		{"kafka retriable", kerr.NotLeaderForPartition, true, false},
		{"kafka broker not available", kerr.BrokerNotAvailable, true, false},
		{"kafka sasl auth", kerr.SaslAuthenticationFailed, false, true},
		{"kafka topic authorization", kerr.TopicAuthorizationFailed, false, true},
		{"kafka not retriable", kerr.InvalidRequest, false, false},
		{"kafka client closed", kgo.ErrClientClosed, false, true},
		{"marked transient", MarkTransient(errors.New("stream ended")), true, false},
		{"marked permanent over transient cause", Permanent(io.EOF), false, true},
		{"transient over permanent marker", MarkTransient(Permanent(io.EOF)), true, false},
		{"permanent cause beats a transient one", dsn.WithCause(pg("28P01"), refused), false, true},
		{"soon", Soon(errors.New("slot in use"), time.Second), true, false},
		{"gave up", &GaveUpError{What: "x", Err: io.EOF}, false, true},
		{"scrubbed keeps cause", dsn.ScrubError(refused, "hunter2"), true, false},
		{"pg connect error", &pgconn.ConnectError{Config: &pgconn.Config{}}, false, false},
		{"network down", os.NewSyscallError("write", syscall.ENETDOWN), true, false},
		{"no local port", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)}, true, false},
		{"file: not a directory", &fs.PathError{Op: "mkdir", Path: "/s/copies", Err: syscall.ENOTDIR}, false, false},
		{"file: disk full", &fs.PathError{Op: "write", Path: "/s/f", Err: syscall.ENOSPC}, false, false},
		{"file: permission", &fs.PathError{Op: "open", Path: "/s/f", Err: syscall.EACCES}, false, false},
		{"file: interrupted", &fs.PathError{Op: "read", Path: "/s/f", Err: syscall.EINTR}, true, false},
		{"i/o timeout", &fs.PathError{Op: "read", Path: "/dev/x", Err: os.ErrDeadlineExceeded}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, wrap := range []struct {
				name string
				f    func(error) error
			}{{"bare", func(e error) error { return e }}, {"deep", deep}} {
				err := tc.err
				if err != nil {
					err = wrap.f(err)
				}
				if got := Transient(err); got != tc.transient {
					t.Errorf("%s: Transient(%v) = %v, want %v", wrap.name, err, got, tc.transient)
				}
				if got := IsPermanent(err); got != tc.permanent {
					t.Errorf("%s: IsPermanent(%v) = %v, want %v", wrap.name, err, got, tc.permanent)
				}
			}
		})
	}
}

func TestMarkersKeepChain(t *testing.T) {
	base := &pgconn.PgError{Code: "57P01"}
	for _, err := range []error{MarkTransient(base), Permanent(base), Soon(base, time.Second)} {
		if !errors.Is(err, base) || err.Error() != base.Error() {
			t.Errorf("%T: lost its cause or changed the message: %q", err, err)
		}
	}
	if MarkTransient(nil) != nil || Permanent(nil) != nil || Soon(nil, 0) != nil {
		t.Error("nil not kept")
	}
}

func quickPolicy(buf *bytes.Buffer) Policy {
	return Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, What: "test op", Logger: slog.New(slog.NewTextHandler(buf, nil)), Secrets: []string{"hunter2"}}
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	t.Run("retries transient until success, logging each retry", func(t *testing.T) {
		var buf bytes.Buffer
		n := 0
		err := Do(ctx, quickPolicy(&buf), func(context.Context) error {
			n++
			if n < 4 {
				return fmt.Errorf("dial with password hunter2: %w", syscall.ECONNREFUSED)
			}
			return nil
		})
		if err != nil || n != 4 {
			t.Fatalf("Do = %v after %d calls, want nil after 4", err, n)
		}
		log := buf.String()
		if c := strings.Count(log, "level=WARN"); c != 3 {
			t.Errorf("%d warnings, want 3:\n%s", c, log)
		}
		if !strings.Contains(log, "test op: transient failure; retrying") || !strings.Contains(log, "attempt=3") {
			t.Errorf("log lacks what/attempt:\n%s", log)
		}
		if strings.Contains(log, "hunter2") {
			t.Errorf("log leaks the password:\n%s", log)
		}
	})
	t.Run("permanent fails at once", func(t *testing.T) {
		var buf bytes.Buffer
		n := 0
		perm := hint.Wrap(fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01"}), "check the password")
		err := Do(ctx, quickPolicy(&buf), func(context.Context) error { n++; return perm })
		if err != perm || n != 1 {
			t.Fatalf("Do = %v after %d calls, want the error after 1", err, n)
		}
		if buf.Len() != 0 {
			t.Errorf("logged a retry: %s", buf.String())
		}
	})
	t.Run("unknown error is not retried", func(t *testing.T) {
		n := 0
		err := Do(ctx, quickPolicy(&bytes.Buffer{}), func(context.Context) error { n++; return errors.New("x") })
		if err == nil || n != 1 {
			t.Fatalf("Do = %v after %d calls", err, n)
		}
	})
	t.Run("gives up after For", func(t *testing.T) {
		p := quickPolicy(&bytes.Buffer{})
		p.For = 50 * time.Millisecond
		t0 := time.Now()
		n := 0
		err := Do(ctx, p, func(context.Context) error { n++; return io.EOF })
		el := time.Since(t0)
		gu, ok := errors.AsType[*GaveUpError](err)
		if !ok || !errors.Is(err, io.EOF) || Transient(err) {
			t.Fatalf("Do = %v, want a non-transient *GaveUpError wrapping EOF", err)
		}
		if el < p.For || el > p.For+time.Second || gu.Attempts != n || n < 3 {
			t.Errorf("gave up after %v and %d attempts (%d calls), For %v", el, gu.Attempts, n, p.For)
		}
	})
	t.Run("progress ends the run of failures", func(t *testing.T) {
		p := quickPolicy(&bytes.Buffer{})
		p.For = 30 * time.Millisecond
		n := 0
		t0 := time.Now()
		err := Do(ctx, p, func(ctx context.Context) error {
			n++
			if time.Since(t0) > 200*time.Millisecond {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
			Progress(ctx) // each attempt gets somewhere before failing
			return io.EOF
		})
		if err != nil {
			t.Fatalf("Do = %v after %d calls: progress did not reset the run", err, n)
		}
	})
	t.Run("ctx ends the wait", func(t *testing.T) {
		p := quickPolicy(&bytes.Buffer{})
		p.Initial, p.Max = time.Hour, time.Hour
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		err := Do(cctx, p, func(context.Context) error { return io.EOF })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v, want the context's error", err)
		}
	})
	t.Run("Soon caps the wait", func(t *testing.T) {
		p := quickPolicy(&bytes.Buffer{})
		p.Initial, p.Max = time.Hour, time.Hour
		n := 0
		t0 := time.Now()
		err := Do(ctx, p, func(context.Context) error {
			n++
			if n < 3 {
				return Soon(errors.New("slot in use"), time.Millisecond)
			}
			return nil
		})
		if err != nil || time.Since(t0) > time.Second {
			t.Fatalf("Do = %v after %v", err, time.Since(t0))
		}
	})
}
