package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func storeCommand() *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "commit a pipe to a store, inspect it, compact it",
		Subcommands: []*cli.Command{
			{
				Name:      "append",
				Usage:     "commit the system-time pipe on stdin to the store in DIR",
				ArgsUsage: "DIR",
				Description: `Reads the pipe format (docs/format-pipe.md) on stdin and commits it:
data is buffered per collection and committed when a progress record closes
it (compare-and-append), bindings go to the source's remap shard before
the data that follows them, error records become definite errors of their
collection.

The data must be at system times (rtr.time = system_ms): pipe source-time
data through 'rtrctl reclock' first. Everything is validated as it arrives;
commits are written in groups, at the end of the input or a second after the
first commit of a group. On bad input it stops with an error and writes
nothing of the current group, so a finite bad input leaves the store exactly
as it was. Rows after the last progress record of their collection are not
committed. A replay of times the store already holds must match what is
durable, and is skipped.

Examples:
  rtrctl replicate ... | rtrctl reclock --store ./data | rtrctl store append ./data
  rtrctl read ./old public.orders --format arrow | rtrctl store append ./new`,
				Action: func(c *cli.Context) error {
					dir, err := oneArg(c, "DIR")
					if err != nil {
						return err
					}
					return runStoreAppend(c.Context, c.App.Reader, c.App.ErrWriter, storeAppendOptions{dir: dir})
				},
			},
			{
				Name:      "inspect",
				Usage:     "show the shards of a store, or one collection in detail",
				ArgsUsage: "DIR [COLLECTION]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
				},
				Description: `Lists every collection and source (remap shard) with its readable range
[since, upper), batch count, rows and bytes; with COLLECTION, also its
schema, batch files and definite errors. Times are milliseconds since the
Unix epoch.

Examples:
  rtrctl store inspect ./data
  rtrctl store inspect ./data public.orders --output json`,
				Action: func(c *cli.Context) error {
					if c.NArg() < 1 || c.NArg() > 2 {
						return usagef("run 'rtrctl store inspect --help'", "want DIR [COLLECTION], got %d arguments", c.NArg())
					}
					out := c.String("output")
					if out != "text" && out != "json" {
						return usagef("use --output text or json", "bad --output %q", out)
					}
					return runStoreInspect(c.Context, c.App.Writer, storeInspectOptions{dir: c.Args().Get(0), collection: c.Args().Get(1), output: out})
				},
			},
			{
				Name:      "compact",
				Usage:     "merge small batches and drop history older than --retain",
				ArgsUsage: "DIR",
				Flags: []cli.Flag{
					&cli.DurationFlag{Name: "retain", Value: store.DefaultRetain, Usage: "history to keep readable before the upper (since = upper - retain)"},
				},
				Description: `Merges small batch files (size-tiered), advances times older than the
retention window to since, and consolidates. Reads at times >= since are
unchanged.

Example:
  rtrctl store compact ./data --retain 24h`,
				Action: func(c *cli.Context) error {
					dir, err := oneArg(c, "DIR")
					if err != nil {
						return err
					}
					if c.Duration("retain") <= 0 {
						return usagef("use a positive --retain such as 1h", "bad --retain %s", c.Duration("retain"))
					}
					return runStoreCompact(c.Context, c.App.Writer, storeCompactOptions{dir: dir, retain: c.Duration("retain")})
				},
			},
		},
	}
}

func oneArg(c *cli.Context, name string) (string, error) {
	if c.NArg() != 1 {
		return "", usagef(fmt.Sprintf("run '%s --help'", c.Command.HelpName), "want exactly one argument %s, got %d", name, c.NArg())
	}
	return c.Args().First(), nil
}

type storeAppendOptions struct{ dir string }

func runStoreAppend(ctx context.Context, stdin io.Reader, stderr io.Writer, opts storeAppendOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{})
	if err != nil {
		return err
	}
	r := pipe.NewReader(stdin, memory.DefaultAllocator)
	defer r.Close()
	stats, err := st.ApplyPipe(ctx, r, store.ApplyOptions{})
	slog.Info("store append", "dir", opts.dir, "streams", stats.Streams, "commits", stats.Commits,
		"rows", stats.Rows, "skipped_replayed", stats.Skipped, "bindings", stats.Bindings, "errors", stats.Errors)
	if err != nil {
		return hint.Wrap(err, "nothing of the input's last commit group was written; earlier groups (if the input took over a second) are durable")
	}
	for c, n := range stats.Uncommitted {
		slog.Warn("rows not committed: no progress record closed them", "collection", c, "rows", n)
	}
	return nil
}

type storeInspectOptions struct {
	dir, collection, output string
}

// inspectJSON is the JSON form of one shard in `store inspect`.
type inspectJSON struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Since   uint64   `json:"since"`
	Upper   uint64   `json:"upper"`
	Version uint64   `json:"version"`
	Batches int      `json:"batches"`
	Rows    int64    `json:"rows"`
	Bytes   int64    `json:"bytes"`
	Domain  string   `json:"domain,omitempty"`
	Schema  []string `json:"schema,omitempty"`
	// Generations lists a collection's generations when it has more than
	// one from 0 (detail only).
	Generations []inspectGenJSON  `json:"generations,omitempty"`
	Files       []inspectFileJSON `json:"files,omitempty"`
	Errors      []inspectErrJSON  `json:"errors,omitempty"`
}

type inspectFileJSON struct {
	Path       string `json:"path"`
	Lower      uint64 `json:"lower"`
	Upper      uint64 `json:"upper"`
	Rows       int64  `json:"rows"`
	Bytes      int64  `json:"bytes"`
	Generation uint64 `json:"generation,omitempty"`
}

// inspectGenJSON is one generation of a collection: its start time and
// its columns.
type inspectGenJSON struct {
	Start  uint64   `json:"start"`
	Schema []string `json:"schema"`
}

func schemaColumns(s *arrow.Schema) []string {
	var out []string
	for _, f := range s.Fields() {
		out = append(out, fmt.Sprintf("%s %s", f.Name, f.Type))
	}
	return out
}

type inspectErrJSON struct {
	Time    uint64 `json:"time"`
	Message string `json:"message"`
}

func runStoreInspect(ctx context.Context, w io.Writer, opts storeInspectOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{MustExist: true})
	if err != nil {
		return err
	}
	var infos []store.Info
	if opts.collection != "" {
		sh, err := openCollection(ctx, st, opts.collection)
		if err != nil {
			return err
		}
		info, err := sh.Info(ctx)
		if err != nil {
			return err
		}
		infos = append(infos, info)
	} else {
		var err error
		if infos, err = allShardInfos(ctx, st); err != nil {
			return err
		}
	}
	detail := opts.collection != ""
	out := make([]inspectJSON, len(infos))
	for i, in := range infos {
		j := inspectJSON{Name: in.Name, Kind: in.Kind, Since: in.Since, Upper: in.Upper, Version: in.Version,
			Batches: len(in.Batches), Rows: in.Rows, Bytes: in.Bytes, Domain: string(in.Domain)}
		if detail {
			if in.Schema != nil {
				j.Schema = schemaColumns(in.Schema)
			}
			if gs := in.Generations; len(gs) > 1 || (len(gs) == 1 && gs[0].Start != 0) {
				for _, g := range gs {
					j.Generations = append(j.Generations, inspectGenJSON{Start: g.Start, Schema: schemaColumns(g.Schema)})
				}
			}
			for _, b := range in.Batches {
				j.Files = append(j.Files, inspectFileJSON{Path: b.Path, Lower: b.Lower, Upper: b.Upper, Rows: b.Rows, Bytes: b.Bytes, Generation: b.Generation})
			}
		}
		for _, e := range in.Errors {
			j.Errors = append(j.Errors, inspectErrJSON{Time: e.Time, Message: e.Message})
		}
		out[i] = j
	}
	if opts.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if detail {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSINCE\tUPPER\tBATCHES\tROWS\tBYTES\tERRORS")
	for _, j := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", j.Name, j.Kind, j.Since, j.Upper, j.Batches, j.Rows, j.Bytes, len(j.Errors))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if detail {
		j := out[0]
		if len(j.Schema) > 0 {
			fmt.Fprintf(w, "\nschema:\n  %s\n", strings.Join(j.Schema, "\n  "))
		}
		if len(j.Generations) > 0 {
			fmt.Fprintln(w, "\ngenerations:")
			for _, g := range j.Generations {
				fmt.Fprintf(w, "  from %d: %s\n", g.Start, strings.Join(g.Schema, ", "))
			}
		}
		if len(j.Files) > 0 {
			fmt.Fprintln(w, "\nbatches:")
			for _, f := range j.Files {
				gen := ""
				if len(j.Generations) > 0 {
					gen = fmt.Sprintf(" generation=%d", f.Generation)
				}
				fmt.Fprintf(w, "  [%d, %d) rows=%d bytes=%d%s %s\n", f.Lower, f.Upper, f.Rows, f.Bytes, gen, f.Path)
			}
		}
		for _, e := range j.Errors {
			fmt.Fprintf(w, "\nerror at %d: %s\n", e.Time, e.Message)
		}
	}
	return nil
}

// allShardInfos describes every collection, then every source's remap
// shard.
func allShardInfos(ctx context.Context, st *store.Store) ([]store.Info, error) {
	names, err := st.Collections(ctx)
	if err != nil {
		return nil, err
	}
	sources, err := st.Sources(ctx)
	if err != nil {
		return nil, err
	}
	open := make([]func() (*store.Shard, error), 0, len(names)+len(sources))
	for _, n := range names {
		open = append(open, func() (*store.Shard, error) { return st.Shard(ctx, n) })
	}
	for _, src := range sources {
		open = append(open, func() (*store.Shard, error) { return st.Remap(ctx, src) })
	}
	infos := make([]store.Info, 0, len(open))
	for _, o := range open {
		sh, err := o()
		if err != nil {
			return nil, err
		}
		info, err := sh.Info(ctx)
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// openCollection opens an existing collection, or says which exist.
func openCollection(ctx context.Context, st *store.Store, name string) (*store.Shard, error) {
	sh, err := st.Shard(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		names, _ := st.Collections(ctx)
		sort.Strings(names)
		h := "the store has no collections yet"
		if len(names) > 0 {
			h = "collections in this store: " + strings.Join(names, ", ")
		}
		return nil, hint.Wrap(fmt.Errorf("collection %q is not in store %s: %w", name, st.Dir(), err), h)
	}
	return sh, err
}

type storeCompactOptions struct {
	dir    string
	retain time.Duration
}

func runStoreCompact(ctx context.Context, w io.Writer, opts storeCompactOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{MustExist: true, Retain: opts.retain})
	if err != nil {
		return err
	}
	res, err := st.Compact(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCOMMITTED\tMERGED\tWRITTEN\tROWS_BEFORE\tROWS_AFTER")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%d\t%d\n", r.Name, r.Kind, r.Committed, r.Merged, r.Written, r.RowsBefore, r.RowsAfter)
	}
	return tw.Flush()
}
