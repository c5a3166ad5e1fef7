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
	certs, err := servers.GenerateCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
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
