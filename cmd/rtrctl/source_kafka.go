package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"

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
			&cli.StringFlag{Name: "envelope", Value: "none", Usage: "kafka: none (append-only), upsert (one row per key) or debezium (Debezium change events: the after row per record key; key and value formats json, or avro, protobuf or json-schema with --schema-registry)"},
			&cli.StringFlag{Name: "key-format", Value: "bytes", Usage: "kafka: bytes, text, json, avro, json-schema or protobuf (those three with --schema-registry; subject <topic>-key)"},
			&cli.StringFlag{Name: "value-format", Value: "bytes", Usage: "kafka: bytes, text, json, avro, json-schema or protobuf (those three with --schema-registry; subject <topic>-value)"},
			&cli.IntFlag{Name: "max-record-bytes", Value: replicate.DefaultMaxRecordBytes, Usage: "kafka: largest record (key+value+headers) accepted"},
			&cli.StringFlag{Name: "on-decode-error", Value: kafkafmt.PolicyFail, Usage: "kafka: a record that does not decode: fail (a definite error of the collection), skip (dropped, counted) or inline (kept with its raw bytes and error)"},
			&cli.IntFlag{Name: "key-schema-version", Usage: "kafka: avro, json-schema, protobuf: read keys as this version of subject <topic>-key (default: the latest at start)"},
			&cli.IntFlag{Name: "value-schema-version", Usage: "kafka: avro, json-schema, protobuf: read values as this version of subject <topic>-value (default: the latest at start)"},
		}
	}
	topicFlag := &cli.StringFlag{Name: "topic", Usage: "kafka: the topic"}
	sec := kafkaSecurityFlags()
	formats0 := formats
	formats = func(cmd string) []cli.Flag { return append(formats0(cmd), schemaRegistryFlags()...) }
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
			fc, err := kafkaFormatConfig(c)
			if err != nil {
				return nil, err
			}
			cache, err := theMemory.stateCache(c)
			if err != nil {
				return nil, err
			}
			fc.Upstream, fc.Topics, fc.Source = ku.kafka, ku.topics, c.String("source-id")
			fc.Envelope, fc.Group, fc.MaxRecordBytes = c.String("envelope"), c.String("group"), c.Int("max-record-bytes")
			fc.StateDir, fc.StateCache = c.String("state-dir"), cache
			return ingest.NewKafka(fc), nil
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

// schemaRegistryFlags name the schema registry of the avro,
// json-schema and protobuf formats.
func schemaRegistryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "schema-registry", EnvVars: []string{"RTR_SCHEMA_REGISTRY_URL"}, Usage: "kafka: URL of the Confluent-compatible schema registry of --key-format/--value-format avro, json-schema or protobuf"},
		&cli.StringFlag{Name: "schema-registry-user", EnvVars: []string{"RTR_SCHEMA_REGISTRY_USER"}, Usage: "kafka: schema registry basic auth user (basic.auth.user.info's user)"},
		&cli.StringFlag{Name: "schema-registry-password-file", Usage: "kafka: file holding the schema registry password (one line; default: $" + envRegistryPassword + ")"},
		&cli.StringFlag{Name: "schema-registry-ca", Usage: "kafka: PEM file of the CAs to trust for the schema registry instead of the system's"},
		&cli.StringFlag{Name: "schema-registry-cert", Usage: "kafka: PEM client certificate for the schema registry (mutual TLS)"},
		&cli.StringFlag{Name: "schema-registry-key", Usage: "kafka: PEM private key of --schema-registry-cert"},
		&cli.StringFlag{Name: "schema-registry-server-name", Usage: "kafka: name the schema registry's certificate must carry (default: the URL's host)"},
		&cli.BoolFlag{Name: "schema-registry-insecure-skip-verify", Usage: "kafka: accept any schema registry certificate; tests only"},
	}
}

// envRegistryPassword holds the schema registry password when no
// --schema-registry-password-file is given.
const envRegistryPassword = "RTR_SCHEMA_REGISTRY_PASSWORD"

// kafkaFormatConfig is the formats, schema registry and decode error
// policy the flags name (the rest of an ingest's KafkaConfig is the
// caller's).
func kafkaFormatConfig(c *cli.Context) (ingest.KafkaConfig, error) {
	fc := ingest.KafkaConfig{KeyFormat: c.String("key-format"), ValueFormat: c.String("value-format"),
		KeySchemaVersion: c.Int("key-schema-version"), ValueSchemaVersion: c.Int("value-schema-version"),
		OnDecodeError: c.String("on-decode-error")}
	if !slices.Contains(kafkafmt.Policies, fc.OnDecodeError) {
		return fc, usagef("use --on-decode-error fail, skip or inline", "bad --on-decode-error %q", fc.OnDecodeError)
	}
	registryFormat := "" // a format that needs the registry
	for _, f := range []string{"key-format", "value-format"} {
		_, err := kafkafmt.ParseFormat(c.String(f))
		switch {
		case errors.Is(err, kafkafmt.ErrNeedsRegistry):
			registryFormat = c.String(f)
		case err != nil:
			return fc, usagef("use --"+f+" bytes, text, json, avro, json-schema or protobuf", "bad --%s %q", f, c.String(f))
		}
	}
	for _, f := range []string{"key-schema-version", "value-schema-version"} {
		if c.Int(f) < 0 {
			return fc, usagef("pass a version number of the subject (1, 2, ...), or leave --"+f+" out for the latest", "bad --%s %d", f, c.Int(f))
		}
	}
	url := c.String("schema-registry")
	if registryFormat == "" {
		return fc, nil
	}
	if url == "" {
		return fc, usagef("pass --schema-registry URL (or set RTR_SCHEMA_REGISTRY_URL)", "--key-format/--value-format %s needs a schema registry", registryFormat)
	}
	reg, err := schemaRegistry(c, url)
	if err != nil {
		return fc, err
	}
	fc.Registry = reg
	return fc, nil
}

// schemaRegistry is the registry client of the --schema-registry* flags.
// Credentials in the URL (https://user:password@host) are taken out of
// it, so that the URL in logs and errors has none.
func schemaRegistry(c *cli.Context, raw string) (*kafkafmt.Registry, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("write the registry as http://host:port or https://host:port", "bad --schema-registry: not an http(s) URL")
	}
	cfg := kafkafmt.RegistryConfig{User: c.String("schema-registry-user")}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
		u.User = nil
	}
	cfg.URL = u.String()
	switch file := c.String("schema-registry-password-file"); {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("name a readable file holding the password", "read --schema-registry-password-file %s: %v", file, err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	case cfg.Password == "":
		cfg.Password = os.Getenv(envRegistryPassword)
	}
	if cfg.Password != "" && cfg.User == "" {
		return nil, usagef("pass --schema-registry-user", "a schema registry password without a user")
	}
	files := upstream.TLSFiles{CA: c.String("schema-registry-ca"), Cert: c.String("schema-registry-cert"), Key: c.String("schema-registry-key"),
		ServerName: c.String("schema-registry-server-name"), InsecureSkipVerify: c.Bool("schema-registry-insecure-skip-verify")}
	if files != (upstream.TLSFiles{}) {
		if u.Scheme != "https" {
			return nil, usagef("use an https:// --schema-registry URL with the TLS flags", "--schema-registry-* TLS flags given for %s", cfg.URL)
		}
		cfg.TLS, err = files.Config(u.Hostname(), upstream.TLSFiles{CA: "--schema-registry-ca", Cert: "--schema-registry-cert", Key: "--schema-registry-key"})
		if err != nil {
			return nil, err
		}
	}
	return kafkafmt.NewRegistry(cfg)
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
	fc, err := kafkaFormatConfig(c)
	if err != nil {
		return err
	}
	keyF, valF, err := ingest.KafkaFormats(c.Context, fc, topic)
	if err != nil {
		return err
	}
	source := c.String("source-id")
	if source == "" {
		source = ingest.KafkaSourceID("", topic)
	}
	if c.String("envelope") == "debezium" {
		return usagef("ingest the topic with rtrctl ingest --envelope debezium (its columns come from the topic's first change event)", "rtrctl replicate does not take --envelope debezium")
	}
	dec, err := kafkafmt.NewDecoder(kafkafmt.Config{Envelope: c.String("envelope"), Key: keyF, Value: valF, Collection: topic, Source: source,
		OnDecodeError: fc.OnDecodeError})
	if err != nil {
		return usagef("use --envelope none or upsert", "bad --envelope %q", c.String("envelope"))
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
