package ingest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// storeWriter is the reclocker's Output for an in-process ingest: it
// buffers system-time data per collection and commits every collection of
// the source when a binding's data is complete.
type storeWriter struct {
	st          *store.Store
	source      string
	mem         memory.Allocator
	collections []string // every collection of the source, sorted

	mu      sync.Mutex
	pending map[string]*buffered
	errs    map[string][]string
	// durable is the upper every collection has committed (min over them).
	durable uint64
	// afterCommit is a test hook called after each collection's commit.
	afterCommit func(collection string, upper uint64)
	onCommit    func(collection string, rows int64, upper uint64)
}

type buffered struct {
	schema  *arrow.Schema
	recs    []arrow.Record
	rows    int64
	minTime uint64
}

func newStoreWriter(st *store.Store, source string, collections []string, mem memory.Allocator) *storeWriter {
	cs := append([]string{}, collections...)
	sort.Strings(cs)
	return &storeWriter{st: st, source: source, mem: mem, collections: cs, pending: map[string]*buffered{}, errs: map[string][]string{}}
}

// Binding implements reclock.Output: the binding is already durable.
func (w *storeWriter) Binding(frontier.Binding) error { return nil }

// Data implements reclock.Output.
func (w *storeWriter) Data(collection string, schema *arrow.Schema, rec arrow.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.pending[collection]
	if b == nil {
		b = &buffered{schema: schema}
		w.pending[collection] = b
	}
	times := rec.Column(int(rec.NumCols()) - 2).(*array.Uint64)
	for i := 0; i < times.Len(); i++ {
		if b.rows == 0 && i == 0 || times.Value(i) < b.minTime {
			b.minTime = times.Value(i)
		}
	}
	rec.Retain()
	b.recs = append(b.recs, rec)
	b.rows += rec.NumRows()
	return nil
}

// Error implements reclock.Output: the error is recorded with the next
// commit of the collection, after its data.
func (w *storeWriter) Error(collection string, t uint64, msg string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs[collection] = append(w.errs[collection], msg)
	return nil
}

// Progress implements reclock.Output: every collection of the source is
// complete below upper; commit them all.
func (w *storeWriter) Progress(upper uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx := context.Background()
	for _, c := range w.collections {
		if err := w.commit(ctx, c, upper); err != nil {
			return err
		}
	}
	w.durable = upper
	return nil
}

func (w *storeWriter) commit(ctx context.Context, c string, upper uint64) error {
	b := w.pending[c]
	delete(w.pending, c)
	if b != nil {
		defer func() {
			for _, r := range b.recs {
				r.Release()
			}
		}()
	}
	sh, err := w.st.Shard(ctx, c)
	if errors.Is(err, store.ErrNotFound) {
		if b == nil {
			// No data and no shard yet: nothing to say about it until its
			// first data (its snapshot) arrives.
			return nil
		}
		sh, err = w.st.CreateShard(ctx, c, b.schema)
	}
	if err != nil {
		return fmt.Errorf("commit %s: %w", c, err)
	}
	if err := sh.Refresh(ctx); err != nil {
		return fmt.Errorf("commit %s: %w", c, err)
	}
	cur := sh.Upper()
	expected := cur
	var rec arrow.Record
	var rows int64
	if b != nil && b.rows > 0 {
		rows = b.rows
		if b.minTime < cur {
			expected = b.minTime // a replay: verified against the store and skipped
		}
		rec, err = arrowutil.Concat(b.schema, b.recs, w.mem)
		if err != nil {
			return fmt.Errorf("commit %s: %w", c, err)
		}
		defer rec.Release()
	}
	if upper <= expected {
		return nil // already durable
	}
	res, err := sh.Append(ctx, expected, upper, rec)
	if err != nil {
		return fmt.Errorf("commit %s: %w", c, err)
	}
	if msgs := w.errs[c]; len(msgs) > 0 {
		delete(w.errs, c)
		for _, m := range msgs {
			u := sh.Upper()
			if _, err := sh.AppendError(ctx, u, u+1, m); err != nil {
				return fmt.Errorf("commit error of %s: %w", c, err)
			}
		}
	}
	if w.onCommit != nil && res.Status == store.Appended {
		w.onCommit(c, rows, upper)
	}
	if w.afterCommit != nil {
		w.afterCommit(c, upper)
	}
	return nil
}

// Durable returns the system upper below which every collection of the
// source is committed, reading the store (another process may have
// committed more; this one never has less).
func (w *storeWriter) Durable(ctx context.Context) (uint64, error) {
	return durableUpper(ctx, w.st, w.collections)
}

// durableUpper is the least upper over collections (0 when one has no
// shard yet).
func durableUpper(ctx context.Context, st *store.Store, collections []string) (uint64, error) {
	var least uint64
	for i, c := range collections {
		sh, err := st.Shard(ctx, c)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if err := sh.Refresh(ctx); err != nil {
			return 0, err
		}
		if u := sh.Upper(); i == 0 || u < least {
			least = u
		}
	}
	return least, nil
}

// durableFrontier maps a system upper to the source frontier below which
// everything is durable: the frontier of the last binding at a time below
// upper (empty when there is none).
func durableFrontier(bs []frontier.Binding, upper uint64, d frontier.Domain) frontier.Frontier {
	k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= upper })
	if k == 0 {
		return frontier.Empty(d)
	}
	return bs[k-1].Frontier
}
