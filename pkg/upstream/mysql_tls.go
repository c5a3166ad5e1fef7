package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
)

// MySQL TLS comes from the DSN's parameters, in go-sql-driver's form
// (tls=true|skip-verify|preferred|false, and tls=custom for the files
// below) or the mysql client's (ssl-mode=DISABLED|PREFERRED|REQUIRED|
// VERIFY_CA|VERIFY_IDENTITY), with the files ssl-ca, ssl-cert, ssl-key
// (also spelled with an underscore) and tls-server-name. A CA file alone
// means VERIFY_IDENTITY.

type tlsMode int

const (
	tlsOff       tlsMode = iota
	tlsPreferred         // TLS when the server offers it, unverified
	tlsRequired          // TLS, unverified (skip-verify)
	tlsVerifyCA          // TLS, the chain verified, not the host name
	tlsVerifyID          // TLS, chain and host name verified
)

var tlsModeNames = map[tlsMode]string{tlsOff: "DISABLED", tlsPreferred: "PREFERRED", tlsRequired: "REQUIRED", tlsVerifyCA: "VERIFY_CA", tlsVerifyID: "VERIFY_IDENTITY"}

// tlsParam and sslModeParam are the values of tls= (go-sql-driver) and
// ssl-mode= (the mysql client).
var (
	tlsParam = map[string]tlsMode{"false": tlsOff, "0": tlsOff, "off": tlsOff, "true": tlsVerifyID, "1": tlsVerifyID,
		"custom": tlsVerifyID, "skip-verify": tlsRequired, "preferred": tlsPreferred}
	sslModeParam = map[string]tlsMode{"DISABLED": tlsOff, "PREFERRED": tlsPreferred, "REQUIRED": tlsRequired,
		"VERIFY_CA": tlsVerifyCA, "VERIFY_IDENTITY": tlsVerifyID}
)

// mysqlTLS is the TLS of a MySQL upstream.
type mysqlTLS struct {
	mode  tlsMode
	files TLSFiles
	cfg   *tls.Config // nil for tlsOff
}

// errNoServerTLS: the server offers no TLS (go-mysql's handshake error).
var errNoServerTLS = errors.New("the server offers no TLS")

// mysqlNames are the DSN parameters of TLSFiles, for errors.
var mysqlNames = TLSFiles{CA: "ssl-ca", Cert: "ssl-cert", Key: "ssl-key", ServerName: "tls-server-name"}

const mysqlTLSHint = "use tls=true (verify the server), tls=skip-verify, tls=preferred or tls=false, or ssl-mode=DISABLED|PREFERRED|REQUIRED|VERIFY_CA|VERIFY_IDENTITY; name files with ssl-ca, ssl-cert, ssl-key"

func parseMySQLTLS(d dsn.MySQL) (mysqlTLS, error) {
	p := map[string]string{}
	for k, v := range d.Params {
		p[strings.ReplaceAll(strings.ToLower(k), "_", "-")] = v
	}
	t := mysqlTLS{files: TLSFiles{CA: p["ssl-ca"], Cert: p["ssl-cert"], Key: p["ssl-key"], ServerName: p["tls-server-name"]}}
	filesGiven := t.files.CA != "" || t.files.Cert != ""
	var fromTLS, fromMode *tlsMode
	if v, ok := p["tls"]; ok {
		m, ok := tlsParam[strings.ToLower(v)]
		if !ok {
			return t, hint.Wrap(fmt.Errorf("bad tls=%q: %w", v, ErrTLSConfig), mysqlTLSHint)
		}
		fromTLS = &m
	}
	if v, ok := p["ssl-mode"]; ok {
		m, ok := sslModeParam[strings.ToUpper(v)]
		if !ok {
			return t, hint.Wrap(fmt.Errorf("bad ssl-mode=%q: %w", v, ErrTLSConfig), mysqlTLSHint)
		}
		if m == tlsRequired && t.files.CA != "" {
			// As the mysql client: with a CA, REQUIRED verifies it.
			m = tlsVerifyCA
		}
		fromMode = &m
	}
	switch {
	case fromTLS != nil && fromMode != nil && *fromTLS != *fromMode:
		return t, hint.Wrap(fmt.Errorf("tls=%s and ssl-mode=%s disagree: %w", p["tls"], p["ssl-mode"], ErrTLSConfig), "give one of tls and ssl-mode")
	case fromTLS != nil:
		t.mode = *fromTLS
	case fromMode != nil:
		t.mode = *fromMode
	case filesGiven:
		t.mode = tlsVerifyID
	}
	if t.mode == tlsOff {
		if filesGiven {
			return t, hint.Wrap(fmt.Errorf("ssl-ca/ssl-cert given with TLS off: %w", ErrTLSConfig), "drop tls=false (or ssl-mode=DISABLED), or the file parameters")
		}
		return t, nil
	}
	f := t.files
	f.InsecureSkipVerify = t.mode == tlsRequired || t.mode == tlsPreferred
	f.SkipHostname = t.mode == tlsVerifyCA
	cfg, err := f.Config(d.Host, mysqlNames)
	if err != nil {
		return t, err
	}
	t.cfg = cfg
	return t, nil
}

// query is the TLS parameters as a URL query ("" without TLS).
func (t mysqlTLS) query() string {
	if t.mode == tlsOff {
		return ""
	}
	q := url.Values{"ssl-mode": {tlsModeNames[t.mode]}}
	for k, v := range map[string]string{"ssl-ca": t.files.CA, "ssl-cert": t.files.Cert, "ssl-key": t.files.Key, "tls-server-name": t.files.ServerName} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return "?" + q.Encode()
}

// explainTLS returns the error for a connection that failed over TLS (or
// without TLS where the server requires it), nil for other failures.
func (m *MySQL) explainTLS(ctx context.Context, err error) error {
	t, d := m.tls, m.d
	cause := dsn.ScrubError(err, d.Password)
	var myErr *mysql.MyError
	if t.mode == tlsOff && errors.As(err, &myErr) && myErr.Code == mysql.ER_ACCESS_DENIED_ERROR {
		// MariaDB denies a plaintext login where it requires TLS
		// (require_secure_transport, REQUIRE SSL) as if the password were
		// wrong. Ask again over TLS (the password was just sent in the
		// clear to the same server): if that passes, TLS is what is missing.
		if conn, terr := m.connect(ctx, &tls.Config{InsecureSkipVerify: true}); terr == nil {
			conn.Close()
			return hint.Wrap(dsn.WithCause(fmt.Errorf("connect to %s: %w: the server requires TLS for user %q (require_secure_transport or REQUIRE SSL)", d, ErrConnect, d.User), err, d.Password),
				"connect with TLS: add ?tls=true&ssl-ca=/path/ca.pem to --dsn (or ssl-mode=VERIFY_IDENTITY)")
		}
		return nil
	}
	switch {
	case errors.Is(err, errNoServerTLS):
		return hint.Wrap(fmt.Errorf("connect to %s: %w: the server offers no TLS: %w", d, ErrConnect, cause),
			"enable TLS on the server (ssl-cert, ssl-key), or connect with tls=preferred or tls=false")
	case strings.Contains(err.Error(), "insecure transport"):
		return hint.Wrap(fmt.Errorf("connect to %s: %w: the server requires TLS (require_secure_transport): %w", d, ErrConnect, cause),
			"connect with TLS: add ?tls=true&ssl-ca=/path/ca.pem to --dsn (or ssl-mode=VERIFY_IDENTITY)")
	}
	if h := TLSHint(err, "ssl-ca in --dsn", "tls-server-name in --dsn"); h != "" {
		return hint.Wrap(fmt.Errorf("connect to %s: %w: TLS: %w", d, ErrConnect, cause), h)
	}
	return nil
}

// BinlogTLS is the TLS configuration of a binlog connection to the
// server conn is connected to (nil: plaintext): that of the DSN, and for
// tls=preferred whatever conn ended up with.
func (m *MySQL) BinlogTLS(conn *client.Conn) *tls.Config {
	if m.tls.cfg == nil {
		return nil
	}
	if m.tls.mode == tlsPreferred && !UsesTLS(conn) {
		return nil
	}
	return m.tls.cfg.Clone()
}

// UsesTLS reports whether conn is encrypted.
func UsesTLS(conn *client.Conn) bool {
	if conn == nil || conn.Conn == nil {
		return false
	}
	_, ok := conn.Conn.Conn.(*tls.Conn)
	return ok
}
