package ingest

import (
	"context"
	"time"

	"github.com/rtrctl/rtrctl/internal/retry"
)

// retryTransient runs op (one attempt of an ingest, resuming from the
// store) again while it fails transiently: an upstream restart, failover
// or lost connection that the stream's own retries did not ride out, or
// one before streaming began (the first connection, a snapshot). Every
// retry is logged and counted. opts.RetryFor bounds a run of failures (0:
// for ever; negative: no retries); an attempt that got as far as
// streaming ends the run.
func retryTransient(ctx context.Context, opts Options, op func(context.Context) error) error {
	if opts.RetryFor < 0 {
		return op(ctx)
	}
	attempt := 0
	return retry.Do(ctx, retry.Policy{For: opts.RetryFor, Logger: opts.Logger, What: "ingest"}, func(ctx context.Context) error {
		if attempt++; attempt > 1 && opts.Metrics != nil {
			opts.Metrics.retried()
		}
		return op(ctx)
	})
}

// streamRetryFor is the stream's own bound for opts.RetryFor (negative:
// give up at the first failure).
func streamRetryFor(d time.Duration) time.Duration {
	if d < 0 {
		return time.Nanosecond
	}
	return d
}
