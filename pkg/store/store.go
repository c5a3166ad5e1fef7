// Package store is rtrctl's durable store: a directory of collections of
// updates (row, time, diff) on the system clock (milliseconds since the Unix
// epoch), plus one remap shard per source holding its reclocking bindings.
//
// Each collection is a shard: immutable Arrow IPC batch files, each covering
// a system-time interval [lower, upper) and sorted by row then time, and a
// versioned JSON manifest naming them. Writers commit by compare-and-append:
// the batch is written and synced under a temporary name and renamed, then
// manifest version N+1 is created exclusively (a hard link that fails when
// the name exists), then the directory is synced. The highest manifest
// version is current, so a crash at any instant leaves either the old or
// the new version readable, and of two concurrent writers exactly one wins
// each version; the other gets an *UpperMismatchError.
//
// A collection's contents at time t are all updates with time <= t,
// consolidated. An append or a merge writes one sorted run, cut into
// files of bounded size (Options.FileBytes) of row groups of bounded rows
// (Options.GroupRows) indexed in the manifest, and StreamAsOf, ScanAsOf
// and compaction merge runs a group of each at a time, so their memory
// does not grow with the collection.
//
// Reads are exact at every t in [since, upper): compaction
// merges batches, advances times below since to since and consolidates, and
// never changes such a read.
//
// A collection is a sequence of generations (Shard.NewGeneration): one
// starting at T, with its own schema, holds the contents from T on, so a
// TRUNCATE, a re-snapshot or a schema change upstream retracts everything
// before T at T without writing it. Reads at t use the generation in force
// at t. See docs/format-store.md for the format.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/rtrctl/rtrctl/internal/hint"
)

// Defaults of Options.
const (
	DefaultRetain        = time.Hour
	DefaultGrace         = 10 * time.Minute
	DefaultKeepManifests = 8
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Retain is how much history compaction keeps readable: since advances
	// to upper - Retain (never beyond upper-1). Zero means DefaultRetain;
	// a negative value keeps all history (since never advances).
	Retain time.Duration
	// FS is the filesystem; nil means OSFS.
	FS FS
	// KeepManifests is how many manifest versions to keep; older ones are
	// removed. Zero means DefaultKeepManifests; at least 2 are kept.
	KeepManifests int
	// Grace is how old an unreferenced batch file or a temporary file must
	// be before it is removed: younger ones may belong to an append in
	// flight in another process. Zero means DefaultGrace.
	Grace time.Duration
	// Now is the clock used for file ages; nil means time.Now.
	Now func() time.Time
	// FileBytes is the size at which appends and compaction cut a data
	// run into its next batch file; zero means DefaultFileBytes. A file
	// ends after the row group that reaches it.
	FileBytes int64
	// GroupRows is the most rows of one row group (Arrow record batch) of
	// a data batch file; zero means DefaultGroupRows. Readers load one
	// group of each file at a time.
	GroupRows int
	// LeaseTTL is how long the writer lease of a source on an S3 store
	// lives without renewal (LockSource); zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// MustExist makes Open fail with ErrNoStore instead of creating a new
	// store (readers use it, so a typo does not create an empty store).
	MustExist bool
}

// ErrNoStore is returned by Open with MustExist when dir holds no store.
var ErrNoStore = errors.New("no rtrctl store here")

func (o Options) withDefaults() Options {
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.KeepManifests == 0 {
		o.KeepManifests = DefaultKeepManifests
	}
	o.KeepManifests = max(o.KeepManifests, 2)
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Store is an open store directory. It is safe for concurrent use, and
// several processes may open the same directory: every commit is a
// compare-and-append on the filesystem.
type Store struct {
	dir  string // the store's root in fs: a local directory, or a key prefix
	loc  string // the location as given: a directory or s3://bucket/prefix
	opts Options
	fs   FS
	// lease is the writer lease of an S3 store's source, when this
	// handle holds one (lease.go); its epoch goes into every manifest.
	lease *lease

	id     string
	mu     sync.Mutex
	shards map[string]*Shard // by kind + "/" + name
}

// Subdirectories and files of a store.
const (
	storeFile = "rtrstore.json"
	dataDir   = "shards"
	remapDir  = "remap"
)

// storeMeta is rtrstore.json.
type storeMeta struct {
	Format  int    `json:"format"`
	Created string `json:"created"`
	// ID is random, made when the store is created (stores made before it
	// existed get one derived from Created).
	ID string `json:"id,omitempty"`
}

// Open opens the store at loc, creating it on first use. loc is a local
// directory (a path, or a file:// URL) or s3://bucket/prefix: a store on
// S3 or an S3-compatible server, with the client made from the AWS
// environment (NewS3Client) unless opts.FS is given (an FS on that
// bucket). An S3 store's bucket must honour conditional writes: Open
// checks (S3FS.SelfTest) and refuses one that does not.
func Open(ctx context.Context, loc string, opts Options) (*Store, error) {
	dir, err := resolveLocation(ctx, loc, &opts)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", loc, err)
	}
	opts = opts.withDefaults()
	s := &Store{dir: dir, loc: loc, opts: opts, fs: opts.FS, shards: map[string]*Shard{}}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open store %s: %w", loc, err)
	}
	if st, ok := s.fs.(interface{ SelfTest(dir string) error }); ok {
		if err := st.SelfTest(dir); errors.Is(err, errNoConditionalWrites) {
			return nil, hint.Wrap(fmt.Errorf("open store %s: %w", loc, err),
				"the store needs create-only writes (If-None-Match: *) to commit safely; use AWS S3 or a server that implements them (versitygw, MinIO)")
		} else if err != nil {
			return nil, hint.Wrap(fmt.Errorf("open store %s: %w", loc, err),
				"check the bucket name and the AWS environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE); see docs/operations.md")
		}
	}
	path := filepath.Join(dir, storeFile)
	if _, err := readFile(s.fs, path); errors.Is(err, fs.ErrNotExist) {
		if opts.MustExist {
			return nil, fmt.Errorf("open store %s: %w (create one with 'rtrctl store append' or 'rtrctl ingest')", loc, ErrNoStore)
		}
		if names, err := s.fs.ReadDir(dir); err == nil && !onlyStoreEntries(names) {
			return nil, fmt.Errorf("open store %s: the directory is not empty and holds no %s; point the store at an empty or new directory: %w", loc, storeFile, ErrNoStore)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, dataDir), filepath.Join(dir, remapDir)} {
		if err := s.fs.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("open store %s: %w", loc, err)
		}
	}
	b, err := readFile(s.fs, path)
	if errors.Is(err, fs.ErrNotExist) {
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, fmt.Errorf("open store %s: %w", loc, err)
		}
		meta, _ := json.MarshalIndent(storeMeta{Format: FormatVersion, Created: opts.Now().UTC().Format(time.RFC3339), ID: hex.EncodeToString(id[:])}, "", "  ")
		tmp, werr := writeTemp(s.fs, dir, storeFile, append(meta, '\n'))
		if werr != nil {
			return nil, fmt.Errorf("open store %s: %w", loc, werr)
		}
		lerr := s.fs.Link(tmp, path)
		s.fs.Remove(tmp)
		if lerr != nil && !errors.Is(lerr, fs.ErrExist) {
			return nil, fmt.Errorf("open store %s: %w", loc, lerr)
		}
		if serr := s.fs.SyncDir(dir); serr != nil {
			return nil, fmt.Errorf("open store %s: %w", loc, serr)
		}
		b, err = readFile(s.fs, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", loc, err)
	}
	var meta storeMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("open store %s: %s is not a store file (%v); point --store at an rtrctl store directory", loc, storeFile, err)
	}
	if meta.Format != FormatVersion {
		return nil, fmt.Errorf("open store %s: format version %d, this rtrctl reads version %d; use a matching rtrctl", loc, meta.Format, FormatVersion)
	}
	s.id = meta.ID
	if s.id == "" {
		sum := sha256.Sum256([]byte(meta.Created))
		s.id = hex.EncodeToString(sum[:8])
	}
	return s, nil
}

// resolveLocation turns a store location into the root path in its FS,
// making the S3 FS of an s3:// location when opts has none.
func resolveLocation(ctx context.Context, loc string, opts *Options) (string, error) {
	if rest, ok := strings.CutPrefix(loc, "file://"); ok {
		if !strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("a file:// url needs an absolute path (file:///var/lib/rtr), got %q", loc)
		}
		return rest, nil
	}
	if !isS3(loc) {
		return loc, nil
	}
	bucket, prefix, err := ParseS3URL(loc)
	if err != nil {
		return "", err
	}
	if opts.FS == nil {
		c, err := NewS3Client(ctx)
		if err != nil {
			return "", err
		}
		f := NewS3FS(c, bucket)
		f.ctx = context.WithoutCancel(ctx)
		opts.FS = f
	}
	if prefix == "" {
		return ".", nil
	}
	return prefix, nil
}

// display is a path of the store as users name it: for an S3 store the
// s3:// URL of the object or prefix.
func (s *Store) display(p string) string {
	if bucket, _, err := ParseS3URL(s.loc); err == nil {
		return "s3://" + bucket + "/" + s3Key(p)
	}
	return p
}

func isS3(loc string) bool { return strings.HasPrefix(loc, "s3://") }

// ID identifies the store: 16 hex digits, made when it was created. Names
// that must differ between stores (a default replication slot) use it.
func (s *Store) ID() string { return s.id }

// onlyStoreEntries reports whether a directory holds nothing but what a
// store being created holds before its rtrstore.json (another process may
// be creating it right now, or crashed while it did).
func onlyStoreEntries(entries []fs.DirEntry) bool {
	for _, e := range entries {
		switch n := e.Name(); {
		case n == dataDir || n == remapDir || n == "locks" || n == "sources" || n == stagedDirName || n == pendingDirName || n == "state":
		case strings.HasPrefix(n, storeFile) || strings.HasPrefix(n, "tmp-") || strings.HasPrefix(n, "."):
		default:
			return false
		}
	}
	return true
}

// Dir returns the store's location as given to Open: a directory, or an
// s3:// URL.
func (s *Store) Dir() string { return s.loc }

// Local reports whether the store is in a local directory (not on S3):
// only then do sockets, flock and other local state live inside it.
func (s *Store) Local() bool { return !isS3(s.loc) }

// Collections lists the collections (data shards), sorted.
func (s *Store) Collections(ctx context.Context) ([]string, error) {
	return s.list(ctx, dataDir)
}

// Sources lists the sources with a remap shard, sorted.
func (s *Store) Sources(ctx context.Context) ([]string, error) {
	return s.list(ctx, remapDir)
}

func (s *Store) list(ctx context.Context, sub string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", sub, err)
	}
	ents, err := s.fs.ReadDir(filepath.Join(s.dir, sub))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", sub, err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		name, err := unescapeName(e.Name())
		hashed := errors.Is(err, errHashedName)
		if err != nil && !hashed {
			continue
		}
		// Only shards with a manifest exist; a bare directory is a create
		// that did not finish.
		files, err := s.fs.ReadDir(filepath.Join(s.dir, sub, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", sub, err)
		}
		var v uint64
		for _, f := range files {
			if n, ok := parseManifestName(f.Name()); ok && n > v {
				v = n
			}
		}
		if v == 0 {
			continue
		}
		if hashed {
			// A long name: the manifest has it.
			if name, err = s.manifestShardName(filepath.Join(s.dir, sub, e.Name()), v); err != nil {
				return nil, fmt.Errorf("list %s: %w", sub, err)
			}
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// manifestShardName reads the shard name from the manifest of dir with
// version v or, when a newer writer has removed it meanwhile, the newest.
func (s *Store) manifestShardName(dir string, v uint64) (string, error) {
	for attempt := 0; ; attempt++ {
		b, err := readFile(s.fs, filepath.Join(dir, manifestName(v)))
		if errors.Is(err, fs.ErrNotExist) && attempt < 20 {
			files, err := s.fs.ReadDir(dir)
			if err != nil {
				return "", err
			}
			for _, f := range files {
				if n, ok := parseManifestName(f.Name()); ok && n > v {
					v = n
				}
			}
			continue
		}
		if err != nil {
			return "", err
		}
		m, err := decodeManifest(b)
		if err != nil {
			return "", &CorruptError{Path: filepath.Join(dir, manifestName(v)), Detail: err.Error()}
		}
		return m.Name, nil
	}
}

// Shard opens an existing collection. It fails with an error wrapping
// ErrNotFound when there is none.
func (s *Store) Shard(ctx context.Context, name string) (*Shard, error) {
	sh, err := s.handle(kindData, name)
	if err != nil {
		return nil, fmt.Errorf("open collection %s: %w", name, err)
	}
	if _, err := sh.refresh(ctx); err != nil {
		return nil, err
	}
	return sh, nil
}

// CreateShard creates a collection with the given user schema (the
// columns, without _time and _diff; if they are present they are dropped),
// or opens it when it exists with an equal schema. Schema metadata (such
// as rtr.key) is stored with it.
//
// An existing collection's schema is its latest generation's; an earlier
// generation's is accepted too (a replay of old data), and appends check
// the schema of the generation their times fall in.
func (s *Store) CreateShard(ctx context.Context, name string, schema *arrow.Schema) (*Shard, error) {
	user, err := checkUserSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("create collection %s: %w", name, err)
	}
	sh, err := s.handle(kindData, name)
	if err != nil {
		return nil, fmt.Errorf("create collection %s: %w", name, err)
	}
	if err := sh.create(ctx, user); err != nil {
		return nil, err
	}
	return sh, nil
}

// checkUserSchema returns the user schema of a collection or generation
// (userSchema) after checking that every column type is supported.
func checkUserSchema(schema *arrow.Schema) (*arrow.Schema, error) {
	user, err := userSchema(schema)
	if err != nil {
		return nil, err
	}
	for _, f := range user.Fields() {
		if _, err := newColumn(f.Type); err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
	}
	return user, nil
}

// userSchema drops _time and _diff (which must have their types).
func userSchema(s *arrow.Schema) (*arrow.Schema, error) {
	if s == nil {
		return nil, fmt.Errorf("no schema given: %w", ErrInvalid)
	}
	var fs []arrow.Field
	for _, f := range s.Fields() {
		switch f.Name {
		case TimeColumn:
			if !arrow.TypeEqual(f.Type, arrow.PrimitiveTypes.Uint64) {
				return nil, fmt.Errorf("column _time is %s, want uint64 (milliseconds since the Unix epoch): %w", f.Type, ErrInvalid)
			}
			continue
		case DiffColumn:
			if !arrow.TypeEqual(f.Type, arrow.PrimitiveTypes.Int64) {
				return nil, fmt.Errorf("column _diff is %s, want int64: %w", f.Type, ErrInvalid)
			}
			continue
		}
		fs = append(fs, f)
	}
	md := s.Metadata()
	return arrow.NewSchema(fs, &md), nil
}

// handle returns the cached handle of a shard (without touching disk).
func (s *Store) handle(kind, name string) (*Shard, error) {
	esc, err := escapeName(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := kind + "/" + name
	if sh := s.shards[key]; sh != nil {
		return sh, nil
	}
	sub := dataDir
	if kind == kindRemap {
		sub = remapDir
	}
	sh := &Shard{st: s, name: name, kind: kind, dir: filepath.Join(s.dir, sub, esc)}
	s.shards[key] = sh
	return sh, nil
}

// CompactCrowded compacts the shards this handle has open whose cached
// manifest lists at least batches batches (an ingest's own collections,
// between its timed compactions). Every commit writes the whole manifest,
// so a collection that gains a batch per binding makes each commit
// costlier until it is compacted: a Kafka ingest at 10 bindings a second
// spent its commits encoding a 500 KB manifest before its first
// compaction (rtrctl bench kafka, docs/kafka.md).
func (s *Store) CompactCrowded(ctx context.Context, batches int) ([]CompactResult, error) {
	s.mu.Lock()
	var crowded []*Shard
	for _, sh := range s.shards {
		sh.mu.Lock()
		if sh.cur != nil && len(sh.cur.Batches) >= batches {
			crowded = append(crowded, sh)
		}
		sh.mu.Unlock()
	}
	s.mu.Unlock()
	var out []CompactResult
	for _, sh := range crowded {
		r, err := sh.Compact(ctx)
		if err != nil {
			return out, fmt.Errorf("compact store: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Compact compacts every shard (collections and remap shards) and reports
// what it did per shard.
func (s *Store) Compact(ctx context.Context) ([]CompactResult, error) {
	var out []CompactResult
	for _, kind := range []string{kindData, kindRemap} {
		var names []string
		var err error
		if kind == kindData {
			names, err = s.Collections(ctx)
		} else {
			names, err = s.Sources(ctx)
		}
		if err != nil {
			return out, fmt.Errorf("compact store: %w", err)
		}
		for _, n := range names {
			sh, err := s.handle(kind, n)
			if err != nil {
				return out, fmt.Errorf("compact store: %w", err)
			}
			r, err := sh.Compact(ctx)
			if err != nil {
				return out, fmt.Errorf("compact store: %w", err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}
