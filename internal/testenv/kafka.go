package testenv

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka describes a reachable Kafka cluster.
type Kafka struct {
	Brokers []string
	// Cluster is the in-process fake cluster, nil for an external one.
	Cluster *kfake.Cluster
}

// StartKafka starts a dedicated in-process kfake cluster with one broker
// (opts may override it, e.g. kfake.NumBrokers(3)); it is closed at
// t.Cleanup.
func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	k, err := LaunchKafka(opts...)
	if err != nil {
		t.Fatalf("testenv: start kafka: %v", err)
	}
	t.Cleanup(k.Cluster.Close)
	return k
}

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
