package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/bench"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// envBenchRtrctl names the rtrctl binary bench runs as `rtrctl ingest`
// (default: this executable); tests point it at a built binary.
const envBenchRtrctl = "RTR_BENCH_RTRCTL"

func benchCommand() *cli.Command {
	common := func() []cli.Flag {
		return []cli.Flag{
			&cli.Float64Flag{Name: "num-seconds", Usage: "how long the producer writes, in seconds (required)"},
			&cli.DurationFlag{Name: "restart-every", Usage: "SIGKILL and restart ingest this often while producing (e.g. 10s)"},
			&cli.StringFlag{Name: "store", Usage: "the store directory, which must not exist or be empty (default: a temporary one, removed)"},
			&cli.StringFlag{Name: "output", Value: "text", Usage: "text (a line per second and a summary) or json (one object; the lines go to stderr)"},
			&cli.DurationFlag{Name: "drain-timeout", Value: bench.DefaultDrainTimeout, Usage: "how long ingest may take to catch up after the producer stops"},
			&cli.StringFlag{Name: "plot", Usage: "write a PNG plot of the lag over time to this file"},
			&cli.StringSliceFlag{Name: "ingest-flag", Usage: "one more flag of every 'rtrctl ingest' of the run, e.g. --ingest-flag=--state-cache=64MiB (repeatable)"},
			&cli.StringFlag{Name: "ingest-memory-limit", Usage: "the --memory-limit of every 'rtrctl ingest' of the run (default: its own default); the bench process and its in-process broker keep theirs"},
			&cli.StringFlag{Name: "rtrctl", Hidden: true, EnvVars: []string{envBenchRtrctl}, Usage: "the rtrctl binary to run as ingest"},
		}
	}
	return &cli.Command{
		Name:  "bench",
		Usage: "open-loop load tests of ingest: fixed-rate producer, lag, CPU and memory",
		Description: `Runs a producer at a fixed rate (open loop: it keeps the rate whatever ingest
does) and 'rtrctl ingest' as a separate process into an empty store, and
every 100 ms compares what the store holds durably with what the upstream
acknowledged. Prints a line per second, then, once the producer has stopped
and ingest has caught up exactly, a summary: sustained rate, lag p50/p99/max
(seconds: the age of the oldest acknowledged record not yet durable), drain
time, and the peak RSS and CPU time of the ingest process (docs/benchmarks.md).

Examples:
  rtrctl bench kafka --records-per-second 100000 --num-seconds 30
  rtrctl bench kafka --records-per-second 50000 --num-seconds 30 --envelope upsert --restart-every 10s
  rtrctl bench kafka --records-per-second 40000 --num-seconds 60 --envelope upsert --ingest-memory-limit 512MiB
  rtrctl bench kafka --records-per-second 10000 --num-seconds 120 --envelope upsert --key-cardinality 10000000 --preload-keys 10000000
  rtrctl bench pg --rate 500 --num-seconds 20 --output json`,
		Subcommands: []*cli.Command{
			{
				Name:  "kafka",
				Usage: "Kafka: a producer into a topic, ingest --source kafka",
				Description: `Without --brokers an in-process broker (kfake, as 'rtrctl dev kafka') is
started for the run. The topic (--topic, default bench) is created with
--partitions partitions and must not exist. Keys are drawn uniformly from
--key-cardinality keys; values are --value-size random bytes. With
--preload-keys N, keys 0 to N-1 are produced once each before the timed
run and ingest must have them durable before its clock starts, so an
upsert state holds N keys throughout (uniform draws alone reach few of
a large key space).`,
				Flags: append(append(common(),
					&cli.Float64Flag{Name: "records-per-second", Usage: "the producer's rate (required)"},
					&cli.IntFlag{Name: "key-cardinality", Value: bench.DefaultKeyCardinality, Usage: "number of distinct keys"},
					&cli.IntFlag{Name: "preload-keys", Usage: "before the timed run, produce this many distinct keys once each (at most --key-cardinality) and wait until ingest has them durable, so an upsert state starts full"},
					&cli.IntFlag{Name: "value-size", Value: bench.DefaultValueSize, Usage: "value size in bytes"},
					&cli.StringFlag{Name: "envelope", Value: "none", Usage: "ingest envelope: none or upsert"},
					&cli.IntFlag{Name: "partitions", Value: bench.DefaultPartitions, Usage: "partitions of the topic"},
					&cli.StringFlag{Name: "brokers", Usage: "an existing Kafka cluster, host:port[,host:port] (default: an embedded broker)"},
					&cli.StringFlag{Name: "topic", Value: bench.DefaultTopic, Usage: "the topic to create"},
				), kafkaSecurityFlags()...),
				Action: func(c *cli.Context) error {
					common, err := benchCommon(c)
					if err != nil {
						return err
					}
					if c.Float64("records-per-second") <= 0 {
						return usagef("pass --records-per-second R (R > 0)", "no or bad --records-per-second")
					}
					if c.Int("key-cardinality") < 1 {
						return usagef("use --key-cardinality 1 or more", "bad --key-cardinality %d", c.Int("key-cardinality"))
					}
					if c.Int("value-size") < 0 {
						return usagef("use --value-size 0 or more", "bad --value-size %d", c.Int("value-size"))
					}
					if c.Int("partitions") < 1 {
						return usagef("use --partitions 1 or more", "bad --partitions %d", c.Int("partitions"))
					}
					if n := c.Int("preload-keys"); n < 0 || n > c.Int("key-cardinality") {
						return usagef("the preload writes keys of the run's key space once each: use at most --key-cardinality", "bad --preload-keys %d (--key-cardinality %d)", n, c.Int("key-cardinality"))
					}
					if e := c.String("envelope"); e != "none" && e != "upsert" {
						return usagef("use --envelope none or --envelope upsert", "bad --envelope %q", e)
					}
					// No --brokers: an embedded broker.
					var up upstream.Kafka
					if len(upstream.ParseKafka(c.String("brokers")).Brokers) > 0 {
						ku, err := kafkaBrokers(c)
						if err != nil {
							return err
						}
						up = ku.kafka
					}
					cfg := bench.KafkaConfig{
						Common: common, RecordsPerSecond: c.Float64("records-per-second"),
						KeyCardinality: c.Int("key-cardinality"), ValueSize: c.Int("value-size"),
						Envelope: c.String("envelope"), Partitions: c.Int("partitions"), Upstream: up, Topic: c.String("topic"), PreloadKeys: c.Int("preload-keys"),
					}
					return runBench(c, func(ctx context.Context) (*bench.Result, error) { return bench.RunKafka(ctx, cfg) })
				},
			},
			{
				Name:  "pg",
				Usage: "PostgreSQL: a writer at a fixed transaction rate, ingest --source pg",
				Description: `Without --dsn a throwaway PostgreSQL 15 server is started for the run and
stopped at the end. A table, publication and slot named rtr_bench_<random>
are created and dropped at the end. Lag is in seconds and in WAL bytes
(pg_current_wal_insert_lsn() minus the store's durable frontier).`,
				Flags: append(common(),
					&cli.Float64Flag{Name: "rate", Usage: "transactions per second (required)"},
					&cli.IntFlag{Name: "rows-per-txn", Value: bench.DefaultRowsPerTxn, Usage: "rows written per transaction"},
					&cli.Float64Flag{Name: "update-ratio", Value: bench.DefaultUpdateRatio, Usage: "share of rows that update an earlier row (0..1)"},
					&cli.StringFlag{Name: "dsn", Usage: "the server (default: a throwaway one)"},
					&cli.IntFlag{Name: "connections", Value: bench.DefaultConnections, Usage: "writer connections"},
				),
				Action: func(c *cli.Context) error {
					common, err := benchCommon(c)
					if err != nil {
						return err
					}
					if c.Float64("rate") <= 0 {
						return usagef("pass --rate R (transactions per second, R > 0)", "no or bad --rate")
					}
					if c.Int("rows-per-txn") < 1 {
						return usagef("use --rows-per-txn 1 or more", "bad --rows-per-txn %d", c.Int("rows-per-txn"))
					}
					if x := c.Float64("update-ratio"); x < 0 || x > 1 {
						return usagef("use --update-ratio between 0 and 1", "bad --update-ratio %g", x)
					}
					if c.Int("connections") < 1 {
						return usagef("use --connections 1 or more", "bad --connections %d", c.Int("connections"))
					}
					cfg := bench.PGConfig{
						Common: common, Rate: c.Float64("rate"), RowsPerTxn: c.Int("rows-per-txn"),
						UpdateRatio: c.Float64("update-ratio"), DSN: c.String("dsn"), Connections: c.Int("connections"),
					}
					return runBench(c, func(ctx context.Context) (*bench.Result, error) { return bench.RunPG(ctx, cfg) })
				},
			},
		},
	}
}

// benchCommon reads the flags every bench subcommand has.
func benchCommon(c *cli.Context) (bench.Common, error) {
	if c.Args().Present() {
		return bench.Common{}, usagef("run 'rtrctl bench "+c.Command.Name+" --help'", "unexpected argument %q", c.Args().First())
	}
	secs := c.Float64("num-seconds")
	if secs <= 0 {
		return bench.Common{}, usagef("pass --num-seconds S (S > 0)", "no or bad --num-seconds")
	}
	if c.Duration("restart-every") < 0 {
		return bench.Common{}, usagef("use --restart-every 10s or so", "bad --restart-every %s", c.Duration("restart-every"))
	}
	switch c.String("output") {
	case "text", "json":
	default:
		return bench.Common{}, usagef("use --output text or --output json", "bad --output %q", c.String("output"))
	}
	bin := c.String("rtrctl")
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return bench.Common{}, fmt.Errorf("bench: find the rtrctl executable: %w", err)
		}
		bin = exe
	}
	progress := c.App.Writer
	if c.String("output") == "json" {
		progress = c.App.ErrWriter
	}
	return bench.Common{
		Duration:     time.Duration(secs * float64(time.Second)),
		RestartEvery: c.Duration("restart-every"),
		StoreDir:     c.String("store"),
		Rtrctl:       bin,
		IngestFlags:  c.StringSlice("ingest-flag"),
		IngestEnv:    ingestEnv(c),
		DrainTimeout: c.Duration("drain-timeout"),
		Progress:     progress,
	}, nil
}

// ingestEnv is the extra environment of the run's ingest processes.
func ingestEnv(c *cli.Context) []string {
	if v := c.String("ingest-memory-limit"); v != "" {
		return []string{memoryLimitFlag.EnvVars[0] + "=" + v}
	}
	return nil
}

// runBench runs a benchmark and prints its summary.
func runBench(c *cli.Context, fn func(context.Context) (*bench.Result, error)) error {
	res, err := fn(c.Context)
	if res != nil && c.String("plot") != "" {
		if perr := bench.WritePlot(c.String("plot"), res); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return err
	}
	return printBench(c.App.Writer, c.String("output"), res)
}

func printBench(w io.Writer, output string, res *bench.Result) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		return enc.Encode(res)
	}
	return bench.FormatText(w, res)
}
