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
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
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

It never advances the slot (the slot's confirmed_flush_lsn stays put), so
the server keeps the WAL until a consumer that stores the changes durably
confirms them. --ack-store is not available yet.

Tables need REPLICA IDENTITY FULL; docs/replicate.md lists every error and
docs/types-postgres.md the column types.

Examples:
  rtrctl replicate --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --slot rtr_app > changes.arrow
  rtrctl replicate --source pg --publication rtr --slot rtr_app --start-lsn 0/16B3748 --stop-at "$(rtrctl frontier --source pg)"
  rtrctl snapshot --source pg --publication rtr --slot rtr_app > snap.arrow && \
    rtrctl replicate --source pg --publication rtr --slot rtr_app | rtrctl reclock ...`,
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "publication", Usage: "pgoutput publication of the tables (required)"},
			&cli.StringFlag{Name: "slot", Usage: "logical replication slot, plugin pgoutput (required; 'rtrctl snapshot' creates it)"},
			&cli.StringFlag{Name: "start-lsn", Usage: "start at this LSN, e.g. 0/16B3748 (default: the slot's confirmed_flush_lsn)"},
			&cli.StringFlag{Name: "stop-at", Usage: "an upper, e.g. from 'rtrctl frontier': exit 0 once every transaction committed below this LSN has been written"},
			&cli.DurationFlag{Name: "status-interval", Value: time.Second, Usage: "how often to ask the server for a keepalive (progress while idle)"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl replicate --help'", "unexpected argument %q", c.Args().First())
			}
			switch c.String("source") {
			case "pg", "postgres", "postgresql":
			case "":
				return usagef("use --source pg", "no --source given")
			case "mysql", "mariadb", "kafka":
				return usagef("use --source pg", "replicate does not support --source %s yet", c.String("source"))
			default:
				return usagef("use --source pg", "unknown source %q", c.String("source"))
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
