package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
)

// A resumable snapshot (an ingest's initial snapshot) stages the rows it
// copied in DIR/staged/<escaped source>/snapshot/, beside a record of
// the chunks it finished (SnapshotRecordName), so that a restart after a
// crash copies only the others (docs/format-store.md, Staged files).
// SweepStaged leaves that directory alone; its owner removes what the
// record does not name (SweepSnapshot) and the whole of it once the
// snapshot is committed (RemoveSnapshot).
const (
	snapshotDirName = "snapshot"
	// SnapshotRecordName is the file name of the record in the directory.
	SnapshotRecordName = "snapshot.json"
	// SnapshotProgressName is the file name of the running snapshot's
	// latest progress report (for rtrctl status and wait-recent).
	SnapshotProgressName = "progress.json"
	// snapshotGroupRows bounds the row groups of a snapshot's staged
	// files: the commit holds one group of each run at a time.
	snapshotGroupRows = 8 << 10
)

// snapshotDir returns the resumable snapshot directory of source.
func (s *Store) snapshotDir(source string) (string, error) {
	dir, err := s.stagedDir(source)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, snapshotDirName), nil
}

// NewSnapshotStage returns a stage of a resumable snapshot of source
// holding the runs given (read back from the record; none for a new
// stage), for updates in schema (user columns, _time, _diff). Unlike
// NewStage's, its files are synced before Write returns, so a record
// written after it may name them.
func (s *Store) NewSnapshotStage(source string, schema *arrow.Schema, runs [][]BatchMeta) (*Stage, error) {
	dir, err := s.snapshotDir(source)
	if err != nil {
		return nil, fmt.Errorf("stage snapshot of %s: %w", source, err)
	}
	return s.durableStage(dir, "snapshot of "+source, schema, runs)
}

// durableStage is a stage in dir (named what) whose files are synced
// before Write returns, holding runs (read back from a record).
func (s *Store) durableStage(dir, what string, schema *arrow.Schema, runs [][]BatchMeta) (*Stage, error) {
	user, err := checkUserSchema(stripStaged(schema))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", what, err)
	}
	sg := s.stageIn(dir, what, user)
	// Synced; and small groups, since the commit merges a group of every
	// run at once.
	sg.files.scratch, sg.files.groupRows = false, snapshotGroupRows
	for _, run := range runs {
		if len(run) == 0 {
			continue
		}
		for _, b := range run {
			if b.Lower != 0 || b.Upper != 0 {
				return nil, fmt.Errorf("stage %s: staged file %s has times [%d, %d), want the stage's own: %w", what, b.File, b.Lower, b.Upper, ErrInvalid)
			}
		}
		var n int64
		for _, b := range run {
			n += b.Rows
		}
		lo, hi := run[0].minTime(), run[0].maxTime()
		for _, b := range run[1:] {
			lo, hi = min(lo, b.minTime()), max(hi, b.maxTime())
		}
		if sg.rows == 0 {
			sg.minTime, sg.maxTime = lo, hi
		}
		sg.minTime, sg.maxTime = min(sg.minTime, lo), max(sg.maxTime, hi)
		sg.rows += n
		sg.runs = append(sg.runs, run)
	}
	return sg, nil
}

// minTime and maxTime bound the batch's rows' _time from its groups (0
// when it has none).
func (b BatchMeta) minTime() uint64 {
	if len(b.Groups) == 0 {
		return 0
	}
	lo := b.Groups[0].MinTime
	for _, g := range b.Groups {
		lo = min(lo, g.MinTime)
	}
	return lo
}

func (b BatchMeta) maxTime() uint64 {
	var hi uint64
	for _, g := range b.Groups {
		hi = max(hi, g.MaxTime)
	}
	return hi
}

// WriteRun is Write, returning the files of the run it staged (none when
// recs hold no rows).
func (sg *Stage) WriteRun(ctx context.Context, recs ...arrow.Record) ([]BatchMeta, error) {
	n := len(sg.runs)
	if err := sg.Write(ctx, recs...); err != nil {
		return nil, err
	}
	if len(sg.runs) == n {
		return nil, nil
	}
	return sg.runs[len(sg.runs)-1], nil
}

// ReadSnapshotRecord returns the record of source's resumable snapshot
// (ErrNotFound when there is none).
func (s *Store) ReadSnapshotRecord(source string) ([]byte, error) {
	return s.ReadSnapshotFile(source, SnapshotRecordName)
}

// WriteSnapshotRecord replaces the record of source's resumable snapshot
// atomically (a temporary file synced, renamed, the directory synced).
// Only the holder of the source's writer lock may call it.
func (s *Store) WriteSnapshotRecord(source string, b []byte) error {
	return s.WriteSnapshotFile(source, SnapshotRecordName, b)
}

// ReadSnapshotFile returns file name (SnapshotRecordName or
// SnapshotProgressName) of source's resumable snapshot (ErrNotFound when
// there is none).
func (s *Store) ReadSnapshotFile(source, name string) ([]byte, error) {
	dir, err := s.snapshotDir(source)
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s of %s: %w", name, source, err)
	}
	f, err := s.fs.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read snapshot %s of %s: %w", name, source, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s of %s: %w", name, source, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s of %s: %w", name, source, err)
	}
	return b, nil
}

// WriteSnapshotFile replaces file name of source's resumable snapshot
// atomically.
func (s *Store) WriteSnapshotFile(source, name string, b []byte) error {
	dir, err := s.snapshotDir(source)
	if err != nil {
		return fmt.Errorf("write snapshot %s of %s: %w", name, source, err)
	}
	if err := s.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("write snapshot %s of %s: %w", name, source, err)
	}
	tmp, err := writeTempSync(s.fs, dir, "record-", true, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("write snapshot %s of %s: %w", name, source, err)
	}
	if err := s.fs.Rename(tmp, filepath.Join(dir, name)); err != nil {
		s.fs.Remove(tmp)
		return fmt.Errorf("write snapshot %s of %s: %w", name, source, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("write snapshot %s of %s: %w", name, source, err)
	}
	return nil
}

// SweepSnapshot removes every file of source's resumable snapshot that
// keep does not name (staged files of chunks an earlier run did not
// finish, temporary files), keeping the record. It returns how many it
// removed. Only the holder of the source's writer lock may call it.
func (s *Store) SweepSnapshot(source string, keep map[string]bool) (int, error) {
	dir, err := s.snapshotDir(source)
	if err != nil {
		return 0, fmt.Errorf("sweep snapshot of %s: %w", source, err)
	}
	n, err := s.sweepDir(dir, func(name string) bool {
		return name == SnapshotRecordName || name == SnapshotProgressName || keep[name]
	})
	if err != nil {
		return n, fmt.Errorf("sweep snapshot of %s: %w", source, err)
	}
	return n, nil
}

// sweepDir removes every file of dir that keep rejects, and returns how
// many it removed (temporary files not counted).
func (s *Store) sweepDir(dir string, keep func(name string) bool) (int, error) {
	files, err := s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		if keep(f.Name()) {
			continue
		}
		if err := s.fs.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		if !strings.HasPrefix(f.Name(), tmpPrefix) {
			n++
		}
	}
	return n, nil
}

// RemoveSnapshot removes source's resumable snapshot: its staged files,
// then its record, then the directory. Only the holder of the source's
// writer lock may call it.
func (s *Store) RemoveSnapshot(source string) error {
	if _, err := s.SweepSnapshot(source, nil); err != nil {
		return fmt.Errorf("remove snapshot of %s: %w", source, err)
	}
	dir, err := s.snapshotDir(source)
	if err != nil {
		return fmt.Errorf("remove snapshot of %s: %w", source, err)
	}
	for _, name := range []string{SnapshotProgressName, SnapshotRecordName} {
		if err := s.fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove snapshot of %s: %w", source, err)
		}
	}
	if err := s.fs.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove snapshot of %s: %w", source, err)
	}
	return nil
}

// SnapshotFileExists reports whether file name is in source's resumable
// snapshot directory.
func (s *Store) SnapshotFileExists(source, name string) bool {
	dir, err := s.snapshotDir(source)
	if err != nil {
		return false
	}
	f, err := s.fs.Open(filepath.Join(dir, name))
	if err != nil {
		return false
	}
	f.Close()
	return true
}
