package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3FS is the FS of a store on an S3 bucket (or any S3-compatible server
// that honours conditional writes). A path is an object key; directories
// are key prefixes ending in "/", so MkdirAll and SyncDir do nothing (a
// successful PUT is durable).
//
// Temporary files never reach the bucket: CreateTemp buffers the file in
// an unlinked local file, Rename uploads it under its final (unique) name,
// and Link uploads it with If-None-Match: * — the create-only condition
// that is the commit: a 412 is fs.ErrExist, the lost race. Open does a
// HEAD and ReadAt a ranged GET, so reads fetch only the row groups they
// need.
type S3FS struct {
	client *s3.Client
	bucket string
	// ctx bounds every request (FS calls carry no context).
	ctx context.Context

	mu    sync.Mutex
	temps map[string]*s3Temp // buffered temporary files by path
}

var _ FS = (*S3FS)(nil)

// NewS3FS returns the FS of bucket through client.
func NewS3FS(client *s3.Client, bucket string) *S3FS {
	return &S3FS{client: client, bucket: bucket, ctx: context.Background(), temps: map[string]*s3Temp{}}
}

// Environment variables of S3 stores besides the AWS SDK's own
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_PROFILE,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, the shared
// config and credentials files).
const (
	// EnvS3PathStyle forces path-style ("true") or virtual-hosted ("false")
	// requests; unset, path style is used exactly when an endpoint is set.
	EnvS3PathStyle = "RTRCTL_S3_PATH_STYLE"
)

// NewS3Client makes an S3 client from the usual AWS environment and
// config files. The region defaults to us-east-1 when none is set (most
// S3-compatible servers ignore it).
func NewS3Client(ctx context.Context) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRetryer(s3Retryer))
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	pathStyle := cfg.BaseEndpoint != nil || os.Getenv("AWS_ENDPOINT_URL_S3") != ""
	if v := os.Getenv(EnvS3PathStyle); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("s3 config: %s=%q is not true or false", EnvS3PathStyle, v)
		}
		pathStyle = b
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) { s3ClientOptions(o, pathStyle) }), nil
}

// s3Retryer retries what the SDK does (503 SlowDown, 500, throttling,
// broken connections) and two kinds of 409:
//   - ConditionalRequestConflict, a concurrent conditional write to the
//     same key: retrying is safe, since a 412 that follows is checked
//     against our own bytes (S3FS.Link);
//   - ExistingObjectIsDirectory, which versitygw also returns when a
//     concurrent delete removed the (then empty) directory of the key
//     between its mkdir and its link: nothing was written, and a store
//     key is never a directory, so a retry succeeds or fails the same way.
func s3Retryer() aws.Retryer {
	return retry.AddWithErrorCodes(retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 6 }),
		"ConditionalRequestConflict", "ExistingObjectIsDirectory")
}

// s3ClientOptions are the client settings of every S3 store.
func s3ClientOptions(o *s3.Options, pathStyle bool) {
	o.UsePathStyle = pathStyle
	// Checksums only where the API requires them: S3-compatible servers
	// differ in what trailing checksums they accept. Batch files carry
	// their own CRC-32C in the manifest.
	o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
}

// ParseS3URL splits s3://bucket/prefix into the bucket and the key
// prefix (without a trailing slash; "" for the bucket's root).
func ParseS3URL(u string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return "", "", fmt.Errorf("parse store url %q: not an s3:// url", u)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("parse store url %q: no bucket; write s3://BUCKET/PREFIX", u)
	}
	if prefix != "" && path.Clean(prefix) != prefix || strings.Contains(prefix, "..") {
		return "", "", fmt.Errorf("parse store url %q: the prefix must be a clean path (no '.', '..' or '//'); write s3://BUCKET/PREFIX", u)
	}
	return bucket, prefix, nil
}

// key turns a store path into an object key.
func s3Key(name string) string {
	name = path.Clean(name)
	if name == "." || name == "/" {
		return ""
	}
	return strings.TrimPrefix(name, "/")
}

// dirPrefix is the key prefix of the objects in dir.
func s3DirPrefix(dir string) string {
	if k := s3Key(dir); k != "" {
		return k + "/"
	}
	return ""
}

// s3Err maps an S3 error to the FS's: a missing object to fs.ErrNotExist,
// a failed create-only condition to fs.ErrExist.
func s3Err(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) || httpStatus(err) == http.StatusNotFound {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if httpStatus(err) == http.StatusPreconditionFailed {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrExist}
	}
	return fmt.Errorf("s3 %s %s: %w", op, name, err)
}

func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// MkdirAll implements FS: prefixes need no creating.
func (*S3FS) MkdirAll(string) error { return nil }

// SyncDir implements FS: a successful PUT is durable.
func (*S3FS) SyncDir(string) error { return nil }

// CreateTemp implements FS: the file is buffered locally (an unlinked
// temporary file of the OS) until Rename or Link uploads it.
func (f *S3FS) CreateTemp(dir, prefix string) (File, error) {
	lf, err := os.CreateTemp("", "rtrctl-s3-")
	if err != nil {
		return nil, err
	}
	os.Remove(lf.Name()) // anonymous: a crash leaves nothing behind
	t := &s3Temp{File: lf, name: path.Join(dir, prefix+randomHex(8))}
	f.mu.Lock()
	f.temps[t.name] = t
	f.mu.Unlock()
	return t, nil
}

// s3Temp is a buffered temporary file.
type s3Temp struct {
	*os.File
	name string
}

func (t *s3Temp) Name() string { return t.name }

// Close keeps the buffer until the temporary name is renamed, linked or
// removed.
func (t *s3Temp) Close() error { return nil }

// Sync does nothing: the upload makes the bytes durable.
func (t *s3Temp) Sync() error { return nil }

func (f *S3FS) temp(name string, drop bool) *s3Temp {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.temps[path.Clean(name)]
	if drop {
		delete(f.temps, path.Clean(name))
	}
	return t
}

// put uploads t as newpath, create-only when exclusive.
func (f *S3FS) put(t *s3Temp, newpath string, exclusive bool) error {
	st, err := t.File.Stat()
	if err != nil {
		return err
	}
	in := &s3.PutObjectInput{Bucket: &f.bucket, Key: aws.String(s3Key(newpath)),
		Body: io.NewSectionReader(t.File, 0, st.Size()), ContentLength: aws.Int64(st.Size())}
	if exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	_, err = f.client.PutObject(f.ctx, in)
	if exclusive && httpStatus(err) == http.StatusPreconditionFailed {
		// The name exists: another writer's, or ours when the SDK retried
		// a PUT whose first attempt succeeded unseen. Same bytes: ours.
		if same, _ := f.sameAs(t.File, st.Size(), newpath); same {
			return nil
		}
	}
	return s3Err("put", newpath, err)
}

// sameAs reports whether the object name holds exactly the size bytes of
// lf.
func (f *S3FS) sameAs(lf *os.File, size int64, name string) (bool, error) {
	got, err := f.ReadFile(name)
	if err != nil || int64(len(got)) != size {
		return false, err
	}
	want := make([]byte, size)
	if _, err := lf.ReadAt(want, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return bytes.Equal(got, want), nil
}

// Rename implements FS for temporary files: it uploads oldpath under
// newpath (names the store renames to are unique, or replaced whole).
func (f *S3FS) Rename(oldpath, newpath string) error {
	t := f.temp(oldpath, false)
	if t == nil {
		return &fs.PathError{Op: "rename", Path: oldpath, Err: errors.New("only temporary files can be renamed on s3")}
	}
	if err := f.put(t, newpath, false); err != nil {
		return err
	}
	f.temp(oldpath, true)
	return t.File.Close()
}

// Link implements FS for temporary files: it uploads oldpath as newpath
// with If-None-Match: *, failing with fs.ErrExist when newpath exists.
func (f *S3FS) Link(oldpath, newpath string) error {
	t := f.temp(oldpath, false)
	if t == nil {
		return &fs.PathError{Op: "link", Path: oldpath, Err: errors.New("only temporary files can be linked on s3")}
	}
	return f.put(t, newpath, true)
}

// Remove implements FS. Removing a missing object succeeds, as S3 does.
func (f *S3FS) Remove(name string) error {
	if t := f.temp(name, true); t != nil {
		return t.File.Close()
	}
	_, err := f.client.DeleteObject(f.ctx, &s3.DeleteObjectInput{Bucket: &f.bucket, Key: aws.String(s3Key(name))})
	return s3Err("remove", name, err)
}

// ReadDir implements FS: the objects and common prefixes right under dir,
// sorted by name. A prefix with nothing under it is an empty directory.
func (f *S3FS) ReadDir(dir string) ([]fs.DirEntry, error) {
	return f.list(dir, "", "")
}

// ListAfter lists the entries of dir whose names begin with prefix and
// sort after after (S3's StartAfter): finding the newest manifest from the
// last known version lists only what is newer.
func (f *S3FS) ListAfter(dir, prefix, after string) ([]fs.DirEntry, error) {
	return f.list(dir, prefix, after)
}

func (f *S3FS) list(dir, prefix, after string) ([]fs.DirEntry, error) {
	p := s3DirPrefix(dir)
	in := &s3.ListObjectsV2Input{Bucket: &f.bucket, Prefix: aws.String(p + prefix), Delimiter: aws.String("/")}
	if after != "" {
		in.StartAfter = aws.String(p + after)
	}
	var out []fs.DirEntry
	pg := s3.NewListObjectsV2Paginator(f.client, in)
	for pg.HasMorePages() {
		page, err := pg.NextPage(f.ctx)
		if err != nil {
			return nil, s3Err("list", dir, err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), p)
			if name == "" || strings.Contains(name, "/") {
				continue
			}
			out = append(out, s3Entry{name: name, size: aws.ToInt64(o.Size), mod: aws.ToTime(o.LastModified)})
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), p), "/")
			if name != "" {
				out = append(out, s3Entry{name: name, dir: true})
			}
		}
	}
	sortEntries(out)
	return out, nil
}

// ReadFile reads a whole object with one GET.
func (f *S3FS) ReadFile(name string) ([]byte, error) {
	if t := f.temp(name, false); t != nil {
		return io.ReadAll(io.NewSectionReader(t.File, 0, 1<<62))
	}
	out, err := f.client.GetObject(f.ctx, &s3.GetObjectInput{Bucket: &f.bucket, Key: aws.String(s3Key(name))})
	if err != nil {
		return nil, s3Err("read", name, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("s3 read %s: %w", name, err)
	}
	return b, nil
}

// Open implements FS: a HEAD (so a missing object fails here with
// fs.ErrNotExist), then ranged GETs as the file is read.
func (f *S3FS) Open(name string) (File, error) {
	if t := f.temp(name, false); t != nil {
		return &s3Object{fs: f, name: name, local: t.File}, nil
	}
	h, err := f.client.HeadObject(f.ctx, &s3.HeadObjectInput{Bucket: &f.bucket, Key: aws.String(s3Key(name))})
	if err != nil {
		return nil, s3Err("open", name, err)
	}
	return &s3Object{fs: f, name: name, size: aws.ToInt64(h.ContentLength), mod: aws.ToTime(h.LastModified), etag: aws.ToString(h.ETag)}, nil
}

// s3Object is an object open for reading.
type s3Object struct {
	fs    *S3FS
	name  string
	size  int64
	mod   time.Time
	etag  string
	off   int64
	local *os.File // a temporary file not uploaded yet
}

func (o *s3Object) ReadAt(p []byte, off int64) (int, error) {
	if o.local != nil {
		return o.local.ReadAt(p, off)
	}
	if off >= o.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(p)), o.size) - 1
	in := &s3.GetObjectInput{Bucket: &o.fs.bucket, Key: aws.String(s3Key(o.name)), Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))}
	if o.etag != "" {
		in.IfMatch = aws.String(o.etag) // the object read is the one opened
	}
	out, err := o.fs.client.GetObject(o.fs.ctx, in)
	if err != nil {
		if httpStatus(err) == http.StatusPreconditionFailed {
			return 0, &fs.PathError{Op: "read", Path: o.name, Err: fs.ErrNotExist}
		}
		return 0, s3Err("read", o.name, err)
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, p[:end-off+1])
	if err != nil {
		return n, fmt.Errorf("s3 read %s: %w", o.name, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (o *s3Object) Read(p []byte) (int, error) {
	n, err := o.ReadAt(p, o.off)
	o.off += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

func (o *s3Object) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += o.off
	case io.SeekEnd:
		off += o.size
	}
	if off < 0 {
		return 0, fmt.Errorf("seek %s: negative offset", o.name)
	}
	o.off = off
	return off, nil
}

func (o *s3Object) Write([]byte) (int, error) {
	return 0, &fs.PathError{Op: "write", Path: o.name, Err: fs.ErrPermission}
}
func (o *s3Object) Sync() error  { return nil }
func (o *s3Object) Close() error { return nil }
func (o *s3Object) Name() string { return o.name }
func (o *s3Object) Stat() (fs.FileInfo, error) {
	if o.local != nil {
		return o.local.Stat()
	}
	return s3Entry{name: path.Base(o.name), size: o.size, mod: o.mod}, nil
}

// s3Entry is a listed object or common prefix; it is its own FileInfo.
type s3Entry struct {
	name string
	size int64
	mod  time.Time
	dir  bool
}

func (e s3Entry) Name() string               { return e.name }
func (e s3Entry) IsDir() bool                { return e.dir }
func (e s3Entry) Type() fs.FileMode          { return e.Mode().Type() }
func (e s3Entry) Info() (fs.FileInfo, error) { return e, nil }
func (e s3Entry) Size() int64                { return e.size }
func (e s3Entry) ModTime() time.Time         { return e.mod }
func (e s3Entry) Sys() any                   { return nil }
func (e s3Entry) Mode() fs.FileMode {
	if e.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

func sortEntries(es []fs.DirEntry) {
	// Objects and prefixes come as two sorted lists; merge them by name.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Name() < es[j-1].Name(); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// errNoConditionalWrites is the self-test's refusal.
var errNoConditionalWrites = errors.New("the bucket ignores conditional writes (If-None-Match: *)")

// SelfTest checks that the bucket honours create-only writes, which the
// commit protocol needs: it writes a probe object under dir twice with
// If-None-Match: *; the second write must fail with 412.
//
// A bucket is refused only when probes on selfTestProbes fresh keys all
// see the second write succeed. versitygw v1.8.0 can acknowledge a PUT
// into a directory that a concurrent delete of its last object removes,
// and lose it (TestS3ConcurrentOpen saw this about once in 2,000 rounds
// of six processes opening one new prefix): the second write then finds
// no object and rightly succeeds. A server that ignores the condition
// fails every probe.
func (f *S3FS) SelfTest(dir string) error {
	var err error
	for range selfTestProbes {
		if err = f.probe(dir); !errors.Is(err, errSecondWriteWon) {
			return err
		}
	}
	return err
}

const selfTestProbes = 3

// errSecondWriteWon is a probe whose second create-only write succeeded.
var errSecondWriteWon = errors.New("a second create-only write of a probe object succeeded")

// probe writes one probe object twice, create-only, and removes it.
func (f *S3FS) probe(dir string) error {
	key := s3DirPrefix(dir) + tmpPrefix + "probe-" + randomHex(8)
	defer f.client.DeleteObject(f.ctx, &s3.DeleteObjectInput{Bucket: &f.bucket, Key: &key})
	for i := 0; i < 2; i++ {
		_, err := f.client.PutObject(f.ctx, &s3.PutObjectInput{Bucket: &f.bucket, Key: &key,
			Body: bytes.NewReader([]byte(strconv.Itoa(i))), IfNoneMatch: aws.String("*")})
		switch {
		case i == 0 && err != nil:
			var ae smithy.APIError
			if errors.As(err, &ae) && (ae.ErrorCode() == "NotImplemented" || httpStatus(err) == http.StatusNotImplemented) {
				return fmt.Errorf("s3 self-test of bucket %s: %w: it does not implement them", f.bucket, errNoConditionalWrites)
			}
			return fmt.Errorf("s3 self-test of bucket %s: write a probe object: %w", f.bucket, err)
		case i == 1 && err == nil:
			return fmt.Errorf("s3 self-test of bucket %s: %w: %w (%s, and so on each of %d fresh keys) where it must fail with 412", f.bucket, errNoConditionalWrites, errSecondWriteWon, key, selfTestProbes)
		case i == 1 && httpStatus(err) != http.StatusPreconditionFailed:
			return fmt.Errorf("s3 self-test of bucket %s: a second create-only write must fail with 412: %w", f.bucket, err)
		}
	}
	return nil
}
