package main

import (
	"github.com/urfave/cli/v2"
)

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

Tables need REPLICA IDENTITY FULL here: a standalone stream keeps no rows,
so it cannot retract the old row of an update or delete under DEFAULT (the
primary key) or USING INDEX. 'rtrctl ingest' takes those: it keeps the
current row of every key (docs/replicate.md, "Replica identity"). That
document lists every error, docs/types-postgres.md the column types.

Examples:
  rtrctl replicate --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --slot rtr_app > changes.arrow
  rtrctl replicate --source pg --publication rtr --slot rtr_app --start-lsn 0/16B3748 --stop-at "$(rtrctl frontier --source pg)"
  rtrctl replicate --source kafka --brokers 127.0.0.1:9092 --topic orders --value-format json \
      --stop-at "$(rtrctl frontier --source kafka --brokers 127.0.0.1:9092 --topic orders)" > orders.arrow
  rtrctl snapshot --source pg --publication rtr --slot rtr_app > snap.arrow && \
    rtrctl replicate --source pg --publication rtr --slot rtr_app | rtrctl reclock ...`,
		Flags: append(sourceFlags("replicate"),
			&cli.StringFlag{Name: "stop-at", Usage: "an upper, e.g. from 'rtrctl frontier': exit 0 once every change below it has been written"},
			&cli.StringFlag{Name: "tables", Usage: "mysql: comma-separated db.table (default: every table in the binlog)"},
			&cli.StringFlag{Name: "source-id", Usage: "the source id: with --ack-store for pg (default pg); mysql: rtr.source of the pipe (default mysql); kafka: rtr.source of the pipe (default kafka.<topic>)"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl replicate --help'", "unexpected argument %q", c.Args().First())
			}
			k, u, err := lookupSource(c)
			if err != nil {
				return err
			}
			if k.replicate == nil {
				return stageUnsupported("replicate")
			}
			return k.replicate(c, u)
		},
	}
}
