package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
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

	mu  sync.Mutex
	cur *Manifest
	// schemas caches the decoded schemas of generations by their encoding.
	schemas map[string]*genSchemas
	swept   bool
	// scratch: files that a crash may lose (staged updates, which the
	// source replays) are not synced.
	scratch bool
	// groupRows, when set, bounds the row groups of the files it writes
	// instead of the store's Options.GroupRows (a snapshot's stage).
	groupRows int64
}

// genSchemas are a generation's user schema and the schemas derived from
// it. For a remap shard all three are the batch schema.
type genSchemas struct {
	// user is the user columns.
	user *arrow.Schema
	// batch is the user columns, _time and _diff: batch files, Changes.
	batch *arrow.Schema
	// read is the user columns and _diff: ReadAsOf.
	read *arrow.Schema

	headOnce sync.Once
	head     []byte
	headErr  error
}

// ipcHead returns the IPC stream form of the batch schema's message, to
// decode a row group with (schemaHead).
func (sc *genSchemas) ipcHead() ([]byte, error) {
	sc.headOnce.Do(func() { sc.head, sc.headErr = schemaHead(sc.batch) })
	return sc.head, sc.headErr
}

// gen is a generation of a manifest with its schemas: it is in force at
// times [start, end), end being the next generation's start (MaxUint64
// for the latest).
type gen struct {
	start, end uint64
	sc         *genSchemas
}

// batches returns the batches of m that belong to g.
func (g gen) batches(m *Manifest) []BatchMeta {
	var out []BatchMeta
	for _, b := range m.Batches {
		if b.Generation == g.start {
			out = append(out, b)
		}
	}
	return out
}

// Generation is one generation of a collection: from Start on (until the
// next generation's start), the collection's contents are exactly the
// updates appended at times >= Start into this generation, in Schema.
type Generation struct {
	Start  uint64
	Schema *arrow.Schema
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
// for a remap shard, _time, _partition and _upper) of the manifest last
// read: for a collection, its latest generation's, the schema of the
// next append at its upper.
func (sh *Shard) Schema() *arrow.Schema {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cur == nil {
		return nil
	}
	return sh.schemas[sh.cur.Schema].user
}

// Generations returns the collection's generations of the manifest last
// read, oldest first: the first starts at 0 (or, once compaction removed
// generations that ended at or before since, at the start of the one in
// force at since), the last is the one Schema describes.
func (sh *Shard) Generations() []Generation {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cur == nil {
		return nil
	}
	var out []Generation
	for _, g := range sh.cur.gens() {
		out = append(out, Generation{Start: g.Start, Schema: sh.schemas[g.Schema].user})
	}
	return out
}

// SchemaAt returns the user schema of the generation in force at time t
// (of the manifest last read): the schema of ReadAsOf(t), and of an
// append at t. Times before the first generation kept get its schema
// (they are below since, so not readable).
func (sh *Shard) SchemaAt(t uint64) *arrow.Schema {
	gs := sh.Generations()
	if len(gs) == 0 {
		return nil
	}
	i := 0
	for k, g := range gs {
		if g.Start <= t {
			i = k
		}
	}
	return gs[i].Schema
}

// gensOf returns m's generations with their schemas.
func (sh *Shard) gensOf(m *Manifest) ([]gen, error) {
	ms := m.gens()
	out := make([]gen, len(ms))
	for i, g := range ms {
		sc, err := sh.schemasOf(g.Schema)
		if err != nil {
			return nil, fmt.Errorf("generation from %d: %w", g.Start, err)
		}
		end := uint64(math.MaxUint64)
		if i+1 < len(ms) {
			end = ms[i+1].Start
		}
		out[i] = gen{start: g.Start, end: end, sc: sc}
	}
	return out, nil
}

// genAt returns the index of the generation in force at t, or -1 when t
// is before all of gs.
func genAt(gs []gen, t uint64) int {
	i := -1
	for k, g := range gs {
		if g.start <= t {
			i = k
		}
	}
	return i
}

// schemasOf returns the schemas of an encoded user schema, decoding it on
// first use.
func (sh *Shard) schemasOf(enc string) (*genSchemas, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.schemasLocked(enc)
}

func (sh *Shard) schemasLocked(enc string) (*genSchemas, error) {
	if sc := sh.schemas[enc]; sc != nil {
		return sc, nil
	}
	s, err := decodeSchema(enc)
	if err != nil {
		return nil, err
	}
	sc := &genSchemas{user: s, batch: s, read: s}
	if sh.kind == kindData {
		sc.batch, sc.read = withColumns(s, timeField, diffField), withColumns(s, diffField)
	}
	if sh.schemas == nil {
		sh.schemas = map[string]*genSchemas{}
	}
	sh.schemas[enc] = sc
	return sc, nil
}

// refresh returns the current manifest, reading it when a newer version
// than the cached one exists.
func (sh *Shard) refresh(ctx context.Context) (*Manifest, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read manifest of %s: %w", sh.what(), err)
		}
		sh.mu.Lock()
		known, swept := sh.cur, sh.swept
		sh.mu.Unlock()
		var ents []fs.DirEntry
		var err error
		al, after := sh.st.fs.(afterLister)
		if after = after && swept && known != nil; after {
			// Only the manifests newer than the one we know (S3).
			ents, err = al.ListAfter(sh.dir, manifestPrefix, manifestName(known.Version))
		} else {
			ents, err = sh.st.fs.ReadDir(sh.dir)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open %s: no such %s in %s: %w", sh.what(), strings.Fields(sh.what())[0], sh.st.loc, ErrNotFound)
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
		if v == 0 && after {
			return known, nil
		}
		if v == 0 {
			return nil, fmt.Errorf("open %s: no such %s in %s: %w", sh.what(), strings.Fields(sh.what())[0], sh.st.loc, ErrNotFound)
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

// install makes m the cached manifest (if newer), decoding the schemas of
// its generations on first use.
func (sh *Shard) install(m *Manifest, path string) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, g := range m.gens() {
		if _, err := sh.schemasLocked(g.Schema); err != nil {
			return &CorruptError{Path: path, Detail: err.Error()}
		}
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

// create makes the shard's first manifest, or checks the existing schema:
// the latest generation's, or for a replay an earlier one's.
func (sh *Shard) create(ctx context.Context, user *arrow.Schema) error {
	for {
		_, err := sh.refresh(ctx)
		if err == nil {
			d := fieldsDiff(user.Fields(), sh.Schema().Fields())
			for _, g := range sh.Generations() {
				if fieldsDiff(user.Fields(), g.Schema.Fields()) == "" {
					d = ""
				}
			}
			if d != "" {
				return fmt.Errorf("create %s: it exists with a different schema (%s); for a schema change upstream start a new generation at its time, else pick another name or drop the collection", sh.what(), d)
			}
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
		m := &Manifest{Format: FormatVersion, Kind: sh.kind, Name: sh.name, Version: 1,
			Schema: enc, Columns: columnInfos(user), Batches: []BatchMeta{}}
		if _, err := sh.commit(ctx, nil, m); err != nil && !errors.Is(err, errLostRace) {
			return fmt.Errorf("create %s: %w", sh.what(), err)
		}
		// Created by us or by a concurrent creator: loop to check.
	}
}

// commit creates manifest version next.Version, built on base (nil for
// the first), exclusively. linked reports whether the manifest became
// visible (an error after that leaves the commit in doubt: it may or may
// not be durable, or the head).
func (sh *Shard) commit(ctx context.Context, base, next *Manifest) (linked bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("commit %s: %w", sh.what(), err)
	}
	epoch, err := sh.st.fence(next.Epoch)
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", sh.what(), err)
	}
	next.Epoch = epoch
	next.Parent = ""
	if base != nil {
		next.Parent = base.Commit
	}
	next.Commit = randomHex(8)
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
	// The name was free, but the version may not be: other writers that
	// committed KeepManifests versions past it meanwhile have pruned its
	// manifest (this one waited between its last read of the head and
	// the link). Then a newer manifest exists, and readers never take
	// this one: it lost. A newer version can also be another writer's,
	// built on this one since the link: then this one won.
	switch newer, err := sh.newerThan(next.Version); {
	case err != nil:
		return true, fmt.Errorf("commit %s: list manifests after creating version %d (it may or may not be the head; replay the append from the expected upper): %w", sh.what(), next.Version, err)
	case newer:
		built, err := sh.builtUpon(next)
		if err != nil {
			return true, fmt.Errorf("commit %s: read the version after %d, created meanwhile (version %d may or may not have won; replay the append from the expected upper): %w", sh.what(), next.Version, next.Version, err)
		}
		if !built {
			sh.st.fs.Remove(final)
			return false, errLostRace
		}
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

// builtUpon reports whether version m.Version+1 was built on m: its
// Parent is m's Commit.
func (sh *Shard) builtUpon(m *Manifest) (bool, error) {
	path := filepath.Join(sh.dir, manifestName(m.Version+1))
	b, err := readFile(sh.st.fs, path)
	if err != nil {
		return false, err
	}
	after, err := decodeManifest(b)
	if err != nil {
		return false, &CorruptError{Path: path, Detail: err.Error()}
	}
	return after.Parent == m.Commit, nil
}

// newerThan reports whether a manifest of a version after v exists.
func (sh *Shard) newerThan(v uint64) (bool, error) {
	var ents []fs.DirEntry
	var err error
	if al, ok := sh.st.fs.(afterLister); ok {
		ents, err = al.ListAfter(sh.dir, manifestPrefix, manifestName(v))
	} else {
		ents, err = sh.st.fs.ReadDir(sh.dir)
	}
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if n, ok := parseManifestName(e.Name()); ok && n > v {
			return true, nil
		}
	}
	return false, nil
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

// loadBatch reads and checks one batch file, which must have the schema
// want. The caller releases the records. A missing file (removed after a
// compaction) gives an error matching fs.ErrNotExist.
func (sh *Shard) loadBatch(ctx context.Context, b BatchMeta, want *arrow.Schema) ([]arrow.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read batch %s: %w", b.File, err)
	}
	path := filepath.Join(sh.dir, b.File)
	data, err := readFile(sh.st.fs, path)
	if err != nil {
		return nil, fmt.Errorf("read batch %s: %w", b.File, err)
	}
	recs, err := decodeBatch(path, data, b.CRC32C, want)
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
	// Epoch is the writer lease epoch of the last commit (S3 stores).
	Epoch uint64
	Since uint64
	Upper uint64
	// Schema is the user schema (for remap shards, the batch schema); for
	// a collection, its latest generation's.
	Schema *arrow.Schema
	// Generations are a collection's generations, oldest first (see
	// Shard.Generations); a remap shard has one from 0.
	Generations []Generation
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
	gs, err := sh.gensOf(m)
	if err != nil {
		return Info{}, fmt.Errorf("describe %s: %w", sh.what(), err)
	}
	in := Info{Name: sh.name, Kind: sh.kind, Dir: sh.st.display(sh.dir), Version: m.Version, Epoch: m.Epoch, Since: m.Since, Upper: m.Upper,
		Schema: gs[len(gs)-1].sc.user, Domain: m.Domain, Errors: slicesClone(m.Errors)}
	for _, g := range gs {
		in.Generations = append(in.Generations, Generation{Start: g.start, Schema: g.sc.user})
	}
	for _, b := range m.Batches {
		in.Batches = append(in.Batches, BatchInfo{BatchMeta: b, Path: sh.st.display(filepath.Join(sh.dir, b.File))})
		in.Rows += b.Rows
		in.Bytes += b.Bytes
	}
	return in, nil
}

// firstError returns the earliest definite error at or before t.
//
// An error holds from its time until a later generation starts (a
// re-snapshot of the collection clears it).
func (sh *Shard) firstError(m *Manifest, t uint64) error { return sh.errorDuring(m, t, t) }

// errorDuring returns the earliest definite error in force at some time
// in [lo, hi].
func (sh *Shard) errorDuring(m *Manifest, lo, hi uint64) error {
	for _, e := range m.Errors {
		if e.Time > hi {
			continue
		}
		x := max(e.Time, lo)
		cleared := false
		for _, g := range m.Generations {
			cleared = cleared || e.Time < g.Start && g.Start <= x
		}
		if !cleared {
			return &DefiniteError{Collection: sh.name, Time: e.Time, Message: e.Message}
		}
	}
	return nil
}

// readableAt checks that t is readable in m and returns the generation in
// force at t.
func (sh *Shard) readableAt(m *Manifest, op string, t uint64) (gen, error) {
	if m.Upper == 0 || t < m.Since || t >= m.Upper {
		return gen{}, &NotReadableError{Collection: sh.name, Op: op, Time: t, Since: m.Since, Upper: m.Upper}
	}
	if err := sh.firstError(m, t); err != nil {
		return gen{}, err
	}
	gs, err := sh.gensOf(m)
	if err != nil {
		return gen{}, fmt.Errorf("%s %s as of %d: %w", op, sh.what(), t, err)
	}
	i := genAt(gs, t)
	if i < 0 {
		// Generations before since are removed only when a later one
		// starts at or before since, so this does not happen.
		return gen{}, &NotReadableError{Collection: sh.name, Op: op, Time: t, Since: m.Since, Upper: m.Upper}
	}
	return gs[i], nil
}

// ReadAsOf returns the collection's contents at time t: every update at a
// time <= t of the generation in force at t, consolidated, as one record
// of that generation's user columns plus _diff (the multiplicity; rows
// whose diffs sum to zero are dropped), sorted by row. t must be in
// [Since, Upper). The caller releases the record.
func (sh *Shard) ReadAsOf(ctx context.Context, t uint64) (arrow.Record, error) {
	if sh.kind != kindData {
		return nil, fmt.Errorf("read %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	var out arrow.Record
	err := sh.readRetry(ctx, func(m *Manifest) error {
		g, err := sh.readableAt(m, "read", t)
		if err != nil {
			return err
		}
		rs, err := newRunSet(g.sc.user.Fields())
		if err != nil {
			return fmt.Errorf("read %s: %w", sh.what(), err)
		}
		defer rs.release()
		var lists [][]ent
		for _, b := range g.batches(m) {
			if b.Lower > t {
				continue
			}
			recs, err := sh.loadBatch(ctx, b, g.sc.batch)
			if err != nil {
				return fmt.Errorf("read %s as of %d: %w", sh.what(), t, err)
			}
			for _, rec := range recs {
				run := rs.add(rec)
				rec.Release()
				lists = append(lists, rs.consolidateRow(rs.ents(run, 0, t+1)))
			}
		}
		out = rs.build(g.sc.read, rs.mergeRows(lists), false)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Changes returns the consolidated updates at times in (t1, t2]: the user
// columns plus _time and _diff, consolidated per (row, time) and sorted by
// time then row. It needs Since <= t1 <= t2 < Upper; to get everything up
// to t2, read as of Since and add Changes(Since, t2). The caller releases
// the record.
//
// A generation starting at T in (t1, t2] with the same schema as the one
// before it (a truncate, a re-snapshot) contributes, at time T, the
// retraction of the contents as of T-1 and its own updates at T, so that
// ReadAsOf(t1) plus the changes is ReadAsOf(t2) still. One with another
// schema makes Changes fail with a *SchemaChangedError: read the changes
// up to T-1, then as of T and the changes after it.
func (sh *Shard) Changes(ctx context.Context, t1, t2 uint64) (arrow.Record, error) {
	var out arrow.Record
	err := sh.readRetry(ctx, func(m *Manifest) error {
		gs, i1, i2, err := sh.changesGens(m, t1, t2)
		if err != nil {
			return err
		}
		rs, err := newRunSet(gs[i2].sc.user.Fields())
		if err != nil {
			return fmt.Errorf("changes of %s: %w", sh.what(), err)
		}
		defer rs.release()
		var es []ent
		for k := i1; k <= i2; k++ {
			g := gs[k]
			if k > i1 {
				// The implicit retraction at g.start of what the previous
				// generation holds as of g.start-1: all its updates.
				prev := gs[k-1]
				old, err := sh.gather(ctx, prev.batches(m), prev.sc, rs, 0, g.start)
				if err != nil {
					return fmt.Errorf("changes of %s: %w", sh.what(), err)
				}
				rs.sortRowTime(old)
				for _, e := range rs.consolidateRow(old) {
					e.time, e.diff = g.start, -e.diff
					es = append(es, e)
				}
			}
			got, err := sh.gather(ctx, g.batches(m), g.sc, rs, max(t1+1, g.start), min(t2+1, g.end))
			if err != nil {
				return fmt.Errorf("changes of %s: %w", sh.what(), err)
			}
			es = append(es, got...)
		}
		rs.sortTimeRow(es)
		out = rs.build(gs[i2].sc.batch, rs.consolidateRowTime(es), true)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// changesGens checks that the changes in (t1, t2] are readable in m and
// returns m's generations and the indexes of those in force at t1 and t2.
func (sh *Shard) changesGens(m *Manifest, t1, t2 uint64) (gs []gen, i1, i2 int, err error) {
	if sh.kind != kindData {
		return nil, 0, 0, fmt.Errorf("changes of %s: a remap shard holds bindings; use Bindings: %w", sh.what(), ErrInvalid)
	}
	if t1 > t2 {
		return nil, 0, 0, fmt.Errorf("changes of %s in (%d, %d]: the interval is empty (the start is after the end): %w", sh.what(), t1, t2, ErrInvalid)
	}
	switch {
	case m.Upper == 0 || t2 >= m.Upper:
		return nil, 0, 0, &NotReadableError{Collection: sh.name, Op: "changes of", Time: t2, Since: m.Since, Upper: m.Upper}
	case t1 < m.Since:
		return nil, 0, 0, &NotReadableError{Collection: sh.name, Op: "changes of", Time: t1, Since: m.Since, Upper: m.Upper}
	}
	if err := sh.errorDuring(m, t1+1, t2); err != nil {
		return nil, 0, 0, err
	}
	if gs, err = sh.gensOf(m); err != nil {
		return nil, 0, 0, fmt.Errorf("changes of %s: %w", sh.what(), err)
	}
	i1, i2 = genAt(gs, t1), genAt(gs, t2)
	if i1 < 0 {
		return nil, 0, 0, &NotReadableError{Collection: sh.name, Op: "changes of", Time: t1, Since: m.Since, Upper: m.Upper}
	}
	for k := i1 + 1; k <= i2; k++ {
		if !sameSchema(gs[k].sc.user, gs[k-1].sc.user) {
			return nil, 0, 0, &SchemaChangedError{Collection: sh.name, From: t1, To: t2, At: gs[k].start}
		}
	}
	return gs, i1, i2, nil
}

// sameSchema reports whether two user schemas are identical: fields
// (names, types, nullability, metadata) and schema metadata.
func sameSchema(a, b *arrow.Schema) bool {
	return a.Equal(b) && a.Metadata().Equal(b.Metadata())
}

// collect loads the updates of batches (files of schema want) at times in
// [lo, hi) into rs and returns them sorted by (time, row) and
// consolidated.
func (sh *Shard) collect(ctx context.Context, batches []BatchMeta, sc *genSchemas, rs *runSet, lo, hi uint64) ([]ent, error) {
	es, err := sh.gather(ctx, batches, sc, rs, lo, hi)
	if err != nil {
		return nil, err
	}
	rs.sortTimeRow(es)
	return rs.consolidateRowTime(es), nil
}

// gather loads the updates of batches (of the generation with schemas
// sc) at times in [lo, hi) into rs and returns them, in no particular
// order. Row groups whose time range misses [lo, hi) are not read.
func (sh *Shard) gather(ctx context.Context, batches []BatchMeta, sc *genSchemas, rs *runSet, lo, hi uint64) ([]ent, error) {
	head, err := sc.ipcHead()
	if err != nil {
		return nil, err
	}
	var es []ent
	for _, b := range batches {
		if b.Lower >= hi || b.Upper <= lo {
			continue
		}
		r, err := sh.openRun(ctx, []BatchMeta{b}, sc.batch, head, lo, hi)
		if err != nil {
			return nil, err
		}
		for {
			rec, err := r.next()
			if err != nil || rec == nil {
				r.close()
				if err != nil {
					return nil, err
				}
				break
			}
			run := rs.add(rec)
			rec.Release()
			es = append(es, rs.ents(run, lo, hi)...)
		}
	}
	return es, nil
}

// prepareInput checks an appended record against the schema of the
// generation from genStart (sc) and the interval, and returns it with the
// columns in store order (user columns, _time, _diff), or nil when it has
// no rows.
func (sh *Shard) prepareInput(rec arrow.Record, lower, upper, genStart uint64, sc *genSchemas) (arrow.Record, error) {
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
	if d := fieldsDiff(user, sc.user.Fields()); d != "" {
		return nil, &SchemaMismatchError{Collection: sh.name, Detail: d, Generation: genStart, InGeneration: true}
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
	return array.NewRecord(sc.batch, cols, rec.NumRows()), nil
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
func (sh *Shard) sortConsolidate(in runs, sc *genSchemas) (runs, error) {
	if out, err := sh.inOrder(in, sc); out != nil || err != nil {
		return out, err // nothing to sort or consolidate
	}
	rec := in[0]
	if len(in) > 1 {
		// One run, so that prefixes can pack leading columns rebased to
		// their ranges in it.
		var err error
		if rec, err = arrowutil.Concat(sc.batch, in, memory.DefaultAllocator); err != nil {
			return nil, fmt.Errorf("sort batch: %w", err)
		}
		defer rec.Release()
	}
	rs, err := newRunSet(sc.user.Fields())
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
	return runs{rs.build(sc.batch, es, true)}, nil
}

// inOrder returns the runs of in, retained and in row order, when each is
// sorted and consolidated and they do not overlap (runSet.inOrder); nil
// otherwise.
func (sh *Shard) inOrder(in runs, sc *genSchemas) (runs, error) {
	rs, err := newRunSet(sc.user.Fields())
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
func (sh *Shard) filterFrom(in runs, t uint64, sc *genSchemas) runs {
	var out runs
	for _, rec := range in {
		rs, err := newRunSet(sc.user.Fields())
		if err != nil {
			return nil
		}
		if es := rs.ents(rs.add(rec), t, ^uint64(0)); len(es) > 0 {
			out = append(out, rs.build(sc.batch, es, true))
		}
		rs.release()
	}
	return out
}
