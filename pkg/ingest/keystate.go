package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/keystate"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// rowStates are the on-disk states (keystate.DB) behind the key states
// of a PostgreSQL or MySQL run's keyed collections (replicate.KeyState's
// Backing): each is the collection as of where the stream resumes, and
// holds what the key state's overlay spills. They are opened afresh by
// every Resume (which clears what an earlier stream spilled) and closed
// with the source.
type rowStates struct {
	// dir and cache are the run's --state-dir and --state-cache (0: the
	// default).
	dir   string
	cache int64
	log   *slog.Logger
	dbs   []*keystate.DB
	sts   []*replicate.KeyState // each collection's latest state on its DB
	names []string
	// epochs is, per DB, the last spill epoch a state read from a copy
	// took (fill): the next one takes a later one.
	epochs []uint32
	// stop ends the followers (follow); done is closed when they ended.
	stop context.CancelFunc
	ctx  context.Context
	done sync.WaitGroup
}

// close closes every state, logging those that spilled.
func (r *rowStates) close() {
	if r.stop != nil {
		r.stop()
		r.done.Wait()
		r.stop = nil
	}
	for i, db := range r.dbs {
		if n := r.sts[i].Spills(); n > 0 {
			r.log.Info("key state spilled to disk", "collection", r.names[i], "times", n)
		}
		db.Close()
	}
	r.dbs, r.sts, r.names, r.epochs = nil, nil, nil, nil
}

// fill makes st (a new state of collection name, for its re-snapshot)
// the rows of copy c. When name has a state on disk, the rows are written
// there, under a spill epoch of their own (replicate.KeyState.LoadBacked:
// the rows the disk held before are not read), and st keeps only its
// overlay in memory; else st holds them in memory. Either way the copy is
// read from its staged files a window at a time.
func (r *rowStates) fill(ctx context.Context, name string, st *replicate.KeyState, c *stagedCopy) error {
	each := func(add func(arrow.Record) error) error {
		if c.stage == nil {
			return nil
		}
		return c.stage.Each(ctx, c.at.Pos, add)
	}
	i := slices.Index(r.names, name)
	if i < 0 {
		st.ResetState()
		if err := each(st.AddState); err != nil {
			return err
		}
		return st.EndState()
	}
	epoch := max(r.epochs[i], r.sts[i].Epoch()) + 1
	r.epochs[i] = epoch
	if err := st.LoadBacked(r.dbs[i], epoch, r.overlayBudget(), each); err != nil {
		return err
	}
	r.sts[i] = st
	return nil
}

// overlayBudget is the memory of a state's overlay over its DB: a
// quarter of the budget (half is pebble's; the heap grows to about twice
// what is live before a collection).
func (r *rowStates) overlayBudget() int {
	budget := r.cache
	if budget <= 0 {
		budget = keystate.DefaultCacheBytes
	}
	return int(budget / 4)
}

// build makes st the collection in sh as of durable-1 (a stream resumes
// from durable), backed by its state on disk in st's store (reused,
// caught up or rebuilt from the store, as the log line says), and logs
// it. attrs are more attributes of the log line.
func (r *rowStates) build(ctx context.Context, log *slog.Logger, s *store.Store, timeline, name string, sh *store.Shard, durable uint64, st *replicate.KeyState, attrs ...any) error {
	began := time.Now()
	base, err := stateBase(s, r.dir, timeline)
	if err != nil {
		return err
	}
	budget := r.cache
	if budget <= 0 {
		budget = keystate.DefaultCacheBytes
	}
	dir := filepath.Join(base, "keys", url.PathEscape(timeline), url.PathEscape(name))
	ident := fmt.Sprintf("row key state v1: store %s, source %s, collection %s, %s", s.ID(), timeline, name, st.Ident())
	db, err := keystate.Open(keystate.Config{Dir: dir, Ident: ident, PebbleBytes: budget / 2, Logger: log})
	if err != nil {
		return err
	}
	out := keystate.Outcome{How: "created"}
	if durable == 0 {
		err = db.Reset(ctx)
	} else {
		out, err = db.Sync(ctx, sh, durable-1, st)
	}
	if err != nil {
		db.Close()
		return err
	}
	r.dbs, r.sts, r.names, r.epochs, r.log = append(r.dbs, db), append(r.sts, st), append(r.names, name), append(r.epochs, 0), log
	if err := r.follow(log, timeline, name, sh, db, st); err != nil {
		return err
	}
	st.SetBacking(db, int(db.Keys()), r.overlayBudget())
	args := append(append([]any{"source", timeline, "collection", name}, attrs...), "keys", db.Keys(), "as_of", max(durable, 1)-1, "updates", out.Updates)
	if out.Reason != "" {
		args = append(args, "why", out.Reason)
	}
	msg := "key state " + out.How
	if out.How == "rebuilt" || out.How == "caught up" {
		msg += " from the store"
	}
	log.Info(msg, append(args, "dir", dir, "took", time.Since(began).Round(time.Millisecond).String())...)
	return nil
}

// stateFollow is how often a state on disk folds what the store
// committed since.
const stateFollow = time.Second

// follow folds the store's commits of sh into db while the stream runs
// (until close), so that a restart catches up only what was committed
// since the last fold, not everything since the stream started. The fold
// does not change what the stream reads: a key the stream changed is in
// its overlay or spilled, which the committed keys are behind.
func (r *rowStates) follow(log *slog.Logger, timeline, name string, sh *store.Shard, db *keystate.DB, st *replicate.KeyState) error {
	codec, err := st.Twin()
	if err != nil {
		return err
	}
	if r.stop == nil {
		var ctx context.Context
		ctx, r.stop = context.WithCancel(context.Background())
		r.ctx = ctx
	}
	ctx := r.ctx
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		ticking(ctx, stateFollow, func() {
			err := sh.Refresh(ctx)
			if up := sh.Upper(); err == nil && up > 0 {
				_, err = db.CatchUp(ctx, sh, up-1, codec)
			}
			if err != nil && ctx.Err() == nil {
				// Re-snapshotted in other columns, say: the next start
				// reads the state from the store anew.
				log.Info("key state: no longer folding the store's commits while this run lasts (a restart catches up or rebuilds it)", "source", timeline, "collection", name, "error", err)
				<-ctx.Done()
			}
		})
	}()
	return nil
}

// stateBase is the directory states on disk of st's sources live under:
// dir (--state-dir), else STORE/state, else (a store on S3) this host's
// cache directory, under the store's id.
func stateBase(st *store.Store, dir, source string) (string, error) {
	switch {
	case dir != "":
		return dir, nil
	case st.Local():
		return filepath.Join(st.Dir(), "state"), nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", hint.Wrap(fmt.Errorf("state of %s: the store is on S3 and there is no local cache directory: %w", source, err), "pass --state-dir DIR (a local directory)")
	}
	return filepath.Join(cache, "rtrctl", "state", st.ID()), nil
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
