package dsn

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseMySQL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want MySQL
	}{
		{"driver form", "app:pw@tcp(10.0.0.1:3307)/shop?timeout=5s", MySQL{User: "app", Password: "pw", Host: "10.0.0.1", Port: 3307, Database: "shop", Params: map[string]string{"timeout": "5s"}}},
		{"driver form no db", "app:pw@tcp(127.0.0.1:3306)/", MySQL{User: "app", Password: "pw", Host: "127.0.0.1", Port: 3306}},
		{"driver form password with colon and at", "app:p:w@x@tcp(h:1)/d", MySQL{User: "app", Password: "p:w@x", Host: "h", Port: 1, Database: "d"}},
		{"driver form no port", "app@tcp(db)/d", MySQL{User: "app", Host: "db", Port: 3306, Database: "d"}},
		{"driver form defaults", "/d", MySQL{Host: "127.0.0.1", Port: 3306, Database: "d"}},
		{"url form", "mysql://app:pw@db.local:3310/shop", MySQL{User: "app", Password: "pw", Host: "db.local", Port: 3310, Database: "shop"}},
		{"url form escaped password", "mysql://app:p%40ss@h/d", MySQL{User: "app", Password: "p@ss", Host: "h", Port: 3306, Database: "d"}},
		{"mariadb scheme", "mariadb://u@h:1/", MySQL{User: "u", Host: "h", Port: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMySQL(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.User != tc.want.User || got.Password != tc.want.Password || got.Host != tc.want.Host ||
				got.Port != tc.want.Port || got.Database != tc.want.Database {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for k, v := range tc.want.Params {
				if got.Params[k] != v {
					t.Errorf("param %s = %q, want %q", k, got.Params[k], v)
				}
			}
			if tc.want.Password != "" && strings.Contains(got.String(), tc.want.Password) {
				t.Errorf("String() %q leaks the password", got.String())
			}
		})
	}
}

func TestParseMySQLErrors(t *testing.T) {
	for _, in := range []string{"", "app:s3cret@tcp(h:99999)/d", "app:s3cret@unix(/x)/d", "app:s3cret@tcp(h:1)", "mysql://app:s3cret@h:port/d", "app:s3cret@h:1/d"} {
		t.Run(in, func(t *testing.T) {
			_, err := ParseMySQL(in)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestMask(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"pg url", MaskPG("postgres://u:secret@h:5432/db?sslmode=disable"), "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"pg url no password", MaskPG("postgres://u@h/db"), "postgres://u@h/db"},
		{"pg kv", MaskPG("host=h password=secret user=u"), "host=h password=xxxxx user=u"},
		{"pg kv quoted", MaskPG("host=h password='se cret' user=u"), "host=h password=xxxxx user=u"},
		{"pg kv spaces", MaskPG("password = secret"), "password = xxxxx"},
		{"mysql driver", MaskMySQLDriver("u:secret@tcp(h:1)/d"), "u:xxxxx@tcp(h:1)/d"},
		{"mysql url", MaskMySQLDriver("mysql://u:secret@h:1/d"), "mysql://u:xxxxx@h:1/d"},
		{"mysql driver as pg", MaskPG("u:secret@tcp(h:1)/d"), "u:xxxxx@tcp(h:1)/d"},
		{"pg kv as mysql", MaskMySQLDriver("host=h password=secret user=u"), "host=h password=xxxxx user=u"},
		{"scrub", Scrub("auth failed for secret", "secret"), "auth failed for xxxxx"},
		{"pg url query password", MaskPG("postgres://u@h:x/db?sslmode=disable&password=secret&x=1"), "postgres://u@h:x/db?sslmode=disable&password=xxxxx&x=1"},
		{"pg url sslpassword", MaskPG("postgres://u@h/db?sslpassword=secret"), "postgres://u@h/db?sslpassword=xxxxx"},
		{"url password with at", MaskAny("mysql://u:p@ss@h:1/d"), "mysql://u:xxxxx@h:1/d"},
		{"url password with slash", MaskAny("postgres://u:p/ss@h:1/d"), "postgres://u:xxxxx@h:1/d"},
		{"url query with at", MaskAny("postgres://u:pw@h:1/d?application_name=a@b"), "postgres://u:xxxxx@h:1/d?application_name=a@b"},
		{"mysql driver password with at", MaskMySQLDriver("u:p@ss@tcp(h:1)/d"), "u:xxxxx@tcp(h:1)/d"},
		{"mysql driver password with at colon slash", MaskMySQLDriver("u:p:@/w@tcp(h:1)/d"), "u:xxxxx@tcp(h:1)/d"},
		{"mysql driver malformed", MaskMySQLDriver("u:p@ss@tcp(h:1"), "u:xxxxx@tcp(h:1"},
		{"pg kv unterminated quote", MaskPG("host=h password='se cret"), "host=h password=xxxxx"},
		{"pg kv escaped quote", MaskPG(`host=h password='se\' cret' user=u`), "host=h password=xxxxx user=u"},
		{"pg kv upper case", MaskPG("PASSWORD=secret host=h"), "PASSWORD=xxxxx host=h"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

// TestSecrets: every string a DSN of any form may hold a password in,
// raw and URL-decoded, so that text quoting a DSN that failed to parse can
// be scrubbed of it.
func TestSecrets(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"postgres://u:p%40ss@h/db", []string{"p%40ss", "p@ss"}},
		{"postgres://u@h:bad/db?password=s%20e&x=1", []string{"s%20e", "s e"}},
		{"host=h password='se cret", []string{"se cret"}},
		{"host=h password=secret user=u", []string{"secret"}},
		{"u:p@ss@tcp(h:1)/d", []string{"p@ss"}},
	} {
		got := Secrets(c.in)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("Secrets(%q) = %q, want it to hold %q", c.in, got, w)
			}
		}
	}
}

func TestScrubErrorKeepsCause(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	wrapped := fmt.Errorf("connect: password hunter2 refused: %w", cause)
	err := fmt.Errorf("probe: %w", ScrubError(wrapped, "hunter2"))
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("message leaks the password: %q", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("cause lost: %v", err)
	}
	sentinel := errors.New("authentication failed")
	worded := fmt.Errorf("connect to x: %w for user %q", sentinel, "rtr")
	err = WithCause(worded, wrapped, "hunter2")
	if err.Error() != worded.Error() {
		t.Errorf("WithCause changed the message: %q", err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("WithCause lost a cause: %v", err)
	}
	var de *Error
	if errors.As(err, &de) {
		for _, c := range de.Causes {
			if strings.Contains(c.Error(), "hunter2") {
				t.Errorf("cause text leaks the password: %q", c)
			}
		}
	}
}
