package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// pendingDirName is the store's directory of pending copies, one
// directory per source under it (docs/format-store.md, Pending copies).
const pendingDirName = "pending"

// A pending copy is a copy of a collection that its source could not take
// again identically: a re-snapshot of a table with a key state is not
// rewound to its position, so a second copy after a crash would hold a
// later upstream than the bindings made before it. The source writes the
// copy here, durable, before any binding past its position can be, reads
// it back instead of copying again when a restart meets the same
// position, and removes it once its stream starts past it. Readers never
// look here.

// pendingDir returns the pending directory of source.
func (s *Store) pendingDir(source string) (string, error) {
	esc, err := escapeName(source)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, pendingDirName, esc), nil
}

// PutPending makes the copy recs (all of schema, whose metadata describes
// the copy) durable as source's pending copy name (a file name: letters,
// digits, '-', '_' and '.'), replacing one of that name.
func (s *Store) PutPending(source, name string, schema *arrow.Schema, recs []arrow.Record) error {
	dir, err := s.pendingDir(source)
	if err != nil {
		return fmt.Errorf("put pending copy %s of %s: %w", name, source, err)
	}
	if err := checkPendingName(name); err != nil {
		return fmt.Errorf("put pending copy of %s: %w", source, err)
	}
	if err := s.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("put pending copy %s of %s: %w", name, source, err)
	}
	f, err := s.fs.CreateTemp(dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("put pending copy %s of %s: %w", name, source, err)
	}
	tmp := f.Name()
	err = func() error {
		w := ipc.NewWriter(f, ipc.WithSchema(schema))
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := s.fs.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
		return s.fs.SyncDir(dir)
	}()
	if err != nil {
		f.Close()
		s.fs.Remove(tmp)
		return fmt.Errorf("put pending copy %s of %s: %w", name, source, err)
	}
	return nil
}

// Pending reads source's pending copy name: its schema and records (the
// caller releases them); ok is false when there is none.
func (s *Store) Pending(source, name string) (schema *arrow.Schema, recs []arrow.Record, ok bool, err error) {
	dir, err := s.pendingDir(source)
	if err == nil {
		err = checkPendingName(name)
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read pending copy %s of %s: %w", name, source, err)
	}
	f, err := s.fs.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read pending copy %s of %s: %w", name, source, err)
	}
	defer f.Close()
	r, err := ipc.NewReader(f, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, nil, false, fmt.Errorf("read pending copy %s of %s: %w", name, source, err)
	}
	defer r.Release()
	for r.Next() {
		rec := r.Record()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		for _, rec := range recs {
			rec.Release()
		}
		return nil, nil, false, fmt.Errorf("read pending copy %s of %s: %w", name, source, err)
	}
	return r.Schema(), recs, true, nil
}

// SweepPending removes source's pending copies that keep rejects (given
// their name and schema metadata; one that cannot be read is removed),
// and the temporary files of puts a crash left unfinished. Only the
// holder of the source's writer lock may call it.
func (s *Store) SweepPending(source string, keep func(name string, meta arrow.Metadata) bool) error {
	dir, err := s.pendingDir(source)
	if err != nil {
		return fmt.Errorf("sweep pending copies of %s: %w", source, err)
	}
	es, err := s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep pending copies of %s: %w", source, err)
	}
	for _, e := range es {
		path := filepath.Join(dir, e.Name())
		if checkPendingName(e.Name()) == nil {
			if meta, err := s.pendingMeta(path); err == nil && keep(e.Name(), meta) {
				continue
			}
		}
		if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sweep pending copies of %s: %w", source, err)
		}
	}
	return nil
}

// pendingMeta reads the schema metadata of the pending copy at path.
func (s *Store) pendingMeta(path string) (arrow.Metadata, error) {
	f, err := s.fs.Open(path)
	if err != nil {
		return arrow.Metadata{}, err
	}
	defer f.Close()
	r, err := ipc.NewReader(f)
	if err != nil {
		return arrow.Metadata{}, err
	}
	defer r.Release()
	return r.Schema().Metadata(), nil
}

func checkPendingName(name string) error {
	if name == "" || name[0] == '.' {
		return fmt.Errorf("bad pending copy name %q", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("bad pending copy name %q", name)
		}
	}
	return nil
}
