package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the filesystem the store writes through. It is the small set of
// operations the commit protocol needs, so tests can inject a failed Write
// or Sync and so the store can later sit on other backends. OSFS is the
// implementation for local disks.
type FS interface {
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string) error
	// CreateTemp creates a new file in dir with a unique name beginning with
	// prefix, open for writing.
	CreateTemp(dir, prefix string) (File, error)
	// Open opens a file for reading.
	Open(name string) (File, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// Link creates newpath as a hard link to oldpath. It fails with an error
	// matching fs.ErrExist when newpath exists: this is the exclusive create
	// the commit protocol relies on.
	Link(oldpath, newpath string) error
	// Remove removes a file.
	Remove(name string) error
	// ReadDir lists a directory.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// SyncDir makes the directory's entries (creates, renames, links) durable.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Seeker
	// Sync makes the file's contents durable.
	Sync() error
	Close() error
	Name() string
	Stat() (fs.FileInfo, error)
}

// afterLister is an FS that lists only the entries of a directory whose
// names begin with a prefix and sort after a name (S3FS): a shard finds
// its newest manifest by listing from the version it knows.
type afterLister interface {
	ListAfter(dir, prefix, after string) ([]fs.DirEntry, error)
}

// OSFS is the FS of the local operating system.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// CreateTemp implements FS: the file's writes past its first MiB go
// around the page cache (direct.go) where the filesystem allows it.
func (OSFS) CreateTemp(dir, prefix string) (File, error) {
	f, err := createTemp(dir, prefix)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Open implements FS.
func (OSFS) Open(name string) (File, error) { return os.Open(name) }

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Link implements FS.
func (OSFS) Link(oldpath, newpath string) error { return os.Link(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// tmpPrefix starts the name of every temporary file the store writes. Files
// with this prefix are never referenced by a manifest.
const tmpPrefix = "tmp-"

// writeTemp writes data to a new temporary file in dir, syncs and closes
// it, and returns its path. On any error the temporary file is removed.
func writeTemp(fsys FS, dir, prefix string, data []byte) (string, error) {
	return writeTempWith(fsys, dir, prefix, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeTempWith is writeTemp with the contents written by fill.
func writeTempWith(fsys FS, dir, prefix string, fill func(io.Writer) error) (_ string, err error) {
	return writeTempSync(fsys, dir, prefix, true, fill)
}

// writeTempSync is writeTempWith, syncing the file only when sync is set.
func writeTempSync(fsys FS, dir, prefix string, sync bool, fill func(io.Writer) error) (_ string, err error) {
	f, err := fsys.CreateTemp(dir, tmpPrefix+prefix)
	if err != nil {
		return "", fmt.Errorf("create temp file: %w", err)
	}
	path := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			fsys.Remove(path)
		}
	}()
	if err := fill(f); err != nil {
		return "", fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return "", fmt.Errorf("sync %s: %w", filepath.Base(path), err)
		}
	} else if fl, ok := f.(interface{ Flush() error }); ok {
		// Without a sync, what a direct file still buffers must be written.
		if err := fl.Flush(); err != nil {
			return "", fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", filepath.Base(path), err)
	}
	return path, nil
}

// readFile reads a whole file (with one request where the FS can: S3FS).
func readFile(fsys FS, name string) ([]byte, error) {
	if rf, ok := fsys.(interface{ ReadFile(string) ([]byte, error) }); ok {
		return rf.ReadFile(name)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	buf := make([]byte, 0, size+1)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}
