package ingest

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// background runs what every ingest runs beside its change stream: a
// ticker that mints bindings on time even while the source is quiet, and
// periodic compaction. A tick error cancels the stream (stop) and is
// returned by wait.
type background struct {
	wg   sync.WaitGroup
	errc chan error
}

// startBackground starts the loops under ctx. tick mints a binding if one
// is due (callers lock their reclocker in it); it runs every interval/10
// (at most every 10 ms), so that data the source completed while it went
// quiet is bound at most a tenth of an interval after the interval allows
// (a tick with nothing due costs a lock and a comparison).
// Compaction runs every compactEvery when that is positive.
func startBackground(ctx context.Context, stop context.CancelFunc, interval, compactEvery time.Duration,
	tick func(context.Context) error, st *store.Store, log *slog.Logger) *background {
	b := &background{errc: make(chan error, 1)}
	if interval <= 0 {
		interval = reclock.DefaultInterval
	}
	b.every(ctx, max(interval/10, 10*time.Millisecond), func() bool {
		if err := tick(ctx); err != nil && ctx.Err() == nil {
			b.errc <- err
			stop()
			return false
		}
		return true
	})
	if compactEvery > 0 {
		var one sync.Mutex // one compaction at a time
		b.every(ctx, compactEvery, func() bool {
			one.Lock()
			defer one.Unlock()
			if _, err := st.Compact(ctx); err != nil && ctx.Err() == nil {
				log.Warn("compaction failed; will retry", "err", err)
			}
			return true
		})
		// Between them, a collection with many batches is compacted
		// within a second (store.Store.CompactCrowded).
		b.every(ctx, min(compactEvery, time.Second), func() bool {
			one.Lock()
			defer one.Unlock()
			if _, err := st.CompactCrowded(ctx, crowdedBatches); err != nil && ctx.Err() == nil {
				log.Warn("compaction failed; will retry", "err", err)
			}
			return true
		})
	}
	return b
}

// crowdedBatches is how many batches make a collection due for
// compaction before its time: four merges' worth (store's fan-in is 16).
const crowdedBatches = 64

// every runs fn every d until ctx ends or fn returns false.
func (b *background) every(ctx context.Context, d time.Duration, fn func() bool) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ticking(ctx, d, func() {
			if !fn() {
				cancel()
			}
		})
	}()
}

// ticking calls fn every d until ctx ends.
func ticking(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return // both were ready
			}
			fn()
		}
	}
}

// wait waits for the loops (after their context ended) and returns the
// tick error that stopped them, if any.
func (b *background) wait() error {
	b.wg.Wait()
	select {
	case err := <-b.errc:
		return err
	default:
		return nil
	}
}

// tickIngest mints a binding of rc if one is due, unless w has failed a
// commit (then that error stops the ingest). mu guards rc.
func tickIngest(ctx context.Context, mu *sync.Mutex, rc *reclock.Reclocker, w *storeWriter) error {
	if err := w.Err(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return rc.Tick(ctx, false)
}

// finishIngest binds what the source completed and commits everything
// handed over, when an interrupted ingest stops. mu guards rc.
func finishIngest(mu *sync.Mutex, rc *reclock.Reclocker, w *storeWriter) error {
	mu.Lock()
	err := rc.Tick(context.Background(), true)
	mu.Unlock()
	if err != nil {
		return err
	}
	return w.Close()
}

// bindSnapshot binds the snapshot the source handed over and waits until
// it is committed: where replication resumes is read from the store.
func bindSnapshot(ctx context.Context, mu *sync.Mutex, rc *reclock.Reclocker, w *storeWriter) error {
	mu.Lock()
	err := rc.Tick(ctx, true)
	mu.Unlock()
	if err != nil {
		return err
	}
	return w.Flush()
}
