package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/recency"
)

func waitRecentCommand() *cli.Command {
	return &cli.Command{
		Name:  "wait-recent",
		Usage: "wait until everything visible upstream now is in the store; print the time to read at",
		Description: `Fetches the upstream's visible frontier U (for PostgreSQL
pg_current_wal_insert_lsn()), waits for the first binding (t, F) of the
source with F covering U and for every collection of the source to be
durable past t, and prints t (milliseconds since the Unix epoch). A read as
of t sees every change that was visible upstream when wait-recent started:

  psql -c "INSERT ..."; t=$(rtrctl wait-recent --store ./data) && rtrctl read ./data public.orders --as-of "$t"

When 'rtrctl ingest' runs for the source it answers through its socket
(SourceInfo.socket, by default DIR/sources/<source-id>.sock): one upstream
probe per round for all concurrent callers, a binding minted at once.
Otherwise (or with --no-daemon) wait-recent probes the upstream itself:
the one the ingest recorded in the store, with the password from
PGPASSWORD or MYSQL_PWD (the store never holds it), or the one named by
--source/--dsn (or --dsn-file). A permanent error there (a wrong password,
a missing database) fails at once (exit 1).

An ingest that is starting is waited for (until --timeout): its store
directory, its source, its socket, its snapshot. So
'rtrctl ingest ... --store S & t=$(rtrctl wait-recent --store S)' works
as written. While the initial snapshot runs, a progress bar shows on
stderr when it is a terminal (never otherwise), and a timeout says how far
the snapshot got.

Exit statuses: 0 with t on stdout; 3 when recency was not reached: the
--timeout passed, or no ingest is running and the store is behind the
upstream (with --wait-for-ingest it waits for one until the timeout); the
message says how far ingestion got (both frontiers, the age of the last
binding, whether an ingest runs). 1 for other errors.

--output json prints {"time":T,"upstream":FRONTIER,"binding":FRONTIER,"source":ID,"via":"daemon"|"daemon-http"|"direct"}.`,
		Flags: append(sourceFlags("wait-recent"),
			&cli.StringFlag{Name: "store", Usage: "the store directory (required)"},
			&cli.StringFlag{Name: "source-id", Usage: "the source's id in the store (default: the store's only source)"},
			&cli.DurationFlag{Name: "timeout", Value: recency.DefaultTimeout, Usage: "give up (exit 3) after this long"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text (the time) or json"},
			&cli.BoolFlag{Name: "wait-for-ingest", Usage: "when no ingest is running, wait (until --timeout) instead of failing at once"},
			&cli.BoolFlag{Name: "no-daemon", Usage: "do not ask the ingest's socket; probe the upstream directly"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl wait-recent --help'", "unexpected argument %q", c.Args().First())
			}
			if c.String("store") == "" {
				return usagef("pass --store DIR", "no --store given")
			}
			out := c.String("output")
			if out != "text" && out != "json" {
				return usagef("use --output text or --output json", "bad --output %q", out)
			}
			if c.Duration("timeout") <= 0 {
				return usagef("pass a positive --timeout, e.g. 10s", "bad --timeout %s", c.Duration("timeout"))
			}
			opts := waitRecentOptions{
				store: c.String("store"), output: out,
				wait: recency.Options{
					Source: c.String("source-id"), Timeout: c.Duration("timeout"),
					WaitForIngest: c.Bool("wait-for-ingest"), NoDaemon: c.Bool("no-daemon"),
					Recorded: recordedProber,
				},
			}
			if c.IsSet("source") {
				_, u, err := lookupSource(c)
				if err != nil {
					return err
				}
				p, err := u.Prober()
				if err != nil {
					return err
				}
				defer p.Close()
				opts.wait.Prober = p
			} else if c.IsSet("dsn") || c.IsSet("dsn-file") {
				return usagef("add --source pg (or mysql) to name the upstream's kind", "--dsn needs --source")
			}
			return runWaitRecent(c.Context, c.App.Writer, c.App.ErrWriter, opts)
		},
	}
}

type waitRecentOptions struct {
	store, output string
	wait          recency.Options
}

// waitRecentJSON is the stable JSON form of `wait-recent --output json`.
type waitRecentJSON = recency.Result

func runWaitRecent(ctx context.Context, w, stderr io.Writer, opts waitRecentOptions) error {
	// An ingest that is starting may not have created the store yet.
	opts.wait.Started = time.Now()
	st, err := recency.OpenStore(ctx, opts.store, opts.wait.Started, opts.wait.Timeout)
	if err != nil {
		return err
	}
	stop := showSnapshotWhileWaiting(ctx, stderr, st, opts.wait.Source, "")
	res, err := recency.Wait(ctx, st, opts.wait)
	stop()
	if err != nil {
		return snapshotWaitHint(st, err)
	}
	if opts.output == "json" {
		return json.NewEncoder(w).Encode(waitRecentJSON(res))
	}
	_, err = fmt.Fprintln(w, res.Time)
	return err
}
