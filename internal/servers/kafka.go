package servers

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka describes a reachable Kafka cluster.
type Kafka struct {
	Brokers []string
	// Cluster is the in-process fake cluster, nil for an external one.
	Cluster *kfake.Cluster
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
