package recency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// direct is one wait without a daemon: probe the upstream, then poll the
// store's remap shard and the collections' uppers.
type direct struct {
	st       *store.Store
	src      string
	opts     Options
	prober   probe.Prober
	deadline time.Time

	running     bool
	checkedLock time.Time
	remapUpper  uint64
	bindings    []frontier.Binding
	collections []string
	upstream    *frontier.Frontier
	probeErr    error
	bound       *frontier.Binding
	durable     uint64
}

func (d *direct) wait(ctx context.Context) (Result, error) {
	d.running = d.st.LockHeld(d.src)
	d.checkedLock = time.Now()
	u, err := d.probe(ctx)
	if err != nil {
		return Result{}, err
	}
	for {
		if err := d.loadBindings(ctx); err != nil {
			return Result{}, err
		}
		if d.bound == nil {
			if k := firstCovering(d.bindings, u); k >= 0 {
				b := d.bindings[k]
				d.bound = &b
			}
		}
		if d.bound != nil {
			if d.collections == nil {
				cs, err := d.st.SourceCollections(ctx, d.src)
				if err != nil {
					return Result{}, fmt.Errorf("wait-recent %s: %w", d.src, err)
				}
				d.collections = cs
			}
			du, err := durableUpper(ctx, d.st, d.collections)
			if err != nil {
				return Result{}, fmt.Errorf("wait-recent %s: %w", d.src, err)
			}
			d.durable = du
			if du > d.bound.Time {
				return Result{Time: d.bound.Time, Upstream: u, Binding: d.bound.Frontier}, nil
			}
		}
		if time.Since(d.checkedLock) > 250*time.Millisecond {
			d.running, d.checkedLock = d.st.LockHeld(d.src), time.Now()
		}
		if !d.running && !d.opts.WaitForIngest {
			return Result{}, d.notRecent("no ingest is running to catch up")
		}
		if !time.Now().Before(d.deadline) {
			return Result{}, d.notRecent(fmt.Sprintf("timed out after %s", d.opts.Timeout))
		}
		if err := sleepCtx(ctx, min(d.opts.Poll, time.Until(d.deadline))); err != nil {
			return Result{}, fmt.Errorf("wait-recent %s: %w", d.src, err)
		}
	}
}

// probe reads the upstream frontier, retrying failures (a connection that
// is down may come back) until the deadline.
func (d *direct) probe(ctx context.Context) (frontier.Frontier, error) {
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		// One attempt gets at most probeAttempt, so that a connection that
		// hangs is given up and tried again.
		pctx, cancel := context.WithDeadline(ctx, minTime(d.deadline, time.Now().Add(probeAttempt)))
		res, err := d.prober.Probe(pctx)
		cancel()
		if err == nil {
			d.upstream = &res.Frontier
			return res.Frontier, nil
		}
		if ctx.Err() != nil {
			return frontier.Frontier{}, fmt.Errorf("wait-recent %s: %w", d.src, ctx.Err())
		}
		if retry.IsPermanent(err) {
			// A wrong password, a missing database or privilege: waiting
			// does not fix it. The error keeps its hint.
			return frontier.Frontier{}, fmt.Errorf("wait-recent %s: the upstream cannot be probed: %w", d.src, err)
		}
		if d.probeErr == nil || !errors.Is(err, context.DeadlineExceeded) {
			// An attempt the deadline cut short says less than the
			// failure before it.
			d.probeErr = err
		}
		if attempt == 0 {
			d.opts.Logger.Warn("wait-recent: probing the upstream failed; retrying until the timeout", "source", d.src, "error", err)
		}
		if !time.Now().Before(d.deadline) {
			_ = d.loadBindings(ctx)
			return frontier.Frontier{}, d.notRecent(fmt.Sprintf("timed out after %s", d.opts.Timeout))
		}
		if err := sleepCtx(ctx, min(backoff, time.Until(d.deadline))); err != nil {
			return frontier.Frontier{}, fmt.Errorf("wait-recent %s: %w", d.src, err)
		}
		backoff = min(backoff*2, time.Second)
	}
}

// loadBindings re-reads the bindings when the remap shard moved.
func (d *direct) loadBindings(ctx context.Context) error {
	sh, err := d.st.Remap(ctx, d.src)
	if errors.Is(err, store.ErrNotFound) {
		return nil // no binding yet
	}
	if err != nil {
		return fmt.Errorf("wait-recent %s: %w", d.src, err)
	}
	if sh.Upper() == d.remapUpper {
		return nil
	}
	bs, upper, err := d.st.Bindings(ctx, d.src)
	if err != nil {
		return fmt.Errorf("wait-recent %s: %w", d.src, err)
	}
	d.bindings, d.remapUpper = bs, upper
	return nil
}

func (d *direct) notRecent(reason string) *NotRecentError {
	e := &NotRecentError{Source: d.src, Reason: reason, Upstream: d.upstream, Running: d.running, Durable: d.durable}
	if d.upstream == nil && d.probeErr != nil {
		e.ProbeError = d.probeErr.Error()
	}
	if n := len(d.bindings); n > 0 {
		last := d.bindings[n-1]
		e.Ingested, e.LastBinding, e.Age = &last.Frontier, last.Time, ageOf(d.opts.Now(), last.Time)
	}
	if d.bound != nil {
		e.Bound = d.bound.Time
	}
	return e
}

// probeAttempt bounds one probe of the direct path.
const probeAttempt = 5 * time.Second

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
