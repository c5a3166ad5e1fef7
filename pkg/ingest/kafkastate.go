package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/kafkafmt"
	"github.com/rtrctl/rtrctl/pkg/keystate"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// stateFollowEvery is how often a stream folds what the store committed
// into its on-disk upsert state.
const stateFollowEvery = time.Second

// upsertState is a Kafka upsert topic's state on disk (keystate.DB): the
// decoder's Backing, its table a cache in front of it. The DB is written
// only from what the store committed (follow), so that it is the
// collection as of a committed time whatever crashes; clean is the durable
// frontier that time reflects: a change at an offset below it is in the
// DB, so the cache may drop the key.
type upsertState struct {
	db     *keystate.DB
	sh     *store.Shard
	codec  keystate.Codec
	source string
	clean  atomic.Pointer[map[int32]int64]
	folds  atomic.Uint64
}

// Folds implements kafkafmt.Backing.
func (u *upsertState) Folds() uint64 { return u.folds.Load() }

// Get implements kafkafmt.Backing.
func (u *upsertState) Get(key, dst []byte) ([]byte, bool, error) { return u.db.Get(key, dst) }

// Clean implements kafkafmt.Backing.
func (u *upsertState) Clean(p int32, off int64) bool {
	m := u.clean.Load()
	if m == nil {
		return false
	}
	next, ok := (*m)[p]
	return ok && off < next
}

// publish makes f (a durable frontier the DB reflects) the clean one.
func (u *upsertState) publish(f frontier.Frontier) error {
	m := map[int32]int64{}
	for _, p := range f.Partitions() {
		n, err := parsePartitionNumber(p)
		if err != nil {
			return fmt.Errorf("upsert state: frontier partition %q: %w", p, err)
		}
		m[n] = int64(f.Get(p))
	}
	u.clean.Store(&m)
	u.folds.Add(1)
	return nil
}

// follow folds what the store commits into the DB until ctx ends: the
// durable frontier first (ack), then the changes up to the shard's upper,
// which is at least the upper that frontier stands for.
func (u *upsertState) follow(ctx context.Context, ack Ack, log *slog.Logger) {
	ticking(ctx, stateFollowEvery, func() {
		f, err := ack(ctx, u.source)
		if err == nil {
			err = u.sh.Refresh(ctx)
		}
		if up := u.sh.Upper(); err == nil && up > 0 {
			_, err = u.db.CatchUp(ctx, u.sh, up-1, u.codec)
		}
		if err == nil {
			err = u.publish(f)
		}
		if err != nil && ctx.Err() == nil {
			// The cache keeps what is not folded yet: memory grows, the
			// answers stay right.
			log.Warn("upsert state: folding the store's commits failed; will retry", "source", u.source, "error", err)
		}
	})
}

// openUpsertState opens topic's state in k's state directory, makes it the
// collection as of r.Durable-1 (reused, caught up or rebuilt, as the log
// line says) and makes it dec's backing.
func (k *Kafka) openUpsertState(ctx context.Context, r Resume, topic string, sh *store.Shard, dec kafkafmt.Backed) (*upsertState, error) {
	source := KafkaSourceID(k.cfg.Source, topic)
	budget := k.cfg.StateCache
	if budget <= 0 {
		budget = keystate.DefaultCacheBytes
	}
	base, err := stateBase(k.st, k.cfg.StateDir, source)
	if err != nil {
		return nil, err
	}
	ident := fmt.Sprintf("kafka upsert state v1: store %s, source %s, collection %s, key %s, value %s",
		k.st.ID(), source, topic, k.formats[topic][0].Name(), k.formats[topic][1].Name())
	db, err := keystate.Open(keystate.Config{Dir: filepath.Join(base, url.PathEscape(source)), Ident: ident, PebbleBytes: budget / 2, Logger: k.log})
	if err != nil {
		return nil, err
	}
	began := time.Now()
	out := keystate.Outcome{How: "created"}
	if r.Durable == 0 {
		err = db.Reset(ctx)
	} else {
		out, err = db.Sync(ctx, sh, r.Durable-1, dec)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	u := &upsertState{db: db, sh: sh, codec: dec, source: source}
	if err := u.publish(r.Start); err != nil {
		db.Close()
		return nil, err
	}
	dec.SetBacking(u, int(db.Keys()), budget-budget/2)
	args := []any{"source", source, "dir", filepath.Join(base, url.PathEscape(source)), "keys", db.Keys(), "as_of", max(r.Durable, 1) - 1, "updates", out.Updates, "took", time.Since(began).Round(time.Millisecond).String()}
	if out.Reason != "" {
		args = append(args, "why", out.Reason)
	}
	k.log.Info("upsert state "+out.How, args...)
	return u, nil
}
