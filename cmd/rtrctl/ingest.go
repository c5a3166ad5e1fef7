package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/reclock"
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

The replication slot (--slot, default rtr_<source-id>_<store id>) is acknowledged only
up to what every collection has durably committed.

PostgreSQL tables may have REPLICA IDENTITY FULL, DEFAULT (with a primary
key) or USING INDEX: for the latter two the ingest keeps the current row of
every key in memory, rebuilt from the store at each start (about 55 bytes
per key beyond the row itself; logged as "key state rebuilt from the
store"). Tables without a key (NOTHING, DEFAULT without a primary key) are
refused. docs/replicate.md, "Replica identity".

The upstream may change while it runs: a TRUNCATE empties the collection
from its commit; a column added, dropped or retyped re-snapshots the table
in the stream from the change on, without stopping the others; a table
added to the publication joins, one removed gets a definite error.
--resnapshot copies collections again where the ingest resumes (and clears
a definite error). docs/operations.md, "When the upstream changes".

MySQL/MariaDB (--source mysql --tables db.t1,db.t2): snapshot, then the
binlog; source id mysql. docs/mysql.md.

Kafka (--source kafka): every topic of --topics becomes the collection of the
same name and its own source, <source-id>.<topic> (source-id default kafka),
read with isolation level read_committed from where the store ends.
--envelope none appends every record (partition, offset, key, value,
timestamp, header_keys, header_values); --envelope upsert keeps one row per
key (a null value deletes it). --key-format/--value-format: bytes, text or
json. A record that does not decode is a definite error of its collection
(docs/kafka.md). Upsert keeps every key's value on disk in STORE/state/<source
id>/ (--state-dir) behind a cache of --state-cache bytes, reused at restart
(logged as "upsert state reused" or "caught up"); deleting it while no ingest
runs is safe: it is rebuilt from the store.

Tables whose updates do not carry the old row (PostgreSQL replica identity
DEFAULT or USING INDEX; MariaDB binlog_row_image MINIMAL or NOBLOB) keep their
rows by key the same way, in STORE/state/keys/<source id>/<table>/, with at most
--state-cache bytes of changes in memory per table.

Examples:
  rtrctl ingest --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --store ./data
  rtrctl ingest --source pg --publication rtr --tables public.orders,public.lines \
      --store ./data --metrics-addr 127.0.0.1:9464
  rtrctl ingest --source pg --publication rtr --store ./data --resnapshot public.orders
  rtrctl ingest --source pg --publication rtr --store s3://cdc/orders --standby   # on a second host
  rtrctl ingest --source kafka --brokers 127.0.0.1:9092 --topics orders,users \
      --envelope upsert --key-format text --value-format json --store ./data`,
		Flags: append(sourceFlags("ingest"),
			&cli.StringFlag{Name: "store", Usage: "the store: a directory, or s3://BUCKET/PREFIX (AWS_* environment; docs/operations.md) (required)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: store.DefaultLeaseTTL, Usage: "s3:// stores: how long the writer lease outlives its holder; another ingest of the source takes over after it"},
			&cli.BoolFlag{Name: "standby", Usage: "when another ingest holds the source (a local store's lock, an s3:// store's lease), wait and take over once it stops or its lease expires, instead of failing: a hot standby on this host or another"},
			&cli.StringFlag{Name: "source-id", Usage: "the source's id in the store (default: the --source kind, e.g. pg); kafka: the prefix of the ids <prefix>.<topic>"},
			&cli.StringFlag{Name: "tables", Usage: "pg: comma-separated tables, named as SQL names them: public.orders,public.\"RelMix\" (default: every table of the publication); mysql: db.table,... with backticks where SQL needs them, or db.* for every table of db, tables created while the ingest runs included (required)"},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "pg, mysql: snapshot connections"},
			&cli.DurationFlag{Name: "progress-interval", Value: 5 * time.Second, Usage: "pg, mysql: how often the initial snapshot logs its progress per table"},
			&cli.DurationFlag{Name: "interval", Value: reclock.DefaultInterval, Usage: "least time between two bindings (commits)"},
			&cli.Int64Flag{Name: "txn-memory", Usage: "bytes of updates not yet bound (a large transaction before its commit, a re-snapshot's copy) held in memory; beyond it they are staged in the store until their commit (default: a sixteenth of --memory-limit, at most 32 MiB; -1: never stage)"},
			&cli.StringFlag{Name: "state-dir", Usage: "kafka upsert, and tables keyed by primary key (not FULL): where each topic or table keeps its state on disk, a directory per source under it (default STORE/state; for an s3:// store, $XDG_CACHE_HOME/rtrctl/state/<store id>); safe to delete while no ingest runs (it is rebuilt from the store)"},
			&cli.Int64Flag{Name: "state-cache", Usage: "kafka upsert, and keyed tables: bytes of memory for each topic's or table's state (its cache and the on-disk store's; default: an eighth of --memory-limit, at most 256 MiB); the state itself lives on disk"},
			&cli.DurationFlag{Name: "retain", Value: store.DefaultRetain, Usage: "history kept readable by background compaction"},
			&cli.DurationFlag{Name: "compact-every", Value: time.Minute, Usage: "how often to compact (0 disables)"},
			&cli.DurationFlag{Name: "retry-for", Usage: "give up when the upstream has been failing (restarting, unreachable) this long (default: retry for ever; permanent errors such as a wrong password fail at once)"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics on this address (loopback), e.g. 127.0.0.1:9464"},
			&cli.BoolFlag{Name: "metrics-remote", Usage: "allow --metrics-addr on a non-loopback address"},
			&cli.StringFlag{Name: "recency-addr", Usage: "also serve wait-recent over HTTP on this loopback address (GET /wait-recent?timeout_ms=N), e.g. 127.0.0.1:9465; one source (kafka: one topic) per process"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl ingest --help'", "unexpected argument %q", c.Args().First())
			}
			k, u, err := lookupSource(c)
			if err != nil {
				return err
			}
			if k.ingest == nil {
				return stageUnsupported("ingest")
			}
			if c.String("store") == "" {
				return usagef("pass --store DIR", "no --store given")
			}
			txnMemory, err := theMemory.txnMemory(c)
			if err != nil {
				return err
			}
			src, err := k.ingest(c, u)
			if err != nil {
				return err
			}
			opts := ingestOptions{
				store: c.String("store"), retain: c.Duration("retain"), leaseTTL: c.Duration("lease-ttl"),
				metricsAddr: c.String("metrics-addr"), metricsRemote: c.Bool("metrics-remote"),
				run: ingest.Options{
					Interval: c.Duration("interval"), CompactEvery: c.Duration("compact-every"),
					RecencyAddr: c.String("recency-addr"), RetryFor: c.Duration("retry-for"),
					AfterCommit: faultAfterCommit(), MemoryBudget: txnMemory, Standby: c.Bool("standby"),
				},
			}
			if opts.run.CompactEvery == 0 {
				opts.run.CompactEvery = -1
			}
			return runIngest(c.Context, src, opts)
		},
	}
}

type ingestOptions struct {
	store         string
	retain        time.Duration
	leaseTTL      time.Duration
	metricsAddr   string
	metricsRemote bool
	run           ingest.Options
}

// runIngest opens the store, serves metrics when asked and runs src.
func runIngest(ctx context.Context, src ingest.Source, opts ingestOptions) error {
	st, err := store.Open(ctx, opts.store, store.Options{Retain: opts.retain, LeaseTTL: opts.leaseTTL})
	if err != nil {
		return err
	}
	if opts.metricsAddr != "" {
		opts.run.Metrics = ingest.NewMetrics()
		errc := make(chan error, 1)
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { errc <- opts.run.Metrics.Serve(mctx, opts.metricsAddr, opts.metricsRemote) }()
		select {
		case err := <-errc:
			if err != nil {
				return err
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	slog.Info("memory budget", append(theMemory.attrs(), "txn_memory", formatSize(opts.run.MemoryBudget))...)
	return ingest.Run(ctx, src, st, opts.run)
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
