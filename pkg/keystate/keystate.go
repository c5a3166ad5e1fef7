// Package keystate keeps the key state of a collection (the current row
// of every key: a Kafka upsert topic's values) in an embedded on-disk
// key-value store (github.com/cockroachdb/pebble), so that the state an
// ingest needs is bounded by disk, not memory, and survives a restart.
//
// A DB is the collection as of one store time (At). It is written only
// from what the store has committed: Sync rebuilds it from the store
// (store.Shard.ScanAsOf) or catches it up (store.Shard.StreamChanges from
// At on), and CatchUp folds the changes committed since while a stream
// runs. So after any crash it is the collection as of a time the store
// holds, or marked unfinished (a fold cut into several pebble batches was
// interrupted), never a state the store does not have; a restart reuses
// it as it is when At is the time the stream resumes after, catches it up
// when it is behind, and rebuilds it when it is missing, unfinished, of
// another store, collection or encoding (Ident), ahead of the store, or
// behind the store's readable history (docs/kafka.md, "Upsert state").
//
// Layout: the key "\x00meta" holds the meta record (JSON: ident, at,
// keys, valid, none); every key of the collection is "\x01" + its
// encoding, its value the encoding of its row.
package keystate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// DefaultCacheBytes is the default memory budget of a state (the in-memory
// cache in front of it and pebble's block cache and memtables).
const DefaultCacheBytes = 256 << 20

// Codec turns the rows of a store record (user columns, [_time,] _diff)
// into the encodings a state holds: fn is called with every row's key,
// its row and its _diff. The slices are valid during the call only.
type Codec interface {
	StateRows(rec arrow.Record, fn func(key, row []byte, diff int64) error) error
}

// Config configures Open.
type Config struct {
	// Dir is the pebble directory, created on first use.
	Dir string
	// Ident names what the state is of (the store's id, the collection,
	// its encoding); a DB recorded under another is rebuilt.
	Ident string
	// PebbleBytes bounds pebble's block cache plus memtables (at least
	// 8 MiB are used).
	PebbleBytes int64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// meta is the record under metaKey.
type meta struct {
	Ident string `json:"ident"`
	// At: the DB is the collection as of At (when Valid and not None).
	At uint64 `json:"at"`
	// Keys is the number of keys as of At.
	Keys int64 `json:"keys"`
	// Valid is false while a rebuild or refold that spans several batches
	// runs: a DB found so after a crash is rebuilt. A catch-up's batches
	// stay valid: see folder.partial.
	Valid bool `json:"valid"`
	// None: the collection has nothing durable yet; the DB is empty.
	None bool `json:"none,omitempty"`
}

var (
	metaKey    = []byte("\x00meta")
	dataPrefix = []byte{1}
	dataEnd    = []byte{2}
)

// A fold commits its pebble batch (and marks the DB unfinished until the
// fold ends) when it grows past half a memtable: a larger batch is queued
// whole in memory until pebble flushes it, and a rebuild of millions of
// keys queued them faster than they were flushed (bench-scale: 440 MiB of
// heap rebuilding 3M keys with 64 MiB batches).
func (d *DB) batchBytes() int { return int(d.memtable / 2) }

// defaultInsertedMax bounds the keys a catch-up remembers of the time it
// folds (about 100 bytes each): past it, retractions read the DB.
const defaultInsertedMax = 1 << 16

func (d *DB) insertedMax() int {
	if d.insertedCap > 0 {
		return d.insertedCap
	}
	return defaultInsertedMax
}

// DB is a key state on disk. Get is safe for concurrent use with one
// writer (Sync, CatchUp, Reset); writers must not run concurrently.
type DB struct {
	cfg Config
	log *slog.Logger
	db  *pebble.DB

	memtable int64 // pebble's memtable size
	// insertedCap, when positive, replaces defaultInsertedMax (tests).
	insertedCap int
	// foldGets counts the lookups folds made (tests).
	foldGets atomic.Int64

	mu sync.Mutex // guards m
	m  meta
	// found is what Open found: a reason the DB cannot be used as it is
	// ("" when it can).
	found string
}

// Open opens (creating) the state in cfg.Dir. A state that cannot be used
// as it is is not an error: Sync rebuilds it, saying why.
func Open(cfg Config) (*DB, error) {
	d := &DB{cfg: cfg, log: cfg.Logger}
	if d.log == nil {
		d.log = slog.Default()
	}
	if err := d.open(false); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *DB) open(retried bool) error {
	if err := os.MkdirAll(d.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("open key state %s: %w", d.cfg.Dir, err)
	}
	budget := max(d.cfg.PebbleBytes, 8<<20)
	c := pebble.NewCache(budget * 3 / 4)
	defer c.Unref()
	// No write-ahead log: the DB is a cache of the store, and what pebble
	// keeps of it after a crash (its flushed memtables, a prefix of the
	// batches committed, each with its meta record) is a state as of an
	// earlier committed time, which a start catches up. Close flushes.
	d.memtable = budget / 8
	opts := &pebble.Options{Cache: c, MemTableSize: uint64(d.memtable), Logger: quietLogger{d.log}, DisableWAL: true}
	opts.EnsureDefaults()
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(d.cfg.Dir, opts)
	if err != nil && !retried {
		// Not a pebble directory (stray files, a torn copy): it is only
		// ever rebuilt from the store, so start it afresh.
		if rerr := os.RemoveAll(d.cfg.Dir); rerr != nil {
			return fmt.Errorf("open key state %s: %w; clearing it: %w", d.cfg.Dir, err, rerr)
		}
		if err := d.open(true); err != nil {
			return err
		}
		d.found = fmt.Sprintf("it did not open (%v)", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open key state %s: %w (delete the directory to rebuild it from the store)", d.cfg.Dir, err)
	}
	d.db = db
	if err := d.clearSpill(); err != nil {
		return err
	}
	d.m, d.found = meta{}, ""
	v, closer, err := db.Get(metaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		d.found = "there is none"
	case err != nil:
		d.found = fmt.Sprintf("its meta record does not read (%v)", err)
	default:
		err := json.Unmarshal(v, &d.m)
		closer.Close()
		switch {
		case err != nil:
			d.found = fmt.Sprintf("its meta record does not decode (%v)", err)
		case d.m.Ident != d.cfg.Ident:
			d.found = fmt.Sprintf("it is of %q, not %q", d.m.Ident, d.cfg.Ident)
		case !d.m.Valid:
			d.found = "a fold into it did not finish"
		}
	}
	if d.found != "" {
		d.m = meta{}
	}
	return nil
}

// Close closes the DB.
func (d *DB) Close() error {
	if d.db == nil {
		return nil
	}
	err := d.db.Flush()
	if cerr := d.db.Close(); err == nil {
		err = cerr
	}
	d.db = nil
	if err != nil {
		return fmt.Errorf("close key state %s: %w", d.cfg.Dir, err)
	}
	return nil
}

// At returns the time the DB is the collection as of, and false when it
// is of no time (empty: nothing durable yet, or not synced).
func (d *DB) At() (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.At, d.m.Valid && !d.m.None
}

// Keys is the number of keys as of At.
func (d *DB) Keys() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Keys
}

// Get appends key's row to dst; false when the key is not in the state.
func (d *DB) Get(key, dst []byte) ([]byte, bool, error) {
	var kb [64]byte
	k := append(append(kb[:0], dataPrefix...), key...)
	v, closer, err := d.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, fmt.Errorf("key state %s: get: %w", d.cfg.Dir, err)
	}
	dst = append(dst, v...)
	closer.Close()
	return dst, true, nil
}

// Outcome is what Sync did.
type Outcome struct {
	// How: "reused", "caught up" or "rebuilt".
	How string
	// Why it was rebuilt.
	Reason string
	// Updates folded (changes caught up, or rows of a rebuild).
	Updates int64
}

// Reset makes the DB the empty state of a collection with nothing
// durable yet.
func (d *DB) Reset(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reset key state %s: %w", d.cfg.Dir, err)
	}
	if err := d.wipe(); err != nil {
		return err
	}
	return d.commit(d.db.NewBatch(), meta{Ident: d.cfg.Ident, Valid: true, None: true}, true)
}

// Sync makes the DB the collection in sh as of asOf: reused when it is
// that already, caught up from its time when it is behind (and the store
// still holds the changes since), rebuilt from the store otherwise. No
// Get may run during Sync (a rebuild replaces the DB).
func (d *DB) Sync(ctx context.Context, sh *store.Shard, asOf uint64, c Codec) (Outcome, error) {
	at, ok := d.At()
	reason := d.found
	switch {
	case ok && at == asOf:
		return Outcome{How: "reused"}, nil
	case ok && at > asOf:
		reason = fmt.Sprintf("it is as of time %d, ahead of the store's %d", at, asOf)
	case ok && at < sh.Since():
		reason = fmt.Sprintf("it is as of time %d, before the store's readable history (since %d)", at, sh.Since())
	case ok:
		n, err := d.catchUp(ctx, sh, at, asOf, c)
		if err == nil {
			return Outcome{How: "caught up", Updates: n}, nil
		}
		var nr *store.NotReadableError
		var sc *store.SchemaChangedError
		if !errors.As(err, &nr) && !errors.As(err, &sc) {
			return Outcome{}, err
		}
		reason = fmt.Sprintf("the changes since its time %d do not read (%v)", at, err)
	case d.m.None && d.found == "":
		// Empty since nothing was durable: everything in the store is a
		// change since.
		n, err := d.rebuild(ctx, sh, asOf, c)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{How: "caught up", Updates: n}, nil
	}
	if err := d.wipe(); err != nil {
		return Outcome{}, err
	}
	n, err := d.rebuild(ctx, sh, asOf, c)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{How: "rebuilt", Reason: reason, Updates: n}, nil
}

// CatchUp folds the changes of sh committed after the DB's time up to
// asOf into it (the contents as of asOf when the DB is empty and had
// nothing durable), while Gets may run: a key changed in between must not
// be read from the DB before CatchUp returns (a stream's cache holds such
// keys). It returns the updates folded.
func (d *DB) CatchUp(ctx context.Context, sh *store.Shard, asOf uint64, c Codec) (int64, error) {
	d.mu.Lock()
	m := d.m
	d.mu.Unlock()
	switch {
	case !m.Valid:
		return 0, fmt.Errorf("catch up key state %s: it is not synced", d.cfg.Dir)
	case m.None:
		return d.rebuild(ctx, sh, asOf, c)
	case m.At >= asOf:
		return 0, nil
	}
	return d.catchUp(ctx, sh, m.At, asOf, c)
}

// wipe empties the DB (a new pebble directory).
func (d *DB) wipe() error {
	if err := d.Close(); err != nil {
		return err
	}
	if err := os.RemoveAll(d.cfg.Dir); err != nil {
		return fmt.Errorf("clear key state %s: %w", d.cfg.Dir, err)
	}
	return d.open(true)
}

// commit commits b with m as the meta record and makes m the DB's;
// durable flushes it to disk before it returns.
func (d *DB) commit(b *pebble.Batch, m meta, durable bool) error {
	defer b.Close()
	enc, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	if err := b.Set(metaKey, enc, nil); err != nil {
		return fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("key state %s: commit: %w", d.cfg.Dir, err)
	}
	if durable {
		// Without a write-ahead log, durable is a flush of the memtables.
		if err := d.db.Flush(); err != nil {
			return fmt.Errorf("key state %s: flush: %w", d.cfg.Dir, err)
		}
	}
	d.mu.Lock()
	d.m = m
	d.found = ""
	d.mu.Unlock()
	return nil
}

// folder writes a fold into batches: when one grows past batchBytes it is
// committed with the meta record marked unfinished.
type folder struct {
	d       *DB
	b       *pebble.Batch
	indexed bool // the batches are indexed (get reads them)
	spilled bool // a batch was committed unfinished since the last valid one
	keys    int64
	kbuf    []byte
	// partial, when set, is the meta record of a batch committed in the
	// middle of a time (a catch-up's): the DB is then the state as of its
	// At plus a prefix of the changes after At, with Keys the exact count
	// of the keys it holds. Folding the changes after At again from there
	// gives the state a fold from At itself would (an insertion sets its
	// key's row, whatever the key had; a retraction deletes only the row it
	// retracts; the count moves only when a key appears or goes), so a
	// crash at any point of a catch-up leaves a state to catch up, never
	// one to rebuild. Without it (rebuild, refold), such a batch marks the
	// DB unfinished.
	partial func() meta
}

// get appends key's row as the fold has it so far to dst.
func (f *folder) get(key, dst []byte) ([]byte, bool, error) {
	f.d.foldGets.Add(1)
	f.kbuf = append(append(f.kbuf[:0], dataPrefix...), key...)
	v, closer, err := f.b.Get(f.kbuf)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, err
	}
	dst = append(dst, v...)
	closer.Close()
	return dst, true, nil
}

func (f *folder) set(key, row []byte) error {
	f.kbuf = append(append(f.kbuf[:0], dataPrefix...), key...)
	if err := f.b.Set(f.kbuf, row, nil); err != nil {
		return err
	}
	return f.spill()
}

func (f *folder) del(key []byte) error {
	f.kbuf = append(append(f.kbuf[:0], dataPrefix...), key...)
	if err := f.b.Delete(f.kbuf, nil); err != nil {
		return err
	}
	return f.spill()
}

func (f *folder) spill() error {
	if f.b.Len() < f.d.batchBytes() {
		return nil
	}
	d := f.d
	d.mu.Lock()
	m := d.m
	d.mu.Unlock()
	m.Ident, m.Valid = d.cfg.Ident, false
	if f.partial != nil {
		m = f.partial()
	}
	if err := d.commit(f.b, m, false); err != nil {
		return err
	}
	f.spilled = true
	if f.indexed {
		f.b = d.db.NewIndexedBatch()
	} else {
		f.b = d.db.NewBatch()
	}
	return nil
}

// rebuild fills the (empty) DB with the contents of sh as of asOf.
func (d *DB) rebuild(ctx context.Context, sh *store.Shard, asOf uint64, c Codec) (int64, error) {
	f := &folder{d: d, b: d.db.NewBatch()}
	var rows int64
	err := sh.ScanAsOf(ctx, asOf, func() {}, func(rec arrow.Record) error {
		return c.StateRows(rec, func(key, row []byte, diff int64) error {
			if diff != 1 {
				return fmt.Errorf("rebuild key state: key %q has multiplicity %d, but a keyed collection holds each key once", key, diff)
			}
			rows++
			return f.set(key, row)
		})
	})
	if err != nil {
		f.b.Close()
		return 0, fmt.Errorf("rebuild key state %s: %w", d.cfg.Dir, err)
	}
	if err := d.commit(f.b, meta{Ident: d.cfg.Ident, Valid: false}, false); err != nil {
		return 0, err
	}
	// Two rows of one key wrote one key: count what is there.
	n, err := d.count()
	if err != nil {
		return 0, err
	}
	if n != rows {
		return 0, fmt.Errorf("rebuild key state %s: %d rows hold %d keys: two rows have the same key, but a keyed collection holds each key once", d.cfg.Dir, rows, n)
	}
	if err := d.commit(d.db.NewBatch(), meta{Ident: d.cfg.Ident, At: asOf, Keys: n, Valid: true}, true); err != nil {
		return 0, err
	}
	return rows, nil
}

// count counts the keys.
func (d *DB) count() (int64, error) {
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: dataPrefix, UpperBound: dataEnd})
	if err != nil {
		return 0, fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	return n, nil
}

// catchUp folds the changes of sh in (at, asOf] into the DB as they come
// (time, then row order), in bounded memory: an insertion sets its key's
// row; a retraction deletes the key when the key's row is the row it
// retracts (at one time a key loses its old row and gains its new one in
// either order: when the new row came first, the old one's retraction
// finds the new row and leaves it). Reads go through the batch being
// written (an indexed batch), so they see the fold so far.
func (d *DB) catchUp(ctx context.Context, sh *store.Shard, at, asOf uint64, c Codec) (int64, error) {
	if newColumns(sh, at, asOf) {
		return d.refold(ctx, sh, asOf, c)
	}
	var n int64
	f := &folder{d: d, b: d.db.NewIndexedBatch(), indexed: true}
	// keys counts by the sum of the diffs: a keyed collection holds one
	// row per key, so a time's diffs sum to the keys it adds less the
	// keys it removes. keysDone is the count as of done.
	keys := d.Keys()
	keysDone := keys
	var cur []byte
	last, done := at, at // the time being folded; the last one folded whole
	// A batch committed mid-time is the state as of done plus a prefix of
	// the changes of last; folding last again from its start over it
	// gives what folding it once does (an insertion sets its key, a
	// retraction after its key's insertion is skipped, one before it
	// deletes what the insertion then sets) and, counted from keysDone,
	// the same count.
	f.partial = func() meta { return meta{Ident: d.cfg.Ident, At: done, Keys: keysDone, Valid: true} }
	// inserted holds the keys inserted so far at time last, so that a
	// retraction after its key's insertion (its new row sorts first) is
	// told from one of a removed key without reading the DB: a fold of
	// small times (Kafka bindings) reads nothing, where a lookup of a
	// uniform key in a 10M-key state costs 15-50 us (docs/kafka.md). A
	// time with more than d.insertedMax keys (one transaction of
	// millions of rows) reads the batch and the DB for the rest.
	inserted := map[string]struct{}{}
	full := false
	err := sh.StreamChanges(ctx, at, asOf, func(*arrow.Schema) error { return nil }, func(rec arrow.Record) error {
		times, ok := timeColumn(rec)
		if !ok {
			return fmt.Errorf("changes without a %s column", pipe.ColTime)
		}
		i := 0
		return c.StateRows(rec, func(key, row []byte, diff int64) error {
			if t := times.Value(i); t != last {
				// Everything up to last is folded: a batch of some size
				// is committed as the state as of last, so that a fold cut
				// short (a stop, a crash) leaves a state to catch up from
				// rather than one to rebuild.
				if f.spilled || f.b.Len() >= f.d.batchBytes()/4 {
					if err := d.commit(f.b, meta{Ident: d.cfg.Ident, At: last, Keys: keys, Valid: true}, false); err != nil {
						return err
					}
					f.b, f.spilled = d.db.NewIndexedBatch(), false
				}
				last, done, keysDone = t, last, keys
				clear(inserted)
				full = false
			}
			i++
			n++
			switch diff {
			case 1:
				keys++
				if !full {
					if len(inserted) < d.insertedMax() {
						inserted[string(key)] = struct{}{}
					} else {
						full = true
					}
				}
				return f.set(key, row)
			case -1:
				keys--
				if !full {
					if _, ok := inserted[string(key)]; ok {
						return nil // its new row came first
					}
					return f.del(key)
				}
				had, err := false, error(nil)
				if cur, had, err = f.get(key, cur[:0]); err != nil {
					return err
				}
				if had && bytes.Equal(cur, row) {
					return f.del(key)
				}
				return nil // its new row came first
			}
			return fmt.Errorf("key %q has an update of multiplicity %d, but a keyed collection holds each key once", key, diff)
		})
	})
	if err != nil {
		f.b.Close()
		return 0, fmt.Errorf("catch up key state %s from %d to %d: %w", d.cfg.Dir, at, asOf, err)
	}
	if err := d.commit(f.b, meta{Ident: d.cfg.Ident, At: asOf, Keys: keys, Valid: true}, false); err != nil {
		return 0, err
	}
	return n, nil
}

// newColumns reports whether a generation with other columns than the one
// before it starts in (at, asOf]: the changes across it do not read
// (store.SchemaChangedError), the collection is re-expressed there.
func newColumns(sh *store.Shard, at, asOf uint64) bool {
	gs := sh.Generations()
	for i := 1; i < len(gs); i++ {
		if g := gs[i]; g.Start > at && g.Start <= asOf && !(g.Schema.Equal(gs[i-1].Schema) && g.Schema.Metadata().Equal(gs[i-1].Schema.Metadata())) {
			return true
		}
	}
	return false
}

// refold makes the DB the collection as of asOf from its contents then
// (sh.StreamAsOf): every key's row is set and the keys the DB has that
// the collection does not are deleted. It is catchUp across a generation
// with new columns (a Kafka Avro topic whose reader schema moved to a
// later version re-expresses every key in it), which Gets may run during:
// the keys a stream changed since the DB's time are in its cache, and
// any other key's row, old or new, decodes to the same value.
func (d *DB) refold(ctx context.Context, sh *store.Shard, asOf uint64, c Codec) (int64, error) {
	f := &folder{d: d, b: d.db.NewBatch()}
	keep := map[string]struct{}{}
	var rows int64
	err := sh.StreamAsOf(ctx, asOf, func(*arrow.Schema) error { return nil }, func(rec arrow.Record) error {
		return c.StateRows(rec, func(key, row []byte, diff int64) error {
			if diff != 1 {
				return fmt.Errorf("key %q has multiplicity %d, but a keyed collection holds each key once", key, diff)
			}
			rows++
			keep[string(key)] = struct{}{}
			return f.set(key, row)
		})
	})
	if err == nil {
		err = d.Each(func(key, _ []byte) error {
			if _, ok := keep[string(key)]; ok {
				return nil
			}
			return f.del(key)
		})
	}
	if err == nil && int64(len(keep)) != rows {
		err = fmt.Errorf("%d rows hold %d keys: two rows have the same key, but a keyed collection holds each key once", rows, len(keep))
	}
	if err != nil {
		f.b.Close()
		return 0, fmt.Errorf("refold key state %s as of %d: %w", d.cfg.Dir, asOf, err)
	}
	if err := d.commit(f.b, meta{Ident: d.cfg.Ident, At: asOf, Keys: rows, Valid: true}, true); err != nil {
		return 0, err
	}
	return rows, nil
}

// Each calls fn with every key and its row, in key order, as of when it
// starts (a pebble iterator's snapshot); the slices are valid during the
// call only.
func (d *DB) Each(fn func(key, row []byte) error) error {
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: dataPrefix, UpperBound: dataEnd})
	if err != nil {
		return fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key()[len(dataPrefix):], it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("key state %s: %w", d.cfg.Dir, err)
	}
	return nil
}

func timeColumn(rec arrow.Record) (*array.Uint64, bool) {
	for i, f := range rec.Schema().Fields() {
		if f.Name == pipe.ColTime {
			c, ok := rec.Column(i).(*array.Uint64)
			return c, ok
		}
	}
	return nil, false
}

// quietLogger keeps pebble's informational lines out of the ingest's log
// and passes its errors on.
type quietLogger struct{ log *slog.Logger }

func (quietLogger) Infof(string, ...any) {}

func (l quietLogger) Errorf(format string, args ...any) {
	l.log.Error("key state: " + fmt.Sprintf(format, args...))
}

func (l quietLogger) Fatalf(format string, args ...any) {
	l.log.Error("key state: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}

// The spill keyspace: a stream's own changes that the store has not
// committed yet, written out when they outgrow the stream's memory
// (replicate.KeyState's overlay). It is "\x03" + epoch (4 bytes, big
// endian) + key, its value "r" + row or "d" (deleted); an epoch hides
// every earlier one and, past 0, the committed keys too (a TRUNCATE). It
// is never trusted after a restart: Open clears it.
var (
	spillPrefix = []byte{3}
	spillEnd    = []byte{4}
)

func spillKey(dst []byte, epoch uint32, key []byte) []byte {
	dst = append(dst, spillPrefix...)
	dst = append(dst, byte(epoch>>24), byte(epoch>>16), byte(epoch>>8), byte(epoch))
	return append(dst, key...)
}

// clearSpill deletes the spill keyspace (left by an earlier run).
func (d *DB) clearSpill() error {
	if err := d.db.DeleteRange(spillPrefix, spillEnd, pebble.NoSync); err != nil {
		return fmt.Errorf("open key state %s: clear spilled changes: %w", d.cfg.Dir, err)
	}
	return nil
}

// Spill writes changes of a stream's state under epoch: each calls put
// for every key, its row or dead (deleted). Batches of half a memtable
// (as a fold's), not synced: the keyspace is only read by this process,
// and a lookup meanwhile is answered by the caller's overlay.
func (d *DB) Spill(epoch uint32, each func(put func(key, row []byte, dead bool) error) error) error {
	b := d.db.NewBatch()
	defer func() { b.Close() }()
	var k, v []byte
	err := each(func(key, row []byte, dead bool) error {
		k = spillKey(k[:0], epoch, key)
		if dead {
			v = append(v[:0], 'd')
		} else {
			v = append(append(v[:0], 'r'), row...)
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() < d.batchBytes() {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = d.db.NewBatch()
		return nil
	})
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	if err != nil {
		return fmt.Errorf("key state %s: spill: %w", d.cfg.Dir, err)
	}
	return nil
}

// Lookup appends key's row as a stream with spilled changes under epoch
// sees it: spilled there, else (epoch 0) committed.
func (d *DB) Lookup(epoch uint32, key, dst []byte) ([]byte, bool, error) {
	var kb [80]byte
	v, closer, err := d.db.Get(spillKey(kb[:0], epoch, key))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if epoch > 0 {
			return dst, false, nil
		}
		return d.Get(key, dst)
	case err != nil:
		return dst, false, fmt.Errorf("key state %s: get: %w", d.cfg.Dir, err)
	}
	defer closer.Close()
	if len(v) == 0 || v[0] == 'd' {
		return dst, false, nil
	}
	return append(dst, v[1:]...), true, nil
}

// Scan calls fn with every key and row a stream with spilled changes
// under epoch sees (Lookup's answers), in key order.
func (d *DB) Scan(epoch uint32, fn func(key, row []byte) error) error {
	lo := spillKey(nil, epoch, nil)
	hi := spillKey(nil, epoch+1, nil)
	if epoch == ^uint32(0) {
		hi = spillEnd
	}
	sp, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("key state %s: scan: %w", d.cfg.Dir, err)
	}
	defer sp.Close()
	var co *pebble.Iterator
	if epoch == 0 {
		if co, err = d.db.NewIter(&pebble.IterOptions{LowerBound: dataPrefix, UpperBound: dataEnd}); err != nil {
			return fmt.Errorf("key state %s: scan: %w", d.cfg.Dir, err)
		}
		defer co.Close()
		co.First()
	}
	sOK := sp.First()
	for {
		cOK := co != nil && co.Valid()
		if !sOK && !cOK {
			break
		}
		var sk, ck []byte
		if sOK {
			sk = sp.Key()[len(lo):]
		}
		if cOK {
			ck = co.Key()[len(dataPrefix):]
		}
		c := 0
		switch {
		case !sOK:
			c = 1
		case !cOK:
			c = -1
		default:
			c = bytes.Compare(sk, ck)
		}
		if c <= 0 {
			if v := sp.Value(); len(v) > 0 && v[0] == 'r' {
				if err := fn(sk, v[1:]); err != nil {
					return err
				}
			}
			sOK = sp.Next()
			if c == 0 {
				co.Next()
			}
			continue
		}
		if err := fn(ck, co.Value()); err != nil {
			return err
		}
		co.Next()
	}
	if err := sp.Error(); err != nil {
		return fmt.Errorf("key state %s: scan: %w", d.cfg.Dir, err)
	}
	if co != nil {
		if err := co.Error(); err != nil {
			return fmt.Errorf("key state %s: scan: %w", d.cfg.Dir, err)
		}
	}
	return nil
}
