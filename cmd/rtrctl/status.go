package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show how far each collection of a store is ingested",
		ArgsUsage: "DIR",
		Description: `For every collection: its durable upper as a system time (milliseconds since
the Unix epoch) and as its source's frontier, rows, batches, size and last
error; for every source: whether an ingest holds it, and with --dsn the
upstream frontier and the lag behind it.

Examples:
  rtrctl status ./data
  rtrctl status ./data --dsn postgres://app@127.0.0.1/app --output json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dsn", Usage: "PostgreSQL upstream to measure the lag against"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
		},
		Action: func(c *cli.Context) error {
			dir, err := oneArg(c, "DIR")
			if err != nil {
				return err
			}
			out := c.String("output")
			if out != "text" && out != "json" {
				return usagef("use --output text or json", "bad --output %q", out)
			}
			opts := statusOptions{dir: dir, output: out}
			if d := c.String("dsn"); d != "" {
				if opts.pg, err = upstream.ParsePostgres(d); err != nil {
					return err
				}
			}
			return runStatus(c.Context, c.App.Writer, opts)
		},
	}
}

type statusOptions struct {
	dir, output string
	// pg is the PostgreSQL upstream to measure the lag against (--dsn).
	pg *upstream.Postgres
}

// statusJSON is the JSON form of `rtrctl status`. System times are numbers
// (milliseconds since the Unix epoch).
type statusJSON struct {
	Collections []collectionStatus `json:"collections"`
	Sources     []sourceStatus     `json:"sources"`
}

type collectionStatus struct {
	Name      string             `json:"name"`
	Source    string             `json:"source,omitempty"`
	Since     uint64             `json:"since"`
	Upper     uint64             `json:"upper"`
	Frontier  *frontier.Frontier `json:"frontier,omitempty"`
	Rows      int64              `json:"rows"`
	Batches   int                `json:"batches"`
	Bytes     int64              `json:"bytes"`
	LastError string             `json:"last_error,omitempty"`
}

type sourceStatus struct {
	Name      string             `json:"name"`
	Kind      string             `json:"kind,omitempty"`
	Running   bool               `json:"ingest_running"`
	Bindings  int                `json:"bindings"`
	LastBound uint64             `json:"last_binding_time"`
	Frontier  *frontier.Frontier `json:"frontier,omitempty"`
	Upstream  *frontier.Frontier `json:"upstream,omitempty"`
	LagBytes  *uint64            `json:"lag_wal_bytes,omitempty"`
	LagMillis *int64             `json:"lag_ms,omitempty"`
}

func runStatus(ctx context.Context, w io.Writer, opts statusOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{MustExist: true})
	if err != nil {
		return err
	}
	var out statusJSON
	sources, err := st.Sources(ctx)
	if err != nil {
		return err
	}
	bindings := map[string][]frontier.Binding{}
	for _, src := range sources {
		bs, _, err := st.Bindings(ctx, src)
		if err != nil {
			return err
		}
		bindings[src] = bs
		s := sourceStatus{Name: src, Running: st.LockHeld(src), Bindings: len(bs)}
		if info, err := st.ReadSourceInfo(src); err == nil {
			s.Kind = info.Kind
		}
		if len(bs) > 0 {
			last := bs[len(bs)-1]
			s.LastBound, s.Frontier = last.Time, &last.Frontier
			if opts.pg != nil && last.Frontier.Domain() == frontier.DomainLSN {
				p := probe.NewPostgres(opts.pg)
				res, err := p.Probe(ctx)
				p.Close()
				if err != nil {
					return err
				}
				s.Upstream = &res.Frontier
				lag := uint64(0)
				if res.Frontier.Pos() > last.Frontier.Pos() {
					lag = res.Frontier.Pos() - last.Frontier.Pos()
				}
				ms := time.Now().UnixMilli() - int64(last.Time)
				if lag == 0 {
					ms = 0
				}
				s.LagBytes, s.LagMillis = &lag, &ms
			}
		}
		out.Sources = append(out.Sources, s)
	}
	names, err := st.Collections(ctx)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		sh, err := st.Shard(ctx, n)
		if err != nil {
			return err
		}
		info, err := sh.Info(ctx)
		if err != nil {
			return err
		}
		cs := collectionStatus{Name: n, Since: info.Since, Upper: info.Upper, Rows: info.Rows, Batches: len(info.Batches), Bytes: info.Bytes}
		if src, ok := info.Schema.Metadata().GetValue("rtr.source"); ok {
			cs.Source = src
			if bs := bindings[src]; len(bs) > 0 {
				k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= info.Upper })
				if k > 0 {
					f := bs[k-1].Frontier
					cs.Frontier = &f
				}
			}
		}
		if len(info.Errors) > 0 {
			e := info.Errors[len(info.Errors)-1]
			cs.LastError = fmt.Sprintf("at %d: %s", e.Time, e.Message)
		}
		out.Collections = append(out.Collections, cs)
	}
	if opts.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COLLECTION\tSOURCE\tUPPER\tFRONTIER\tROWS\tBATCHES\tBYTES\tLAST ERROR")
	for _, c := range out.Collections {
		f := "-"
		if c.Frontier != nil {
			f = c.Frontier.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", c.Name, c.Source, c.Upper, f, c.Rows, c.Batches, c.Bytes, c.LastError)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SOURCE\tKIND\tINGEST\tBINDINGS\tLAST BINDING\tFRONTIER\tUPSTREAM\tLAG")
	for _, s := range out.Sources {
		running := "stopped"
		if s.Running {
			running = "running"
		}
		f, up, lag := "-", "-", "-"
		if s.Frontier != nil {
			f = s.Frontier.String()
		}
		if s.Upstream != nil {
			up = s.Upstream.String()
			lag = fmt.Sprintf("%d bytes, %d ms", *s.LagBytes, *s.LagMillis)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Kind, running, s.Bindings, s.LastBound, f, up, lag)
	}
	return tw.Flush()
}
