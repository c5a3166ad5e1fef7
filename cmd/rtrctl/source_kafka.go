package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// The Kafka source: records of topics (read_committed) at (partition,
// offset), every topic its own source id kafka.<topic> (docs/kafka.md).
func init() {
	formats := func(cmd string) []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "envelope", Value: "none", Usage: "kafka: none (append-only), upsert (one row per key) or debezium (Debezium change events: the after row per record key; needs --key-format json --value-format json)"},
			&cli.StringFlag{Name: "key-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.StringFlag{Name: "value-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.IntFlag{Name: "max-record-bytes", Value: replicate.DefaultMaxRecordBytes, Usage: "kafka: largest record (key+value+headers) accepted"},
		}
	}
	topicFlag := &cli.StringFlag{Name: "topic", Usage: "kafka: the topic"}
	sec := kafkaSecurityFlags()
	registerSource(&sourceKind{
		name: "kafka",
		flags: map[string][]cli.Flag{
			"frontier":    append([]cli.Flag{topicFlag}, sec...),
			"wait-recent": append([]cli.Flag{topicFlag}, sec...),
			"replicate": append(append([]cli.Flag{&cli.StringFlag{Name: "topic", Usage: "kafka: the topic (one per pipe; it is the collection)"},
				&cli.StringFlag{Name: "start", Usage: "kafka: start offsets partition:offset,... e.g. 0:15,1:7 (default: every partition's log start)"}}, formats("replicate")...), sec...),
			"ingest": append(append([]cli.Flag{&cli.StringFlag{Name: "topics", Usage: "kafka: comma-separated topics (required for kafka)"},
				&cli.StringFlag{Name: "group", Usage: "kafka: consumer group to commit durable offsets to (monitoring only)"}}, formats("ingest")...), sec...),
		},
		upstream: func(c *cli.Context) (sourceUpstream, error) {
			u, err := kafkaBrokers(c)
			if err != nil {
				return nil, err
			}
			flag := "topic"
			if c.Command.Name == "ingest" {
				flag = "topics"
			}
			u.topics = splitList(c.String(flag))
			if len(u.topics) == 0 {
				return nil, usagef("pass --"+flag+" NAME", "no Kafka topic given")
			}
			return u, nil
		},
		replicate: replicateKafkaAction,
		ingest: func(c *cli.Context, u sourceUpstream) (ingest.Source, error) {
			ku := u.(kafkaUpstream)
			switch env := c.String("envelope"); env {
			case "none", "upsert", "debezium":
			default:
				return nil, usagef("use --envelope none, upsert or debezium", "bad --envelope %q", env)
			}
			for _, f := range []string{"key-format", "value-format"} {
				if _, err := kafkafmt.ParseFormat(c.String(f)); err != nil {
					return nil, usagef("use --"+f+" bytes, text or json", "bad --%s %q", f, c.String(f))
				}
			}
			return ingest.NewKafka(ingest.KafkaConfig{
				Upstream: ku.kafka, Topics: ku.topics, Source: c.String("source-id"),
				Envelope: c.String("envelope"), KeyFormat: c.String("key-format"), ValueFormat: c.String("value-format"),
				Group: c.String("group"), MaxRecordBytes: c.Int("max-record-bytes"),
			}), nil
		},
		// The recorded cluster, with the SASL password from the recorded
		// password file or $RTR_KAFKA_SASL_PASSWORD.
		recorded: func(info store.SourceInfo, _ string) (probe.Prober, error) {
			k, err := upstream.KafkaFromRecorded(info.Upstream, "")
			if err != nil {
				return nil, err
			}
			return probe.NewKafka(k, splitList(info.Upstream["topic"]))
		},
		upstreamFlag: "brokers",
		// A store holds one source per topic: --brokers names the
		// cluster, the store each source's topic.
		upstreamOf: func(c *cli.Context, info store.SourceInfo) (sourceUpstream, error) {
			u, err := kafkaBrokers(c)
			if err != nil {
				return nil, err
			}
			if u.topics = splitList(info.Upstream["topic"]); len(u.topics) == 0 {
				return nil, hint.Wrap(errors.New("the store does not record the source's topic (no ingest recorded it)"),
					"measure it by hand: rtrctl frontier --source kafka --brokers ... --topic NAME")
			}
			return u, nil
		},
		domains: []frontier.Domain{frontier.DomainKafka},
	})
}

// kafkaBrokers is the Kafka upstream --brokers (or $RTR_KAFKA_BROKERS)
// and the --kafka-tls*/--kafka-sasl* flags name, without topics.
func kafkaBrokers(c *cli.Context) (kafkaUpstream, error) {
	list := envDefault(c, "brokers", "RTR_KAFKA_BROKERS")
	if len(upstream.ParseKafka(list).Brokers) == 0 {
		return kafkaUpstream{}, usagef("pass --brokers host:port or set RTR_KAFKA_BROKERS", "no Kafka brokers given")
	}
	if c.IsSet("kafka-sasl-password") && c.IsSet("kafka-sasl-password-file") {
		return kafkaUpstream{}, usagef("pass one of them (a file keeps the password out of ps)", "both --kafka-sasl-password and --kafka-sasl-password-file given")
	}
	// The flag, else the environment; a password file wins over the
	// environment.
	password := c.String("kafka-sasl-password")
	if password == "" && !c.IsSet("kafka-sasl-password-file") {
		password = os.Getenv(upstream.EnvKafkaSASLPassword)
	}
	k, err := upstream.NewKafka(list, upstream.KafkaSecurity{
		TLS: c.Bool("kafka-tls"),
		TLSFiles: upstream.TLSFiles{CA: c.String("kafka-tls-ca"), Cert: c.String("kafka-tls-cert"), Key: c.String("kafka-tls-key"),
			ServerName: c.String("kafka-tls-server-name"), InsecureSkipVerify: c.Bool("kafka-tls-insecure-skip-verify")},
		SASLMechanism: c.String("kafka-sasl-mechanism"), SASLUser: c.String("kafka-sasl-user"),
		SASLPassword: password, SASLPasswordFile: c.String("kafka-sasl-password-file"),
	})
	if err != nil {
		return kafkaUpstream{}, err
	}
	return kafkaUpstream{kafka: k}, nil
}

// kafkaSecurityFlags are the TLS and SASL flags of every command that
// talks to a Kafka cluster (librdkafka's property names in the usage).
func kafkaSecurityFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "kafka-tls", Usage: "kafka: connect with TLS (librdkafka security.protocol=SSL, or SASL_SSL with --kafka-sasl-mechanism); implied by any --kafka-tls-* file"},
		&cli.StringFlag{Name: "kafka-tls-ca", Usage: "kafka: PEM file of the CAs to trust instead of the system's (ssl.ca.location)"},
		&cli.StringFlag{Name: "kafka-tls-cert", Usage: "kafka: PEM client certificate, for mutual TLS (ssl.certificate.location)"},
		&cli.StringFlag{Name: "kafka-tls-key", Usage: "kafka: PEM private key of --kafka-tls-cert (ssl.key.location)"},
		&cli.StringFlag{Name: "kafka-tls-server-name", Usage: "kafka: name the brokers' certificates must carry (default: each broker's host)"},
		&cli.BoolFlag{Name: "kafka-tls-insecure-skip-verify", Usage: "kafka: accept any broker certificate (enable.ssl.certificate.verification=false); tests only"},
		&cli.StringFlag{Name: "kafka-sasl-mechanism", Usage: "kafka: SASL mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (sasl.mechanism; default: no SASL)"},
		&cli.StringFlag{Name: "kafka-sasl-user", EnvVars: []string{"RTR_KAFKA_SASL_USER"}, Usage: "kafka: SASL user (sasl.username)"},
		&cli.StringFlag{Name: "kafka-sasl-password", Usage: "kafka: SASL password (sasl.password; default: $" + upstream.EnvKafkaSASLPassword + "); prefer the variable or --kafka-sasl-password-file, which stay out of ps"},
		&cli.StringFlag{Name: "kafka-sasl-password-file", Usage: "kafka: file holding the SASL password (one line)"},
	}
}

// kafkaUpstream is a Kafka cluster and topics.
type kafkaUpstream struct {
	kafka  upstream.Kafka
	topics []string
}

func (u kafkaUpstream) Prober() (probe.Prober, error) {
	return probe.NewKafka(u.kafka, u.topics)
}

// errStopReached ends a Kafka replicate at --stop-at.
var errStopReached = errors.New("stop frontier reached")

// replicateKafkaAction runs 'rtrctl replicate --source kafka'.
func replicateKafkaAction(c *cli.Context, u sourceUpstream) error {
	cfg := u.(kafkaUpstream)
	topic := cfg.topics[0]
	var start, stop frontier.Frontier
	for _, f := range []struct {
		name string
		dst  *frontier.Frontier
	}{{"start", &start}, {"stop-at", &stop}} {
		*f.dst = frontier.Empty(frontier.DomainKafka)
		if s := c.String(f.name); s != "" {
			v, err := frontier.Parse(frontier.DomainKafka, s)
			if err != nil {
				return usagef("write Kafka offsets as partition:offset,..., e.g. 0:15,1:7", "bad --%s %q: %v", f.name, s, err)
			}
			*f.dst = v
		}
	}
	keyF, err := kafkafmt.ParseFormat(c.String("key-format"))
	if err != nil {
		return usagef("use --key-format bytes, text or json", "bad --key-format %q", c.String("key-format"))
	}
	valF, err := kafkafmt.ParseFormat(c.String("value-format"))
	if err != nil {
		return usagef("use --value-format bytes, text or json", "bad --value-format %q", c.String("value-format"))
	}
	source := c.String("source-id")
	if source == "" {
		source = ingest.KafkaSourceID("", topic)
	}
	dec, err := kafkafmt.NewDecoder(kafkafmt.Config{Envelope: c.String("envelope"), Key: keyF, Value: valF, Collection: topic, Source: source})
	if err != nil {
		return usagef("use --envelope none or --envelope upsert", "bad --envelope %q", c.String("envelope"))
	}
	defer dec.Release()
	kcfg := replicate.KafkaConfig{
		Upstream: cfg.kafka, MaxRecordBytes: c.Int("max-record-bytes"),
		Topics: []replicate.KafkaTopic{{Name: topic, Start: start, Decoder: dec}},
	}
	return runReplicateKafka(c.Context, c.App.Writer, kcfg, source, stop, c.IsSet("stop-at"))
}

// runReplicateKafka streams one topic to w until its progress covers stop
// (when stopSet), an error or ctx ends. The pipe written so far
// ends at a stream boundary.
func runReplicateKafka(ctx context.Context, w io.Writer, cfg replicate.KafkaConfig, source string, stop frontier.Frontier, stopSet bool) error {
	pw := pipe.NewWriter(w, nil)
	sink := &stopSink{Sink: &pipe.PipeSink{W: pw, Source: source, Domain: frontier.DomainKafka}, stop: stop, set: stopSet}
	err := replicate.StreamKafka(ctx, cfg, sink)
	if errors.Is(err, errStopReached) {
		err = nil
	}
	if ferr := pw.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("replicate: %w", ferr)
	}
	return err
}

// stopSink ends the stream once progress covers stop.
type stopSink struct {
	pipe.Sink
	stop frontier.Frontier
	set  bool
}

func (s *stopSink) Progress(topic string, upper frontier.Frontier) error {
	if err := s.Sink.Progress(topic, upper); err != nil {
		return err
	}
	if s.set && upper.Covers(s.stop) {
		return errStopReached
	}
	return nil
}
