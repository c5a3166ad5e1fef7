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

// WithPassword is the DSN in URL form with password pw, and the
// parameters: for a password that comes from elsewhere than the DSN (a
// file, MYSQL_PWD). Never print it.
func (m MySQL) WithPassword(pw string) string {
	u := url.URL{Scheme: "mysql", Host: m.Addr(), Path: "/" + m.Database, User: url.UserPassword(m.User, pw)}
	q := url.Values{}
	for k, v := range m.Params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
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

// kvPassword is a password of a key=value DSN (also sslpassword): a
// quoted value, which may lack its closing quote (then it runs to the
// end), or one up to the next space. Group 2 is the value.
var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*(?:'|$)|\S*)`)

// queryPassword is a password parameter of a URL's query string (password,
// sslpassword). Group 2 is the value.
var queryPassword = regexp.MustCompile(`(?i)([?&;][^=&#?;]*password=)([^&#;]*)`)

// MaskURL replaces the passwords of a URL-form DSN (in its userinfo and in
// its query string) with xxxxx.
func MaskURL(s string) string { return mask(s, urlSpans(s)) }

// MaskMySQLDriver replaces the password of a go-sql-driver DSN. It is
// MaskAny: a DSN that fails to parse may be of another kind.
func MaskMySQLDriver(s string) string { return MaskAny(s) }

// MaskPG masks the password in a PostgreSQL DSN of either form. It is
// MaskAny: a DSN that fails to parse may be of another kind.
func MaskPG(s string) string { return MaskAny(s) }

// MaskAny masks the password of a DSN of any form rtrctl reads, well
// formed or not: a URL (userinfo and query string), a PostgreSQL key=value
// string (quoted, unquoted, or with its closing quote missing) or a
// go-sql-driver DSN (whose password may hold '@', ':' and '/'). Parse
// errors quote the DSN masked with it, since a DSN of one kind is often
// handed to the parser of another (rtrctl status tries each source's
// kind).
func MaskAny(s string) string { return mask(s, spans(s)) }

// Secrets are the strings of s that may be a password, as written and
// URL-decoded: the passwords MaskAny masks. Scrub text that quotes s (a
// library's parse error) of them.
func Secrets(s string) []string {
	var out []string
	for _, sp := range spans(s) {
		v := s[sp[0]:sp[1]]
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if u, ok := strings.CutPrefix(v, "'"); ok {
			u = strings.TrimSuffix(u, "'")
			out = append(out, u, strings.NewReplacer(`\'`, "'", `\\`, `\`).Replace(u))
		}
	}
	return out
}

// spans are the [start, end) byte ranges of s that hold a password,
// sorted and disjoint.
func spans(s string) [][2]int {
	if strings.Contains(s, "://") {
		return urlSpans(s)
	}
	var out [][2]int
	for _, m := range kvPassword.FindAllStringSubmatchIndex(s, -1) {
		out = append(out, [2]int{m[4], m[5]})
	}
	if len(out) == 0 {
		if sp, ok := driverSpan(s); ok {
			out = append(out, sp)
		}
	}
	return out
}

// urlSpans: the userinfo's password, up to the last '@' of the authority
// (the last '@' before the query, else the last one at all: a password
// may hold '@', '/' or '?' unescaped), and the query's password values.
func urlSpans(s string) [][2]int {
	i := strings.Index(s, "://") + 3
	rest := s[i:]
	at := -1
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		at = strings.LastIndex(rest[:q], "@")
	}
	if at < 0 {
		at = strings.LastIndex(rest, "@")
	}
	var out [][2]int
	if at >= 0 {
		if c := strings.Index(rest[:at], ":"); c >= 0 {
			out = append(out, [2]int{i + c + 1, i + at})
		}
	}
	tail := i + at + 1
	for _, m := range queryPassword.FindAllStringSubmatchIndex(s[tail:], -1) {
		out = append(out, [2]int{tail + m[4], tail + m[5]})
	}
	return out
}

// driverSpan: the password of [user[:password]@]..., between the first
// ':' and the last '@' before the database's '/' (as the parser reads it).
func driverSpan(s string) ([2]int, bool) {
	head := s
	if slash := strings.LastIndex(s, "/"); slash >= 0 && strings.Contains(s[:slash], "@") {
		head = s[:slash]
	}
	at := strings.LastIndex(head, "@")
	if at < 0 {
		return [2]int{}, false
	}
	c := strings.Index(s[:at], ":")
	if c < 0 || strings.ContainsAny(s[:c], "= \t/") {
		return [2]int{}, false
	}
	return [2]int{c + 1, at}, true
}

// mask replaces the spans of s with xxxxx.
func mask(s string, sp [][2]int) string {
	var b strings.Builder
	last := 0
	for _, r := range sp {
		if r[0] < last {
			continue
		}
		b.WriteString(s[last:r[0]])
		b.WriteString("xxxxx")
		last = r[1]
	}
	b.WriteString(s[last:])
	return b.String()
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
