package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

type replicateOptions struct {
	cfg    replicate.PGConfig
	source string // source id in the pipe
}

func replicateCommand() *cli.Command {
	return &cli.Command{
		Name:      "replicate",
		Usage:     "stream changes from a replication slot as a pipe (Arrow IPC) on stdout",
		ArgsUsage: " ",
		Description: `Reads the logical replication slot --slot (plugin pgoutput) for the tables of
--publication and writes the pipe format (docs/format-pipe.md) to stdout:

  data      one stream per collection (schema.table) and run of changes: the
            table's columns, _time = the transaction's commit LSN, _diff = +1
            (insert, new row of an update) or -1 (delete, old row of an update)
  progress  after every commit and on server keepalives: the source's upper
            (no more changes will come at commit LSNs below it)
  error     a definite error of one collection (TRUNCATE, a column added,
            dropped or retyped): that collection stops, the others go on

Times are in the "lsn" domain, source id "pg". It starts at --start-lsn, or
else at the slot's confirmed_flush_lsn, and runs until progress reaches
--stop-at (an upper: every commit below it has been written; pass what
'rtrctl frontier' printed to catch up with "now" and exit) or until interrupted (SIGINT/SIGTERM: the pipe is ended cleanly at a stream
boundary, exit status 130). A lost connection is retried with backoff.

The slot's confirmed_flush_lsn never moves past what is durable. Without
--ack-store it is never advanced: the server keeps the WAL until a
consumer that stores the changes confirms them. With --ack-store DIR it
follows the store's durable frontier of the source (--source-id, default
pg): the frontier of the last binding below the least upper of the
source's collections, as 'rtrctl store append' commits them.

MySQL/MariaDB (--source mysql): row events of the binlog at their GTID
(partition: MariaDB domain / MySQL server UUID), from --start-gtid (default:
the server's current position); --stop-at takes 'rtrctl frontier --source
mysql' output or a MariaDB position. docs/mysql.md.

Kafka (--source kafka --topic T): records of T (read_committed) at time
(partition, offset) in the "kafka" domain, source id kafka.T, progress per
partition after every fetch (it steps over transaction markers); --stop-at
takes a kafka frontier (partition:next_offset,..., what 'rtrctl frontier
--source kafka' prints) and exits 0 once progress covers it. docs/kafka.md.

Tables need REPLICA IDENTITY FULL; docs/replicate.md lists every error and
docs/types-postgres.md the column types.

Examples:
  rtrctl replicate --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --slot rtr_app > changes.arrow
  rtrctl replicate --source pg --publication rtr --slot rtr_app --start-lsn 0/16B3748 --stop-at "$(rtrctl frontier --source pg)"
  rtrctl replicate --source kafka --brokers 127.0.0.1:9092 --topic orders --value-format json \
      --stop-at "$(rtrctl frontier --source kafka --brokers 127.0.0.1:9092 --topic orders)" > orders.arrow
  rtrctl snapshot --source pg --publication rtr --slot rtr_app > snap.arrow && \
    rtrctl replicate --source pg --publication rtr --slot rtr_app | rtrctl reclock ...`,
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "publication", Usage: "pgoutput publication of the tables (required)"},
			&cli.StringFlag{Name: "slot", Usage: "logical replication slot, plugin pgoutput (required; 'rtrctl snapshot' creates it)"},
			&cli.StringFlag{Name: "start-lsn", Usage: "start at this LSN, e.g. 0/16B3748 (default: the slot's confirmed_flush_lsn)"},
			&cli.StringFlag{Name: "stop-at", Usage: "an upper, e.g. from 'rtrctl frontier': exit 0 once every transaction committed below this LSN has been written"},
			&cli.DurationFlag{Name: "status-interval", Value: time.Second, Usage: "how often to ask the server for a keepalive (progress while idle)"},
			&cli.StringFlag{Name: "ack-store", Usage: "pg: advance the slot only up to what this store holds durably for the source (default: never advance it)"},
			&cli.StringFlag{Name: "start-gtid", Usage: "mysql: start after this GTID position (MariaDB 0-1-42, MySQL uuid:1-42; default: the server's current position)"},
			&cli.StringFlag{Name: "tables", Usage: "mysql: comma-separated db.table (default: every table in the binlog)"},
			&cli.StringFlag{Name: "topic", Usage: "kafka: the topic (one per pipe; it is the collection)"},
			&cli.StringFlag{Name: "start", Usage: "kafka: start offsets partition:offset,... e.g. 0:15,1:7 (default: every partition's log start)"},
			&cli.StringFlag{Name: "envelope", Value: "none", Usage: "kafka: none (append-only) or upsert (one row per key; state kept in memory from --start on)"},
			&cli.StringFlag{Name: "key-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.StringFlag{Name: "value-format", Value: "bytes", Usage: "kafka: bytes, text or json"},
			&cli.StringFlag{Name: "source-id", Usage: "the source id: with --ack-store for pg (default pg); kafka: rtr.source of the pipe (default kafka.<topic>)"},
			&cli.IntFlag{Name: "max-record-bytes", Value: replicate.DefaultMaxRecordBytes, Usage: "kafka: largest record (key+value+headers) accepted"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl replicate --help'", "unexpected argument %q", c.Args().First())
			}
			switch c.String("source") {
			case "pg", "postgres", "postgresql":
			case "":
				return usagef("use --source pg", "no --source given")
			case "kafka":
				return replicateKafkaAction(c)
			case "mysql", "mariadb":
				return replicateMySQLAction(c)
			default:
				return usagef("use --source pg or --source kafka", "unknown source %q", c.String("source"))
			}
			opts := replicateOptions{source: "pg", cfg: replicate.PGConfig{
				DSN:            c.String("dsn"),
				Publication:    c.String("publication"),
				Slot:           c.String("slot"),
				StatusInterval: c.Duration("status-interval"),
			}}
			if opts.cfg.DSN == "" {
				opts.cfg.DSN = os.Getenv("RTR_PG_DSN")
			}
			if opts.cfg.Publication == "" {
				return usagef("pass --publication NAME (CREATE PUBLICATION name FOR TABLE ...)", "no --publication given")
			}
			if opts.cfg.Slot == "" {
				return usagef("pass --slot NAME, e.g. --slot rtr_app", "no --slot given")
			}
			for _, f := range []struct {
				name string
				dst  *frontier.LSN
			}{{"start-lsn", &opts.cfg.StartLSN}, {"stop-at", &opts.cfg.StopAt}} {
				if s := c.String(f.name); s != "" {
					l, err := frontier.ParseLSN(s)
					if err != nil {
						return usagef("write an LSN as X/Y in hex, e.g. 0/16B3748", "bad --%s %q", f.name, s)
					}
					*f.dst = l
				}
			}
			if opts.cfg.StopAt > 0 {
				// --stop-at is an upper (exclusive), PGConfig.StopAt inclusive.
				opts.cfg.StopAt--
			}
			if dir := c.String("ack-store"); dir != "" {
				st, err := store.Open(c.Context, dir, store.Options{MustExist: true})
				if err != nil {
					return err
				}
				source := c.String("source-id")
				if source == "" {
					source = "pg"
				}
				opts.cfg.Ack = func(ctx context.Context) (frontier.LSN, error) {
					f, err := st.DurableFrontier(ctx, source)
					if err != nil {
						return 0, err
					}
					return frontier.LSN(f.Pos()), nil
				}
			}
			return runReplicate(c.Context, c.App.Writer, opts)
		},
	}
}

// runReplicate streams changes to w until StopAt, an error or ctx ends.
// Whatever happens, the pipe written so far ends at a stream boundary.
func runReplicate(ctx context.Context, w io.Writer, opts replicateOptions) error {
	pw := pipe.NewWriter(w, nil)
	err := replicate.StreamPG(ctx, opts.cfg, replicate.PipeSink(pw, opts.source))
	if ferr := pw.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("replicate: %w", ferr)
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("replicate: %w", err)
	}
	return err
}

// errStopReached ends a Kafka replicate at --stop-at.
var errStopReached = errors.New("stop frontier reached")

// replicateKafkaAction runs 'rtrctl replicate --source kafka'.
func replicateKafkaAction(c *cli.Context) error {
	topic := c.String("topic")
	var topics []string
	if topic != "" {
		topics = []string{topic}
	}
	cfg, err := sourceConfig(c, topics)
	if err != nil {
		return err
	}
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
		Brokers: cfg.Brokers, MaxRecordBytes: c.Int("max-record-bytes"),
		Topics: []replicate.KafkaTopic{{Name: topic, Start: start, Decoder: dec}},
	}
	return runReplicateKafka(c.Context, c.App.Writer, kcfg, source, stop, c.IsSet("stop-at"))
}

// runReplicateKafka streams one topic to w until its progress covers stop
// (when stopSet), an error or ctx ends. The pipe written so far
// ends at a stream boundary.
func runReplicateKafka(ctx context.Context, w io.Writer, cfg replicate.KafkaConfig, source string, stop frontier.Frontier, stopSet bool) error {
	pw := pipe.NewWriter(w, nil)
	sink := &stopSink{KafkaSink: replicate.KafkaPipeSink(pw, func(string) string { return source }), stop: stop, set: stopSet}
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
	replicate.KafkaSink
	stop frontier.Frontier
	set  bool
}

func (s *stopSink) Progress(topic string, upper frontier.Frontier) error {
	if err := s.KafkaSink.Progress(topic, upper); err != nil {
		return err
	}
	if s.set && upper.Covers(s.stop) {
		return errStopReached
	}
	return nil
}
