package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// Shard is a handle on one shard: a collection, or a source's remap shard.
// It caches the manifest it last read; every operation that depends on the
// current state re-reads the manifest when a newer version exists, so
// appends by other processes are seen. It is safe for concurrent use.
type Shard struct {
	st   *Store
	name string
	kind string
	dir  string

	mu    sync.Mutex
	cur   *Manifest
	user  *arrow.Schema
	swept bool
}

// errLostRace is returned by commit when another writer created the
// manifest version first.
var errLostRace = errors.New("lost the race for the next manifest version")

// maxCommitRetries bounds how often an append retries a commit lost to a
// writer that did not move the upper (a compaction).
const maxCommitRetries = 100

// Name returns the collection or source name.
func (sh *Shard) Name() string { return sh.name }

func (sh *Shard) what() string {
	if sh.kind == kindRemap {
		return "source " + sh.name
	}
	return "collection " + sh.name
}

// Refresh re-reads the current manifest if a newer version exists.
func (sh *Shard) Refresh(ctx context.Context) error {
	_, err := sh.refresh(ctx)
	return err
}

// Upper returns the upper of the manifest last read (see Refresh): every
// update at a time below it is durable.
func (sh *Shard) Upper() uint64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cur == nil {
		return 0
	}
	return sh.cur.Upper
}

// Since returns the since of the manifest last read: reads at times
// >= since are exact.
func (sh *Shard) Since() uint64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cur == nil {
		return 0
	}
	return sh.cur.Since
}

// Schema returns the user schema (the columns without _time and _diff;
// for a remap shard, _time, _partition and _upper).
func (sh *Shard) Schema() *arrow.Schema {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.user
}

// batchSchema is the schema of the shard's batch files.
func (sh *Shard) batchSchema() *arrow.Schema {
	if sh.kind == kindRemap {
		return sh.Schema()
	}
	return withColumns(sh.Schema(), timeField, diffField)
}

// refresh returns the current manifest, reading it when a newer version
// than the cached one exists.
func (sh *Shard) refresh(ctx context.Context) (*Manifest, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read manifest of %s: %w", sh.what(), err)
		}
		ents, err := sh.st.fs.ReadDir(sh.dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open %s: no such %s in %s: %w", sh.what(), strings.Fields(sh.what())[0], sh.st.dir, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("read manifest of %s: %w", sh.what(), err)
		}
		var v uint64
		for _, e := range ents {
			if n, ok := parseManifestName(e.Name()); ok && n > v {
				v = n
			}
		}
		if v == 0 {
			return nil, fmt.Errorf("open %s: no such %s in %s: %w", sh.what(), strings.Fields(sh.what())[0], sh.st.dir, ErrNotFound)
		}
		sh.sweepOnce(ents)
		sh.mu.Lock()
		cur := sh.cur
		sh.mu.Unlock()
		if cur != nil && cur.Version >= v {
			return cur, nil
		}
		path := filepath.Join(sh.dir, manifestName(v))
		b, err := readFile(sh.st.fs, path)
		if errors.Is(err, fs.ErrNotExist) && attempt < 20 {
			continue // removed by a newer writer's cleanup; list again
		}
		if err != nil {
			return nil, fmt.Errorf("read manifest of %s: %w", sh.what(), err)
		}
		m, err := decodeManifest(b)
		if err != nil {
			return nil, &CorruptError{Path: path, Detail: err.Error()}
		}
		if m.Version != v || m.Kind != sh.kind || m.Name != sh.name {
			return nil, &CorruptError{Path: path, Detail: fmt.Sprintf("manifest says version %d of %s %q", m.Version, m.Kind, m.Name)}
		}
		if err := sh.install(m, path); err != nil {
			return nil, err
		}
		sh.mu.Lock()
		if sh.cur != nil && sh.cur.Version > m.Version {
			m = sh.cur
		}
		sh.mu.Unlock()
		return m, nil
	}
}

// install makes m the cached manifest (if newer), decoding the schema on
// first use.
func (sh *Shard) install(m *Manifest, path string) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.user == nil {
		s, err := decodeSchema(m.Schema)
		if err != nil {
			return &CorruptError{Path: path, Detail: err.Error()}
		}
		sh.user = s
	}
	if sh.cur == nil || m.Version > sh.cur.Version {
		sh.cur = m
	}
	return nil
}

// sweepOnce removes stray temporary files older than the grace period,
// once per handle. Younger ones may belong to a writer in another process.
func (sh *Shard) sweepOnce(ents []fs.DirEntry) {
	sh.mu.Lock()
	done := sh.swept
	sh.swept = true
	sh.mu.Unlock()
	if !done {
		sh.sweepTemps(ents)
	}
}

func (sh *Shard) sweepTemps(ents []fs.DirEntry) int {
	n := 0
	now := sh.st.opts.Now()
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < sh.st.opts.Grace {
			continue
		}
		if sh.st.fs.Remove(filepath.Join(sh.dir, e.Name())) == nil {
			n++
		}
	}
	return n
}

// create makes the shard's first manifest, or checks the existing schema.
func (sh *Shard) create(ctx context.Context, user *arrow.Schema) error {
	for {
		m, err := sh.refresh(ctx)
		if err == nil {
			if d := fieldsDiff(user.Fields(), sh.Schema().Fields()); d != "" {
				return fmt.Errorf("create %s: it exists with a different schema (%s); pick another name or drop the collection", sh.what(), d)
			}
			_ = m
			return nil
		}
		if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("create %s: %w", sh.what(), err)
		}
		if err := sh.st.fs.MkdirAll(sh.dir); err != nil {
			return fmt.Errorf("create %s: %w", sh.what(), err)
		}
		enc, err := encodeSchema(user)
		if err != nil {
			return fmt.Errorf("create %s: %w", sh.what(), err)
		}
		m = &Manifest{Format: FormatVersion, Kind: sh.kind, Name: sh.name, Version: 1,
			Schema: enc, Columns: columnInfos(user), Batches: []BatchMeta{}}
		if _, err := sh.commit(ctx, m); err != nil && !errors.Is(err, errLostRace) {
			return fmt.Errorf("create %s: %w", sh.what(), err)
		}
		// Created by us or by a concurrent creator: loop to check.
	}
}

// commit creates manifest version next.Version exclusively. linked reports
// whether the manifest became visible (an error after that is a failed
// directory sync: the commit may or may not be durable).
func (sh *Shard) commit(ctx context.Context, next *Manifest) (linked bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("commit %s: %w", sh.what(), err)
	}
	data, err := encodeManifest(next)
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", sh.what(), err)
	}
	tmp, err := writeTemp(sh.st.fs, sh.dir, manifestPrefix, data)
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", sh.what(), err)
	}
	defer sh.st.fs.Remove(tmp)
	final := filepath.Join(sh.dir, manifestName(next.Version))
	if err := sh.st.fs.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, errLostRace
		}
		return false, fmt.Errorf("commit %s: link manifest: %w", sh.what(), err)
	}
	if err := sh.st.fs.SyncDir(sh.dir); err != nil {
		return true, fmt.Errorf("commit %s: sync directory after creating manifest version %d (it may or may not be durable; replay the append from the expected upper): %w", sh.what(), next.Version, err)
	}
	if err := sh.install(next, final); err != nil {
		return true, err
	}
	if old := next.Version; old > uint64(sh.st.opts.KeepManifests) {
		sh.st.fs.Remove(filepath.Join(sh.dir, manifestName(old-uint64(sh.st.opts.KeepManifests))))
	}
	return true, nil
}

// writeBatch writes rec as a new batch file covering [lower, upper):
// temporary file, sync, close, rename, sync the directory.
func (sh *Shard) writeBatch(ctx context.Context, lower, upper uint64, recs ...arrow.Record) (BatchMeta, error) {
	if err := ctx.Err(); err != nil {
		return BatchMeta{}, fmt.Errorf("write batch: %w", err)
	}
	var size, rows int64
	var crc uint32
	for _, rec := range recs {
		rows += rec.NumRows()
	}
	tmp, err := writeTempWith(sh.st.fs, sh.dir, "batch-", func(w io.Writer) (err error) {
		size, crc, err = encodeBatch(w, recs...)
		return err
	})
	if err != nil {
		return BatchMeta{}, fmt.Errorf("write batch: %w", err)
	}
	name := fmt.Sprintf("%020d-%020d-%016x.arrow", lower, upper, rand.Uint64())
	final := filepath.Join(sh.dir, name)
	if err := sh.st.fs.Rename(tmp, final); err != nil {
		sh.st.fs.Remove(tmp)
		return BatchMeta{}, fmt.Errorf("write batch: rename: %w", err)
	}
	if err := sh.st.fs.SyncDir(sh.dir); err != nil {
		sh.st.fs.Remove(final)
		return BatchMeta{}, fmt.Errorf("write batch: sync directory: %w", err)
	}
	return BatchMeta{File: name, Lower: lower, Upper: upper, Rows: rows, Bytes: size, CRC32C: crc}, nil
}

// loadBatch reads and checks one batch file. The caller releases the
// records. A missing file (removed after a compaction) gives an error
// matching fs.ErrNotExist.
func (sh *Shard) loadBatch(ctx context.Context, b BatchMeta) ([]arrow.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read batch %s: %w", b.File, err)
	}
	path := filepath.Join(sh.dir, b.File)
	data, err := readFile(sh.st.fs, path)
	if err != nil {
		return nil, fmt.Errorf("read batch %s: %w", b.File, err)
	}
	recs, err := decodeBatch(path, data, b.CRC32C, sh.batchSchema())
	if err != nil {
		return nil, fmt.Errorf("read batch %s: %w", b.File, err)
	}
	return recs, nil
}

// readRetry runs fn on the current manifest, again on a newer one when a
// batch file disappeared under it (a compaction replaced it).
func (sh *Shard) readRetry(ctx context.Context, fn func(m *Manifest) error) error {
	for attempt := 0; ; attempt++ {
		m, err := sh.refresh(ctx)
		if err != nil {
			return err
		}
		err = fn(m)
		if errors.Is(err, fs.ErrNotExist) && attempt < 10 {
			continue
		}
		return err
	}
}

// Info describes a shard, for `rtrctl store inspect`.
type Info struct {
	Name string
	// Kind is "data" for a collection, "remap" for a source.
	Kind    string
	Dir     string
	Version uint64
	Since   uint64
	Upper   uint64
	// Schema is the user schema (for remap shards, the batch schema).
	Schema *arrow.Schema
	// Domain is a remap shard's time domain.
	Domain  frontier.Domain
	Batches []BatchInfo
	Rows    int64
	Bytes   int64
	Errors  []ErrorMeta
}

// BatchInfo is a batch with the path of its file (an Arrow IPC file any
// Arrow implementation can read).
type BatchInfo struct {
	BatchMeta
	Path string
}

// Info re-reads the manifest and describes the shard.
func (sh *Shard) Info(ctx context.Context) (Info, error) {
	m, err := sh.refresh(ctx)
	if err != nil {
		return Info{}, err
	}
	in := Info{Name: sh.name, Kind: sh.kind, Dir: sh.dir, Version: m.Version, Since: m.Since, Upper: m.Upper,
		Schema: sh.Schema(), Domain: m.Domain, Errors: slicesClone(m.Errors)}
	for _, b := range m.Batches {
		in.Batches = append(in.Batches, BatchInfo{BatchMeta: b, Path: filepath.Join(sh.dir, b.File)})
		in.Rows += b.Rows
		in.Bytes += b.Bytes
	}
	return in, nil
}

// firstError returns the earliest definite error at or before t.
func (sh *Shard) firstError(m *Manifest, t uint64) error {
	for _, e := range m.Errors {
		if e.Time <= t {
			return &DefiniteError{Collection: sh.name, Time: e.Time, Message: e.Message}
		}
	}
	return nil
}

// readSchema is the schema of ReadAsOf results: user columns and _diff.
func (sh *Shard) readSchema() *arrow.Schema { return withColumns(sh.Schema(), diffField) }

// changesSchema is the schema of Changes results.
func (sh *Shard) changesSchema() *arrow.Schema {
	return withColumns(sh.Schema(), timeField, diffField)
}

// ReadAsOf returns the collection's contents at time t: every update at a
// time <= t, consolidated, as one record of the user columns plus _diff
// (the multiplicity; rows whose diffs sum to zero are dropped), sorted by
// row. t must be in [Since, Upper). The caller releases the record.
func (sh *Shard) ReadAsOf(ctx context.Context, t uint64) (arrow.Record, error) {
	if sh.kind != kindData {
		return nil, fmt.Errorf("read %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	var out arrow.Record
	err := sh.readRetry(ctx, func(m *Manifest) error {
		if m.Upper == 0 || t < m.Since || t >= m.Upper {
			return &NotReadableError{Collection: sh.name, Op: "read", Time: t, Since: m.Since, Upper: m.Upper}
		}
		if err := sh.firstError(m, t); err != nil {
			return err
		}
		rs, err := newRunSet(sh.Schema().Fields())
		if err != nil {
			return fmt.Errorf("read %s: %w", sh.what(), err)
		}
		defer rs.release()
		var lists [][]ent
		for _, b := range m.Batches {
			if b.Lower > t {
				continue
			}
			recs, err := sh.loadBatch(ctx, b)
			if err != nil {
				return fmt.Errorf("read %s as of %d: %w", sh.what(), t, err)
			}
			for _, rec := range recs {
				run := rs.add(rec)
				rec.Release()
				lists = append(lists, rs.consolidateRow(rs.ents(run, 0, t+1)))
			}
		}
		out = rs.build(sh.readSchema(), rs.mergeRows(lists), false)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanAsOf hands the updates at times <= t to add, one batch at a time
// (the user columns, _time and _diff; consolidated within a batch, not
// across batches), so that a caller can fold the contents as of t into
// its own structure holding no more than one batch. Summed, the updates
// are ReadAsOf(t). If a compaction replaces a batch file during the scan,
// the scan starts over on the new manifest; begin is called before each
// pass, and the caller drops what it gathered. t must be in [Since,
// Upper).
func (sh *Shard) ScanAsOf(ctx context.Context, t uint64, begin func(), add func(rec arrow.Record) error) error {
	if sh.kind != kindData {
		return fmt.Errorf("scan %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	return sh.readRetry(ctx, func(m *Manifest) error {
		if m.Upper == 0 || t < m.Since || t >= m.Upper {
			return &NotReadableError{Collection: sh.name, Op: "read", Time: t, Since: m.Since, Upper: m.Upper}
		}
		if err := sh.firstError(m, t); err != nil {
			return err
		}
		begin()
		for _, b := range m.Batches {
			if b.Lower > t {
				continue
			}
			recs, err := sh.loadBatch(ctx, b)
			if err != nil {
				return fmt.Errorf("scan %s as of %d: %w", sh.what(), t, err)
			}
			for i, rec := range recs {
				if b.Upper > t+1 {
					rest, ferr := sh.filterTo(rec, t)
					rec.Release()
					rec, err = rest, ferr
				}
				if rec != nil {
					err = add(rec)
					rec.Release()
				}
				if err != nil {
					runs(recs[i+1:]).release()
					return err
				}
			}
		}
		return nil
	})
}

// filterTo returns the rows of rec with _time <= t (nil when none).
func (sh *Shard) filterTo(rec arrow.Record, t uint64) (arrow.Record, error) {
	rs, err := newRunSet(sh.Schema().Fields())
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", sh.what(), err)
	}
	defer rs.release()
	es := rs.ents(rs.add(rec), 0, t+1)
	if len(es) == 0 {
		return nil, nil
	}
	return rs.build(sh.batchSchema(), es, true), nil
}

// Changes returns the consolidated updates at times in (t1, t2]: the user
// columns plus _time and _diff, consolidated per (row, time) and sorted by
// time then row. It needs Since <= t1 <= t2 < Upper; to get everything up
// to t2, read as of Since and add Changes(Since, t2). The caller releases
// the record.
func (sh *Shard) Changes(ctx context.Context, t1, t2 uint64) (arrow.Record, error) {
	if sh.kind != kindData {
		return nil, fmt.Errorf("changes of %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	if t1 > t2 {
		return nil, fmt.Errorf("changes of %s in (%d, %d]: the interval is empty (the start is after the end): %w", sh.what(), t1, t2, ErrInvalid)
	}
	var out arrow.Record
	err := sh.readRetry(ctx, func(m *Manifest) error {
		switch {
		case m.Upper == 0 || t2 >= m.Upper:
			return &NotReadableError{Collection: sh.name, Op: "changes of", Time: t2, Since: m.Since, Upper: m.Upper}
		case t1 < m.Since:
			return &NotReadableError{Collection: sh.name, Op: "changes of", Time: t1, Since: m.Since, Upper: m.Upper}
		}
		if err := sh.firstError(m, t2); err != nil {
			return err
		}
		rs, err := newRunSet(sh.Schema().Fields())
		if err != nil {
			return fmt.Errorf("changes of %s: %w", sh.what(), err)
		}
		defer rs.release()
		es, err := sh.collect(ctx, m, rs, t1+1, t2+1)
		if err != nil {
			return fmt.Errorf("changes of %s: %w", sh.what(), err)
		}
		out = rs.build(sh.changesSchema(), es, true)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// collect loads the updates at times in [lo, hi) into rs and returns them
// sorted by (time, row) and consolidated.
func (sh *Shard) collect(ctx context.Context, m *Manifest, rs *runSet, lo, hi uint64) ([]ent, error) {
	var es []ent
	for _, b := range m.Batches {
		if b.Lower >= hi || b.Upper <= lo {
			continue
		}
		recs, err := sh.loadBatch(ctx, b)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			run := rs.add(rec)
			rec.Release()
			es = append(es, rs.ents(run, lo, hi)...)
		}
	}
	rs.sortTimeRow(es)
	return rs.consolidateRowTime(es), nil
}

// prepareInput checks an appended record against the shard's schema and
// the interval, and returns it with the columns in store order (user
// columns, _time, _diff), or nil when it has no rows.
func (sh *Shard) prepareInput(rec arrow.Record, lower, upper uint64) (arrow.Record, error) {
	if rec == nil {
		return nil, nil
	}
	ti, di := -1, -1
	var user []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		switch f.Name {
		case TimeColumn:
			ti = i
		case DiffColumn:
			di = i
		default:
			user = append(user, f)
			cols = append(cols, rec.Column(i))
		}
	}
	if ti < 0 || di < 0 {
		return nil, &SchemaMismatchError{Collection: sh.name, Detail: "the batch needs a _time (uint64) and a _diff (int64) column"}
	}
	tf, df := rec.Schema().Field(ti), rec.Schema().Field(di)
	if !arrow.TypeEqual(tf.Type, arrow.PrimitiveTypes.Uint64) || !arrow.TypeEqual(df.Type, arrow.PrimitiveTypes.Int64) {
		return nil, &SchemaMismatchError{Collection: sh.name, Detail: fmt.Sprintf("_time is %s and _diff is %s, want uint64 and int64", tf.Type, df.Type)}
	}
	if d := fieldsDiff(user, sh.Schema().Fields()); d != "" {
		return nil, &SchemaMismatchError{Collection: sh.name, Detail: d}
	}
	if rec.NumRows() == 0 {
		return nil, nil
	}
	tcol, dcol := rec.Column(ti), rec.Column(di)
	if tcol.NullN() > 0 || dcol.NullN() > 0 {
		return nil, fmt.Errorf("append %s: _time and _diff must not be null: %w", sh.what(), ErrInvalid)
	}
	for _, t := range tcol.(*array.Uint64).Uint64Values() {
		if t < lower || t >= upper {
			return nil, fmt.Errorf("append %s: a row has _time %d outside the appended interval [%d, %d); every time must be at or after the expected upper and below the new upper: %w", sh.what(), t, lower, upper, ErrInvalid)
		}
	}
	cols = append(cols, tcol, dcol)
	return array.NewRecord(sh.batchSchema(), cols, rec.NumRows()), nil
}

// runs are the records of one batch, in store column order.
type runs []arrow.Record

func (in runs) release() {
	for _, r := range in {
		r.Release()
	}
}

// sortConsolidate returns in sorted by (row, time) and consolidated: its
// runs themselves (retained, perhaps reordered) when they are so already,
// one after the other, else one record; nothing when everything cancels.
func (sh *Shard) sortConsolidate(in runs) (runs, error) {
	if out, err := sh.inOrder(in); out != nil || err != nil {
		return out, err // nothing to sort or consolidate
	}
	rec := in[0]
	if len(in) > 1 {
		// One run, so that prefixes can pack leading columns rebased to
		// their ranges in it.
		var err error
		if rec, err = arrowutil.Concat(sh.batchSchema(), in, memory.DefaultAllocator); err != nil {
			return nil, fmt.Errorf("sort batch: %w", err)
		}
		defer rec.Release()
	}
	rs, err := newRunSet(sh.Schema().Fields())
	if err != nil {
		return nil, err
	}
	defer rs.release()
	es := rs.ents(rs.add(rec), 0, ^uint64(0))
	if len(es) != int(rec.NumRows()) {
		// _time == MaxUint64 cannot be below an upper; prepareInput checked.
		return nil, fmt.Errorf("sort batch: time out of range: %w", ErrInvalid)
	}
	rs.packPrefixes(0, es)
	rs.sortRowTime(es)
	if es = rs.consolidateRowTime(es); len(es) == 0 {
		return nil, nil
	}
	return runs{rs.build(sh.batchSchema(), es, true)}, nil
}

// inOrder returns the runs of in, retained and in row order, when each is
// sorted and consolidated and they do not overlap (runSet.inOrder); nil
// otherwise.
func (sh *Shard) inOrder(in runs) (runs, error) {
	rs, err := newRunSet(sh.Schema().Fields())
	if err != nil {
		return nil, err
	}
	defer rs.release()
	for _, rec := range in {
		rs.add(rec)
	}
	order := rs.inOrder()
	if order == nil {
		return nil, nil
	}
	out := make(runs, len(in))
	for k, i := range order {
		in[i].Retain()
		out[k] = in[i]
	}
	return out, nil
}

// filterFrom returns the rows of in with _time >= t.
func (sh *Shard) filterFrom(in runs, t uint64) runs {
	var out runs
	for _, rec := range in {
		rs, err := newRunSet(sh.Schema().Fields())
		if err != nil {
			return nil
		}
		if es := rs.ents(rs.add(rec), t, ^uint64(0)); len(es) > 0 {
			out = append(out, rs.build(sh.batchSchema(), es, true))
		}
		rs.release()
	}
	return out
}
