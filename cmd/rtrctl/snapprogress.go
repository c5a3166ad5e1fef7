package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/snapshot"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// The progress of an ingest's initial snapshot, as the ingest writes it to
// the store (ingest.SnapshotProgress): for status, and for wait-recent and
// read --recent while they wait for the snapshot.

// snapshotProgress returns the progress report of source's initial
// snapshot when the store has one (running: an ingest holds the source;
// else the snapshot was interrupted and resumes at the next ingest).
func snapshotProgress(st *store.Store, source string) (p *ingest.SnapshotProgress, running bool) {
	p, err := ingest.ReadSnapshotProgress(st, source)
	if err != nil {
		return nil, false
	}
	return p, st.LockHeld(source)
}

// progressTotals sums a report's rows and estimated rows over its tables
// (the estimate of a table without one is its rows).
func progressTotals(p *ingest.SnapshotProgress) (rows, est int64) {
	for _, tp := range p.Tables {
		rows += tp.Rows
		est += max(tp.EstimatedRows, tp.Rows)
	}
	return rows, est
}

// describeProgress is a one-line account of a snapshot's progress.
func describeProgress(p *ingest.SnapshotProgress) string {
	rows, est := progressTotals(p)
	s := fmt.Sprintf("%s: %d of about %d rows of %d tables", p.Phase, rows, est, len(p.Tables))
	var eta float64
	for _, tp := range p.Tables {
		if tp.ETASeconds != nil {
			eta = max(eta, *tp.ETASeconds)
		}
	}
	if eta > 0 {
		s += fmt.Sprintf(", about %s left", (time.Duration(eta * float64(time.Second))).Round(time.Second))
	}
	return s
}

// snapshotWaitHint adds to a recency wait's err, when it did not reach
// recency while the initial snapshot of its source runs, how far the
// snapshot got.
func snapshotWaitHint(st *store.Store, err error) error {
	var nr *recency.NotRecentError
	if !errors.As(err, &nr) || nr.Source == "" {
		return err
	}
	p, running := snapshotProgress(st, nr.Source)
	if p == nil || !running {
		return err
	}
	return hint.Wrap(err, fmt.Sprintf("the initial snapshot of source %s is running (%s); pass a longer --timeout to wait for it, or see 'rtrctl status'", nr.Source, describeProgress(p)))
}

// showSnapshotWhileWaiting draws the progress of the running initial
// snapshot of source (of collection's, when source is "") as a bar on
// stderr while a recency wait runs, when stderr is a terminal (never
// otherwise). The returned function stops it.
func showSnapshotWhileWaiting(ctx context.Context, stderr io.Writer, st *store.Store, source, collection string) func() {
	if !isTerminal(stderr) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r *progressReporter
		defer func() {
			if r != nil {
				r.finish()
			}
		}()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			src, err := recency.ResolveSource(ctx, st, source, collection)
			if err == nil {
				if p, running := snapshotProgress(st, src); p != nil && running {
					if r == nil {
						r = newProgressReporter(stderr, 0)
					}
					rows, est := progressTotals(p)
					phase := p.Phase
					r.report(snapshot.Progress{Phase: phase, Rows: rows, EstimatedRows: est})
				} else if r != nil {
					return // the snapshot is over
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
