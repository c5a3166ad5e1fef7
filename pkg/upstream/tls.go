package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// TLSFiles is a client TLS configuration named by PEM files, as the
// command line and DSN parameters give it. The zero value verifies the
// server against the system roots.
type TLSFiles struct {
	// CA is a PEM file of the certificate authorities to trust instead of
	// the system roots ("" keeps the system roots).
	CA string
	// Cert and Key are the client certificate and its private key, both
	// or neither.
	Cert, Key string
	// ServerName is the name the server's certificate must carry (""
	// means the host connected to).
	ServerName string
	// InsecureSkipVerify accepts any server certificate. For tests of
	// one's own setup only: it gives encryption without authentication.
	InsecureSkipVerify bool
	// SkipHostname verifies the chain against the CAs but not the name
	// the certificate is for (MySQL's VERIFY_CA, as opposed to
	// VERIFY_IDENTITY).
	SkipHostname bool
}

// ErrTLSConfig marks TLS settings that cannot be used (a missing or
// unreadable file, a certificate without its key).
var ErrTLSConfig = errors.New("bad TLS configuration")

// Config builds the tls.Config for connections to host. names says how
// the user spells the settings (the flags or DSN parameters), for the
// errors: names.CA is e.g. "--kafka-tls-ca" or "ssl-ca".
func (f TLSFiles) Config(host string, names TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if f.ServerName != "" {
		cfg.ServerName = f.ServerName
	}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, hint.Wrap(fmt.Errorf("tls: read %s %s: %w: %w", names.CA, f.CA, ErrTLSConfig, err),
				"name a readable PEM file of the CA certificates that signed the server's certificate")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, hint.Wrap(fmt.Errorf("tls: %s %s holds no PEM certificate: %w", names.CA, f.CA, ErrTLSConfig),
				"name a PEM file (-----BEGIN CERTIFICATE-----) of the CA certificates")
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, hint.Wrap(fmt.Errorf("tls: load client certificate %s %s and %s %s: %w: %w", names.Cert, f.Cert, names.Key, f.Key, ErrTLSConfig, err),
				"name the PEM client certificate and its unencrypted PEM private key")
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "" || f.Key != "":
		return nil, hint.Wrap(fmt.Errorf("tls: %s and %s go together: %w", names.Cert, names.Key, ErrTLSConfig),
			fmt.Sprintf("pass both %s and %s, or neither", names.Cert, names.Key))
	}
	switch {
	case f.InsecureSkipVerify:
		cfg.InsecureSkipVerify = true
	case f.SkipHostname:
		// Verify the chain, not the name: crypto/tls has no such mode, so
		// skip its check and verify by hand.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}

// TLSHint is the hint for a failed TLS handshake, or "" when err is not
// one: an unknown authority, a certificate for another name, a server
// that wants a client certificate. caFlag names where the CA is set.
func TLSHint(err error, caFlag, serverNameFlag string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	switch {
	case errors.As(err, &host):
		return "the server's certificate is for another name: connect by a name it carries, or set " + serverNameFlag
	case errors.As(err, &unknown), errors.As(err, &verify):
		return "the server's certificate is not signed by a trusted CA: set " + caFlag + " to the CA that signed it"
	case errors.As(err, &alert):
		return "the server refused the TLS handshake (" + alert.Error() + "): does it want a client certificate, or another TLS version?"
	}
	return ""
}
