package servers

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Kafka describes a reachable Kafka cluster.
type Kafka struct {
	Brokers []string
	// Cluster is the in-process fake cluster, nil for an external one.
	Cluster *kfake.Cluster
	// Security is how a client reaches it: TLS and SASL (the zero value:
	// plaintext, no authentication).
	Security upstream.KafkaSecurity
}

// Upstream is the cluster as rtrctl's stages take it. It panics when the
// security settings cannot be used (the files are the harness's own).
func (k *Kafka) Upstream() upstream.Kafka {
	u, err := upstream.NewKafka(k.String(), k.Security)
	if err != nil {
		panic(err)
	}
	return u
}

// String is the broker list.
func (k *Kafka) String() string { return strings.Join(k.Brokers, ",") }

// LaunchKafka starts an in-process kfake cluster with one broker unless
// opts say otherwise. Close it with k.Cluster.Close.
func LaunchKafka(opts ...kfake.Opt) (*Kafka, error) {
	all := append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, fmt.Errorf("start kfake cluster: %w", err)
	}
	return &Kafka{Brokers: c.ListenAddrs(), Cluster: c}, nil
}

// LaunchSecureKafka is LaunchKafka with TLS on every listener (the server
// certificate of certs; client certificates are verified when sent) and,
// when mechanism is set (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SASL with
// user as the only (super)user. Security says how to reach it: the CA of
// certs and those credentials.
func LaunchSecureKafka(certs *Certs, mechanism, user, password string, opts ...kfake.Opt) (*Kafka, error) {
	all := []kfake.Opt{kfake.TLS(certs.ServerTLS(true))}
	sec := upstream.KafkaSecurity{TLS: true, TLSFiles: upstream.TLSFiles{CA: certs.CA}}
	if mechanism != "" {
		all = append(all, kfake.EnableSASL(), kfake.Superuser(mechanism, user, password))
		sec.SASLMechanism, sec.SASLUser, sec.SASLPassword = mechanism, user, password
	}
	k, err := LaunchKafka(append(all, opts...)...)
	if err != nil {
		return nil, err
	}
	k.Security = sec
	return k, nil
}
