package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func ingestCommand() *cli.Command {
	return &cli.Command{
		Name:  "ingest",
		Usage: "keep a store in step with an upstream: snapshot, replicate, reclock, commit",
		Description: `Runs the whole pipeline in one long-running process: a definite snapshot of
the tables whose snapshot is not yet durable in the store, then logical
replication from where the store's durable data ends, reclocked onto the
system timeline and committed to the store every binding (--interval).

It resumes from the store alone, so it can be killed at any instant (even
with SIGKILL) and restarted: nothing is lost, nothing is duplicated, and
every system time already bound keeps its contents. SIGINT/SIGTERM commit
what is complete and exit 0. One ingest per source and store: a second one
fails at once.

The replication slot (--slot, default rtr_<source-id>) is acknowledged only
up to what every collection has durably committed.

MySQL/MariaDB (--source mysql --tables db.t1,db.t2): snapshot, then the
binlog; source id mysql. docs/mysql.md.

Kafka (--source kafka): every topic of --topics becomes the collection of the
same name and its own source, <source-id>.<topic> (source-id default kafka),
read with isolation level read_committed from where the store ends.
--envelope none appends every record (partition, offset, key, value,
timestamp, header_keys, header_values); --envelope upsert keeps one row per
key (a null value deletes it). --key-format/--value-format: bytes, text or
json. A record that does not decode is a definite error of its collection
(docs/kafka.md).

Examples:
  rtrctl ingest --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --store ./data
  rtrctl ingest --source pg --publication rtr --tables public.orders,public.lines \
      --store ./data --metrics-addr 127.0.0.1:9464
  rtrctl ingest --source kafka --brokers 127.0.0.1:9092 --topics orders,users \
      --envelope upsert --key-format text --value-format json --store ./data`,
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "store", Usage: "the store directory (required)"},
			&cli.StringFlag{Name: "source-id", Usage: "the source's id in the store (default: the --source kind, e.g. pg); kafka: the prefix of the ids <prefix>.<topic>"},
			&cli.StringFlag{Name: "publication", Usage: "pg: the publication (required for pg)"},
			&cli.StringFlag{Name: "slot", Usage: "pg: the permanent logical replication slot (default rtr_<source-id>)"},
			&cli.StringFlag{Name: "tables", Usage: "pg: comma-separated tables (default: every table of the publication); mysql: db.table,... (required)"},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "pg, mysql: snapshot connections"},
			&cli.StringFlag{Name: "topics", Usage: "kafka: comma-separated topics (required for kafka)"},
			&cli.StringFlag{Name: "envelope", Value: "none", Usage: "kafka: none (append-only) or upsert (one row per key)"},
			&cli.StringFlag{Name: "key-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.StringFlag{Name: "value-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.StringFlag{Name: "group", Usage: "kafka: consumer group to commit durable offsets to (monitoring only)"},
			&cli.IntFlag{Name: "max-record-bytes", Value: replicate.DefaultMaxRecordBytes, Usage: "kafka: largest record (key+value+headers) accepted"},
			&cli.DurationFlag{Name: "interval", Value: reclock.DefaultInterval, Usage: "least time between two bindings (commits)"},
			&cli.DurationFlag{Name: "retain", Value: store.DefaultRetain, Usage: "history kept readable by background compaction"},
			&cli.DurationFlag{Name: "compact-every", Value: time.Minute, Usage: "how often to compact (0 disables)"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics on this address (loopback), e.g. 127.0.0.1:9464"},
			&cli.BoolFlag{Name: "metrics-remote", Usage: "allow --metrics-addr on a non-loopback address"},
			&cli.StringFlag{Name: "recency-addr", Usage: "pg: also serve wait-recent over HTTP on this loopback address (GET /wait-recent?timeout_ms=N), e.g. 127.0.0.1:9465"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl ingest --help'", "unexpected argument %q", c.Args().First())
			}
			var topics []string
			for _, t := range strings.Split(c.String("topics"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					topics = append(topics, t)
				}
			}
			if c.String("source") == "kafka" && len(topics) == 0 {
				return usagef("pass --topics NAME[,NAME...]", "no --topics given")
			}
			cfg, err := sourceConfig(c, topics)
			if err != nil {
				return err
			}
			if c.String("store") == "" {
				return usagef("pass --store DIR", "no --store given")
			}
			if cfg.Source == "mysql" {
				return ingestMySQLAction(c, cfg.DSN)
			}
			if cfg.Source == "kafka" {
				compactEvery := c.Duration("compact-every")
				if compactEvery == 0 {
					compactEvery = -1
				}
				return runIngestKafka(c.Context, c.String("store"), c.Duration("retain"), ingest.KafkaConfig{
					Brokers: cfg.Brokers, Topics: topics, Source: c.String("source-id"),
					Envelope: c.String("envelope"), KeyFormat: c.String("key-format"), ValueFormat: c.String("value-format"),
					Group: c.String("group"), MaxRecordBytes: c.Int("max-record-bytes"),
					Interval: c.Duration("interval"), CompactEvery: compactEvery,
					AfterCommit: faultAfterCommit(),
				})
			}
			if c.String("publication") == "" {
				return usagef("pass --publication NAME (CREATE PUBLICATION rtr FOR TABLE ...)", "no --publication given")
			}
			opts := ingestOptions{
				dsn: cfg.DSN, store: c.String("store"), sourceID: c.String("source-id"),
				publication: c.String("publication"), slot: c.String("slot"), parallel: c.Int("parallel"),
				interval: c.Duration("interval"), retain: c.Duration("retain"), compactEvery: c.Duration("compact-every"),
				metricsAddr: c.String("metrics-addr"), metricsRemote: c.Bool("metrics-remote"),
				recencyAddr: c.String("recency-addr"),
			}
			if opts.sourceID == "" {
				opts.sourceID = cfg.Source
			}
			if opts.compactEvery == 0 {
				opts.compactEvery = -1
			}
			for _, t := range strings.Split(c.String("tables"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					opts.tables = append(opts.tables, t)
				}
			}
			return runIngest(c.Context, opts)
		},
	}
}

type ingestOptions struct {
	dsn, store, sourceID, publication, slot string
	tables                                  []string
	parallel                                int
	interval, retain, compactEvery          time.Duration
	metricsAddr                             string
	metricsRemote                           bool
	recencyAddr                             string
}

func runIngest(ctx context.Context, opts ingestOptions) error {
	st, err := store.Open(ctx, opts.store, store.Options{Retain: opts.retain})
	if err != nil {
		return err
	}
	var metrics *ingest.Metrics
	if opts.metricsAddr != "" {
		metrics = ingest.NewMetrics(opts.sourceID)
		errc := make(chan error, 1)
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { errc <- metrics.Serve(mctx, opts.metricsAddr, opts.metricsRemote) }()
		select {
		case err := <-errc:
			if err != nil {
				return err
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ingest.RunPG(ctx, ingest.PGConfig{
		DSN: opts.dsn, Publication: opts.publication, Slot: opts.slot, Tables: opts.tables, Parallel: opts.parallel,
		Store: st, Source: opts.sourceID, Interval: opts.interval, CompactEvery: opts.compactEvery, Metrics: metrics,
		RecencyAddr: opts.recencyAddr, AfterCommit: faultAfterCommit(),
	})
}

// runIngestKafka opens the store and runs a Kafka ingest.
func runIngestKafka(ctx context.Context, dir string, retain time.Duration, cfg ingest.KafkaConfig) error {
	switch cfg.Envelope {
	case "none", "upsert":
	default:
		return usagef("use --envelope none or --envelope upsert", "bad --envelope %q", cfg.Envelope)
	}
	for _, f := range []struct{ flag, v string }{{"key-format", cfg.KeyFormat}, {"value-format", cfg.ValueFormat}} {
		if _, err := kafkafmt.ParseFormat(f.v); err != nil {
			return usagef("use --"+f.flag+" bytes, text or json", "bad --%s %q", f.flag, f.v)
		}
	}
	st, err := store.Open(ctx, dir, store.Options{Retain: retain})
	if err != nil {
		return err
	}
	cfg.Store = st
	return ingest.RunKafka(ctx, cfg)
}

// faultAfterCommit is fault injection for crash tests: with
// RTR_FAULT_EXIT_AFTER_COMMIT=COLLECTION the process dies (exit 137, as if
// SIGKILLed) right after that collection's first commit.
func faultAfterCommit() func(string, uint64) {
	target := os.Getenv("RTR_FAULT_EXIT_AFTER_COMMIT")
	if target == "" {
		return nil
	}
	return func(collection string, upper uint64) {
		if collection == target {
			os.Exit(137)
		}
	}
}
