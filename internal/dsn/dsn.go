// Package dsn parses connection strings for the upstream sources and masks
// their passwords for logs and errors.
//
// PostgreSQL DSNs are handed to pgx (URL or key=value form, plus the usual
// PG* environment variables); this package only masks them. MySQL/MariaDB
// DSNs come in two forms, the go-sql-driver form
// `user:pass@tcp(host:port)/db?param=v` and the URL form
// `mysql://user:pass@host:port/db?param=v`; Parse reads both.
package dsn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// MySQL is a parsed MySQL/MariaDB connection string.
type MySQL struct {
	User     string
	Password string
	Host     string
	Port     int
	Database string
	Params   map[string]string
}

// Addr returns host:port.
func (m MySQL) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// String prints the DSN in URL form with the password masked.
func (m MySQL) String() string {
	u := url.URL{Scheme: "mysql", Host: m.Addr(), Path: "/" + m.Database}
	if m.Password != "" {
		u.User = url.UserPassword(m.User, "xxxxx")
	} else if m.User != "" {
		u.User = url.User(m.User)
	}
	return u.String()
}

// ErrMalformed marks a DSN that could not be parsed.
var ErrMalformed = errors.New("malformed DSN")

// ParseMySQL reads either DSN form. The default port is 3306 and the default
// host 127.0.0.1. Errors never contain the password.
func ParseMySQL(s string) (MySQL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return MySQL{}, fmt.Errorf("parse mysql dsn: empty: %w", ErrMalformed)
	}
	if strings.HasPrefix(s, "mysql://") || strings.HasPrefix(s, "mariadb://") {
		return parseMySQLURL(s)
	}
	return parseMySQLDriver(s)
}

func parseMySQLURL(s string) (MySQL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return MySQL{}, fmt.Errorf("parse mysql dsn %s: not a valid URL (want mysql://user:pass@host:port/db): %w", MaskURL(s), ErrMalformed)
	}
	m := MySQL{Host: u.Hostname(), Port: 3306, Database: strings.TrimPrefix(u.Path, "/"), Params: map[string]string{}}
	if u.User != nil {
		m.User = u.User.Username()
		m.Password, _ = u.User.Password()
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return MySQL{}, fmt.Errorf("parse mysql dsn %s: bad port %q: %w", m, p, ErrMalformed)
		}
		m.Port = n
	}
	if m.Host == "" {
		m.Host = "127.0.0.1"
	}
	for k, v := range u.Query() {
		if len(v) > 0 {
			m.Params[k] = v[0]
		}
	}
	return m, nil
}

// parseMySQLDriver reads [user[:password]@][net[(addr)]]/dbname[?params].
func parseMySQLDriver(s string) (MySQL, error) {
	m := MySQL{Host: "127.0.0.1", Port: 3306, Params: map[string]string{}}
	masked := MaskMySQLDriver(s)
	// The parameters may hold paths (ssl-ca=/etc/...): the database
	// name's slash is the one after the address, else the last one.
	slash := strings.Index(s, ")/") + 1
	if slash == 0 {
		slash = strings.LastIndex(s, "/")
	}
	if slash < 0 {
		return MySQL{}, fmt.Errorf("parse mysql dsn %q: no '/' before the database name (want user:pass@tcp(host:port)/db or mysql://user:pass@host:port/db): %w", masked, ErrMalformed)
	}
	head, tail := s[:slash], s[slash+1:]
	db, query, _ := strings.Cut(tail, "?")
	m.Database = db
	if query != "" {
		vals, err := url.ParseQuery(query)
		if err != nil {
			return MySQL{}, fmt.Errorf("parse mysql dsn %q: bad parameters: %w", masked, ErrMalformed)
		}
		for k, v := range vals {
			m.Params[k] = v[0]
		}
	}
	if at := strings.LastIndex(head, "@"); at >= 0 {
		cred := head[:at]
		head = head[at+1:]
		m.User, m.Password, _ = strings.Cut(cred, ":")
	}
	if head == "" {
		return m, nil
	}
	open := strings.Index(head, "(")
	if open < 0 || !strings.HasSuffix(head, ")") {
		return MySQL{}, fmt.Errorf("parse mysql dsn %q: address %q is not tcp(host:port): %w", masked, head, ErrMalformed)
	}
	proto, addr := head[:open], head[open+1:len(head)-1]
	if proto != "tcp" {
		return MySQL{}, fmt.Errorf("parse mysql dsn %q: only tcp(host:port) addresses are supported, got %s: %w", masked, proto, ErrMalformed)
	}
	if addr == "" {
		return m, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "3306"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return MySQL{}, fmt.Errorf("parse mysql dsn %q: bad port %q: %w", masked, port, ErrMalformed)
	}
	if host != "" {
		m.Host = host
	}
	m.Port = n
	return m, nil
}

var (
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)
	drvPassword = regexp.MustCompile(`^([^:@/]*:)[^@]*@`)
)

// MaskURL replaces the password of a URL-form DSN with xxxxx.
func MaskURL(s string) string { return urlPassword.ReplaceAllString(s, "${1}xxxxx@") }

// MaskMySQLDriver replaces the password of a go-sql-driver DSN. It is
// MaskAny: a DSN that fails to parse may be of another kind.
func MaskMySQLDriver(s string) string { return MaskAny(s) }

// MaskPG masks the password in a PostgreSQL DSN of either form. It is
// MaskAny: a DSN that fails to parse may be of another kind.
func MaskPG(s string) string { return MaskAny(s) }

// MaskAny masks the password of a DSN of any form rtrctl reads: a URL, a
// PostgreSQL key=value string or a go-sql-driver DSN. Parse errors quote
// the DSN masked with it, since a DSN of one kind is often handed to the
// parser of another (rtrctl status tries each source's kind).
func MaskAny(s string) string {
	if strings.Contains(s, "://") {
		return MaskURL(s)
	}
	return drvPassword.ReplaceAllString(kvPassword.ReplaceAllString(s, "${1}xxxxx"), "${1}xxxxx@")
}

// Scrub removes every occurrence of the given secrets from msg. Use it on
// error text that came from a library and might echo a DSN.
func Scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 1 {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// Error is an error whose message is safe to show (worded or scrubbed by
// the caller, without passwords) while its causes stay in the chain, so
// errors.Is/As (and internal/retry.Transient) still see the library's
// error.
type Error struct {
	Msg    string
	Causes []error
}

func (e *Error) Error() string   { return e.Msg }
func (e *Error) Unwrap() []error { return e.Causes }

// ScrubError returns err with every secret removed from its message; its
// chain still holds err. A nil err stays nil.
func ScrubError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	return &Error{Msg: Scrub(err.Error(), secrets...), Causes: []error{err}}
}

// WithCause returns an error with err's message whose chain holds both err
// and cause (scrubbed of secrets): for an error worded for the user that
// must not lose the library error behind it.
func WithCause(err, cause error, secrets ...string) error {
	if cause == nil {
		return err
	}
	return &Error{Msg: err.Error(), Causes: []error{err, ScrubError(cause, secrets...)}}
}
