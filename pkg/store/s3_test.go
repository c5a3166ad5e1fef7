package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rtrctl/rtrctl/internal/servers"
)

// The store suites run on three backends: a local directory, gofakes3
// (in-process, bucket "fake") and versitygw (a real S3 gateway over a
// POSIX directory, started on a loopback port, bucket "vgw"). A test takes
// a location from backend.dir and opens it with openTest, which gives an
// s3:// location the S3FS of its server; the bucket names the server.

// testBackend is one place stores live in tests.
type testBackend struct {
	name   string
	bucket string // "" for the local directory
}

var (
	localBackend = testBackend{name: "local"}
	fakeBackend  = testBackend{name: "gofakes3", bucket: "fake"}
	vgwBackend   = testBackend{name: "versitygw", bucket: "vgw"}
	allBackends  = []testBackend{localBackend, fakeBackend, vgwBackend}
)

// forBackends runs f as a subtest on each backend.
func forBackends(t *testing.T, f func(t *testing.T, b testBackend)) {
	for _, b := range allBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// dir returns a fresh, empty store location.
func (b testBackend) dir(t testing.TB) string {
	if b.bucket == "" {
		return t.TempDir()
	}
	testS3(t, b.bucket) // start the server now, failing clearly
	var r [6]byte
	rand.Read(r[:])
	name := strings.NewReplacer("/", "-", " ", "_", "=", "_").Replace(t.Name())
	return "s3://" + b.bucket + "/" + name + "-" + hex.EncodeToString(r[:])
}

// s3 is whether the backend is an S3 server.
func (b testBackend) s3() bool { return b.bucket != "" }

// testS3Server is a started S3 server of the tests.
type testS3Server struct {
	endpoint, access, secret string
	// ignore makes the gofakes3 front drop conditional headers (a server
	// that accepts them and does nothing), for the self-test.
	ignore bool
}

var (
	s3Mu      sync.Mutex
	s3Servers = map[string]*testS3Server{}
	s3Stops   []func() error
)

// testS3 returns the server of bucket, starting it on first use.
func testS3(t testing.TB, bucket string) *testS3Server {
	t.Helper()
	s3Mu.Lock()
	defer s3Mu.Unlock()
	if s := s3Servers[bucket]; s != nil {
		return s
	}
	var s *testS3Server
	switch bucket {
	case "fake", "ignoring":
		be := s3mem.New()
		if err := be.CreateBucket(bucket); err != nil {
			t.Fatalf("gofakes3: create bucket: %v", err)
		}
		var h http.Handler = gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
		if bucket == "ignoring" {
			inner := h
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Header.Del("If-None-Match")
				r.Header.Del("If-Match")
				inner.ServeHTTP(w, r)
			})
		}
		srv := httptest.NewServer(h)
		s3Stops = append(s3Stops, func() error { srv.Close(); return nil })
		s = &testS3Server{endpoint: srv.URL, access: "rtrtest", secret: "rtrtest-secret"}
	case "vgw":
		dir, err := os.MkdirTemp("", "rtr-versitygw-")
		if err != nil {
			t.Fatal(err)
		}
		v, stop, err := servers.LaunchVersityGW(context.Background(), dir, bucket)
		if err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		s3Stops = append(s3Stops, stop, func() error { return os.RemoveAll(dir) })
		s = &testS3Server{endpoint: v.Endpoint, access: v.AccessKey, secret: v.SecretKey}
	default:
		t.Fatalf("no test S3 server for bucket %q", bucket)
	}
	s3Servers[bucket] = s
	return s
}

// env points a child process's AWS SDK at the server.
func (s *testS3Server) env() []string {
	return (&servers.S3Server{Endpoint: s.endpoint, AccessKey: s.access, SecretKey: s.secret, Region: "us-east-1"}).Env()
}

// fs returns a new S3FS on bucket of the server (a new one per store
// handle, as another process would have).
func (s *testS3Server) fs(bucket string) *S3FS {
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.endpoint), Retryer: s3Retryer(),
		Credentials: credentials.NewStaticCredentialsProvider(s.access, s.secret, "")},
		func(o *s3.Options) { s3ClientOptions(o, true) })
	return NewS3FS(c, bucket)
}

// baseFS is the FS of a store location: OSFS, or the S3FS of its server.
func baseFS(t testing.TB, loc string) FS {
	if !isS3(loc) {
		return OSFS{}
	}
	bucket, _, err := ParseS3URL(loc)
	if err != nil {
		t.Fatal(err)
	}
	return testS3(t, bucket).fs(bucket)
}

// childEnv is the environment a child process needs to open loc.
func childEnv(t testing.TB, loc string) []string {
	if !isS3(loc) {
		return nil
	}
	bucket, _, _ := ParseS3URL(loc)
	return testS3(t, bucket).env()
}

// stopS3Servers stops the servers the tests started.
func stopS3Servers() {
	s3Mu.Lock()
	defer s3Mu.Unlock()
	for i := len(s3Stops) - 1; i >= 0; i-- {
		if err := s3Stops[i](); err != nil {
			fmt.Fprintln(os.Stderr, "stop test S3 server:", err)
		}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopS3Servers()
	os.Exit(code)
}

// TestS3Smoke appends, reads and compacts a collection on each S3
// backend through a second handle (another "process").
func TestS3Smoke(t *testing.T) {
	forBackends(t, func(t *testing.T, b testBackend) {
		ctx := context.Background()
		dir := b.dir(t)
		s := openTest(t, dir, Options{Retain: -1})
		sh := createTest(t, s, "db.t", testFields)
		m := &model{}
		for i := uint64(0); i < 5; i++ {
			ups := []upd{{[]any{int64(i), fmt.Sprint("v", i)}, 10 * i, 1}}
			if i > 0 {
				ups = append(ups, upd{[]any{int64(i - 1), fmt.Sprint("v", i-1)}, 10*i + 1, -1})
			}
			rec := buildRecord(t, testFields, ups)
			if _, err := sh.Append(ctx, 10*i, 10*i+10, rec); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			rec.Release()
			m.ups = append(m.ups, ups...)
		}
		other, err := openTest(t, dir, Options{Retain: -1}).Shard(ctx, "db.t")
		if err != nil {
			t.Fatal(err)
		}
		if other.Upper() != 50 {
			t.Fatalf("second handle sees upper %d, want 50", other.Upper())
		}
		for at := uint64(0); at < 50; at += 7 {
			checkAsOf(t, ctx, other, m, len(testFields), at)
		}
		if _, err := other.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		checkAsOf(t, ctx, sh, m, len(testFields), 49)
		checkChanges(t, ctx, sh, m, len(testFields), 3, 45)
	})
}

// TestS3SelfTest: a server that accepts If-None-Match and does nothing
// (gofakes3 behind a front that drops the header) is refused at open
// with an error naming the cause; the real ones pass.
func TestS3SelfTest(t *testing.T) {
	testS3(t, "ignoring")
	_, err := Open(context.Background(), "s3://ignoring/store", Options{FS: baseFS(t, "s3://ignoring/store")})
	if err == nil || !errors.Is(err, errNoConditionalWrites) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("open on a bucket ignoring conditional writes: %v, want the self-test's refusal", err)
	}
	t.Logf("refused: %v", err)
	for _, b := range []testBackend{fakeBackend, vgwBackend} {
		dir := b.dir(t)
		if err := baseFS(t, dir).(*S3FS).SelfTest("x"); err != nil {
			t.Errorf("%s: self-test: %v", b.name, err)
		}
	}
}

// TestS3ConcurrentOpen: processes opening one new store at once (an
// ingest and its readers) each write and delete a probe object in the
// same fresh prefix. versitygw keeps a prefix as a directory and removes
// it when its last object goes, so one process's delete can race
// another's write into it: the write fails with 409
// ExistingObjectIsDirectory, a transient error, which must be retried
// rather than fail the open. (Before the retry, this failed within the
// first 20 rounds; the store sits two levels down, as s3://b/stores/one
// does, so the emptied directories are the store's own.)
func TestS3ConcurrentOpen(t *testing.T) {
	for _, b := range []testBackend{fakeBackend, vgwBackend} {
		t.Run(b.name, func(t *testing.T) {
			// Six "processes", each with its own client, kept across the
			// rounds (a client per round leaks its idle connections).
			fss := make([]*S3FS, 6)
			for i := range fss {
				fss[i] = baseFS(t, b.dir(t)).(*S3FS)
			}
			for round := 0; round < 200; round++ {
				dir := b.dir(t)
				var wg sync.WaitGroup
				errs := make([]error, len(fss))
				for i := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						f := fss[i]
						for k := 0; k < 3 && errs[i] == nil; k++ {
							errs[i] = f.SelfTest(s3Path(dir) + "/a/b")
						}
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("round %d: concurrent self-tests of one new prefix: %v", round, err)
				}
			}
		})
	}
}

// s3Path is the path in its FS of a store location: the key prefix of an
// s3:// one (after the bucket).
func s3Path(loc string) string {
	if !isS3(loc) {
		return loc
	}
	_, p, _ := ParseS3URL(loc)
	if p == "" {
		return "."
	}
	return p
}

// snapshotS3 returns every object's bytes under an s3:// location.
func snapshotS3(t testing.TB, loc string) map[string]string {
	t.Helper()
	f := baseFS(t, loc).(*S3FS)
	out := map[string]string{}
	pg := s3.NewListObjectsV2Paginator(f.client, &s3.ListObjectsV2Input{Bucket: &f.bucket, Prefix: aws.String(s3DirPrefix(s3Path(loc)))})
	for pg.HasMorePages() {
		page, err := pg.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			b, err := f.ReadFile(aws.ToString(o.Key))
			if err != nil {
				t.Fatal(err)
			}
			out[aws.ToString(o.Key)] = string(b)
		}
	}
	return out
}

// TestS3FS: listing after a name (how a shard finds newer manifests),
// ranged reads, create-only links and missing objects, on both servers.
func TestS3FS(t *testing.T) {
	for _, b := range []testBackend{fakeBackend, vgwBackend} {
		t.Run(b.name, func(t *testing.T) {
			dir := b.dir(t)
			f, root := baseFS(t, dir).(*S3FS), s3Path(dir)
			put := func(name, data string, exclusive bool) error {
				tmp, err := writeTemp(f, root, "x", []byte(data))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Remove(tmp)
				if exclusive {
					return f.Link(tmp, root+"/"+name)
				}
				return f.Rename(tmp, root+"/"+name)
			}
			for v := uint64(1); v <= 5; v++ {
				if err := put(manifestName(v), fmt.Sprint("m", v), true); err != nil {
					t.Fatal(err)
				}
			}
			if err := put("00001-batch.arrow", "0123456789", false); err != nil {
				t.Fatal(err)
			}
			if err := put(manifestName(3), "again", true); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("second create-only link of a manifest: %v, want fs.ErrExist", err)
			}
			ents, err := f.ListAfter(root, manifestPrefix, manifestName(3))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if want := []string{manifestName(4), manifestName(5)}; fmt.Sprint(names) != fmt.Sprint(want) {
				t.Fatalf("list after version 3: %v, want %v", names, want)
			}
			if ents, _ := f.ListAfter(root, manifestPrefix, manifestName(5)); len(ents) != 0 {
				t.Fatalf("list after the newest: %v", ents)
			}
			all, err := f.ReadDir(root)
			if err != nil || len(all) != 6 {
				t.Fatalf("read dir: %d entries, %v", len(all), err)
			}
			o, err := f.Open(root + "/00001-batch.arrow")
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if n, err := o.ReadAt(buf, 3); err != nil || string(buf[:n]) != "3456" {
				t.Fatalf("ranged read: %q, %v", buf[:n], err)
			}
			if n, err := o.ReadAt(buf, 8); !errors.Is(err, io.EOF) || string(buf[:n]) != "89" {
				t.Fatalf("ranged read at the end: %q, %v", buf[:n], err)
			}
			if _, err := f.Open(root + "/nope"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("open of a missing object: %v, want fs.ErrNotExist", err)
			}
			if _, err := f.ReadFile(root + "/nope"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("read of a missing object: %v, want fs.ErrNotExist", err)
			}
		})
	}
}

// TestS3Lease: a second writer is refused while the lease lives, takes
// over once it expires (epoch 2, recorded in its commits), and the first
// then commits nothing.
func TestS3Lease(t *testing.T) {
	for _, b := range []testBackend{fakeBackend, vgwBackend} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dir := b.dir(t)
			const ttl = 600 * time.Millisecond
			s1 := openTest(t, dir, Options{LeaseTTL: ttl})
			sh1 := createTest(t, s1, "db.t", testFields)
			l1, err := s1.LockSource("src")
			if err != nil {
				t.Fatal(err)
			}
			appendOne := func(sh *Shard, at uint64) error {
				rec := buildRecord(t, testFields, []upd{{[]any{int64(at), "x"}, at, 1}})
				defer rec.Release()
				_, err := sh.Append(ctx, at, at+10, rec)
				return err
			}
			if err := appendOne(sh1, 0); err != nil {
				t.Fatal(err)
			}
			s2 := openTest(t, dir, Options{LeaseTTL: ttl})
			if _, err := s2.LockSource("src"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "lease epoch 1") {
				t.Fatalf("second writer while the lease lives: %v, want ErrLocked naming epoch 1", err)
			}
			if !s2.LockHeld("src") {
				t.Fatal("LockHeld: false while the lease lives")
			}
			// The first writer stalls: its renewals fail from now on.
			s1.lease.mu.Lock()
			s1.lease.etag = `"stale"`
			s1.lease.mu.Unlock()
			time.Sleep(ttl + 100*time.Millisecond)
			l2, err := s2.LockSource("src")
			if err != nil {
				t.Fatalf("takeover after expiry: %v", err)
			}
			defer l2.Unlock()
			sh2, err := s2.Shard(ctx, "db.t")
			if err != nil {
				t.Fatal(err)
			}
			if err := appendOne(sh2, 10); err != nil {
				t.Fatal(err)
			}
			if info, _ := sh2.Info(ctx); info.Epoch != 2 {
				t.Fatalf("epoch of the taker's commit: %d, want 2", info.Epoch)
			}
			if err := appendOne(sh1, 20); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("append by the writer that lost its lease: %v, want ErrLeaseLost", err)
			}
			if sh2.Refresh(ctx); sh2.Upper() != 20 {
				t.Fatalf("upper %d after the old writer's attempt, want 20", sh2.Upper())
			}
			l1.Unlock()
			// Released, the lease is free at once.
			if err := l2.Unlock(); err != nil {
				t.Fatal(err)
			}
			l3, err := openTest(t, dir, Options{}).LockSource("src")
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			l3.Unlock()
		})
	}
}
