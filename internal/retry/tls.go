package retry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// TLSRejected reports whether err is a server certificate that does not
// verify (unknown authority, another host name, expired) or a handshake
// the other side refused: retrying gives the same answer.
func TLSRejected(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var rec tls.RecordHeaderError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &rec)
}
