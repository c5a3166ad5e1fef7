package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// The PostgreSQL source: pgoutput logical replication from a slot, a
// definite snapshot pinned to the slot's start (docs/snapshot.md,
// docs/replicate.md).
func init() {
	slotFlag := func(usage string) cli.Flag { return &cli.StringFlag{Name: "slot", Usage: usage} }
	pubFlag := &cli.StringFlag{Name: "publication", Usage: "pg: the pgoutput publication of the tables (required)"}
	registerSource(&sourceKind{
		name:    "pg",
		aliases: []string{"postgres", "postgresql"},
		flags: map[string][]cli.Flag{
			"snapshot": {pubFlag, slotFlag("pg: permanent logical replication slot; created if missing (required)")},
			"replicate": {pubFlag, slotFlag("pg: logical replication slot, plugin pgoutput (required; 'rtrctl snapshot' creates it)"),
				&cli.StringFlag{Name: "start-lsn", Usage: "pg: start at this LSN, e.g. 0/16B3748 (default: the slot's confirmed_flush_lsn)"},
				&cli.DurationFlag{Name: "status-interval", Value: time.Second, Usage: "pg: how often to ask the server for a keepalive (progress while idle)"},
				&cli.StringFlag{Name: "ack-store", Usage: "pg: advance the slot only up to what this store holds durably for the source (default: never advance it)"},
			},
			"ingest": {pubFlag, slotFlag("pg: the permanent logical replication slot (default: the one the store recorded for the source, else rtr_<source-id>_<store id>)"),
				&cli.StringFlag{Name: "resnapshot", Usage: "pg: collections to snapshot again where the ingest resumes, comma-separated (e.g. public.orders), without stopping the others; clears a collection's definite error"},
			},
		},
		upstream: func(c *cli.Context) (sourceUpstream, error) {
			d, err := dsnOf(c, "RTR_PG_DSN")
			if err != nil {
				return nil, err
			}
			pg, err := upstream.ParsePostgres(d)
			if err != nil {
				return nil, err
			}
			return pgUpstream{pg}, nil
		},
		snapshot:  snapshotPGAction,
		replicate: replicatePGAction,
		ingest: func(c *cli.Context, u sourceUpstream) (ingest.Source, error) {
			if c.String("publication") == "" {
				return nil, usagef("pass --publication NAME (CREATE PUBLICATION rtr FOR TABLE ...)", "no --publication given")
			}
			tables, err := pgTables(c.String("tables"))
			if err != nil {
				return nil, err
			}
			var resnap []string
			if c.String("resnapshot") != "" {
				if resnap, err = pgNames("--resnapshot", c.String("resnapshot")); err != nil {
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
			return ingest.NewPG(ingest.PGConfig{
				Upstream: u.(pgUpstream).pg, Publication: c.String("publication"), Slot: c.String("slot"),
				Tables: tables, Parallel: c.Int("parallel"), Source: sourceID(c, "pg"), Resnapshot: resnap,
				ProgressInterval: c.Duration("progress-interval"),
				StateDir:         c.String("state-dir"), StateCache: cache, CopyMemory: copyMem,
			}), nil
		},
		recorded:     recordedVia(upstream.ParsePostgres, probe.NewPostgres),
		upstreamFlag: "dsn",
		domains:      []frontier.Domain{frontier.DomainLSN},
	})
}

// pgUpstream is the parsed --dsn (or $RTR_PG_DSN, else the PG*
// environment).
type pgUpstream struct{ pg *upstream.Postgres }

func (u pgUpstream) Prober() (probe.Prober, error) { return probe.NewPostgres(u.pg), nil }

// sourceID is --source-id, or def.
func sourceID(c *cli.Context, def string) string {
	if s := c.String("source-id"); s != "" {
		return s
	}
	return def
}

func snapshotPGAction(c *cli.Context, u sourceUpstream) error {
	tables, err := pgTables(c.StringSlice("tables")...)
	if err != nil {
		return err
	}
	opts := snapshotOptions{
		cfg: snapshot.Config{
			Upstream:    u.(pgUpstream).pg,
			Publication: c.String("publication"),
			Slot:        c.String("slot"),
			Parallel:    c.Int("parallel"),
			Tables:      tables,
		},
		progressEvery: c.Duration("progress-interval"),
		stderr:        c.App.ErrWriter,
	}
	switch {
	case opts.cfg.Publication == "":
		return usagef("pass --publication NAME (CREATE PUBLICATION name FOR TABLE ...)", "no --publication given")
	case opts.cfg.Slot == "":
		return usagef("pass --slot NAME, e.g. --slot rtr_app", "no --slot given")
	case opts.cfg.Parallel < 1:
		return usagef("pass --parallel 1 or more", "bad --parallel %d", opts.cfg.Parallel)
	}
	return runSnapshot(c.Context, c.App.Writer, opts)
}

type snapshotOptions struct {
	cfg snapshot.Config
	// progressEvery is the interval of progress log lines when stderr is
	// not a terminal.
	progressEvery time.Duration
	stderr        io.Writer
}

func runSnapshot(ctx context.Context, w io.Writer, opts snapshotOptions) error {
	pw := pipe.NewWriter(w, nil)
	rep := newProgressReporter(opts.stderr, opts.progressEvery)
	opts.cfg.OnProgress = rep.report
	began := time.Now()
	res, err := snapshot.PG(ctx, opts.cfg, &pipe.PipeSink{W: pw, Source: "pg", Domain: frontier.DomainLSN})
	rep.finish()
	if err != nil {
		return err
	}
	if err := pw.Close(); err != nil {
		return err
	}
	where := opts.cfg.Upstream.String()
	created := ""
	if res.SlotCreated {
		created = " (created)"
	}
	e := opts.stderr
	fmt.Fprintf(e, "snapshot of %s: slot %s at %s%s, snapshot at %s\n", where, opts.cfg.Slot, res.SlotLSN, created, res.SnapshotLSN)
	for _, t := range res.Tables {
		fmt.Fprintf(e, "  %s: %d rows copied", t.Name, t.Rows)
		if t.Ranges > 1 {
			fmt.Fprintf(e, " in %d ctid ranges", t.Ranges)
		}
		fmt.Fprintf(e, ", %d changes rewound\n", t.Rewound)
		if t.Error != "" {
			fmt.Fprintf(e, "  %s: definite error (the other tables are unaffected): %s\n", t.Name, t.Error)
		}
	}
	fmt.Fprintf(e, "snapshot: %d tables, %d rows, %d changes rewound to %s, in %s\n",
		len(res.Tables), res.Rows(), res.Rewound(), res.SlotLSN, time.Since(began).Round(time.Millisecond))
	return nil
}

type replicateOptions struct {
	cfg    replicate.PGConfig
	source string // source id in the pipe
}

func replicatePGAction(c *cli.Context, u sourceUpstream) error {
	opts := replicateOptions{source: "pg", cfg: replicate.PGConfig{
		Upstream:       u.(pgUpstream).pg,
		Publication:    c.String("publication"),
		Slot:           c.String("slot"),
		StatusInterval: c.Duration("status-interval"),
	}}
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
		source := sourceID(c, "pg")
		opts.cfg.Ack = func(ctx context.Context) (frontier.LSN, error) {
			f, err := st.DurableFrontier(ctx, source)
			if err != nil {
				return 0, err
			}
			return frontier.LSN(f.Pos()), nil
		}
	}
	return runReplicate(c.Context, c.App.Writer, opts)
}

// runReplicate streams changes to w until StopAt, an error or ctx ends.
// Whatever happens, the pipe written so far ends at a stream boundary.
func runReplicate(ctx context.Context, w io.Writer, opts replicateOptions) error {
	pw := pipe.NewWriter(w, nil)
	err := replicate.StreamPG(ctx, opts.cfg, &pipe.PipeSink{W: pw, Source: opts.source, Domain: frontier.DomainLSN})
	if ferr := pw.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("replicate: %w", ferr)
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("replicate: %w", err)
	}
	return err
}
