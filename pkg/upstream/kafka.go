package upstream

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka is a Kafka cluster: its bootstrap brokers, with room for TLS and
// SASL options later.
type Kafka struct {
	Brokers []string
}

// ParseKafka reads a comma-separated broker list (host:port,host:port);
// empty entries are dropped, so an empty list gives no brokers, which the
// caller reports in its own words.
func ParseKafka(list string) Kafka {
	var k Kafka
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			k.Brokers = append(k.Brokers, b)
		}
	}
	return k
}

// String is the broker list (Kafka brokers carry no secrets).
func (k Kafka) String() string { return strings.Join(k.Brokers, ",") }

// Opts are the client options that reach the cluster, to put before a
// client's own.
func (k Kafka) Opts() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(k.Brokers...)} }
