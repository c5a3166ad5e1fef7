package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/rtrctl/rtrctl/pkg/snapshot"
)

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "write a definite snapshot of PostgreSQL or MySQL/MariaDB tables to stdout (pipe format)",
		ArgsUsage: " ",
		Description: `Writes every row of the tables at source time 0 (diff +1) in the pipe format
(docs/format-pipe.md), then one progress stream per table with upper 1 ("time
0 complete"). Time 0 holds each table exactly as of the start of the
replication slot (its confirmed_flush_lsn), however long after the slot's
creation the snapshot is taken: changes between the slot's start and the
copy are read from the slot (without confirming it) and subtracted. Run it
again and it writes the same contents. See docs/snapshot.md.

The slot is created (plugin pgoutput) if missing. The tables must be in the
publication and have REPLICA IDENTITY FULL ('rtrctl ingest' also takes
DEFAULT and USING INDEX, see docs/replicate.md). Nothing else may consume the
slot while the snapshot runs.

Progress goes to stderr: a progress bar on a terminal, otherwise a log line
every --progress-interval; at the end a summary.

MySQL/MariaDB (--source mysql --tables db.t1,db.t2): time 0 is the tables at
the snapshot's GTID position, times in the "mariadb"/"mysql" domain, source
id mysql; see docs/mysql.md.

Examples:
  rtrctl snapshot --source mysql --dsn 'app:pw@tcp(127.0.0.1:3306)/' --tables shop.orders,shop.lines --parallel 2
  rtrctl snapshot --source pg --dsn postgres://app@127.0.0.1/app --publication rtr --slot rtr_app > snap.arrow
  rtrctl snapshot --source pg --publication rtr --slot rtr_app --tables public.orders,items --parallel 4`,
		Flags: append(sourceFlags("snapshot"),
			&cli.StringSliceFlag{Name: "tables", KeepSpace: true, Usage: `tables to snapshot, comma-separated, named as SQL names them (pg: public.orders,public."RelMix"; default: every table of the publication; mysql: db.table, required)`},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "connections copying at once; large tables are split into ctid ranges"},
			&cli.DurationFlag{Name: "progress-interval", Value: 5 * time.Second, Usage: "how often to log progress when stderr is not a terminal"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl snapshot --help'", "unexpected argument %q", c.Args().First())
			}
			k, u, err := lookupSource(c)
			if err != nil {
				return err
			}
			if k.snapshot == nil {
				return stageUnsupported("snapshot")
			}
			return k.snapshot(c, u)
		},
	}
}

// progressReporter shows snapshot progress: a bar on a terminal, log
// lines otherwise.
type progressReporter struct {
	bar   *progressbar.ProgressBar
	every time.Duration
	last  time.Time
	est   int64
}

func newProgressReporter(stderr io.Writer, every time.Duration) *progressReporter {
	r := &progressReporter{every: every, last: time.Now()}
	if isTerminal(stderr) {
		r.bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription("snapshot"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetPredictTime(true),
		)
	}
	return r
}

func (r *progressReporter) report(p snapshot.Progress) {
	if r.bar != nil {
		if p.EstimatedRows > p.Rows && p.EstimatedRows != r.est {
			r.est = p.EstimatedRows
			r.bar.ChangeMax64(p.EstimatedRows)
		}
		if p.Phase == "rewind" {
			r.bar.Describe(fmt.Sprintf("rewind (%d)", p.Rewound))
		}
		r.bar.Set64(p.Rows)
		return
	}
	if r.every <= 0 || time.Since(r.last) < r.every {
		return
	}
	r.last = time.Now()
	attrs := []any{"phase", p.Phase, "table", p.Table, "rows", p.Rows}
	if s := p.Elapsed.Seconds(); s > 0 {
		rate := float64(p.Rows) / s
		attrs = append(attrs, "rows_per_s", int64(rate))
		if p.EstimatedRows > p.Rows && rate > 0 {
			attrs = append(attrs, "estimated_rows", p.EstimatedRows,
				"estimated_remaining", (time.Duration(float64(p.EstimatedRows-p.Rows) / rate * float64(time.Second))).Round(time.Second))
		}
	}
	if p.Phase == "rewind" {
		attrs = append(attrs, "rewound", p.Rewound)
	}
	slog.Info("snapshot progress", attrs...)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (r *progressReporter) finish() {
	if r.bar != nil {
		r.bar.Finish()
	}
}
