package upstream

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// Kafka is a Kafka cluster: its bootstrap brokers and how to reach them
// (TLS, SASL). Make one with ParseKafka (plaintext) or NewKafka; every
// client of the cluster takes its options from Opts.
type Kafka struct {
	Brokers []string

	sec   KafkaSecurity
	tls   *tls.Config
	sasl  sasl.Mechanism
	watch *saslWatch
}

// saslWatch sees the SASL exchanges of the clients made with Opts: a
// broker that rejects the credentials may answer with an error code
// (SaslAuthenticationFailed) or just close the connection, which alone
// reads like a network failure.
type saslWatch struct{ failed atomic.Bool }

// OnBrokerRead implements kgo.HookBrokerRead.
func (w *saslWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	switch {
	case key == saslAuthenticateKey && err != nil:
		w.failed.Store(true)
	case key != saslAuthenticateKey && key != saslHandshakeKey && err == nil:
		// An authenticated request went through.
		w.failed.Store(false)
	}
}

const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// KafkaSecurity is how a Kafka client authenticates, in the terms of the
// command line (librdkafka's names in brackets). The zero value is
// security.protocol=PLAINTEXT.
type KafkaSecurity struct {
	// TLS encrypts every broker connection (security.protocol=SSL, or
	// SASL_SSL with SASL). Any of TLSFiles implies it.
	TLS bool
	// TLSFiles: the CA (ssl.ca.location), the client certificate and key
	// (ssl.certificate.location, ssl.key.location), the server name and
	// whether to skip verification (enable.ssl.certificate.verification).
	TLSFiles TLSFiles
	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (sasl.mechanism); "" means no SASL.
	SASLMechanism string
	// SASLUser and SASLPassword are the credentials (sasl.username,
	// sasl.password); the password never appears in String or Recorded.
	SASLUser, SASLPassword string
	// SASLPasswordFile, when set, is where SASLPassword was read from:
	// recorded so that a later prober reads it again.
	SASLPasswordFile string
}

// EnvKafkaSASLPassword is the environment variable the SASL password is
// read from when no flag or file gives it.
const EnvKafkaSASLPassword = "RTR_KAFKA_SASL_PASSWORD"

// kafkaNames are the flags the settings come from, for errors.
var kafkaNames = TLSFiles{CA: "--kafka-tls-ca", Cert: "--kafka-tls-cert", Key: "--kafka-tls-key", ServerName: "--kafka-tls-server-name"}

// ErrKafkaSecurity marks Kafka TLS or SASL settings that cannot be used.
var ErrKafkaSecurity = errors.New("bad kafka security settings")

// ParseKafka reads a comma-separated broker list (host:port,host:port);
// empty entries are dropped, so an empty list gives no brokers, which the
// caller reports in its own words. The cluster is reached in plaintext.
func ParseKafka(list string) Kafka {
	var k Kafka
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			k.Brokers = append(k.Brokers, b)
		}
	}
	return k
}

// NewKafka is ParseKafka with TLS and SASL: it reads the files sec names
// (a password file is read now) and checks the mechanism.
func NewKafka(list string, sec KafkaSecurity) (Kafka, error) {
	k := ParseKafka(list)
	f := sec.TLSFiles
	if f != (TLSFiles{}) {
		sec.TLS = true
	}
	if sec.TLS {
		// No server name: franz-go verifies each broker by its own host.
		cfg, err := f.Config("", kafkaNames)
		if err != nil {
			return Kafka{}, fmt.Errorf("kafka: %w", err)
		}
		k.tls = cfg
	}
	if sec.SASLPasswordFile != "" {
		b, err := os.ReadFile(sec.SASLPasswordFile)
		if err != nil {
			return Kafka{}, hint.Wrap(fmt.Errorf("kafka: read --kafka-sasl-password-file %s: %w: %w", sec.SASLPasswordFile, ErrKafkaSecurity, err),
				"name a readable file holding the SASL password (one line)")
		}
		sec.SASLPassword = strings.TrimRight(string(b), "\r\n")
	}
	m, err := saslMechanism(sec)
	if err != nil {
		return Kafka{}, err
	}
	k.sec, k.sasl = sec, m
	if m != nil {
		k.watch = &saslWatch{}
	}
	return k, nil
}

func saslMechanism(sec KafkaSecurity) (sasl.Mechanism, error) {
	if sec.SASLMechanism == "" {
		if sec.SASLUser != "" {
			return nil, hint.Wrap(fmt.Errorf("kafka: --kafka-sasl-user without --kafka-sasl-mechanism: %w", ErrKafkaSecurity),
				"add --kafka-sasl-mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka: sasl.mechanism)")
		}
		return nil, nil
	}
	if sec.SASLUser == "" {
		return nil, hint.Wrap(fmt.Errorf("kafka: SASL %s without a user: %w", sec.SASLMechanism, ErrKafkaSecurity),
			"pass --kafka-sasl-user NAME (librdkafka: sasl.username)")
	}
	switch strings.ToUpper(sec.SASLMechanism) {
	case "PLAIN":
		return plain.Auth{User: sec.SASLUser, Pass: sec.SASLPassword}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: sec.SASLUser, Pass: sec.SASLPassword}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: sec.SASLUser, Pass: sec.SASLPassword}.AsSha512Mechanism(), nil
	}
	return nil, hint.Wrap(fmt.Errorf("kafka: unknown SASL mechanism %q: %w", sec.SASLMechanism, ErrKafkaSecurity),
		"use --kafka-sasl-mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
}

// String is the broker list (the security settings are not part of it).
func (k Kafka) String() string { return strings.Join(k.Brokers, ",") }

// Protocol is librdkafka's security.protocol of the connection:
// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
func (k Kafka) Protocol() string {
	switch {
	case k.sasl != nil && k.tls != nil:
		return "SASL_SSL"
	case k.sasl != nil:
		return "SASL_PLAINTEXT"
	case k.tls != nil:
		return "SSL"
	}
	return "PLAINTEXT"
}

// Opts are the client options that reach the cluster, to put before a
// client's own: the seed brokers, TLS and SASL.
func (k Kafka) Opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(k.tls.Clone()))
	}
	if k.sasl != nil {
		opts = append(opts, kgo.SASL(k.sasl), kgo.WithHooks(k.watch))
	}
	return opts
}

// Args are the rtrctl flags that name this cluster (--brokers and the
// --kafka-tls*/--kafka-sasl* flags), for a child rtrctl; the password is
// not among them but in env ($RTR_KAFKA_SASL_PASSWORD), unless a password
// file names it.
func (k Kafka) Args() (args, env []string) {
	args = []string{"--brokers", k.String()}
	f := k.sec.TLSFiles
	if k.tls != nil {
		args = append(args, "--kafka-tls")
	}
	for _, a := range [][2]string{{"--kafka-tls-ca", f.CA}, {"--kafka-tls-cert", f.Cert}, {"--kafka-tls-key", f.Key}, {"--kafka-tls-server-name", f.ServerName}} {
		if a[1] != "" {
			args = append(args, a[0], a[1])
		}
	}
	if f.InsecureSkipVerify {
		args = append(args, "--kafka-tls-insecure-skip-verify")
	}
	if k.sasl == nil {
		return args, nil
	}
	args = append(args, "--kafka-sasl-mechanism", k.sec.SASLMechanism, "--kafka-sasl-user", k.sec.SASLUser)
	if k.sec.SASLPasswordFile != "" {
		return append(args, "--kafka-sasl-password-file", k.sec.SASLPasswordFile), nil
	}
	return args, []string{EnvKafkaSASLPassword + "=" + k.sec.SASLPassword}
}

// Recorded is what a store records of the cluster (SourceInfo.Upstream):
// the brokers and the security settings in librdkafka's names, without
// the password.
func (k Kafka) Recorded() map[string]string {
	r := map[string]string{"brokers": k.String()}
	if p := k.Protocol(); p != "PLAINTEXT" {
		r["security.protocol"] = p
	}
	f := k.sec.TLSFiles
	for key, v := range map[string]string{
		"ssl.ca.location": f.CA, "ssl.certificate.location": f.Cert, "ssl.key.location": f.Key, "ssl.server.name": f.ServerName,
		"sasl.mechanism": k.sec.SASLMechanism, "sasl.username": k.sec.SASLUser, "sasl.password.file": k.sec.SASLPasswordFile,
	} {
		if v != "" {
			r[key] = v
		}
	}
	if f.InsecureSkipVerify {
		r["enable.ssl.certificate.verification"] = "false"
	}
	return r
}

// KafkaFromRecorded is the cluster an ingest recorded (Recorded). The
// SASL password is password, else the recorded password file's, else
// $RTR_KAFKA_SASL_PASSWORD.
func KafkaFromRecorded(r map[string]string, password string) (Kafka, error) {
	proto := r["security.protocol"]
	sec := KafkaSecurity{
		TLS: strings.HasSuffix(proto, "SSL"),
		TLSFiles: TLSFiles{CA: r["ssl.ca.location"], Cert: r["ssl.certificate.location"], Key: r["ssl.key.location"], ServerName: r["ssl.server.name"],
			InsecureSkipVerify: r["enable.ssl.certificate.verification"] == "false"},
		SASLMechanism: r["sasl.mechanism"], SASLUser: r["sasl.username"], SASLPassword: password,
	}
	if password == "" {
		if sec.SASLPasswordFile = r["sasl.password.file"]; sec.SASLPasswordFile == "" {
			sec.SASLPassword = os.Getenv(EnvKafkaSASLPassword)
		}
	}
	return NewKafka(r["brokers"], sec)
}

// Explain adds the hint for a failed connection to the cluster when err
// is one of TLS or SASL: rejected credentials, an unsupported mechanism,
// a certificate not trusted; other errors are returned as they are.
func (k Kafka) Explain(err error) error {
	if err == nil || hint.Of(err) != "" {
		return err
	}
	switch {
	case k.AuthFailed(err):
		return hint.Wrap(&authError{err}, fmt.Sprintf("SASL authentication failed for user %q with %s: check --kafka-sasl-user and the password (--kafka-sasl-password-file or $%s)",
			k.sec.SASLUser, k.sec.SASLMechanism, EnvKafkaSASLPassword))
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return hint.Wrap(err, "the brokers do not accept this SASL mechanism: check --kafka-sasl-mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and whether the listener wants SASL")
	}
	if h := TLSHint(err, "--kafka-tls-ca", "--kafka-tls-server-name"); h != "" {
		return hint.Wrap(err, h)
	}
	if k.PlainOnTLS(err) {
		return hint.Wrap(err, "the broker seems to want TLS: add --kafka-tls, with --kafka-tls-ca if its CA is not a system one (librdkafka: security.protocol=SSL)")
	}
	return err
}

// PlainOnTLS reports whether err is what a plaintext client gets from a
// TLS listener: the connection closed before the first response.
func (k Kafka) PlainOnTLS(err error) bool {
	var eof *kgo.ErrFirstReadEOF
	return k.tls == nil && errors.As(err, &eof)
}

// AuthFailed reports whether err is the brokers' rejection of the SASL
// credentials: the error code, or a connection closed in the middle of a
// SASL exchange of a client made with Opts (which is how some brokers,
// kfake among them, answer a wrong password).
func (k Kafka) AuthFailed(err error) bool {
	if errors.Is(err, kerr.SaslAuthenticationFailed) {
		return true
	}
	return err != nil && k.watch != nil && k.watch.failed.Load()
}

// authError is a rejection of the credentials: "authentication failed"
// (ErrAuth) in its chain, whatever the broker answered.
type authError struct{ err error }

func (e *authError) Error() string   { return "SASL authentication failed: " + e.err.Error() }
func (e *authError) Unwrap() []error { return []error{ErrAuth, e.err} }
