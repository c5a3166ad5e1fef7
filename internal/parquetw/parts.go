package parquetw

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/pkg/store"
)

// PartName is the name of the i-th file of an export (from 0).
func PartName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// tmpPrefix starts the temporary name of a part being written.
const tmpPrefix = ".tmp-rtrctl-"

// Parts writes a stream of records as Parquet files part-00000.parquet,
// part-00001.parquet, ... in a directory of an FS (a local directory or an
// S3 prefix, store.OSFS or store.S3FS), cutting a file when it holds
// MaxRows rows or reaches MaxBytes bytes (whichever first; 0 is no limit). Each file is written under a temporary name and renamed
// into place when complete, so a final name only ever holds a whole file.
type Parts struct {
	FS       store.FS
	Dir      string
	Schema   *arrow.Schema
	MaxRows  int64
	MaxBytes int64
	Opts     Options

	cur    *Writer
	f      store.File
	done   []string // final paths, in order
	rows   int64
	closed bool
}

// Write appends rec, starting a new file first when the current one is
// full: a file holds at most MaxRows rows (rec is split where needed) and
// is cut at the first record boundary past MaxBytes.
func (p *Parts) Write(rec arrow.Record) error {
	for off := int64(0); off < rec.NumRows() || (off == 0 && rec.NumRows() == 0); {
		if p.cur != nil && p.full() {
			if err := p.finish(); err != nil {
				return err
			}
		}
		if p.cur == nil {
			if err := p.start(); err != nil {
				return err
			}
		}
		n := rec.NumRows() - off
		if p.MaxRows > 0 {
			n = min(n, p.MaxRows-p.cur.Rows())
		}
		part := rec.NewSlice(off, off+n)
		err := p.cur.Write(part)
		part.Release()
		if err != nil {
			return fmt.Errorf("export %s: %w", PartName(len(p.done)), err)
		}
		p.rows += n
		if off += n; n == 0 {
			break
		}
	}
	return nil
}

func (p *Parts) full() bool {
	return p.MaxRows > 0 && p.cur.Rows() >= p.MaxRows || p.MaxBytes > 0 && p.cur.Size() >= p.MaxBytes
}

func (p *Parts) start() error {
	f, err := p.FS.CreateTemp(p.Dir, tmpPrefix)
	if err != nil {
		return fmt.Errorf("export: create %s: %w", PartName(len(p.done)), err)
	}
	w, err := NewWriter(f, p.Schema, p.Opts)
	if err != nil {
		f.Close()
		p.FS.Remove(f.Name())
		return err
	}
	p.f, p.cur = f, w
	return nil
}

// finish completes the current file and renames it into place.
func (p *Parts) finish() error {
	name := path.Join(p.Dir, PartName(len(p.done)))
	f, w := p.f, p.cur
	p.f, p.cur = nil, nil
	err := w.Close()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if _, local := p.FS.(store.OSFS); local && err == nil {
		// A temporary file is private (0600); an export is for others.
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = p.FS.Rename(f.Name(), name)
	}
	if err != nil {
		p.FS.Remove(f.Name())
		return fmt.Errorf("export: write %s: %w", name, err)
	}
	p.done = append(p.done, name)
	return nil
}

// Close completes the last file (an export of no rows writes one file with
// the schema and no rows) and makes the directory's entries durable. It
// returns the files written.
func (p *Parts) Close() ([]string, error) {
	if p.closed {
		return p.done, nil
	}
	p.closed = true
	if p.cur == nil && len(p.done) == 0 {
		if err := p.start(); err != nil {
			return nil, err
		}
	}
	if p.cur != nil {
		if err := p.finish(); err != nil {
			return nil, err
		}
	}
	if err := p.FS.SyncDir(p.Dir); err != nil {
		return nil, fmt.Errorf("export: sync %s: %w", p.Dir, err)
	}
	return p.done, nil
}

// Rows is how many rows were written.
func (p *Parts) Rows() int64 { return p.rows }

// Abort removes the file being written and every file completed: an
// export that fails leaves nothing behind. It returns the first error.
func (p *Parts) Abort() error {
	var errs []error
	if p.cur != nil {
		p.cur.Close()
		p.f.Close()
		errs = append(errs, p.FS.Remove(p.f.Name()))
		p.f, p.cur = nil, nil
	}
	for _, n := range p.done {
		errs = append(errs, p.FS.Remove(n))
	}
	p.done = nil
	p.closed = true
	return errors.Join(errs...)
}

// CheckTarget makes dir (a directory, or an S3 prefix) and checks that it
// can be written and holds no export yet: it writes and removes a probe
// file, and fails naming the first part file or leftover temporary file it
// finds.
func CheckTarget(fsys store.FS, dir string) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("export: create %s: %w", dir, err)
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("export: list %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".parquet") || strings.HasPrefix(e.Name(), tmpPrefix) {
			return fmt.Errorf("export: %s already holds %s: %w", dir, e.Name(), fs.ErrExist)
		}
	}
	f, err := fsys.CreateTemp(dir, tmpPrefix+"probe-")
	if err != nil {
		return fmt.Errorf("export: cannot write to %s: %w", dir, err)
	}
	f.Close()
	probe := path.Join(dir, tmpPrefix+"probe")
	if err := fsys.Rename(f.Name(), probe); err != nil {
		fsys.Remove(f.Name())
		return fmt.Errorf("export: cannot write to %s: %w", dir, err)
	}
	if err := fsys.Remove(probe); err != nil {
		return fmt.Errorf("export: cannot remove probe %s: %w", probe, err)
	}
	return nil
}
