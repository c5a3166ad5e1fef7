package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are PEM files for TLS tests, made by GenerateCerts: a CA, a
// server certificate for 127.0.0.1 and localhost and a client certificate
// for the user "rtr", both signed by the CA, and an unrelated CA (OtherCA)
// that signed neither, for tests that a wrong CA is refused.
type Certs struct {
	Dir                    string
	CA, OtherCA            string
	ServerCert, ServerKey  string
	ClientCert, ClientKey  string
	caCert                 *x509.Certificate
	serverPair, clientPair tls.Certificate
}

// ClientUser is the common name of the client certificate (the user it
// authenticates as where the server maps certificates to users).
const ClientUser = "rtr"

// GenerateCerts writes a fresh CA, server and client certificates (ECDSA
// P-256, valid for a day) into dir, which must exist.
func GenerateCerts(dir string) (*Certs, error) {
	c := &Certs{Dir: dir}
	for _, f := range []struct {
		dst  *string
		name string
	}{{&c.CA, "ca.pem"}, {&c.OtherCA, "other-ca.pem"}, {&c.ServerCert, "server.pem"}, {&c.ServerKey, "server-key.pem"},
		{&c.ClientCert, "client.pem"}, {&c.ClientKey, "client-key.pem"}} {
		*f.dst = filepath.Join(dir, f.name)
	}
	ca, caKey, err := newCert("rtrctl test CA", nil, nil, nil)
	if err != nil {
		return nil, err
	}
	other, _, err := newCert("rtrctl unrelated test CA", nil, nil, nil)
	if err != nil {
		return nil, err
	}
	srv, srvKey, err := newCert("localhost", ca, caKey, func(t *x509.Certificate) {
		t.DNSNames = []string{"localhost"}
		t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	if err != nil {
		return nil, err
	}
	cl, clKey, err := newCert(ClientUser, ca, caKey, func(t *x509.Certificate) {
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	if err != nil {
		return nil, err
	}
	c.caCert = ca
	c.serverPair = tls.Certificate{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey, Leaf: srv}
	c.clientPair = tls.Certificate{Certificate: [][]byte{cl.Raw}, PrivateKey: clKey, Leaf: cl}
	for _, w := range []struct {
		path string
		pem  []byte
	}{
		{c.CA, certPEM(ca)}, {c.OtherCA, certPEM(other)},
		{c.ServerCert, certPEM(srv)}, {c.ServerKey, keyPEM(srvKey)},
		{c.ClientCert, certPEM(cl)}, {c.ClientKey, keyPEM(clKey)},
	} {
		if w.pem == nil {
			return nil, fmt.Errorf("generate certificates: encode %s", w.path)
		}
		if err := os.WriteFile(w.path, w.pem, 0o600); err != nil {
			return nil, fmt.Errorf("generate certificates: %w", err)
		}
	}
	return c, nil
}

// TestCerts is GenerateCerts in a temporary directory removed at t's
// cleanup; a failure fails t.
func TestCerts(t TB) *Certs {
	t.Helper()
	dir, err := os.MkdirTemp("", "rtr-certs-")
	if err != nil {
		t.Fatalf("servers: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := GenerateCerts(dir)
	if err != nil {
		t.Fatalf("servers: %v", err)
	}
	return c
}

// ServerTLS is a server configuration with the server certificate; with
// clientCerts it also asks for (and verifies, against the CA) a client
// certificate when one is sent.
func (c *Certs) ServerTLS(clientCerts bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.serverPair}, MinVersion: tls.VersionTLS12}
	if clientCerts {
		pool := x509.NewCertPool()
		pool.AddCert(c.caCert)
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return cfg
}

// ClientTLS is a client configuration trusting the CA, with the client
// certificate, for serverName.
func (c *Certs) ClientTLS(serverName string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(c.caCert)
	return &tls.Config{RootCAs: pool, ServerName: serverName, Certificates: []tls.Certificate{c.clientPair}, MinVersion: tls.VersionTLS12}
}

// newCert makes a certificate signed by parent (self-signed, a CA, when
// parent is nil).
func newCert(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate certificates: key: %w", err)
	}
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, fmt.Errorf("generate certificates: serial: %w", err)
	}
	now := time.Now()
	t := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"rtrctl tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if parent == nil {
		t.IsCA, t.BasicConstraintsValid = true, true
		t.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = t, key
	}
	if edit != nil {
		edit(t)
	}
	der, err := x509.CreateCertificate(rand.Reader, t, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("generate certificates: %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("generate certificates: %s: %w", cn, err)
	}
	return cert, key, nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// keyPEM is the key in SEC 1 form ("EC PRIVATE KEY"), which OpenSSL,
// PostgreSQL, MariaDB and librdkafka all read.
func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}
