package replicate_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// freeAddrPort returns a loopback port nothing listens on (a moment ago).
func freeAddrPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRetryAuthFailsAtOnce: a wrong password is permanent, so the streams
// fail at once with the auth hint instead of retrying until RetryFor.
func TestRetryAuthFailsAtOnce(t *testing.T) {
	const retryFor = 30 * time.Second
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.SharedPostgres(t)
		d := newDB(t, pg, abSetup)
		const wrongPassword = "not-the-password-789"
		u, err := url.Parse(d.dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(pg.User, wrongPassword)
		var logs logBuffer
		cfg := d.cfg()
		cfg.Upstream, cfg.RetryFor, cfg.Logger = upstream.MustParsePostgres(u.String()), retryFor, logs.logger()
		t0 := time.Now()
		err = replicate.StreamPG(t.Context(), cfg, newRecSink())
		el := time.Since(t0)
		if err == nil || !strings.Contains(err.Error(), "authentication failed") || !strings.Contains(hint.Of(err), "check the user and password") {
			t.Fatalf("StreamPG = %v (hint %q), want authentication failed with its hint", err, hint.Of(err))
		}
		if el > 3*time.Second || !retry.IsPermanent(err) || retry.Transient(err) {
			t.Errorf("failed after %v (permanent %v): want at once and permanent", el, retry.IsPermanent(err))
		}
		if strings.Contains(logs.String(), "retrying") {
			t.Errorf("retried an auth failure:\n%s", logs.String())
		}
		if strings.Contains(err.Error()+logs.String(), wrongPassword) || strings.Contains(err.Error(), pg.Password) {
			t.Errorf("password in error or log: %v", err)
		}
		t.Logf("auth failure after %v: %v", el.Round(time.Millisecond), err)
	})
	t.Run("mariadb", func(t *testing.T) {
		m := testenv.SharedMariaDB(t)
		wrong := *m
		wrong.Password = "not-the-password-789"
		var logs logBuffer
		t0 := time.Now()
		err := replicate.StreamMySQL(t.Context(), replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(wrong.URL()), RetryFor: retryFor, Logger: logs.logger()}, newMySink())
		el := time.Since(t0)
		if err == nil || !strings.Contains(err.Error(), "access denied") || !strings.Contains(hint.Of(err), "check the user and password") {
			t.Fatalf("StreamMySQL = %v (hint %q), want access denied with its hint", err, hint.Of(err))
		}
		if el > 3*time.Second || !retry.IsPermanent(err) {
			t.Errorf("failed after %v (permanent %v): want at once and permanent", el, retry.IsPermanent(err))
		}
		if strings.Contains(logs.String(), "retrying") {
			t.Errorf("retried an auth failure:\n%s", logs.String())
		}
		if strings.Contains(err.Error()+logs.String(), wrong.Password) {
			t.Errorf("password in error or log: %v", err)
		}
	})
}

// TestRetryFirstConnection: nothing listening is transient, so the first
// connection is retried (and logged) until RetryFor, then the stream gives
// up with the connect hint and the cause in the chain.
func TestRetryFirstConnection(t *testing.T) {
	const retryFor = 1500 * time.Millisecond
	port := strconv.Itoa(freeAddrPort(t))
	for _, c := range []struct {
		name   string
		stream func(ctx context.Context, l *logBuffer) error
		what   string
		hint   string
	}{
		{"postgres", func(ctx context.Context, l *logBuffer) error {
			return replicate.StreamPG(ctx, replicate.PGConfig{Upstream: upstream.MustParsePostgres("postgres://rtr:hunter2@127.0.0.1:" + port + "/rtr?sslmode=disable"), Publication: "pub", Slot: "rtr_x",
				RetryFor: retryFor, MaxBackoff: 200 * time.Millisecond, Logger: l.logger()}, newRecSink())
		}, "replicate postgres: transient failure; retrying", "is PostgreSQL running"},
		{"mariadb", func(ctx context.Context, l *logBuffer) error {
			return replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL("rtr:hunter2@tcp(127.0.0.1:" + port + ")/"),
				RetryFor: retryFor, MaxBackoff: 200 * time.Millisecond, Logger: l.logger()}, newMySink())
		}, "replicate mysql: transient failure; retrying", "is the MySQL/MariaDB server running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			t0 := time.Now()
			err := c.stream(t.Context(), &logs)
			el := time.Since(t0)
			var gu *retry.GaveUpError
			if !errors.As(err, &gu) || retry.Transient(err) {
				t.Fatalf("got %v, want a *retry.GaveUpError", err)
			}
			if el < retryFor || el > retryFor+3*time.Second {
				t.Errorf("gave up after %v, RetryFor %v", el, retryFor)
			}
			if !strings.Contains(hint.Of(err), c.hint) || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("error %q (hint %q) lacks the cause or the hint", err, hint.Of(err))
			}
			if n := strings.Count(logs.String(), c.what); n < 3 || n != gu.Attempts-1 {
				t.Errorf("%d retries logged for %d attempts:\n%s", n, gu.Attempts, logs.String())
			}
			if strings.Contains(err.Error()+logs.String(), "hunter2") {
				t.Errorf("password in error or log")
			}
			t.Logf("gave up after %v, %d attempts: %v", el.Round(time.Millisecond), gu.Attempts, err)
		})
	}
}
