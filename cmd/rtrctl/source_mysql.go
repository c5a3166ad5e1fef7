package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// The MySQL/MariaDB source: row events of the binlog at their GTID, a
// definite snapshot at a GTID position (docs/mysql.md).
func init() {
	registerSource(&sourceKind{
		name:    "mysql",
		aliases: []string{"mariadb"},
		flags: map[string][]cli.Flag{
			"replicate": {&cli.StringFlag{Name: "start-gtid", Usage: "mysql: start after this GTID position (MariaDB 0-1-42, MySQL uuid:1-42; default: the server's current position)"}},
			// Registered before pg's flag of the same name: one flag, both sources.
			"ingest": {&cli.StringFlag{Name: "resnapshot", Usage: "pg, mysql: collections to snapshot again where the ingest resumes (mysql: at the first transaction it receives), comma-separated (e.g. public.orders, shop.orders), without stopping the others; clears a collection's definite error"}},
		},
		upstream: func(c *cli.Context) (sourceUpstream, error) {
			d, err := dsnOf(c, "RTR_MYSQL_DSN")
			if err != nil {
				return nil, err
			}
			if d == "" {
				return nil, usagef("pass --dsn user:pass@tcp(host:3306)/db (or --dsn-file) or set RTR_MYSQL_DSN", "no MySQL DSN given")
			}
			d, err = withMySQLPassword(d)
			if err != nil {
				return nil, err
			}
			my, err := upstream.ParseMySQL(d)
			if err != nil {
				return nil, err
			}
			return mysqlUpstream{my}, nil
		},
		snapshot:  snapshotMySQLAction,
		replicate: replicateMySQLAction,
		ingest: func(c *cli.Context, u sourceUpstream) (ingest.Source, error) {
			tables, err := tableList("--tables", func(s string) error {
				if _, ok := ingest.MySQLPattern(s); ok {
					return nil
				}
				_, _, err := myarrow.ParseName(s)
				return err
			}, c.String("tables"))
			if err != nil {
				return nil, err
			}
			if len(tables) == 0 {
				return nil, usagef("pass --tables db.t1,db.t2", "no --tables given")
			}
			var resnap []string
			if c.String("resnapshot") != "" {
				if resnap, err = tableList("--resnapshot", func(s string) error { _, _, err := myarrow.ParseName(s); return err }, c.String("resnapshot")); err != nil {
					return nil, err
				}
			}
			cache, err := theMemory.stateCache(c)
			if err != nil {
				return nil, err
			}
			copyMem, err := theMemory.txnMemory(c) // a re-snapshot's copy is staged as a transaction is
			if err != nil {
				return nil, err
			}
			return ingest.NewMySQL(ingest.MySQLConfig{Upstream: u.(mysqlUpstream).my, Tables: tables, Parallel: c.Int("parallel"), Source: sourceID(c, "mysql"), Resnapshot: resnap,
				ProgressInterval: c.Duration("progress-interval"), StateDir: c.String("state-dir"), StateCache: cache, CopyMemory: copyMem}), nil
		},
		recorded:     recordedVia(upstream.ParseMySQL, probe.NewMySQL),
		upstreamFlag: "dsn",
		passwordEnv:  "MYSQL_PWD",
		domains:      []frontier.Domain{frontier.DomainMySQL, frontier.DomainMariaDB},
	})
}

// withMySQLPassword is DSN d with the password from MYSQL_PWD when d has
// a user and no password (as PGPASSWORD for PostgreSQL).
func withMySQLPassword(d string) (string, error) {
	pw := os.Getenv("MYSQL_PWD")
	if pw == "" {
		return d, nil
	}
	m, err := dsn.ParseMySQL(d)
	if err != nil || m.User == "" || m.Password != "" {
		return d, nil // upstream.ParseMySQL words the error
	}
	return m.WithPassword(pw), nil
}

// mysqlUpstream is the parsed --dsn (or $RTR_MYSQL_DSN).
type mysqlUpstream struct{ my *upstream.MySQL }

func (u mysqlUpstream) Prober() (probe.Prober, error) { return probe.NewMySQL(u.my), nil }

// splitList splits a comma-separated flag (also given several times).
func splitList(vals ...string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// parseStopAt reads --stop-at for mysql: a frontier text (what 'rtrctl
// frontier --source mysql' prints: "0:43" for MariaDB, "uuid:1-42" for
// MySQL) or a native MariaDB position ("0-1-42").
func parseStopAt(s string) (frontier.Frontier, error) {
	if strings.Contains(s, "-") && !strings.Contains(s, ":") {
		p, err := frontier.ParseMariaDBPos(s)
		if err != nil {
			return frontier.Frontier{}, err
		}
		return p.Upper(), nil
	}
	if f, err := frontier.Parse(frontier.DomainMariaDB, s); err == nil {
		return f, nil
	}
	return frontier.Parse(frontier.DomainMySQL, s)
}

// snapshotMySQLAction runs 'rtrctl snapshot --source mysql'.
func snapshotMySQLAction(c *cli.Context, u sourceUpstream) error {
	tables, err := myTables(c.StringSlice("tables")...)
	if err != nil {
		return err
	}
	cfg := snapshot.MySQLConfig{Upstream: u.(mysqlUpstream).my, Tables: tables, Parallel: c.Int("parallel"), Source: "mysql"}
	if len(cfg.Tables) == 0 {
		return usagef("pass --tables db.t1,db.t2", "no --tables given")
	}
	if cfg.Parallel < 1 {
		return usagef("pass --parallel 1 or more", "bad --parallel %d", cfg.Parallel)
	}
	return runSnapshotMySQL(c.Context, c.App.Writer, c.App.ErrWriter, cfg, c.Duration("progress-interval"))
}

func runSnapshotMySQL(ctx context.Context, w, e io.Writer, cfg snapshot.MySQLConfig, every time.Duration) error {
	pw := pipe.NewWriter(w, nil)
	rep := newProgressReporter(e, every)
	cfg.OnProgress = rep.report
	began := time.Now()
	// The domain (mysql or mariadb) is known once connected: the sink
	// takes it from each record's metadata.
	sink := &pipe.PipeSink{W: pw, Source: cfg.Source}
	res, err := snapshot.MySQL(ctx, cfg, sink)
	rep.finish()
	if err != nil {
		return err
	}
	if err := pw.Close(); err != nil {
		return err
	}
	where := cfg.Upstream.String()
	lock := ""
	if res.Locked {
		lock = " (under FLUSH TABLES WITH READ LOCK)"
	}
	fmt.Fprintf(e, "snapshot of %s: time 0 at %s, snapshot at %s%s\n", where, res.StartPos, res.SnapshotPos, lock)
	for _, t := range res.Tables {
		fmt.Fprintf(e, "  %s: %d rows copied", t.Name, t.Rows)
		if t.Ranges > 1 {
			fmt.Fprintf(e, " in %d key ranges", t.Ranges)
		}
		fmt.Fprintf(e, ", %d changes rewound\n", t.Rewound)
	}
	fmt.Fprintf(e, "snapshot: %d tables, %d rows, %d changes rewound, in %s\n",
		len(res.Tables), res.Rows(), res.Rewound(), time.Since(began).Round(time.Millisecond))
	return nil
}

// replicateMySQLAction runs 'rtrctl replicate --source mysql'.
func replicateMySQLAction(c *cli.Context, u sourceUpstream) error {
	tables, err := myTables(c.String("tables"))
	if err != nil {
		return err
	}
	cfg := replicate.MySQLConfig{Upstream: u.(mysqlUpstream).my, Tables: tables, Start: c.String("start-gtid"), Source: "mysql"}
	if c.String("source-id") != "" {
		cfg.Source = c.String("source-id")
	}
	if s := c.String("stop-at"); s != "" {
		f, err := parseStopAt(s)
		if err != nil {
			return usagef("write --stop-at as 'rtrctl frontier --source mysql' prints it (0:43, or uuid:1-42) or as a MariaDB position (0-1-42)", "bad --stop-at %q", s)
		}
		cfg.StopAt = f
	}
	return runReplicateMySQL(c.Context, c.App.Writer, cfg)
}

func runReplicateMySQL(ctx context.Context, w io.Writer, cfg replicate.MySQLConfig) error {
	pw := pipe.NewWriter(w, nil)
	sink := &pipe.PipeSink{W: pw, Source: cfg.Source}
	err := replicate.StreamMySQL(ctx, cfg, sink)
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}
