package main

import (
	"context"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func reclockCommand() *cli.Command {
	return &cli.Command{
		Name:  "reclock",
		Usage: "map source-time updates onto the store's system clock",
		Description: `Reads a source-time pipe (snapshot or replicate output) on stdin and writes
system-time data, bindings and progress to stdout.

A binding (t, F) says "by system time t the source had reached frontier F".
Bindings are minted when source progress advances, at most once per
--interval, and are made durable in the store's remap shard for the source
BEFORE any data at their time is written out. An update at source time s
gets the first binding time t whose frontier is strictly beyond s. On a
restart the durable bindings are reused, so replayed updates get the same
system times (docs/reclocking.md).

Examples:
  rtrctl replicate --source pg ... | rtrctl reclock --store ./data | rtrctl store append ./data
  rtrctl snapshot --source pg ... | rtrctl reclock --store ./data --source pg | rtrctl store append ./data`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "store", Usage: "the store whose remap shard holds the bindings (required)"},
			&cli.StringFlag{Name: "source", Usage: "source id (default: rtr.source of the input)"},
			&cli.DurationFlag{Name: "interval", Value: reclock.DefaultInterval, Usage: "least time between two bindings"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl reclock --help'", "unexpected argument %q", c.Args().First())
			}
			if c.String("store") == "" {
				return usagef("pass --store DIR", "no --store given")
			}
			if c.Duration("interval") <= 0 {
				return usagef("use a positive --interval such as 100ms", "bad --interval %s", c.Duration("interval"))
			}
			return runReclock(c.Context, c.App.Reader, c.App.Writer, reclockOptions{
				store: c.String("store"), source: c.String("source"), interval: c.Duration("interval"),
			})
		},
	}
}

type reclockOptions struct {
	store, source string
	interval      time.Duration
}

func runReclock(ctx context.Context, stdin io.Reader, stdout io.Writer, opts reclockOptions) error {
	st, err := store.Open(ctx, opts.store, store.Options{})
	if err != nil {
		return err
	}
	return reclock.RunPipe(ctx, st, stdin, stdout, reclock.PipeOptions{
		Source:  opts.source,
		Options: reclock.Options{Interval: opts.interval},
	})
}
