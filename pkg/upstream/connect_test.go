package upstream_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestConnectErrorsKeepCause: Connect keep the driver's error
// in the chain (so internal/retry classifies it) while the message and
// hint stay as before and hold no password. A wrong password is permanent
// and fails at once; nothing listening is transient.
func TestConnectErrorsKeepCause(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	maria := testenv.SharedMariaDB(t)
	port := strconv.Itoa(closedPort(t))
	const secret = "not-the-password-321"
	wrongPG := *pg
	wrongPG.Password = secret
	wrongMaria := *maria
	wrongMaria.Password = secret
	connectPG := func(s string) error {
		p, err := upstream.ParsePostgres(s)
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Connect(t.Context())
		if err == nil {
			c.Close(context.Background())
		}
		return err
	}
	connectMy := func(s string) error {
		m, err := upstream.ParseMySQL(s)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Connect(t.Context())
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, c := range []struct {
		name      string
		connect   func() error
		transient bool
		msg, hint string
	}{
		{"pg wrong password", func() error { return connectPG(wrongPG.DSN()) }, false, `authentication failed for user "rtr" (28P01)`, "check the user and password"},
		{"pg refused", func() error {
			return connectPG("postgres://rtr:" + secret + "@127.0.0.1:" + port + "/rtr?sslmode=disable")
		}, true, "cannot connect: connect: connection refused", "is PostgreSQL running"},
		{"mariadb wrong password", func() error { return connectMy(wrongMaria.DSN()) }, false, `authentication failed: access denied for user "rtr"`, "check the user and password"},
		{"mariadb refused", func() error { return connectMy("rtr:" + secret + "@tcp(127.0.0.1:" + port + ")/") }, true, "cannot connect: dial tcp", "is the MySQL/MariaDB server running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			err := c.connect()
			if el := time.Since(t0); el > 5*time.Second {
				t.Errorf("took %v", el)
			}
			if err == nil {
				t.Fatal("connected")
			}
			if retry.Transient(err) != c.transient || retry.IsPermanent(err) == c.transient {
				t.Errorf("Transient = %v, IsPermanent = %v for %v; want transient %v", retry.Transient(err), retry.IsPermanent(err), err, c.transient)
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.Contains(hint.Of(err), c.hint) {
				t.Errorf("error %q (hint %q), want %q and hint %q", err, hint.Of(err), c.msg, c.hint)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), pg.Password) || strings.Contains(err.Error(), maria.Password) {
				t.Errorf("password in %q", err)
			}
		})
	}
}
