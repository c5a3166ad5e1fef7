package upstream_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestNewKafka: unusable security settings fail before connecting, with
// a hint naming the flag; usable ones give the librdkafka protocol, and
// the recorded form holds no password and parses back to the same
// cluster.
func TestNewKafka(t *testing.T) {
	certs := servers.TestCerts(t)
	const secret = "kafka-secret-77"
	for _, c := range []struct {
		name, want string
		is         error
		sec        upstream.KafkaSecurity
	}{
		{"user without mechanism", "--kafka-sasl-mechanism", upstream.ErrKafkaSecurity, upstream.KafkaSecurity{SASLUser: "u", SASLPassword: secret}},
		{"unknown mechanism", "SCRAM-SHA-512", upstream.ErrKafkaSecurity, upstream.KafkaSecurity{SASLMechanism: "GSSAPI", SASLUser: "u", SASLPassword: secret}},
		{"mechanism without user", "--kafka-sasl-user", upstream.ErrKafkaSecurity, upstream.KafkaSecurity{SASLMechanism: "PLAIN", SASLPassword: secret}},
		{"cert without key", "--kafka-tls-key", upstream.ErrTLSConfig, upstream.KafkaSecurity{TLSFiles: upstream.TLSFiles{Cert: certs.ClientCert}}},
		{"missing CA", "--kafka-tls-ca", upstream.ErrTLSConfig, upstream.KafkaSecurity{TLSFiles: upstream.TLSFiles{CA: filepath.Join(t.TempDir(), "nope.pem")}}},
		{"CA not PEM", "no PEM certificate", upstream.ErrTLSConfig, upstream.KafkaSecurity{TLSFiles: upstream.TLSFiles{CA: certs.ClientKey}}},
		{"missing password file", "--kafka-sasl-password-file", upstream.ErrKafkaSecurity, upstream.KafkaSecurity{SASLMechanism: "PLAIN", SASLUser: "u", SASLPasswordFile: "/nonexistent/pw"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := upstream.NewKafka("b:9092", c.sec)
			if err == nil || !errors.Is(err, c.is) || !strings.Contains(err.Error()+hint.Of(err), c.want) {
				t.Errorf("NewKafka = %v (hint %q), want %v naming %q", err, hint.Of(err), c.is, c.want)
			}
			if err != nil && strings.Contains(err.Error()+hint.Of(err), secret) {
				t.Errorf("password in %q", err)
			}
		})
	}

	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, proto string
		sec         upstream.KafkaSecurity
	}{
		{"plaintext", "PLAINTEXT", upstream.KafkaSecurity{}},
		{"tls", "SSL", upstream.KafkaSecurity{TLS: true}},
		{"ca implies tls", "SSL", upstream.KafkaSecurity{TLSFiles: upstream.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}}},
		{"sasl", "SASL_PLAINTEXT", upstream.KafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUser: "u", SASLPassword: secret}},
		{"sasl over tls", "SASL_SSL", upstream.KafkaSecurity{TLSFiles: upstream.TLSFiles{CA: certs.CA}, SASLMechanism: "SCRAM-SHA-512", SASLUser: "u", SASLPasswordFile: pwFile}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := upstream.NewKafka("a:9092,b:9093", c.sec)
			if err != nil {
				t.Fatal(err)
			}
			if k.Protocol() != c.proto {
				t.Errorf("Protocol() = %s, want %s", k.Protocol(), c.proto)
			}
			rec := k.Recorded()
			for key, v := range rec {
				if strings.Contains(v, secret) {
					t.Errorf("Recorded()[%s] holds the password", key)
				}
			}
			t.Setenv(upstream.EnvKafkaSASLPassword, secret)
			back, err := upstream.KafkaFromRecorded(rec, "")
			if err != nil {
				t.Fatal(err)
			}
			if back.Protocol() != c.proto || back.String() != "a:9092,b:9093" || len(back.Opts()) != len(k.Opts()) {
				t.Errorf("KafkaFromRecorded(%v) = %s %s, want %s", rec, back, back.Protocol(), c.proto)
			}
		})
	}
}

// TestParseMySQLTLS: the TLS parameters of both DSN forms (file paths
// with slashes in the go-sql-driver form's parameters), recorded without
// secrets in a form that parses back the same; bad combinations fail
// with ErrTLSConfig before connecting.
func TestParseMySQLTLS(t *testing.T) {
	certs := servers.TestCerts(t)
	const secret = "my-secret-31"
	for _, c := range []struct{ dsn, recorded string }{
		{"app:" + secret + "@tcp(db.example:3307)/shop", "mysql://app:xxxxx@db.example:3307/shop"},
		{"app:" + secret + "@tcp(db.example:3307)/shop?tls=false", "mysql://app:xxxxx@db.example:3307/shop"},
		{"app:" + secret + "@tcp(db.example:3307)/shop?tls=true&ssl-ca=" + certs.CA, "ssl-mode=VERIFY_IDENTITY"},
		{"app:" + secret + "@tcp(db.example:3307)/shop?ssl_ca=" + certs.CA, "ssl-mode=VERIFY_IDENTITY"},
		{"app:" + secret + "@tcp(db.example:3307)/shop?ssl-mode=REQUIRED&ssl-ca=" + certs.CA, "ssl-mode=VERIFY_CA"},
		{"mysql://app:" + secret + "@db.example:3307/shop?tls=skip-verify", "ssl-mode=REQUIRED"},
		{"mysql://app:" + secret + "@db.example:3307/shop?tls=preferred", "ssl-mode=PREFERRED"},
		{"mysql://app:" + secret + "@db.example:3307/shop?ssl-mode=VERIFY_IDENTITY&ssl-cert=" + certs.ClientCert + "&ssl-key=" + certs.ClientKey, "ssl-key="},
	} {
		m, err := upstream.ParseMySQL(c.dsn)
		if err != nil {
			t.Fatalf("ParseMySQL: %v", err)
		}
		rec := m.Recorded()
		if m.Database() != "shop" || !strings.Contains(rec, c.recorded) || strings.Contains(rec, secret) {
			t.Errorf("database %q, Recorded() = %q, want %q without the password", m.Database(), rec, c.recorded)
		}
		back, err := upstream.ParseMySQL(strings.Replace(rec, "xxxxx", secret, 1))
		if err != nil || back.Recorded() != rec {
			t.Errorf("recorded %q parses back to %v %v", rec, back, err)
		}
	}
	for _, bad := range []string{
		"?tls=maybe", "?ssl-mode=SOMETIMES", "?tls=true&ssl-mode=DISABLED", "?tls=false&ssl-ca=" + certs.CA,
		"?ssl-cert=" + certs.ClientCert, "?tls=true&ssl-ca=/nonexistent/ca.pem",
	} {
		_, err := upstream.ParseMySQL("app:" + secret + "@tcp(h:3306)/db" + bad)
		if !errors.Is(err, upstream.ErrTLSConfig) || strings.Contains(err.Error(), secret) {
			t.Errorf("ParseMySQL(...%s) = %v, want ErrTLSConfig without the password", bad, err)
		}
	}
}

// TestPostgresRecorded: the recorded form keeps the TLS parameters of
// either DSN form (or of the environment), never the password or
// sslpassword.
func TestPostgresRecorded(t *testing.T) {
	certs := servers.TestCerts(t)
	const secret = "pg-secret-5"
	tlsParams := "sslmode=verify-full&sslrootcert=" + certs.CA + "&sslcert=" + certs.ClientCert + "&sslkey=" + certs.ClientKey
	for _, c := range []struct{ name, dsn, want string }{
		{"none", "postgres://app:" + secret + "@h:5432/db", "postgres://app:xxxxx@h:5432/db"},
		{"url", "postgres://app:" + secret + "@h:5432/db?sslpassword=" + secret + "&" + tlsParams, "sslmode=verify-full"},
		{"key=value", "host=h user=app password=" + secret + " dbname=db sslmode=verify-full sslrootcert='" + certs.CA + "'", "sslrootcert="},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := upstream.ParsePostgres(c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			rec := p.Recorded()
			if !strings.Contains(rec, c.want) || strings.Contains(rec, secret) || strings.Contains(rec, "sslpassword") {
				t.Errorf("Recorded() = %q, want %q and no secret", rec, c.want)
			}
			if _, err := upstream.ParsePostgres(rec); err != nil {
				t.Errorf("recorded %q does not parse: %v", rec, err)
			}
		})
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("PGSSLMODE", "verify-full")
		t.Setenv("PGSSLROOTCERT", certs.CA)
		p, err := upstream.ParsePostgres("postgres://app@h/db")
		if err != nil {
			t.Fatal(err)
		}
		if rec := p.Recorded(); !strings.Contains(rec, "sslmode=verify-full") || !strings.Contains(rec, "sslrootcert=") {
			t.Errorf("Recorded() = %q, want the PGSSL* settings", rec)
		}
	})
}
