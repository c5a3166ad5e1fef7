package store

import (
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
)

// A re-snapshot in the middle of a stream (a table copied again while it
// is replicated) stages its copy in DIR/staged/<escaped source>/copies/,
// synced as a resumable snapshot's files are, so that a record of the
// copy (an ingest's kept copy, in the pending copy that names its runs)
// may name them and a restart read them back. SweepStaged leaves the
// directory alone; the owner removes what no record names (SweepCopies)
// when its stream starts, before it copies anything.
const copiesDirName = "copies"

// copiesDir returns the re-snapshot copies directory of source.
func (s *Store) copiesDir(source string) (string, error) {
	dir, err := s.stagedDir(source)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, copiesDirName), nil
}

// NewCopyStage returns a stage of a re-snapshot's copy of a collection of
// source holding the runs given (read back from a record; none for a new
// stage), for updates in schema (user columns, _time, _diff). Like
// NewSnapshotStage's, its files are synced before Write returns.
func (s *Store) NewCopyStage(source string, schema *arrow.Schema, runs [][]BatchMeta) (*Stage, error) {
	dir, err := s.copiesDir(source)
	if err != nil {
		return nil, fmt.Errorf("stage a copy of %s: %w", source, err)
	}
	return s.durableStage(dir, "copy of "+source, schema, runs)
}

// SweepCopies removes every file of source's re-snapshot copies that keep
// does not name, and returns how many it removed. Only the holder of the
// source's writer lock may call it, while no copy is being staged.
func (s *Store) SweepCopies(source string, keep map[string]bool) (int, error) {
	dir, err := s.copiesDir(source)
	if err != nil {
		return 0, fmt.Errorf("sweep the copies of %s: %w", source, err)
	}
	n, err := s.sweepDir(dir, func(name string) bool { return keep[name] })
	if err != nil {
		return n, fmt.Errorf("sweep the copies of %s: %w", source, err)
	}
	return n, nil
}

// CopyFilesExist reports whether every file of runs is in source's
// re-snapshot copies directory.
func (s *Store) CopyFilesExist(source string, runs [][]BatchMeta) bool {
	dir, err := s.copiesDir(source)
	if err != nil {
		return false
	}
	for _, run := range runs {
		for _, b := range run {
			f, err := s.fs.Open(filepath.Join(dir, b.File))
			if err != nil {
				return false
			}
			f.Close()
		}
	}
	return true
}

// Runs returns the stage's runs (do not modify).
func (sg *Stage) Runs() [][]BatchMeta { return sg.runs }

// Borrow returns a stage of sg's runs whose Release leaves their files:
// a copy kept for a restart is committed from them and stays.
func (sg *Stage) Borrow() *Stage {
	b := *sg
	b.borrowed = true
	return &b
}
