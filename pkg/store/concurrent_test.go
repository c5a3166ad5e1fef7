package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// TestConcurrentWriters races two writers, each with its own Store handle
// (as two processes would have), on one shard: every version has exactly
// one winner, losers get *UpperMismatchError, and the shard holds exactly
// the winners' updates.
func TestConcurrentWriters(t *testing.T) { forBackends(t, testConcurrentWriters) }

func testConcurrentWriters(t *testing.T, b testBackend) {
	ctx := context.Background()
	dir := b.dir(t)
	createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
	const commitsWanted = 60
	var mu sync.Mutex
	m := &model{}
	versions := map[uint64]int{}
	mismatches := 0
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := openTest(t, dir, Options{})
			sh, err := s.Shard(ctx, "db.t")
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; ; i++ {
				if err := sh.Refresh(ctx); err != nil {
					t.Error(err)
					return
				}
				up := sh.Upper()
				if up >= 10*commitsWanted {
					return
				}
				ups := []upd{{[]any{int64(w), fmt.Sprintf("w%d-%d", w, i)}, up + uint64(w), 1}}
				rec := buildRecord(t, testFields, ups)
				res, err := sh.Append(ctx, up, up+10, rec)
				rec.Release()
				var um *UpperMismatchError
				switch {
				case err == nil:
					mu.Lock()
					versions[res.Version]++
					m.ups = append(m.ups, ups...)
					mu.Unlock()
				case errors.As(err, &um):
					if um.Expected != up || um.Actual <= up {
						t.Errorf("mismatch %+v for expected %d", um, up)
					}
					mu.Lock()
					mismatches++
					mu.Unlock()
				default:
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	for v, n := range versions {
		if n != 1 {
			t.Fatalf("version %d committed %d times", v, n)
		}
	}
	if len(versions) != commitsWanted {
		t.Fatalf("%d commits, want %d", len(versions), commitsWanted)
	}
	sh, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, ctx, sh, m, 2, 0, 10*commitsWanted-1)
	checkAsOf(t, ctx, sh, m, 2, 10*commitsWanted-1)
	t.Logf("%d commits, %d mismatches", len(versions), mismatches)
}

// raceFS runs hook before the first Link to a manifest, so a competing
// writer deterministically takes the version first.
type raceFS struct {
	FS
	once sync.Once
	hook func()
}

func (f *raceFS) Link(oldpath, newpath string) error {
	if strings.HasPrefix(filepath.Base(newpath), manifestPrefix) {
		f.once.Do(f.hook)
	}
	return f.FS.Link(oldpath, newpath)
}

// TestLoseManifestRace makes another writer create version N+1 between
// this writer's batch write and its manifest link.
func TestLoseManifestRace(t *testing.T) { forBackends(t, testLoseManifestRace) }

func testLoseManifestRace(t *testing.T, b testBackend) {
	tests := []struct {
		name       string
		competitor func(ctx context.Context, sh *Shard) error
		wantErr    bool
		actual     uint64 // the upper the loser is told
	}{
		{"append wins", func(ctx context.Context, sh *Shard) error {
			rec := buildRecord(t, testFields, []upd{{[]any{int64(7), "other"}, 10, 1}})
			defer rec.Release()
			_, err := sh.Append(ctx, 10, 20, rec)
			return err
		}, true, 20},
		// So many that version N+1's manifest is pruned before this
		// writer links it: the name is free again, but the version is
		// taken (CI saw "version 44 committed 2 times" in
		// TestConcurrentWriters under load).
		{"appends win and prune the version", func(ctx context.Context, sh *Shard) error {
			for up := uint64(10); up < 10*(DefaultKeepManifests+2); up += 10 {
				rec := buildRecord(t, testFields, []upd{{[]any{int64(7), "other"}, up, 1}})
				_, err := sh.Append(ctx, up, up+10, rec)
				rec.Release()
				if err != nil {
					return err
				}
			}
			return nil
		}, true, 10 * (DefaultKeepManifests + 2)},
		{"compaction wins", func(ctx context.Context, sh *Shard) error {
			_, err := sh.Compact(ctx)
			return err
		}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := b.dir(t)
			base := createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
			for i := uint64(0); i < 2; i++ {
				rec := buildRecord(t, testFields, []upd{{[]any{int64(i), "x"}, 5 * i, 1}})
				if _, err := base.Append(ctx, 5*i, 5*i+5, rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			other := openTest(t, dir, Options{Retain: 3 * time.Millisecond})
			osh, err := other.Shard(ctx, "db.t")
			if err != nil {
				t.Fatal(err)
			}
			rfs := &raceFS{FS: baseFS(t, dir)}
			rfs.hook = func() {
				if err := tc.competitor(ctx, osh); err != nil {
					t.Errorf("competitor: %v", err)
				}
			}
			mine := openTest(t, dir, Options{FS: rfs})
			sh, err := mine.Shard(ctx, "db.t")
			if err != nil {
				t.Fatal(err)
			}
			rec := buildRecord(t, testFields, []upd{{[]any{int64(9), "mine"}, 12, 1}})
			defer rec.Release()
			_, err = sh.Append(ctx, 10, 20, rec)
			var um *UpperMismatchError
			if tc.wantErr {
				if !errors.As(err, &um) || um.Expected != 10 || um.Actual != tc.actual {
					t.Fatalf("want mismatch expected 10 actual %d, got %v", tc.actual, err)
				}
				// The loser's batch file is gone.
				info, _ := sh.Info(ctx)
				files := batchFiles(t, info.Dir)
				if len(files) != len(info.Batches) {
					t.Fatalf("%d batch files for %d batches: the loser left its batch", len(files), len(info.Batches))
				}
				return
			}
			if err != nil {
				t.Fatalf("append after losing to a compaction must retry and succeed: %v", err)
			}
			m := &model{ups: []upd{{[]any{int64(0), "x"}, 0, 1}, {[]any{int64(1), "x"}, 5, 1}, {[]any{int64(9), "mine"}, 12, 1}}}
			checkAsOf(t, ctx, sh, m, 2, 19)
		})
	}
}

func batchFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	fsys, dir := baseFS(t, dir), s3Path(dir)
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".arrow") {
			out = append(out, e.Name())
		}
	}
	return out
}

// faultFS fails the n-th call of one operation.
type faultFS struct {
	FS
	op   string // "write", "sync", "rename", "link", "syncdir"
	n    int
	seen int
}

var errInjected = errors.New("injected failure")

func (f *faultFS) hit(op string) bool {
	if op != f.op {
		return false
	}
	f.seen++
	return f.seen == f.n
}

func (f *faultFS) CreateTemp(dir, prefix string) (File, error) {
	file, err := f.FS.CreateTemp(dir, prefix)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *faultFS) Rename(a, b string) error {
	if f.hit("rename") {
		return errInjected
	}
	return f.FS.Rename(a, b)
}

func (f *faultFS) Link(a, b string) error {
	if f.hit("link") {
		return errInjected
	}
	return f.FS.Link(a, b)
}

func (f *faultFS) SyncDir(d string) error {
	if f.hit("syncdir") {
		return errInjected
	}
	return f.FS.SyncDir(d)
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.hit("write") {
		return len(p) / 2, errInjected
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if f.fs.hit("sync") {
		return errInjected
	}
	return f.File.Sync()
}

// TestInjectedFailures fails each step of an append in turn: the append
// returns the error and the store is byte for byte as it was, and a
// retry succeeds.
func TestInjectedFailures(t *testing.T) { forBackends(t, testInjectedFailures) }

func testInjectedFailures(t *testing.T, b testBackend) {
	tests := []struct {
		op string
		n  int
	}{
		{"write", 1},  // batch file
		{"sync", 1},   // batch file
		{"rename", 1}, // batch file
		{"syncdir", 1},
		{"write", 2}, // manifest
		{"sync", 2},  // manifest
		{"link", 1},  // manifest
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s#%d", tc.op, tc.n), func(t *testing.T) {
			ctx := context.Background()
			dir := b.dir(t)
			base := createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
			rec0 := buildRecord(t, testFields, []upd{{[]any{int64(1), "a"}, 1, 1}})
			if _, err := base.Append(ctx, 0, 10, rec0); err != nil {
				t.Fatal(err)
			}
			rec0.Release()
			before := snapshotDir(t, dir)
			ffs := &faultFS{FS: baseFS(t, dir), op: tc.op, n: tc.n}
			sh, err := openTest(t, dir, Options{FS: ffs}).Shard(ctx, "db.t")
			if err != nil {
				t.Fatal(err)
			}
			rec := buildRecord(t, testFields, []upd{{[]any{int64(2), "b"}, 12, 1}})
			defer rec.Release()
			_, err = sh.Append(ctx, 10, 20, rec)
			if !errors.Is(err, errInjected) {
				t.Fatalf("append error %v, want the injected failure", err)
			}
			if after := snapshotDir(t, dir); !equalSnapshots(before, after) {
				t.Fatalf("store changed by a failed append:\nbefore %v\nafter %v", keys(before), keys(after))
			}
			if _, err := sh.Append(ctx, 10, 20, rec); err != nil {
				t.Fatalf("retry: %v", err)
			}
			checkAsOf(t, ctx, sh, &model{ups: []upd{{[]any{int64(1), "a"}, 1, 1}, {[]any{int64(2), "b"}, 12, 1}}}, 2, 19)
		})
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, filepath.Base(k))
	}
	return out
}

// TestCleanup checks that compaction removes old manifests, unreferenced
// batch files and stray temporary files older than the grace period, and
// leaves young ones alone.
func TestCleanup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	s := openTest(t, dir, Options{Grace: time.Minute, Now: clock, KeepManifests: 3, Retain: -1})
	sh := createTest(t, s, "db.t", testFields)
	appendKeys(t, sh, 0, 20)
	stray := filepath.Join(sh.dir, tmpPrefix+"batch-stray")
	if err := writeFileForTest(stray); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	countFiles := func() (manifests, batches, temps int) {
		ents, _ := OSFS{}.ReadDir(sh.dir)
		for _, e := range ents {
			switch {
			case strings.HasPrefix(e.Name(), tmpPrefix):
				temps++
			case strings.HasPrefix(e.Name(), manifestPrefix):
				manifests++
			case strings.HasSuffix(e.Name(), ".arrow"):
				batches++
			}
		}
		return
	}
	info, _ := sh.Info(ctx)
	mans, bats, temps := countFiles()
	if mans != 3 || temps != 1 || bats <= len(info.Batches) {
		t.Fatalf("within grace: %d manifests, %d batch files (%d referenced), %d temps; want 3 manifests, old batches and the temp kept", mans, bats, len(info.Batches), temps)
	}
	// Progress appends push the versions that named the merged-away
	// batches out of the kept window.
	for i := uint64(20); i < 23; i++ {
		if _, err := sh.Append(ctx, i, i+1, nil); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Hour)
	res, err := sh.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mans, bats, temps = countFiles()
	if temps != 0 || bats != len(info.Batches) || mans > 3 || res.Removed == 0 {
		t.Fatalf("after grace: %d manifests, %d batch files for %d batches, %d temps (removed %d)", mans, bats, len(info.Batches), temps, res.Removed)
	}
	m := &model{}
	for i := uint64(0); i < 20; i++ {
		m.ups = append(m.ups, upd{[]any{int64(i), "a"}, i, 1})
	}
	for at := uint64(0); at < 20; at++ {
		checkAsOf(t, ctx, sh, m, 2, at)
	}
}

func writeFileForTest(path string) error {
	f, err := OSFS{}.CreateTemp(filepath.Dir(path), "x")
	if err != nil {
		return err
	}
	f.Close()
	return OSFS{}.Rename(f.Name(), path)
}

func TestBindings(t *testing.T) { forBackends(t, testBindings) }

func testBindings(t *testing.T, b testBackend) {
	ctx := context.Background()
	kf := func(m map[string]uint64) frontier.Frontier {
		f, err := frontier.New(frontier.DomainKafka, m)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	dir := b.dir(t)
	s := openTest(t, dir, Options{Retain: 25 * time.Millisecond})
	b1 := []frontier.Binding{{Time: 1, Frontier: frontier.Empty(frontier.DomainKafka)}, {Time: 5, Frontier: kf(map[string]uint64{"0": 3})}}
	b2 := []frontier.Binding{{Time: 12, Frontier: kf(map[string]uint64{"0": 3, "1": 2})}, {Time: 18, Frontier: kf(map[string]uint64{"0": 9, "1": 2})}}
	if _, err := s.AppendBindings(ctx, "kafka1", 0, 10, b1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendBindings(ctx, "kafka1", 10, 20, b2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		lower  uint64
		upper  uint64
		bs     []frontier.Binding
		want   string
		status AppendStatus
	}{
		{"replay equal", 10, 20, b2, "", Skipped},
		{"replay different", 10, 20, b2[:1], "not a replay", 0},
		{"not covering durable", 20, 30, []frontier.Binding{{Time: 21, Frontier: kf(map[string]uint64{"0": 8, "1": 2})}}, "does not cover the last durable binding", 0},
		{"not ascending", 20, 30, []frontier.Binding{{Time: 25, Frontier: kf(map[string]uint64{"0": 9, "1": 2})}, {Time: 25, Frontier: kf(map[string]uint64{"0": 9, "1": 2})}}, "strictly ascend", 0},
		{"other domain", 20, 30, []frontier.Binding{{Time: 25, Frontier: frontier.Single(frontier.DomainLSN, 5)}}, "domain", 0},
		{"time outside", 20, 30, []frontier.Binding{{Time: 30, Frontier: kf(map[string]uint64{"0": 9, "1": 2})}}, "outside", 0},
		{"shrinking", 20, 30, []frontier.Binding{{Time: 21, Frontier: kf(map[string]uint64{"0": 10, "1": 2})}, {Time: 22, Frontier: kf(map[string]uint64{"0": 10})}}, "does not cover", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.AppendBindings(ctx, "kafka1", tc.lower, tc.upper, tc.bs)
			if tc.want == "" {
				if err != nil || res.Status != tc.status {
					t.Fatalf("got %+v, %v", res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	got, upper, err := s.Bindings(ctx, "kafka1")
	if err != nil || upper != 20 {
		t.Fatalf("bindings: upper %d, %v", upper, err)
	}
	all := append(append([]frontier.Binding(nil), b1...), b2...)
	if fmt.Sprint(got) != fmt.Sprint(all) {
		t.Fatalf("bindings %v, want %v", got, all)
	}
	// Compaction at since = 20-25ms... retain 25ms from upper 40.
	if _, err := s.AppendBindings(ctx, "kafka1", 20, 40, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.Bindings(ctx, "kafka1")
	if err != nil {
		t.Fatal(err)
	}
	// since = 15: keep 18 and the last before it (12).
	if fmt.Sprint(got) != fmt.Sprint(b2) {
		t.Fatalf("after compaction %v, want %v", got, b2)
	}
	srcs, err := s.Sources(ctx)
	if err != nil || fmt.Sprint(srcs) != "[kafka1]" {
		t.Fatalf("sources %v, %v", srcs, err)
	}
}

// TestLoseManifestRaceBindings is TestLoseManifestRace for a remap shard
// and for a definite error: they commit through the same loop.
func TestLoseManifestRaceBindings(t *testing.T) { forBackends(t, testLoseManifestRaceBindings) }

func testLoseManifestRaceBindings(t *testing.T, b testBackend) {
	kf := func(p uint64) frontier.Frontier {
		f, err := frontier.New(frontier.DomainKafka, map[string]uint64{"0": p})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := []frontier.Binding{{Time: 1, Frontier: kf(1)}, {Time: 6, Frontier: kf(2)}}
	mine := []frontier.Binding{{Time: 12, Frontier: kf(5)}}
	tests := []struct {
		name       string
		competitor func(ctx context.Context, s *Store) error
		wantErr    bool
	}{
		{"append wins", func(ctx context.Context, s *Store) error {
			_, err := s.AppendBindings(ctx, "src", 10, 20, []frontier.Binding{{Time: 11, Frontier: kf(4)}})
			return err
		}, true},
		{"compaction wins", func(ctx context.Context, s *Store) error {
			sh, err := s.Remap(ctx, "src")
			if err != nil {
				return err
			}
			r, err := sh.Compact(ctx)
			if err == nil && !r.Committed {
				err = fmt.Errorf("the compaction committed nothing: %+v", r)
			}
			return err
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := b.dir(t)
			st := openTest(t, dir, Options{})
			for i, b := range base {
				if _, err := st.AppendBindings(ctx, "src", 5*uint64(i), 5*uint64(i)+5, []frontier.Binding{b}); err != nil {
					t.Fatal(err)
				}
			}
			other := openTest(t, dir, Options{Retain: 3 * time.Millisecond})
			rfs := &raceFS{FS: baseFS(t, dir)}
			rfs.hook = func() {
				if err := tc.competitor(ctx, other); err != nil {
					t.Errorf("competitor: %v", err)
				}
			}
			s := openTest(t, dir, Options{FS: rfs})
			if _, err := s.Remap(ctx, "src"); err != nil {
				t.Fatal(err)
			}
			res, err := s.AppendBindings(ctx, "src", 10, 20, mine)
			sh, rerr := s.Remap(ctx, "src")
			if rerr != nil {
				t.Fatal(rerr)
			}
			var um *UpperMismatchError
			if tc.wantErr {
				if !errors.As(err, &um) || um.Expected != 10 || um.Actual != 20 {
					t.Fatalf("want mismatch expected 10 actual 20, got %+v, %v", res, err)
				}
				// The loser's batch file is gone.
				info, _ := sh.Info(ctx)
				if files := batchFiles(t, info.Dir); len(files) != len(info.Batches) {
					t.Fatalf("%d batch files for %d batches: the loser left its batch", len(files), len(info.Batches))
				}
				return
			}
			if err != nil || res.Status != Appended || res.Upper != 20 {
				t.Fatalf("append after losing to a compaction must retry and succeed: %+v, %v", res, err)
			}
			got, upper, err := s.Bindings(ctx, "src")
			if err != nil || upper != 20 || len(got) == 0 || got[len(got)-1].Time != 12 || !got[len(got)-1].Frontier.Equal(kf(5)) {
				t.Fatalf("bindings %v upper %d, %v; want the last at 12 and upper 20", got, upper, err)
			}
			// The next append is checked against the binding committed on
			// top of the compaction.
			if _, err := s.AppendBindings(ctx, "src", 20, 30, []frontier.Binding{{Time: 21, Frontier: kf(4)}}); err == nil || !strings.Contains(err.Error(), "does not cover the last durable binding") {
				t.Fatalf("a shrinking binding after the retried commit: %v", err)
			}
		})
	}

	t.Run("error loses to an append", func(t *testing.T) {
		ctx := context.Background()
		dir := b.dir(t)
		createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
		osh, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
		if err != nil {
			t.Fatal(err)
		}
		rfs := &raceFS{FS: baseFS(t, dir)}
		rfs.hook = func() {
			if _, err := osh.Append(ctx, 0, 20, nil); err != nil {
				t.Errorf("competitor: %v", err)
			}
		}
		sh, err := openTest(t, dir, Options{FS: rfs}).Shard(ctx, "db.t")
		if err != nil {
			t.Fatal(err)
		}
		_, err = sh.AppendError(ctx, 0, 10, "boom")
		var um *UpperMismatchError
		if !errors.As(err, &um) || um.Expected != 0 || um.Actual != 20 {
			t.Fatalf("want mismatch expected 0 actual 20, got %v", err)
		}
		if info, _ := sh.Info(ctx); len(info.Errors) != 0 {
			t.Fatalf("the losing error was recorded: %+v", info.Errors)
		}
	})
}

// TestGCKeepsRetiredFiles: files a compaction removed from the list stay
// for the grace period after the compaction, however old they are, so a
// reader of an older version can finish; then cleanup removes them.
func TestGCKeepsRetiredFiles(t *testing.T) { forBackends(t, testGCKeepsRetiredFiles) }

func testGCKeepsRetiredFiles(t *testing.T, b testBackend) {
	ctx := context.Background()
	dir := b.dir(t)
	now := time.Now()
	clock := func() time.Time { return now }
	s := openTest(t, dir, Options{Grace: time.Minute, Now: clock, KeepManifests: 2, Retain: -1})
	sh := createTest(t, s, "db.t", testFields)
	appendKeys(t, sh, 0, 8)
	old, err := sh.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exist := func() (n int) {
		for _, bi := range old.Batches {
			if f, err := baseFS(t, dir).Open(s3Path(dir) + strings.TrimPrefix(bi.Path, dir)); err == nil {
				f.Close()
				n++
			}
		}
		return n
	}
	// An hour on, the files are old; a compaction replaces them now.
	now = now.Add(time.Hour)
	if res, err := sh.Compact(ctx); err != nil || res.Merged == 0 {
		t.Fatalf("compact: %+v, %v", res, err)
	}
	// Push the versions that list them out of the kept window, and clean up.
	for i := uint64(8); i < 12; i++ {
		if _, err := sh.Append(ctx, i, i+1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := exist(); n != len(old.Batches) {
		t.Fatalf("%d of the %d files replaced by the compaction a moment ago are left; a reader of the older version loses the rest", n, len(old.Batches))
	}
	now = now.Add(2 * time.Minute)
	for i := uint64(12); i < 13; i++ {
		if _, err := sh.Append(ctx, i, i+1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sh.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := exist(); n != 0 {
		t.Fatalf("%d retired files left after the grace period", n)
	}
}

// appendKeys appends, for each i in [lo, hi), the row (i, "a") at time i
// over [i, i+1).
func appendKeys(t *testing.T, sh *Shard, lo, hi uint64) {
	t.Helper()
	for i := lo; i < hi; i++ {
		rec := buildRecord(t, testFields, []upd{{[]any{int64(i), "a"}, i, 1}})
		if _, err := sh.Append(context.Background(), i, i+1, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
}

// afterLinkFS runs hook once right after the first manifest Link, before
// the linking writer looks for newer versions.
type afterLinkFS struct {
	FS
	once sync.Once
	hook func()
}

func (f *afterLinkFS) Link(oldpath, newpath string) error {
	err := f.FS.Link(oldpath, newpath)
	if err == nil && strings.HasPrefix(filepath.Base(newpath), manifestPrefix) {
		f.once.Do(f.hook)
	}
	return err
}

// TestCommitBuiltUpon has another writer commit on top of this writer's
// version between its manifest link and its check for newer versions
// (CI saw "58 commits, want 60" in TestConcurrentWriters on gofakes3): a
// newer version built on ours means ours won, not that it lost.
func TestCommitBuiltUpon(t *testing.T) { forBackends(t, testCommitBuiltUpon) }

func testCommitBuiltUpon(t *testing.T, b testBackend) {
	ctx := context.Background()
	dir := b.dir(t)
	createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
	osh, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	afs := &afterLinkFS{FS: baseFS(t, dir)}
	afs.hook = func() {
		if err := osh.Refresh(ctx); err != nil {
			t.Error(err)
			return
		}
		rec := buildRecord(t, testFields, []upd{{[]any{int64(2), "theirs"}, 15, 1}})
		defer rec.Release()
		if _, err := osh.Append(ctx, 10, 20, rec); err != nil {
			t.Errorf("competitor building on the new version: %v", err)
		}
	}
	sh, err := openTest(t, dir, Options{FS: afs}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	rec := buildRecord(t, testFields, []upd{{[]any{int64(1), "mine"}, 5, 1}})
	defer rec.Release()
	res, err := sh.Append(ctx, 0, 10, rec)
	if err != nil {
		t.Fatalf("an append another writer built upon must succeed: %v", err)
	}
	if res.Version != 2 || res.Upper != 10 {
		t.Fatalf("append result %+v, want version 2 upper 10", res)
	}
	m := &model{ups: []upd{{[]any{int64(1), "mine"}, 5, 1}, {[]any{int64(2), "theirs"}, 15, 1}}}
	fresh, err := openTest(t, dir, Options{}).Shard(ctx, "db.t")
	if err != nil {
		t.Fatal(err)
	}
	checkAsOf(t, ctx, fresh, m, 2, 19)
	checkChanges(t, ctx, fresh, m, 2, 0, 19)
}
