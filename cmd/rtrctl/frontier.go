package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
)

// sourceFlags are the flags that name an upstream, shared by every command
// that talks to one.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "source", Usage: "source kind: pg, mysql (MySQL or MariaDB) or kafka (required)"},
		&cli.StringFlag{Name: "dsn", Usage: "connection string for pg (URL or key=value; default: PG* environment) or mysql (user:pass@tcp(host:port)/db or mysql://...; default: $RTR_MYSQL_DSN)"},
		&cli.StringFlag{Name: "brokers", Usage: "kafka bootstrap brokers, host:port[,host:port] (default: $RTR_KAFKA_BROKERS)"},
	}
}

// sourceConfig reads the sourceFlags, applying environment defaults.
func sourceConfig(c *cli.Context, topics []string) (probe.Config, error) {
	cfg := probe.Config{Source: c.String("source"), DSN: c.String("dsn"), Topics: topics}
	switch cfg.Source {
	case "pg", "postgres", "postgresql":
		cfg.Source = "pg"
		if cfg.DSN == "" {
			cfg.DSN = os.Getenv("RTR_PG_DSN")
		}
	case "mysql", "mariadb":
		cfg.Source = "mysql"
		if cfg.DSN == "" {
			cfg.DSN = os.Getenv("RTR_MYSQL_DSN")
		}
		if cfg.DSN == "" {
			return cfg, usagef("pass --dsn user:pass@tcp(host:3306)/db or set RTR_MYSQL_DSN", "no MySQL DSN given")
		}
	case "kafka":
		b := c.String("brokers")
		if b == "" {
			b = os.Getenv("RTR_KAFKA_BROKERS")
		}
		if b == "" {
			return cfg, usagef("pass --brokers host:port or set RTR_KAFKA_BROKERS", "no Kafka brokers given")
		}
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				cfg.Brokers = append(cfg.Brokers, s)
			}
		}
		if len(topics) == 0 {
			return cfg, usagef("pass --topic NAME", "no Kafka topic given")
		}
	case "":
		return cfg, usagef("use --source pg, --source mysql or --source kafka", "no --source given")
	default:
		return cfg, usagef("use --source pg, --source mysql or --source kafka", "unknown source %q", cfg.Source)
	}
	return cfg, nil
}

type frontierOptions struct {
	probe   probe.Config
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
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "topic", Usage: "kafka topic"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text (the source's native notation) or json"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl frontier --help'", "unexpected argument %q", c.Args().First())
			}
			var topics []string
			if t := c.String("topic"); t != "" {
				topics = []string{t}
			}
			cfg, err := sourceConfig(c, topics)
			if err != nil {
				return err
			}
			out := c.String("output")
			if out != "text" && out != "json" {
				return usagef("use --output text or --output json", "bad --output %q", out)
			}
			return runFrontier(c.Context, c.App.Writer, frontierOptions{probe: cfg, output: out, timeout: c.Duration("timeout")})
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
	p, err := probe.New(opts.probe)
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
		return enc.Encode(frontierJSON{Source: opts.probe.Source, Flavor: res.Flavor, Native: res.Native, Frontier: res.Frontier})
	}
	_, err = fmt.Fprintln(w, res.Native)
	return err
}
