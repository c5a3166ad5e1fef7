package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrLocked is returned by LockSource when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

// Lock is an exclusive, advisory lock on one source of a store: one
// ingest per source. The kernel drops it when the process dies, so a
// killed ingest never leaves a stale lock.
//
// On an S3 store, where there is no flock, it is a lease object renewed
// with conditional writes (lease.go): held until released or, if the
// holder dies or stalls, until it expires.
type Lock struct {
	f       *os.File
	release func() error
}

// LockSource takes the writer lock of source in the store, failing at once
// with ErrLocked (naming the holder's pid) when another process has it.
func (s *Store) LockSource(source string) (*Lock, error) {
	if f, ok := s.fs.(*S3FS); ok {
		name, err := escapeName(source)
		if err != nil {
			return nil, fmt.Errorf("lock source %s: %w", source, err)
		}
		return s.acquireLease(f, source, name)
	}
	dir := filepath.Join(s.dir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock source %s: %w", source, err)
	}
	name, err := escapeName(source)
	if err != nil {
		return nil, fmt.Errorf("lock source %s: %w", source, err)
	}
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock source %s: %w", source, err)
	}
	// A reader checking LockHeld holds a shared lock for an instant: retry
	// briefly before concluding another writer has it.
	var err2 error
	for i := 0; i < 20; i++ {
		if err2 = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err2, syscall.EWOULDBLOCK) {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := err2; err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock source %s of store %s: %w (%s)", source, s.loc, ErrLocked, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock source %s: %w", source, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+" since "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0)
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l != nil && l.release != nil {
		r := l.release
		l.release = nil
		return r()
	}
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// WriteSourceInfo records info about a source's upstream (atomically:
// temp file, sync, rename).
func (s *Store) WriteSourceInfo(info SourceInfo) error {
	name, err := escapeName(info.Source)
	if err != nil {
		return fmt.Errorf("write source info %s: %w", info.Source, err)
	}
	dir := filepath.Join(s.dir, "sources")
	if err := s.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("write source info %s: %w", info.Source, err)
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("write source info %s: %w", info.Source, err)
	}
	tmp, err := writeTemp(s.fs, dir, name+".json", append(b, '\n'))
	if err != nil {
		return fmt.Errorf("write source info %s: %w", info.Source, err)
	}
	if err := s.fs.Rename(tmp, filepath.Join(dir, name+".json")); err != nil {
		s.fs.Remove(tmp)
		return fmt.Errorf("write source info %s: %w", info.Source, err)
	}
	return s.fs.SyncDir(dir)
}

// ReadSourceInfo returns what an ingest recorded about source (ErrNotFound
// when nothing was).
func (s *Store) ReadSourceInfo(source string) (SourceInfo, error) {
	name, err := escapeName(source)
	if err != nil {
		return SourceInfo{}, fmt.Errorf("read source info %s: %w", source, err)
	}
	b, err := readFile(s.fs, filepath.Join(s.dir, "sources", name+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return SourceInfo{}, fmt.Errorf("read source info %s: %w", source, ErrNotFound)
	}
	if err != nil {
		return SourceInfo{}, fmt.Errorf("read source info %s: %w", source, err)
	}
	var info SourceInfo
	var legacy legacySourceInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return SourceInfo{}, fmt.Errorf("read source info %s: %w", source, err)
	}
	if info.Upstream == nil && json.Unmarshal(b, &legacy) == nil {
		if m := legacy.upstream(); len(m) > 0 {
			info.Upstream = m
		}
	}
	return info, nil
}

// LockHeld reports whether some process holds the writer lock of source
// (an ingest is running), without taking it for long.
func (s *Store) LockHeld(source string) bool {
	name, err := escapeName(source)
	if err != nil {
		return false
	}
	if f, ok := s.fs.(*S3FS); ok {
		return s.leaseHeld(f, name)
	}
	f, err := os.Open(filepath.Join(s.dir, "locks", name+".lock"))
	if err != nil {
		return false // never locked
	}
	defer f.Close()
	// A shared lock conflicts only with a writer's exclusive one, and is
	// dropped at once; it never rewrites the holder's pid line.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// SourceInfo is what an ingest records about its upstream in the store, so
// that wait-recent and status can find it. It never holds a password.
type SourceInfo struct {
	Source string `json:"source"`
	// Kind is the source kind (pg, mysql, mariadb, kafka).
	Kind string `json:"kind"`
	// Upstream names the upstream in the source kind's own terms, without
	// secrets: for example dsn (masked), publication and slot for pg,
	// dsn for mysql, brokers and topic for kafka.
	Upstream map[string]string `json:"upstream,omitempty"`
	// Collections are the source's collections (every one an ingest of it
	// has written, not only the last run's).
	Collections []string `json:"collections,omitempty"`
	PID         int      `json:"pid"`
	Started     string   `json:"started"`
	// Socket is the daemon's local endpoint, when one listens.
	Socket string `json:"socket,omitempty"`
	// HTTP is the daemon's loopback HTTP endpoint (host:port), when asked
	// for one.
	HTTP string `json:"http,omitempty"`
}

// legacySourceInfo holds the upstream fields that stores written before
// SourceInfo.Upstream kept at the top level.
type legacySourceInfo struct {
	DSN         string   `json:"dsn"`
	Publication string   `json:"publication"`
	Slot        string   `json:"slot"`
	Brokers     []string `json:"brokers"`
	Topics      []string `json:"topics"`
}

func (l legacySourceInfo) upstream() map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{"dsn": l.DSN, "publication": l.Publication, "slot": l.Slot,
		"brokers": strings.Join(l.Brokers, ","), "topic": strings.Join(l.Topics, ",")} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// RecordedSources lists the sources an ingest recorded info for (in
// DIR/sources), whether or not they have bindings yet.
func (s *Store) RecordedSources() ([]string, error) {
	entries, err := s.fs.ReadDir(filepath.Join(s.dir, "sources"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list recorded sources: %w", err)
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		if src, err := unescapeName(name); err == nil {
			out = append(out, src)
		}
	}
	return out, nil
}
