package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// DefaultLeaseTTL is how long an S3 store's writer lease lives without a
// renewal; the holder renews it every third of that.
const DefaultLeaseTTL = 15 * time.Second

// ErrLeaseLost is returned by a commit of a writer whose lease expired
// (it was paused, or could not reach the bucket) or was taken over: it
// must stop writing.
var ErrLeaseLost = errors.New("the writer lease of this source was lost")

// leaseDoc is the lease object locks/<escaped source>.lease of an S3
// store.
type leaseDoc struct {
	Source string `json:"source"`
	// Epoch counts the holders: each takeover adds one. It is recorded in
	// every manifest the holder commits (Manifest.Epoch).
	Epoch uint64 `json:"epoch"`
	// Holder names the holding process: host, pid and start time.
	Holder string `json:"holder"`
	// Expires is when the lease lapses unless renewed (RFC 3339, UTC).
	Expires string `json:"expires"`
	TTLms   int64  `json:"ttl_ms"`
}

// lease is a held writer lease.
type lease struct {
	fs     *S3FS
	key    string
	source string
	ttl    time.Duration
	doc    leaseDoc

	mu sync.Mutex
	// etag of our last write: the next renewal is If-Match on it.
	etag string
	// valid is when our hold lapses, measured on the monotonic clock from
	// the start of the last successful write (3/4 of the TTL after it): a
	// writer paused past it commits nothing.
	valid time.Time
	lost  error
	stop  chan struct{}
	done  chan struct{}
}

// leaseTTL is the lease lifetime of the store's writers.
func (s *Store) leaseTTL() time.Duration {
	if s.opts.LeaseTTL > 0 {
		return s.opts.LeaseTTL
	}
	return DefaultLeaseTTL
}

// acquireLease takes the writer lease of source on an S3 store: it
// creates the lease object (If-None-Match: *), or takes over an expired
// one (If-Match on its ETag, epoch + 1). A live lease held by another
// writer fails with ErrLocked.
func (s *Store) acquireLease(f *S3FS, source, esc string) (*Lock, error) {
	key := s3Key(filepath.Join(s.dir, "locks", esc+".lease"))
	host, _ := os.Hostname()
	ttl := s.leaseTTL()
	l := &lease{fs: f, key: key, source: source, ttl: ttl, stop: make(chan struct{}), done: make(chan struct{})}
	l.doc = leaseDoc{Source: source, Holder: fmt.Sprintf("host %s pid %d since %s", host, os.Getpid(), time.Now().UTC().Format(time.RFC3339)), TTLms: ttl.Milliseconds()}
	for attempt := 0; ; attempt++ {
		old, etag, err := l.read()
		switch {
		case errors.Is(err, errNoLease):
			l.doc.Epoch = 1
			err = l.write("", true)
		case err != nil:
		default:
			exp, perr := time.Parse(time.RFC3339Nano, old.Expires)
			if perr == nil && time.Now().Before(exp) {
				return nil, fmt.Errorf("lock source %s of store %s: %w (lease epoch %d held by %s until %s)", source, s.loc, ErrLocked, old.Epoch, old.Holder, old.Expires)
			}
			l.doc.Epoch = old.Epoch + 1
			err = l.write(etag, false)
		}
		if errors.Is(err, errLeaseConflict) && attempt < 3 {
			continue // another writer wrote it first: look again
		}
		if errors.Is(err, errLeaseConflict) {
			return nil, fmt.Errorf("lock source %s of store %s: %w (another writer took the lease)", source, s.loc, ErrLocked)
		}
		if err != nil {
			return nil, fmt.Errorf("lock source %s: %w", source, err)
		}
		break
	}
	go l.renew()
	s.mu.Lock()
	s.lease = l
	s.mu.Unlock()
	return &Lock{release: func() error {
		s.mu.Lock()
		if s.lease == l {
			s.lease = nil
		}
		s.mu.Unlock()
		return l.release()
	}}, nil
}

var (
	errNoLease       = errors.New("no lease")
	errLeaseConflict = errors.New("lease changed")
)

// read returns the lease object and its ETag.
func (l *lease) read() (leaseDoc, string, error) {
	out, err := l.fs.client.GetObject(l.fs.ctx, &s3.GetObjectInput{Bucket: &l.fs.bucket, Key: &l.key})
	if err != nil {
		if errors.Is(s3Err("read", l.key, err), os.ErrNotExist) {
			return leaseDoc{}, "", errNoLease
		}
		return leaseDoc{}, "", fmt.Errorf("read lease: %w", s3Err("read", l.key, err))
	}
	defer out.Body.Close()
	var d leaseDoc
	if err := json.NewDecoder(out.Body).Decode(&d); err != nil {
		return leaseDoc{}, "", fmt.Errorf("read lease %s: %w", l.key, err)
	}
	return d, aws.ToString(out.ETag), nil
}

// write puts the lease with a new expiry: create-only, or If-Match on
// etag. A failed condition is errLeaseConflict.
func (l *lease) write(etag string, create bool) error {
	start := time.Now()
	d := l.doc
	d.Expires = start.Add(l.ttl).UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(d)
	in := &s3.PutObjectInput{Bucket: &l.fs.bucket, Key: &l.key, Body: strings.NewReader(string(b)), ContentLength: aws.Int64(int64(len(b)))}
	if create {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	out, err := l.fs.client.PutObject(l.fs.ctx, in)
	if st := httpStatus(err); st == http.StatusPreconditionFailed || st == http.StatusConflict || st == http.StatusNotFound {
		return errLeaseConflict
	}
	if err != nil {
		return fmt.Errorf("write lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	l.etag = aws.ToString(out.ETag)
	// A quarter of the TTL short of what others read in the object: the
	// margin for clock skew and for a commit's request in flight.
	l.valid = start.Add(l.ttl - l.ttl/4)
	l.mu.Unlock()
	return nil
}

// renew renews the lease every third of its TTL until released; a failed
// condition means another writer took it over.
func (l *lease) renew() {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		etag, lost := l.etag, l.lost
		l.mu.Unlock()
		if lost != nil {
			return
		}
		if err := l.write(etag, false); errors.Is(err, errLeaseConflict) {
			l.mu.Lock()
			l.lost = fmt.Errorf("%w: another writer took it over (epoch %d was ours)", ErrLeaseLost, l.doc.Epoch)
			l.mu.Unlock()
			return
		}
		// Another error (the bucket unreachable): try again next tick;
		// the hold lapses on its own if this goes on.
	}
}

// check fails when the hold has lapsed or was taken over.
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if !time.Now().Before(l.valid) {
		return fmt.Errorf("%w: not renewed within %s (epoch %d); another writer may hold it now", ErrLeaseLost, l.ttl-l.ttl/4, l.doc.Epoch)
	}
	return nil
}

// release stops renewing and deletes the lease object if it is still
// ours, so the next writer need not wait for it to expire.
func (l *lease) release() error {
	close(l.stop)
	<-l.done
	if l.check() != nil {
		return nil
	}
	// Expire it now (If-Match: only if still ours); S3 has no conditional
	// delete everywhere, so the object stays, expired.
	l.mu.Lock()
	etag := l.etag
	l.mu.Unlock()
	d := l.doc
	d.Expires = time.Unix(0, 0).UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(d)
	_, err := l.fs.client.PutObject(context.WithoutCancel(l.fs.ctx), &s3.PutObjectInput{Bucket: &l.fs.bucket, Key: &l.key,
		Body: strings.NewReader(string(b)), ContentLength: aws.Int64(int64(len(b))), IfMatch: aws.String(etag)})
	if err != nil && httpStatus(err) != http.StatusPreconditionFailed {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// leaseHeld reports whether a live lease of source exists on an S3 store.
func (s *Store) leaseHeld(f *S3FS, esc string) bool {
	l := &lease{fs: f, key: s3Key(filepath.Join(s.dir, "locks", esc+".lease"))}
	d, _, err := l.read()
	if err != nil {
		return false
	}
	exp, err := time.Parse(time.RFC3339Nano, d.Expires)
	return err == nil && time.Now().Before(exp)
}

// fence checks, before a commit, that a writer holding a lease still
// holds it and that no later holder has committed to the shard (cur's
// epoch); it returns the epoch to record in the manifest.
func (s *Store) fence(curEpoch uint64) (uint64, error) {
	s.mu.Lock()
	l := s.lease
	s.mu.Unlock()
	if l == nil {
		return curEpoch, nil
	}
	if err := l.check(); err != nil {
		return 0, err
	}
	if curEpoch > l.doc.Epoch {
		return 0, fmt.Errorf("%w: a writer of epoch %d has committed since (ours is %d)", ErrLeaseLost, curEpoch, l.doc.Epoch)
	}
	return l.doc.Epoch, nil
}
