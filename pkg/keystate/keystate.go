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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

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
	// Valid is false while a fold that spans several batches runs: a DB
	// found so after a crash is rebuilt.
	Valid bool `json:"valid"`
	// None: the collection has nothing durable yet; the DB is empty.
	None bool `json:"none,omitempty"`
}

var (
	metaKey    = []byte("\x00meta")
	dataPrefix = []byte{1}
	dataEnd    = []byte{2}
)

// batchBytes is how large a pebble batch grows before a fold commits it
// (and marks the DB unfinished until the fold ends).
const batchBytes = 64 << 20

// DB is a key state on disk. Get is safe for concurrent use with one
// writer (Sync, CatchUp, Reset); writers must not run concurrently.
type DB struct {
	cfg Config
	log *slog.Logger
	db  *pebble.DB

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
	opts := &pebble.Options{Cache: c, MemTableSize: uint64(budget / 8), Logger: quietLogger{d.log}, DisableWAL: true}
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
	d    *DB
	b    *pebble.Batch
	keys int64
	kbuf []byte
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
	if f.b.Len() < batchBytes {
		return nil
	}
	d := f.d
	d.mu.Lock()
	m := d.m
	d.mu.Unlock()
	m.Ident, m.Valid = d.cfg.Ident, false
	if err := d.commit(f.b, m, false); err != nil {
		return err
	}
	f.b = d.db.NewBatch()
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

// change is what the changes of a fold do to a key: whether it was there
// before them (its first change retracts a row), and whether it is there
// after them (its last change, at time at, inserts row).
type change struct {
	before, after bool
	first, at     uint64
	row           []byte
}

// catchUp folds the changes of sh in (at, asOf] into the DB: per key, its
// row after its last change, so a key changed at many times of the
// window is written once. At one time a key loses at most its old row
// and gains at most its new one, in whatever order the changes come.
func (d *DB) catchUp(ctx context.Context, sh *store.Shard, at, asOf uint64, c Codec) (int64, error) {
	var n int64
	byKey := map[string]*change{}
	err := sh.StreamChanges(ctx, at, asOf, func(*arrow.Schema) error { return nil }, func(rec arrow.Record) error {
		times, ok := timeColumn(rec)
		if !ok {
			return fmt.Errorf("changes without a %s column", pipe.ColTime)
		}
		i := 0
		return c.StateRows(rec, func(key, row []byte, diff int64) error {
			t := times.Value(i)
			i++
			n++
			ch := byKey[string(key)]
			if ch == nil {
				ch = &change{first: t, at: t}
				byKey[string(key)] = ch
			} else if t != ch.at {
				// A later time (changes come in time order): what the key
				// is after it is what this time says.
				ch.at, ch.after, ch.row = t, false, ch.row[:0]
			}
			switch {
			case diff == 1 && !ch.after:
				ch.after, ch.row = true, append(ch.row[:0], row...)
			case diff == -1:
				// A retraction at the key's first time is of the row it
				// had before the fold.
				ch.before = ch.before || t == ch.first
			default:
				return fmt.Errorf("key %q gains two rows at time %d (diff %d), but a keyed collection holds each key once", key, t, diff)
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("catch up key state %s from %d to %d: %w", d.cfg.Dir, at, asOf, err)
	}
	f := &folder{d: d, b: d.db.NewBatch()}
	keys := d.Keys()
	for k, ch := range byKey {
		switch {
		case ch.after:
			err = f.set([]byte(k), ch.row)
		case ch.before:
			err = f.del([]byte(k))
		}
		if err != nil {
			f.b.Close()
			return 0, fmt.Errorf("catch up key state %s from %d to %d: %w", d.cfg.Dir, at, asOf, err)
		}
		if ch.after && !ch.before {
			keys++
		} else if ch.before && !ch.after {
			keys--
		}
	}
	if err := d.commit(f.b, meta{Ident: d.cfg.Ident, At: asOf, Keys: keys, Valid: true}, false); err != nil {
		return 0, err
	}
	return n, nil
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
