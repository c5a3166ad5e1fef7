package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/parquetw"
	"github.com/rtrctl/rtrctl/internal/render"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/store"
)

type readOptions struct {
	dir, collection string
	asOf            *uint64 // nil: the latest complete time
	changes         bool
	from, to        *uint64
	format          string
	recent          bool
	stderr          io.Writer // --recent's progress bar while a snapshot runs
	timeout         time.Duration
}

func readCommand() *cli.Command {
	return &cli.Command{
		Name:      "read",
		Usage:     "print a collection as of a time, or its changes between two times",
		ArgsUsage: "DIR COLLECTION",
		Description: `Prints the contents of COLLECTION (schema.table, db.table or a Kafka topic)
in the store DIR as of a system time, consolidated: every row once per
copy. By default it reads as of the latest complete time (the collection's
upper - 1). System times (--as-of, --from, --to) are milliseconds since the
Unix epoch (what wait-recent prints), RFC 3339 (2024-11-29T17:06:40Z), now,
or a duration before now (-5m, now-1h30m).

With --changes it prints the consolidated changes in (--from, --to] with
their _time and _diff (+1 inserted, -1 deleted).

Formats: table (aligned, NULL for nulls, control characters escaped as
\t \n), csv (header row of column names), json (one object per row; float
NaN and infinities as strings), arrow (the pipe format, to pipe onward:
as-of reads carry _time = the read time and _diff = the multiplicity),
parquet (one Parquet file on stdout: as of a time a row once per copy,
with --changes the _time and _diff columns too; types as 'rtrctl export'
maps them, docs/format.md; also for DIR "-"). The binary formats, arrow and parquet, are
refused when stdout is a terminal: redirect them to a file or a pipe.
Values print as PostgreSQL prints them (11.00, 24:00:00, infinity).

DIR "-" reads the pipe format on stdin instead of a store: the output of a
stage (snapshot, replicate, reclock). The data streams of COLLECTION are
consolidated (diffs summed per identical row over all their times) and
printed; times are in the collection's time domain (an LSN for
PostgreSQL, as a number or as 0/16B3748). --as-of T takes only updates at
times <= T, --changes prints every update consolidated per (row, time)
with _time and _diff (and _partition), --from/--to bound them. --as-of,
--from and --to need an unpartitioned domain (lsn, system_ms).

Examples:
  rtrctl read ./data public.orders
  rtrctl snapshot --source pg --publication rtr --slot s | rtrctl read - public.orders
  rtrctl replicate --source pg --publication rtr --slot s --stop-at 0/1A2B3C8 | rtrctl read - public.orders --changes
  rtrctl read ./data public.orders --as-of 1732900000000 --format csv
  rtrctl read ./data public.orders --changes --from 1732900000000 --to 1732900600000
  rtrctl read ./data public.orders --as-of 2024-11-29T17:06:40Z
  rtrctl read ./data public.orders --changes --from -10m
  rtrctl read ./data public.orders --format arrow | rtrctl store append ./copy
  rtrctl read ./data public.orders --format parquet > orders.parquet
  rtrctl read ./data public.orders --changes --from -1h --format parquet > changes.parquet
  rtrctl read ./data public.orders --recent   # everything committed upstream before this call`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "as-of", Usage: "system time to read at: ms since the epoch, RFC 3339, now, or -5m (default: the latest complete time)"},
			&cli.BoolFlag{Name: "changes", Usage: "print changes in (--from, --to] instead of contents"},
			&cli.StringFlag{Name: "from", Usage: "with --changes: exclusive lower time (default: since)"},
			&cli.StringFlag{Name: "to", Usage: "with --changes: inclusive upper time (default: the latest complete time)"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "table", Usage: "table, csv, json, arrow or parquet"},
			&cli.BoolFlag{Name: "recent", Usage: "wait for real-time recency first (as wait-recent does), then read as of the time it returns"},
			&cli.DurationFlag{Name: "timeout", Value: recency.DefaultTimeout, Usage: "with --recent: give up (exit 3) after this long"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usagef("run 'rtrctl read --help'", "want DIR COLLECTION, got %d arguments", c.NArg())
			}
			opts := readOptions{dir: c.Args().Get(0), collection: c.Args().Get(1), changes: c.Bool("changes"), format: c.String("format")}
			switch opts.format {
			case "table", "csv", "json", "arrow", "parquet":
			default:
				return usagef("use --format table, csv, json, arrow or parquet", "bad --format %q", opts.format)
			}
			if (opts.format == "arrow" || opts.format == "parquet") && isTerminal(c.App.Writer) {
				return usagef(fmt.Sprintf("redirect it: rtrctl read ... --format %s > out.%s, or pipe it onward; use --format table or csv to look at rows", opts.format, map[string]string{"arrow": "arrows", "parquet": "parquet"}[opts.format]),
					"--format %s is binary and stdout is a terminal", opts.format)
			}
			pipeIn := opts.dir == "-"
			var err error
			if opts.asOf, err = timeFlag(c, "as-of", pipeIn); err != nil {
				return err
			}
			if opts.from, err = timeFlag(c, "from", pipeIn); err != nil {
				return err
			}
			if opts.to, err = timeFlag(c, "to", pipeIn); err != nil {
				return err
			}
			if opts.changes && opts.asOf != nil {
				return usagef("use --as-of for contents, or --changes --from T1 --to T2", "--as-of and --changes exclude each other")
			}
			if !opts.changes && (opts.from != nil || opts.to != nil) {
				return usagef("add --changes to read changes between --from and --to", "--from/--to need --changes")
			}
			opts.recent, opts.timeout, opts.stderr = c.Bool("recent"), c.Duration("timeout"), c.App.ErrWriter
			if opts.recent && (opts.asOf != nil || opts.changes || pipeIn) {
				return usagef("--recent picks the time itself: drop --as-of/--changes, and read a store, not '-'", "--recent excludes --as-of, --changes and reading a pipe")
			}
			if pipeIn {
				return runReadPipe(c.Context, c.App.Reader, c.App.Writer, c.App.ErrWriter, opts)
			}
			return runRead(c.Context, c.App.Writer, opts)
		},
	}
}

// timeFlag parses a time flag: milliseconds since the Unix epoch for a
// store; for a pipe (pipeIn) a position in the collection's domain, which
// may also be given as an LSN (0/16B3748).
func timeFlag(c *cli.Context, name string, pipeIn bool) (*uint64, error) {
	if !c.IsSet(name) {
		return nil, nil
	}
	v, err := strconv.ParseUint(c.String(name), 10, 64)
	if err != nil && pipeIn && strings.Contains(c.String(name), "/") {
		var l frontier.LSN
		if l, err = frontier.ParseLSN(c.String(name)); err == nil {
			v = uint64(l)
		}
	}
	if err != nil && !pipeIn {
		v, err = parseSystemTime(c.String(name), time.Now())
	}
	if err != nil {
		if pipeIn {
			return nil, usagef("times of a pipe are positions in its time domain: a number, or an LSN such as 0/16B3748", "bad --%s %q", name, c.String(name))
		}
		return nil, usagef("a system time is milliseconds since the Unix epoch (1732900000000), RFC 3339 (2024-11-29T17:06:40Z, 2024-11-29T18:06:40.5+01:00), now, or relative to now (-5m, -1h30m, now-90s)",
			"bad --%s %q: %v", name, c.String(name), err)
	}
	return &v, nil
}

// parseSystemTime reads a system time written as RFC 3339, "now", or a
// duration before now ("-5m", "now-1h30m"), as milliseconds since the Unix
// epoch. A time before the epoch is an error.
func parseSystemTime(s string, now time.Time) (uint64, error) {
	var t time.Time
	switch rel, isRel := strings.CutPrefix(s, "now"); {
	case s == "now":
		t = now
	case strings.HasPrefix(rel, "-") && (isRel || strings.HasPrefix(s, "-")):
		d, err := time.ParseDuration(rel[1:])
		if err != nil {
			return 0, fmt.Errorf("not a duration: %w", err)
		}
		t = now.Add(-d)
	default:
		var err error
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return 0, errors.New("neither milliseconds, RFC 3339 nor a duration before now")
		}
	}
	if t.UnixMilli() < 0 {
		return 0, errors.New("before the Unix epoch")
	}
	return uint64(t.UnixMilli()), nil
}

func runRead(ctx context.Context, w io.Writer, opts readOptions) error {
	var st *store.Store
	var err error
	if opts.recent {
		// As wait-recent: an ingest that is starting may not have created
		// the store or the collection yet.
		started := time.Now()
		if st, err = recency.OpenStore(ctx, opts.dir, started, opts.timeout); err != nil {
			return err // a *recency.NotRecentError exits 3
		}
		stop := showSnapshotWhileWaiting(ctx, opts.stderr, st, "", opts.collection)
		res, err := recency.Wait(ctx, st, recency.Options{Collection: opts.collection, Timeout: opts.timeout, Started: started, Recorded: recordedProber})
		stop()
		if err != nil {
			return snapshotWaitHint(st, err)
		}
		opts.asOf = &res.Time
	} else if st, err = store.Open(ctx, opts.dir, store.Options{MustExist: true}); err != nil {
		return err
	}
	sh, err := openCollection(ctx, st, opts.collection)
	if err != nil {
		return err
	}
	if err := sh.Refresh(ctx); err != nil {
		return err
	}
	upper, since := sh.Upper(), sh.Since()
	if upper == 0 || upper <= since {
		return hint.Wrap(fmt.Errorf("read %s: nothing is readable yet (no time is complete)", opts.collection),
			"wait until ingestion commits a first batch, or use 'rtrctl wait-recent'")
	}
	latest := upper - 1
	if opts.changes {
		from, to := since, latest
		if opts.from != nil {
			from = *opts.from
		}
		if opts.to != nil {
			to = *opts.to
		}
		return streamChanges(ctx, w, sh, opts, from, to)
	}
	t := latest
	if opts.asOf != nil {
		t = *opts.asOf
	}
	return streamAsOf(ctx, w, sh, opts, t)
}

// streamAsOf prints the contents as of t as the store merges them, in
// bounded memory: every format writes rows as they come.
func streamAsOf(ctx context.Context, w io.Writer, sh *store.Shard, opts readOptions, t uint64) error {
	var text *render.Stream
	var pw *pipe.Writer
	var pq *parquetw.Writer
	var user []arrow.Field
	var readSchema *arrow.Schema
	row := 0
	err := sh.StreamAsOf(ctx, t, func(schema *arrow.Schema) (err error) {
		readSchema, user = schema, schema.Fields()[:schema.NumFields()-1]
		if opts.format == "parquet" {
			pq, err = parquetw.NewWriter(w, userSchema(schema), parquetw.Options{Metadata: exportMeta(opts.collection, t)})
			return err
		}
		if opts.format == "arrow" {
			pw = pipe.NewWriter(w, memory.DefaultAllocator)
			return nil
		}
		text, err = render.NewStream(w, opts.format, user)
		return err
	}, func(rec arrow.Record) error {
		if pq != nil {
			return writeCopies(rec, opts.collection, t, pq.Write)
		}
		diffIdx := int(rec.NumCols()) - 1
		diffs := rec.Column(diffIdx).(*array.Int64)
		row += diffs.Len()
		if pw != nil {
			withTime, err := addTimeColumn(rec, t)
			if err != nil {
				return err
			}
			defer withTime.Release()
			return writeArrowRecord(pw, opts.collection, frontier.DomainSystem, withTime)
		}
		for i := 0; i < diffs.Len(); i++ {
			if diffs.Value(i) < 0 {
				return fmt.Errorf("read %s as of %d: row %d has multiplicity %d: the collection holds a retraction without its insert, which upstream data cannot produce; the store's input was inconsistent", opts.collection, t, row-diffs.Len()+i, diffs.Value(i))
			}
		}
		userRec := array.NewRecord(arrow.NewSchema(user, nil), rec.Columns()[:diffIdx], rec.NumRows())
		defer userRec.Release()
		return text.Write(userRec, func(i int) int64 { return diffs.Value(i) })
	})
	if err != nil {
		return err
	}
	if pq != nil {
		return closeParquet(pq)
	}
	if pw != nil {
		if row == 0 {
			// No rows: the stream still says what the collection is.
			empty := array.NewRecordBuilder(memory.DefaultAllocator, readSchema)
			rec := empty.NewRecord()
			empty.Release()
			withTime, err := addTimeColumn(rec, t)
			rec.Release()
			if err != nil {
				return err
			}
			defer withTime.Release()
			if err := writeArrowRecord(pw, opts.collection, frontier.DomainSystem, withTime); err != nil {
				return err
			}
		}
		return closeArrow(pw)
	}
	return text.Close()
}

// streamChanges prints the changes in (from, to] as the store sorts
// them (store.Shard.StreamChanges), in bounded memory: every format
// writes rows as they come.
func streamChanges(ctx context.Context, w io.Writer, sh *store.Shard, opts readOptions, from, to uint64) error {
	var text *render.Stream
	var pw *pipe.Writer
	var pq *parquetw.Writer
	var schema *arrow.Schema
	rows := 0
	err := sh.StreamChanges(ctx, from, to, func(s *arrow.Schema) (err error) {
		schema = s
		if opts.format == "parquet" {
			meta := map[string]string{"rtrctl.collection": opts.collection, "rtrctl.changes_from": strconv.FormatUint(from, 10), "rtrctl.changes_to": strconv.FormatUint(to, 10)}
			pq, err = parquetw.NewWriter(w, s, parquetw.Options{Metadata: meta})
			return err
		}
		if opts.format == "arrow" {
			pw = pipe.NewWriter(w, memory.DefaultAllocator)
			return nil
		}
		text, err = render.NewStream(w, opts.format, s.Fields())
		return err
	}, func(rec arrow.Record) error {
		rows += int(rec.NumRows())
		if pq != nil {
			return pq.Write(rec)
		}
		if pw != nil {
			return writeArrowRecord(pw, opts.collection, frontier.DomainSystem, rec)
		}
		return text.Write(rec, nil)
	})
	if err != nil {
		return err
	}
	if pq != nil {
		return closeParquet(pq)
	}
	if pw == nil {
		return text.Close()
	}
	if rows == 0 {
		// No rows: the stream still says what the collection is.
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		rec := b.NewRecord()
		b.Release()
		defer rec.Release()
		if err := writeArrowRecord(pw, opts.collection, frontier.DomainSystem, rec); err != nil {
			return err
		}
	}
	return closeArrow(pw)
}

// addTimeColumn returns rec (user columns + _diff) with _time = t inserted
// before _diff, as the pipe format's data streams carry it.
func addTimeColumn(rec arrow.Record, t uint64) (arrow.Record, error) {
	n := int(rec.NumCols())
	b := array.NewUint64Builder(memory.DefaultAllocator)
	defer b.Release()
	for i := 0; i < int(rec.NumRows()); i++ {
		b.Append(t)
	}
	times := b.NewArray()
	defer times.Release()
	fields := append([]arrow.Field{}, rec.Schema().Fields()[:n-1]...)
	fields = append(fields, arrow.Field{Name: pipe.ColTime, Type: arrow.PrimitiveTypes.Uint64}, rec.Schema().Field(n-1))
	cols := make([]arrow.Array, 0, n+1)
	for j := 0; j < n-1; j++ {
		cols = append(cols, rec.Column(j))
	}
	cols = append(cols, times, rec.Column(n-1))
	return array.NewRecord(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}

// writeArrow writes rec (user columns + _time + _diff, then _partition for
// partitioned domains) as one data stream of domain d.
func writeArrow(w io.Writer, collection string, d frontier.Domain, rec arrow.Record) error {
	pw := pipe.NewWriter(w, memory.DefaultAllocator)
	if err := writeArrowRecord(pw, collection, d, rec); err != nil {
		return err
	}
	return closeArrow(pw)
}

// writeArrowRecord writes rec as a batch of the data stream of domain d
// (the same stream as the batch before it).
func writeArrowRecord(pw *pipe.Writer, collection string, d frontier.Domain, rec arrow.Record) error {
	n := int(rec.NumCols()) - 2
	if d.Partitioned() {
		n--
	}
	fields := append([]arrow.Field(nil), rec.Schema().Fields()[:n]...)
	h := pipe.Header{Kind: pipe.KindData, Collection: collection, Domain: d}
	schema := pipe.DataSchema(fields, d, h.Metadata())
	out := array.NewRecord(schema, rec.Columns(), rec.NumRows())
	defer out.Release()
	if err := pw.WriteRecord(h, out); err != nil {
		return fmt.Errorf("write arrow: %w", err)
	}
	return nil
}

// writeParquet writes rec as one Parquet file to w; copies, when set,
// turns an as-of record (user columns + _diff) into rows written.
func writeParquet(w io.Writer, rec arrow.Record, meta map[string]string, copies func(arrow.Record, func(arrow.Record) error) error) error {
	schema := rec.Schema()
	if copies != nil {
		schema = userSchema(schema)
	}
	pq, err := parquetw.NewWriter(w, schema, parquetw.Options{Metadata: meta})
	if err != nil {
		return err
	}
	if copies != nil {
		err = copies(rec, pq.Write)
	} else {
		err = pq.Write(rec)
	}
	if err != nil {
		return err
	}
	return closeParquet(pq)
}

// closeParquet ends a Parquet file on stdout; a reader that went away
// (a closed pipe) is not an error, as for arrow.
func closeParquet(pq *parquetw.Writer) error {
	if err := pq.Close(); err != nil && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("write parquet: %w", err)
	}
	return nil
}

func closeArrow(pw *pipe.Writer) error {
	if err := pw.Close(); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			return nil
		}
		return fmt.Errorf("write arrow: %w", err)
	}
	return nil
}
