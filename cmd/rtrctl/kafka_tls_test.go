package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// secureKafka starts a kfake cluster with TLS (and SASL when mechanism is
// set), closed at cleanup.
func secureKafka(t *testing.T, certs *servers.Certs, mechanism, user, password string, opts ...kfake.Opt) *servers.Kafka {
	t.Helper()
	k, err := servers.LaunchSecureKafka(certs, mechanism, user, password, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Cluster.Close)
	return k
}

// independentKafkaClient is a franz-go client configured by hand, not
// through pkg/upstream: TLS trusting caFile and, with user set, SCRAM-SHA-512.
func independentKafkaClient(t *testing.T, brokers []string, caFile, user, password string) *kgo.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if user != "" {
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createKafkaTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := kadm.NewClient(cl).CreateTopic(t.Context(), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// TestKafkaTLSSASL: against a kfake cluster with TLS and SASL
// SCRAM-SHA-512 (and a PLAIN user), records produced by an independent franz-go client are
// ingested by 'rtrctl ingest' (password from a file), wait-recent and
// status reach them through the recorded upstream (status also through
// the flags), and frontier works with the
// password from the environment. A wrong password, a wrong CA and a
// plaintext client fail at once with a hint, well within the timeouts.
func TestKafkaTLSSASL(t *testing.T) {
	certs := servers.TestCerts(t)
	const user, password = "rtr-app", "scram-secret-9f2"
	k := secureKafka(t, certs, "SCRAM-SHA-512", user, password, kfake.User("PLAIN", "plain-user", "plain-secret"))
	brokers := k.String()
	cl := independentKafkaClient(t, k.Brokers, certs.CA, user, password)
	topic := "orders"
	createKafkaTopic(t, cl, topic, 2)
	ctx := context.Background()
	for i := range 6 {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pwFile := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secFlags := []string{"--kafka-tls-ca", certs.CA, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user}

	t.Run("frontier with the password from the environment", func(t *testing.T) {
		t.Setenv("RTR_KAFKA_SASL_PASSWORD", password)
		out, errOut, code := runCLI(t, "", append([]string{"frontier", "--source", "kafka", "--brokers", brokers, "--topic", topic}, secFlags...)...)
		if code != 0 || strings.TrimSpace(out) != "0:3,1:3" {
			t.Fatalf("frontier: exit %d, out %q, stderr %s", code, out, errOut)
		}
	})

	t.Run("frontier with SASL PLAIN", func(t *testing.T) {
		out, errOut, code := runCLI(t, "", "frontier", "--source", "kafka", "--brokers", brokers, "--topic", topic, "--kafka-tls-ca", certs.CA,
			"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "plain-user", "--kafka-sasl-password", "plain-secret")
		if code != 0 || strings.TrimSpace(out) != "0:3,1:3" {
			t.Fatalf("frontier: exit %d, out %q, stderr %s", code, out, errOut)
		}
	})

	t.Run("ingest and wait-recent", func(t *testing.T) {
		dir := t.TempDir()
		// A stale password in the environment: the file wins.
		p := startProc(t, []string{"RTR_KAFKA_SASL_PASSWORD=stale"}, append([]string{"ingest", "--source", "kafka", "--brokers", brokers, "--topics", topic,
			"--key-format", "text", "--value-format", "text", "--store", dir, "--interval", "20ms", "--compact-every", "0",
			"--kafka-sasl-password-file", pwFile}, secFlags...)...)
		waitFor(t, func() bool {
			out, _, code := runCLI(t, "", "read", dir, topic, "--format", "csv")
			return code == 0 && strings.Count(out, "\n") == 7 && strings.Contains(out, "k5,v5")
		}, p)
		// The store records the cluster's security settings, never the
		// password; wait-recent probes it with the recorded password file.
		st, err := store.Open(ctx, dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.ReadSourceInfo("kafka." + topic)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Upstream["security.protocol"]; got != "SASL_SSL" || info.Upstream["sasl.mechanism"] != "SCRAM-SHA-512" || info.Upstream["ssl.ca.location"] != certs.CA {
			t.Errorf("recorded upstream %v, want SASL_SSL, SCRAM-SHA-512 and the CA file", info.Upstream)
		}
		for k, v := range info.Upstream {
			if strings.Contains(v, password) {
				t.Errorf("recorded %s holds the password", k)
			}
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Key: []byte("k6"), Value: []byte("v6")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runCLI(t, "", "wait-recent", "--store", dir, "--no-daemon", "--timeout", "20s")
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("wait-recent: exit %d, out %q, stderr %s", code, out, errOut)
		}
		// status measures the lag with the flags, and against the
		// recorded upstream (the password from the recorded file).
		for _, args := range [][]string{
			append([]string{"--brokers", brokers, "--kafka-sasl-password-file", pwFile}, secFlags...),
			{"--probe-recorded"},
		} {
			st := statusOf(t, dir, args...)
			if len(st.Sources) != 1 || st.Sources[0].Upstream == nil || st.Sources[0].LagNote != "" {
				t.Errorf("status %v: %+v, want the upstream frontier measured", args, st.Sources)
			} else if got := st.Sources[0].Upstream.String(); got != "0:3,1:4" {
				t.Errorf("status %v: upstream %s, want 0:3,1:4", args, got)
			}
		}
		p.signal(syscall.SIGINT)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("ingest exited %d:\n%s", code, p.stderr.Bytes())
		}
		if strings.Contains(string(p.stderr.Bytes()), password) {
			t.Errorf("the password is in the ingest's log")
		}
	})

	for _, c := range []struct {
		name, hint string
		args       []string
	}{
		{"wrong password", "SASL authentication failed", append([]string{"--kafka-sasl-password", "not-the-password"}, secFlags...)},
		{"wrong CA", "not signed by a trusted CA", []string{"--kafka-tls-ca", certs.OtherCA, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user, "--kafka-sasl-password", password}},
		{"no TLS", "--kafka-tls", []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user, "--kafka-sasl-password", password}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cmd := range [][]string{
				{"frontier", "--source", "kafka", "--brokers", brokers, "--topic", topic},
				{"ingest", "--source", "kafka", "--brokers", brokers, "--topics", topic, "--store", t.TempDir()},
			} {
				t0 := time.Now()
				_, errOut, code := runCLI(t, "", append(cmd, c.args...)...)
				el := time.Since(t0)
				t.Logf("%s: %s: exit %d after %v: %s", c.name, cmd[0], code, el.Round(time.Millisecond), errOut)
				if code == 0 || !strings.Contains(errOut, c.hint) {
					t.Errorf("%s: exit %d, stderr %s; want a failure with %q", cmd[0], code, errOut, c.hint)
				}
				// The connect retries of frontier give up after 10s and an
				// ingest's after minutes: failing fast means well below.
				if el > 5*time.Second {
					t.Errorf("%s took %v to fail", cmd[0], el)
				}
				if strings.Contains(errOut, password) || strings.Contains(errOut, "not-the-password") {
					t.Errorf("%s: a password in %s", cmd[0], errOut)
				}
			}
		})
	}
}

// TestKafkaTLSKcat: Debian's kcat (librdkafka) produces to a kfake
// cluster over TLS, verifying the broker against the test CA, and reads
// the records back; 'rtrctl frontier' with a client certificate and
// 'rtrctl ingest --kafka-tls-ca' see them.
func TestKafkaTLSKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found (scripts/install-deps.sh installs it): %v", err)
	}
	certs := servers.TestCerts(t)
	k := secureKafka(t, certs, "", "", "")
	brokers := k.String()
	topic := "kcat-tls"
	createKafkaTopic(t, independentKafkaClient(t, k.Brokers, certs.CA, "", ""), topic, 1)
	tlsArgs := []string{"-b", brokers, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + certs.CA, "-t", topic}
	prod := exec.Command(kcat, append([]string{"-P", "-K", ":", "-p", "0"}, tlsArgs...)...)
	prod.Stdin = strings.NewReader("a:1\nb:2\nc:3\n")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P over TLS: %v\n%s", err, out)
	}
	cons, err := exec.Command(kcat, append([]string{"-C", "-e", "-q", "-f", "%k=%s\n"}, tlsArgs...)...).CombinedOutput()
	if err != nil || string(cons) != "a=1\nb=2\nc=3\n" {
		t.Fatalf("kcat -C over TLS: %v, read %q", err, cons)
	}
	// With a client certificate too (the broker verifies one when sent).
	if out, errOut, code := runCLI(t, "", "frontier", "--source", "kafka", "--brokers", brokers, "--topic", topic,
		"--kafka-tls-ca", certs.CA, "--kafka-tls-cert", certs.ClientCert, "--kafka-tls-key", certs.ClientKey); code != 0 || strings.TrimSpace(out) != "0:3" {
		t.Errorf("frontier with a client certificate: exit %d, out %q: %s", code, out, errOut)
	}
	dir := t.TempDir()
	p := startProc(t, nil, "ingest", "--source", "kafka", "--brokers", brokers, "--topics", topic, "--kafka-tls-ca", certs.CA,
		"--key-format", "text", "--value-format", "text", "--store", dir, "--interval", "20ms", "--compact-every", "0")
	waitFor(t, func() bool {
		out, _, code := runCLI(t, "", "read", dir, topic, "--format", "csv")
		return code == 0 && strings.Contains(out, "a,1") && strings.Contains(out, "c,3")
	}, p)
	p.signal(syscall.SIGINT)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("ingest exited %d:\n%s", code, p.stderr.Bytes())
	}
}

// TestBenchKafkaTLSSASL: 'rtrctl bench kafka' against an existing cluster
// with TLS and SASL: its producer and the ingest it starts (a child
// rtrctl, given the password through the environment) both authenticate.
func TestBenchKafkaTLSSASL(t *testing.T) {
	certs := servers.TestCerts(t)
	const user, password = "bench", "bench-secret-4"
	k := secureKafka(t, certs, "SCRAM-SHA-256", user, password)
	res, _, _ := benchJSON(t, "kafka", "--records-per-second", "1000", "--num-seconds", "2", "--brokers", k.String(),
		"--kafka-tls-ca", certs.CA, "--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", user, "--kafka-sasl-password", password)
	if res.Sent != 2000 {
		t.Errorf("sent %d records, want 2000", res.Sent)
	}
}
