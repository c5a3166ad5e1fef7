package ingest

import (
	"context"

	"log/slog"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/rtrctl/rtrctl/pkg/frontier"

	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// rebuildKeyState fills st with the collection in sh as of durable-1 (a
// stream resumes from durable), a batch at a time, and logs its size:
// keys, bytes (replicate.KeyState.Bytes) and bytes per key. attrs are
// more attributes of the log line.
func rebuildKeyState(ctx context.Context, log *slog.Logger, timeline, name string, sh *store.Shard, durable uint64, st *replicate.KeyState, attrs ...any) error {
	began := time.Now()
	if durable > 0 {
		err := sh.ScanAsOf(ctx, durable-1, st.ResetState, st.AddState)
		if err == nil {
			err = st.EndState()
		}
		if err != nil {
			return err
		}
	}
	args := append(append([]any{"source", timeline, "collection", name}, attrs...), stateAttrs(st)...)
	log.Info("key state rebuilt from the store", append(args, "as_of", max(durable, 1)-1, "took", time.Since(began).Round(time.Millisecond).String())...)
	return nil
}

// stateAttrs are the log attributes of st's size: keys, bytes
// (replicate.KeyState.Bytes) and bytes per key.
func stateAttrs(st *replicate.KeyState) []any {
	perKey := 0
	if st.Len() > 0 {
		perKey = st.Bytes() / st.Len()
	}
	return []any{"keys", st.Len(), "bytes", st.Bytes(), "bytes_per_key", perKey}
}

// takenState is a key state read from a copy at from, or a failed
// re-snapshot (st nil): replicate.StateTaker's answer.
type takenState struct {
	st   *replicate.KeyState
	from frontier.Frontier
}

// fillState makes st the rows of a copy.
func fillState(st *replicate.KeyState, rows []arrow.Record) error {
	st.ResetState()
	for _, rec := range rows {
		if err := st.AddState(rec); err != nil {
			return err
		}
	}
	return st.EndState()
}

// stateTaking is replicate.StateTaker for a sink that re-snapshots
// collections in the stream: restating are the collections whose
// re-snapshot reads the stream's key state from its copy (Restate), with
// their key columns; taken the states read, until the stream takes them.
//
// A change at a time the collection is durable beyond already (it is
// ahead of the stream's start) is not re-snapshotted again, but the
// stream still needs the state from there on: silent starts a copy that
// only reads it (Restate calls it).
type stateTaking struct {
	restating map[string][]string
	taken     map[string]takenState
	silent    map[string]func()
}

// Restate implements replicate.StateTaker.
func (s *stateTaking) Restate(coll string, key []string) {
	if s.restating == nil {
		s.restating, s.taken = map[string][]string{}, map[string]takenState{}
	}
	s.restating[coll] = key
	delete(s.taken, coll) // an earlier one's outcome
	if start := s.silent[coll]; start != nil {
		delete(s.silent, coll)
		start()
	}
}

// later notes how to start a silent copy of coll, should the stream
// restate it (nil: forget it).
func (s *stateTaking) later(coll string, start func()) {
	if s.silent == nil {
		s.silent = map[string]func(){}
	}
	if start == nil {
		delete(s.silent, coll)
		return
	}
	s.silent[coll] = start
}

// TakeState implements replicate.StateTaker.
func (s *stateTaking) TakeState(coll string) (*replicate.KeyState, frontier.Frontier, bool) {
	t, ok := s.taken[coll]
	if ok {
		delete(s.taken, coll)
	}
	return t.st, t.from, ok
}

// unstate ends the restating of coll without a state (its re-snapshot
// failed).
func (s *stateTaking) unstate(coll string) {
	if _, ok := s.restating[coll]; ok {
		delete(s.restating, coll)
		s.taken[coll] = takenState{}
	}
}

// give hands the stream st, read from a copy at from (nil: the
// re-snapshot failed).
func (s *stateTaking) give(coll string, st *replicate.KeyState, from frontier.Frontier) {
	delete(s.restating, coll)
	s.taken[coll] = takenState{st: st, from: from}
}
