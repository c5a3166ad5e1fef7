package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/parquetw"
	"github.com/rtrctl/rtrctl/pkg/store"
)

type exportOptions struct {
	dir, collection string
	asOf            *uint64 // nil: the latest complete time
	to              string
	fileRows        int64
	fileBytes       int64
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a collection as of a time as Parquet files (to a directory or an S3 prefix)",
		ArgsUsage: "STORE COLLECTION",
		Description: `Writes the contents of COLLECTION in STORE (a directory or s3://bucket/prefix)
as of a system time as Parquet files part-00000.parquet, part-00001.parquet,
... under --to: a local directory (created if missing) or
s3://bucket/prefix (the AWS environment as for an s3:// store: see
docs/operations.md). A row is written once per copy, as 'rtrctl read'
prints it. A file is cut every --file-rows rows or when it reaches about
--file-size, whichever comes first; each is written under a temporary
name and renamed into place when whole, and a failed export removes the
files it wrote. The target must hold no .parquet files yet.

The read streams the store's sorted files a row group at a time: memory
stays flat however large the collection. Types are mapped so DuckDB,
Spark and Polars read them natively (docs/format.md, "Parquet"):
timestamps as TIMESTAMP (UTC when the column has a zone), decimals as
DECIMAL(p,s), lists as LIST, structs as groups; an interval becomes a
struct (months, days, nanoseconds). The file metadata holds
rtrctl.collection and rtrctl.as_of. It prints one line: the rows, the
time and the files.

System times (--as-of) are milliseconds since the Unix epoch, RFC 3339,
now, or a duration before now (-5m); the default is the latest complete
time.

Examples:
  rtrctl export ./data public.orders --to ./orders-parquet
  rtrctl export ./data public.orders --as-of 2024-11-29T17:06:40Z --to ./orders-1706
  rtrctl export s3://lake/rtr public.orders --to s3://lake/exports/orders --file-size 256MiB
  duckdb -c "SELECT count(*) FROM './orders-parquet/*.parquet'"
  rtrctl read ./data public.orders --format parquet > orders.parquet   # one file to stdout`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "as-of", Usage: "system time to export at: ms since the epoch, RFC 3339, now, or -5m (default: the latest complete time)"},
			&cli.StringFlag{Name: "to", Usage: "target: a directory or s3://bucket/prefix (required)"},
			&cli.Int64Flag{Name: "file-rows", Usage: "cut a file after this many rows (0: no row limit)"},
			&cli.StringFlag{Name: "file-size", Value: "128MiB", Usage: "cut a file when it reaches about this size"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usagef("run 'rtrctl export --help'", "want STORE COLLECTION, got %d arguments", c.NArg())
			}
			opts := exportOptions{dir: c.Args().Get(0), collection: c.Args().Get(1), to: c.String("to"), fileRows: c.Int64("file-rows")}
			if opts.to == "" {
				return usagef("add --to DIR or --to s3://bucket/prefix", "no --to given")
			}
			if opts.fileRows < 0 {
				return usagef("give --file-rows a positive number, or 0 for no limit", "bad --file-rows %d", opts.fileRows)
			}
			var err error
			if opts.fileBytes, err = parseSize(c.String("file-size")); err != nil || opts.fileBytes < 1<<20 {
				return usagef("give --file-size as e.g. 128MiB (at least 1MiB)", "bad --file-size %q", c.String("file-size"))
			}
			if opts.asOf, err = timeFlag(c, "as-of", false); err != nil {
				return err
			}
			return runExport(c.Context, c.App.Writer, opts)
		},
	}
}

// exportTarget is the FS and directory of an export's --to.
func exportTarget(ctx context.Context, to string) (store.FS, string, error) {
	if rest, ok := strings.CutPrefix(to, "file://"); ok {
		to = rest
	}
	if !strings.HasPrefix(to, "s3://") {
		return store.OSFS{}, filepath.Clean(to), nil
	}
	bucket, prefix, err := store.ParseS3URL(to)
	if err != nil {
		return nil, "", hint.Wrap(fmt.Errorf("export: %w", err), "write --to s3://BUCKET/PREFIX")
	}
	c, err := store.NewS3Client(ctx)
	if err != nil {
		return nil, "", err
	}
	if prefix == "" {
		prefix = "."
	}
	return store.NewS3FS(c, bucket), prefix, nil
}

func runExport(ctx context.Context, w io.Writer, opts exportOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{MustExist: true})
	if err != nil {
		return err
	}
	sh, err := openCollection(ctx, st, opts.collection)
	if err != nil {
		return err
	}
	t, err := readableTime(ctx, sh, opts.collection, opts.asOf)
	if err != nil {
		return err
	}
	fsys, dir, err := exportTarget(ctx, opts.to)
	if err != nil {
		return err
	}
	if err := parquetw.CheckTarget(fsys, dir); err != nil {
		h := "check that the directory (or bucket and credentials) can be written"
		if errors.Is(err, fs.ErrExist) {
			h = "export into a new or empty --to, or remove the files there first"
		}
		return hint.Wrap(err, h)
	}
	var parts *parquetw.Parts
	meta := exportMeta(opts.collection, t)
	err = sh.StreamAsOf(ctx, t, func(schema *arrow.Schema) error {
		parts = &parquetw.Parts{FS: fsys, Dir: dir, Schema: userSchema(schema), MaxRows: opts.fileRows, MaxBytes: opts.fileBytes,
			Opts: parquetw.Options{Metadata: meta}}
		return nil
	}, func(rec arrow.Record) error {
		return writeCopies(rec, opts.collection, t, parts.Write)
	})
	if err == nil {
		var files []string
		if files, err = parts.Close(); err == nil {
			fmt.Fprintf(w, "exported %d rows of %s as of %d to %s in %d files\n", parts.Rows(), opts.collection, t, opts.to, len(files))
			return nil
		}
	}
	if parts != nil {
		if aerr := parts.Abort(); aerr != nil {
			return fmt.Errorf("%w (and removing the files written: %v)", err, aerr)
		}
	}
	return err
}

// readableTime is asOf, or the latest complete time of sh when nil; a time
// outside [since, upper) is an error saying which times are readable.
func readableTime(ctx context.Context, sh *store.Shard, collection string, asOf *uint64) (uint64, error) {
	if err := sh.Refresh(ctx); err != nil {
		return 0, err
	}
	upper, since := sh.Upper(), sh.Since()
	if upper == 0 || upper <= since {
		return 0, hint.Wrap(fmt.Errorf("export %s: nothing is readable yet (no time is complete)", collection),
			"wait until ingestion commits a first batch, or use 'rtrctl wait-recent'")
	}
	if asOf == nil {
		return upper - 1, nil
	}
	if *asOf < since || *asOf >= upper {
		return 0, hint.Wrap(&store.NotReadableError{Collection: collection, Op: "export", Time: *asOf, Since: since, Upper: upper},
			fmt.Sprintf("pick --as-of between %d (the store keeps no history before it: compaction's retention) and %d (the latest complete time)", since, upper-1))
	}
	return *asOf, nil
}

// exportMeta is the file metadata of a Parquet export.
func exportMeta(collection string, t uint64) map[string]string {
	return map[string]string{"rtrctl.collection": collection, "rtrctl.as_of": strconv.FormatUint(t, 10)}
}

// userSchema drops the trailing _diff of an as-of read's schema.
func userSchema(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	return arrow.NewSchema(s.Fields()[:s.NumFields()-1], &md)
}

// writeCopies hands write the user columns of rec (an as-of read's record:
// user columns + _diff) with each row repeated by its multiplicity. A
// negative multiplicity is an error, as read's.
func writeCopies(rec arrow.Record, collection string, t uint64, write func(arrow.Record) error) error {
	diffIdx := int(rec.NumCols()) - 1
	diffs := rec.Column(diffIdx).(*array.Int64)
	user := array.NewRecord(userSchema(rec.Schema()), rec.Columns()[:diffIdx], rec.NumRows())
	defer user.Release()
	// Runs of rows of multiplicity 1 as slices, the others repeated.
	var parts []arrow.Record
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	run := 0
	for i := 0; i <= diffs.Len(); i++ {
		d := int64(1)
		if i < diffs.Len() {
			d = diffs.Value(i)
		}
		if d < 0 {
			return fmt.Errorf("read %s as of %d: a row has multiplicity %d: the collection holds a retraction without its insert, which upstream data cannot produce; the store's input was inconsistent", collection, t, d)
		}
		if d == 1 && i < diffs.Len() {
			continue
		}
		if run == 0 && i == diffs.Len() {
			return write(user) // every row once
		}
		if run < i {
			parts = append(parts, user.NewSlice(int64(run), int64(i)))
		}
		for k := int64(0); k < d && i < diffs.Len(); k++ {
			parts = append(parts, user.NewSlice(int64(i), int64(i+1)))
		}
		run = i + 1
	}
	copies, err := arrowutil.Concat(user.Schema(), parts, memory.DefaultAllocator)
	if err != nil || copies == nil {
		return err
	}
	defer copies.Release()
	return write(copies)
}
