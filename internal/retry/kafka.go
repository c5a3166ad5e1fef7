package retry

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaPermanent: authentication and authorization failures, and a client
// that was closed.
func kafkaPermanent(err error) bool {
	if errors.Is(err, kgo.ErrClientClosed) {
		return true
	}
	ke, ok := errors.AsType[*kerr.Error](err)
	if !ok {
		return false
	}
	switch ke {
	case kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState,
		kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.DelegationTokenAuthorizationFailed:
		return true
	}
	return false
}

// kafkaTransient: errors the protocol marks retriable (leader moves,
// brokers not available, coordinator loading...) and a connection closed
// before its first response (a broker going away).
func kafkaTransient(err error) bool {
	if kerr.IsRetriable(err) {
		return true
	}
	_, ok := errors.AsType[*kgo.ErrFirstReadEOF](err)
	return ok
}
