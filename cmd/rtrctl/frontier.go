package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

type frontierOptions struct {
	source  string // the kind, for --output json
	up      sourceUpstream
	output  string
	timeout time.Duration
}

func frontierCommand() *cli.Command {
	return &cli.Command{
		Name:  "frontier",
		Usage: "print the upstream's visible frontier",
		Description: `Prints what is visible upstream right now, as an upper: everything committed
upstream before the call lies below it.

  pg     pg_current_wal_insert_lsn()       e.g. 0/16B3748
  mysql  @@global.gtid_executed (MySQL)    e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5
         @@global.gtid_binlog_pos (MariaDB) e.g. 0-1-42
  kafka  last stable offset per partition  e.g. 0:15,1:7 (partition:next_offset)

--output json prints one object:
  {"source":"pg","flavor":"postgres","native":"0/16B3748",
   "frontier":{"domain":"lsn","text":"0/16B3748","upper":{"":23803720}}}

Examples:
  rtrctl frontier --source pg --dsn postgres://user@127.0.0.1:5432/app
  PGHOST=127.0.0.1 PGUSER=app rtrctl frontier --source pg
  rtrctl frontier --source mysql --dsn 'app:secret@tcp(127.0.0.1:3306)/'
  rtrctl frontier --source kafka --brokers 127.0.0.1:9092 --topic orders --output json`,
		Flags: append(sourceFlags("frontier"),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text (the source's native notation) or json"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl frontier --help'", "unexpected argument %q", c.Args().First())
			}
			k, u, err := lookupSource(c)
			if err != nil {
				return err
			}
			out := c.String("output")
			if out != "text" && out != "json" {
				return usagef("use --output text or --output json", "bad --output %q", out)
			}
			return runFrontier(c.Context, c.App.Writer, frontierOptions{source: k.name, up: u, output: out, timeout: c.Duration("timeout")})
		},
	}
}

// frontierJSON is the stable JSON form of `rtrctl frontier --output json`.
type frontierJSON struct {
	Source   string            `json:"source"`
	Flavor   string            `json:"flavor"`
	Native   string            `json:"native"`
	Frontier frontier.Frontier `json:"frontier"`
}

func runFrontier(ctx context.Context, w io.Writer, opts frontierOptions) error {
	p, err := opts.up.Prober()
	if err != nil {
		return err
	}
	defer p.Close()
	if opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.timeout)
		defer cancel()
	}
	res, err := p.Probe(ctx)
	if err != nil {
		return err
	}
	if opts.output == "json" {
		enc := json.NewEncoder(w)
		return enc.Encode(frontierJSON{Source: opts.source, Flavor: res.Flavor, Native: res.Native, Frontier: res.Frontier})
	}
	_, err = fmt.Fprintln(w, res.Native)
	return err
}
