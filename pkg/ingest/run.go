package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/retry"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/recency"
	"github.com/rtrctl/rtrctl/pkg/reclock"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// Options configure Run: everything that does not depend on the source.
type Options struct {
	// Interval is the least time between bindings (reclock.DefaultInterval).
	Interval time.Duration
	// CompactEvery runs store compaction this often (0: 1 minute; negative:
	// never).
	CompactEvery time.Duration
	// Metrics, when set, is updated as the ingest runs (every timeline
	// under its own source label).
	Metrics *Metrics
	// RecencyAddr, when set, also serves wait-recent over HTTP on this
	// loopback address (besides the unix socket in the store). It serves
	// one timeline: a run with several fails at the start.
	RecencyAddr string
	// RetryFor bounds how long transient upstream failures (a restart, a
	// failover, a lost connection) are retried: 0 means for ever, a
	// negative value not at all.
	RetryFor time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MemoryBudget bounds the updates not yet bound held in memory
	// (reclock.Options.MemoryBudget): zero means
	// reclock.DefaultMemoryBudget, negative never stages.
	MemoryBudget int64

	// Standby makes an ingest whose source another one holds (a flock, or
	// an s3:// store's writer lease) wait and take over when the holder
	// stops or dies (its lease expired), instead of failing: a hot
	// standby, on this host or another.
	Standby bool

	// AfterCommit is a test hook called after each collection commit.
	AfterCommit func(collection string, upper uint64)
}

// Run ingests src into st until ctx ends (then it returns nil after
// committing what is complete) or a definite error stops it. Transient
// failures of the upstream restart the attempt from the store, for as long
// as opts.RetryFor allows: every attempt resumes from what is durable, so
// a retry neither loses nor duplicates anything.
func Run(ctx context.Context, src Source, st *store.Store, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CompactEvery == 0 {
		opts.CompactEvery = time.Minute
	}
	if mu, ok := src.(MetricsUser); ok && opts.Metrics != nil {
		mu.UseMetrics(opts.Metrics)
	}
	err := retryTransient(ctx, opts, func(ctx context.Context) error {
		for {
			// A standby that found the source free starts afresh, so
			// that what it opens of the upstream is of now, not of when
			// it began to wait.
			if err := runOnce(ctx, src, st, opts); !errors.Is(err, errSourceFreed) {
				return err
			}
		}
	})
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Stopped while starting (a state still being read, say):
		// nothing is lost, as when stopped while streaming.
		return nil
	}
	return err
}

// timeline is the driver's state of one Timeline.
type timeline struct {
	Timeline
	lock   *store.Lock
	w      *storeWriter
	srv    *recency.Server
	shards map[string]*store.Shard
	// ackColls are the collections acknowledgement waits for; guarded by
	// mu once the stream runs.
	ackColls []string
	// info is what the store records of the source.
	info store.SourceInfo

	mu      sync.Mutex // guards rc and errored
	rc      *reclock.Reclocker
	errored map[string]bool
}

// driver is one attempt of Run; it is the pipe.Sink of every stage.
type driver struct {
	src    Source
	ctx    context.Context // of the stage that is running
	st     *store.Store
	opts   Options
	log    *slog.Logger
	tls    []*timeline
	byColl map[string]*timeline
}

func runOnce(ctx context.Context, src Source, st *store.Store, opts Options) (err error) {
	// What an attempt starts beside the stream (probes for metrics) ends
	// with it, not with Run.
	ctx, endAttempt := context.WithCancel(ctx)
	defer endAttempt()
	tls, err := src.Open(ctx, st)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	defer src.Close()
	if len(tls) == 0 {
		return errors.New("ingest: the source has nothing to ingest")
	}
	if opts.RecencyAddr != "" && len(tls) > 1 {
		for _, tl := range tls {
			closeProber(tl)
		}
		return hint.Wrap(fmt.Errorf("ingest: --recency-addr serves one source, this run has %d", len(tls)),
			"ingest one topic per process to serve wait-recent over HTTP, or use the store's socket")
	}
	d := &driver{src: src, ctx: ctx, st: st, opts: opts, log: opts.Logger, byColl: map[string]*timeline{}}
	defer d.close()
	for i, tl := range tls {
		if err := d.start(ctx, tl); err != nil {
			for _, rest := range tls[i+1:] {
				closeProber(rest)
			}
			return err
		}
	}

	// 1. Snapshots of the collections whose time-0 contents are not
	// durable, at the frontier time 0 stands for.
	if sn, ok := src.(Snapshotter); ok {
		for _, t := range d.tls {
			if err := d.snapshot(ctx, sn, t); err != nil {
				return err
			}
		}
	}

	// 2. Where each timeline resumes: the frontier below which every
	// collection is durable.
	start := map[string]frontier.Frontier{}
	for _, t := range d.tls {
		durable, err := t.w.Durable(ctx)
		if err != nil {
			return err
		}
		t.w.setDurable(durable)
		f := durableFrontier(t.rc.Bindings(), durable, t.Domain)
		start[t.ID] = f
		if r, ok := src.(Resumer); ok {
			err := r.Resume(ctx, Resume{Timeline: t.ID, Shards: t.shards, Durable: durable, Start: f, Bindings: t.rc.Bindings(), Errored: maps.Clone(t.errored)})
			if err != nil {
				return fmt.Errorf("ingest %s: %w", t.ID, err)
			}
		}
		d.log.Info("resume", "source", t.ID, "from", f.String(), "durable_upper", durable)
	}

	// 3. The change stream, with binding ticks and compaction beside it.
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	d.ctx = streamCtx
	bg := startBackground(streamCtx, stopStream, opts.Interval, opts.CompactEvery, func(ctx context.Context) error {
		for _, t := range d.tls {
			if err := tickIngest(ctx, &t.mu, t.rc, t.w); err != nil {
				return err
			}
		}
		return nil
	}, st, d.log)
	retry.Progress(ctx) // this attempt got as far as streaming
	err = src.Stream(streamCtx, StreamRequest{Start: start, Sink: d, Ack: d.ack, RetryFor: streamRetryFor(opts.RetryFor), Schema: d.schemaOf, Add: d.add})
	stopStream()
	if terr := bg.wait(); terr != nil {
		return terr
	}
	if ctx.Err() != nil {
		// Interrupted: bind and commit what the source completed.
		for _, t := range d.tls {
			if err := finishIngest(&t.mu, t.rc, t.w); err != nil {
				return err
			}
			d.log.Info("stopped", "source", t.ID, "durable_upper", t.w.DurableUpper())
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	return nil
}

// standbyPoll is how often a standby tries the source's lock: it takes
// over within this of the holder's stop, or of its lease's expiry.
const standbyPoll = 250 * time.Millisecond

// errSourceFreed ends an attempt of a standby whose source became free:
// the next attempt opens the upstream anew and takes the lock.
var errSourceFreed = errors.New("the source is free")

// standby waits until the lock of source, which held says another ingest
// holds, is free (store.LockHeld: the holder's flock is gone, or its
// lease expired), without taking it, and returns errSourceFreed (or
// ctx's error when stopped while waiting): the next attempt takes it, so
// a takeover is one lease epoch.
func (d *driver) standby(ctx context.Context, source string, held error) error {
	d.log.Info("standby: another ingest holds the source; waiting to take over", "source", source, "held", held.Error())
	tick := time.NewTicker(standbyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("standby for %s: %w", source, ctx.Err())
		case <-tick.C:
		}
		if d.st.LockHeld(source) {
			continue
		}
		d.log.Info("standby: the source is free; taking over", "source", source)
		return errSourceFreed
	}
}

func closeProber(tl Timeline) {
	if tl.Prober != nil {
		tl.Prober.Close()
	}
}

// start locks a timeline's source, checks and creates its collections,
// records its info and starts its writer, reclocker, recency server and
// metrics.
func (d *driver) start(ctx context.Context, tl Timeline) error {
	st := d.st
	lock, err := st.LockSource(tl.ID)
	if errors.Is(err, store.ErrLocked) && d.opts.Standby {
		err = d.standby(ctx, tl.ID, err)
	}
	if err != nil {
		closeProber(tl)
		if errors.Is(err, store.ErrLocked) {
			return hint.Wrap(fmt.Errorf("ingest %s: another rtrctl ingest is writing this source to %s: %w", tl.ID, st.Dir(), err),
				"stop it first, or ingest into another store or --source-id")
		}
		return fmt.Errorf("ingest %s: %w", tl.ID, err)
	}
	t := &timeline{Timeline: tl, lock: lock, shards: map[string]*store.Shard{}, errored: map[string]bool{}}
	d.tls = append(d.tls, t)
	var names []string
	for _, c := range tl.Collections {
		if other := d.byColl[c.Name]; other != nil {
			return hint.Wrap(fmt.Errorf("ingest %s: collection %s is named twice", tl.ID, c.Name), "name each table or topic once")
		}
		d.byColl[c.Name] = t
		names = append(names, c.Name)
		sh, err := d.collection(ctx, tl, c)
		if err != nil {
			return err
		}
		t.shards[c.Name] = sh
		info, err := sh.Info(ctx)
		if err != nil {
			return fmt.Errorf("ingest %s: %w", tl.ID, err)
		}
		// An error holds until a later generation (a re-snapshot).
		if n := len(info.Errors); n > 0 && (len(info.Generations) == 0 || info.Errors[n-1].Time >= info.Generations[len(info.Generations)-1].Start) {
			t.errored[c.Name] = true
			d.log.Warn("collection has a definite error; it gets no more data", "source", tl.ID, "collection", c.Name, "error", info.Errors[n-1].Message)
		}
	}

	// Acknowledgement waits for every collection of the source the store
	// holds, also those this run does not ingest (a --tables subset).
	t.ackColls = append([]string{}, names...)
	prev, err := st.ReadSourceInfo(tl.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ingest %s: %w", tl.ID, err)
	}
	for _, c := range append(prev.Collections, tl.AckAlso...) {
		if slices.Contains(t.ackColls, c) {
			continue
		}
		if sh, err := st.Shard(ctx, c); err == nil && shardSource(sh) == tl.ID {
			t.ackColls = append(t.ackColls, c)
			d.log.Warn("this run does not ingest a collection of the source; the upstream position is acknowledged no further than it", "source", tl.ID, "collection", c)
		}
	}
	// The info is written once the recency server listens: a waiter that
	// finds the source locked with a socket that does not answer knows
	// the info is a previous run's and waits for this one's.
	info := store.SourceInfo{
		Source: tl.ID, Kind: tl.Kind, Upstream: tl.Upstream, Collections: t.ackColls,
		PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339),
	}

	t.w = newStoreWriter(st, tl.ID, names)
	t.w.afterCommit = d.opts.AfterCommit
	var sm *sourceMetrics
	if d.opts.Metrics != nil {
		sm = d.opts.Metrics.source(tl.ID)
		t.w.onCommit = sm.committed
	}
	rc, err := reclock.New(ctx, st, tl.ID, tl.Domain, t.w, reclock.Options{Interval: d.opts.Interval, MemoryBudget: d.opts.MemoryBudget})
	if err != nil {
		return err
	}
	t.rc = rc

	// Real-time recency: serve wait-recent on the store's socket
	// (pkg/recency, docs/real-time-recency.md).
	if tl.Prober != nil {
		if w, ok := tl.Prober.(probe.Warmer); ok {
			go w.Warm(ctx)
		}
		nudge := func() {}
		if n, ok := d.src.(Nudger); ok {
			nudge = func() { n.Nudge(tl.ID) }
		}
		socket := recency.SocketPath(st.Dir(), tl.ID)
		if t.srv = serveRecency(ctx, st, tl.ID, socket, tl.Prober, &t.mu, rc, t.w, nudge, d.log); t.srv != nil {
			info.Socket = socket
		}
		if t.srv != nil && d.opts.RecencyAddr != "" {
			addr, err := t.srv.ListenHTTP(d.opts.RecencyAddr, false)
			if err != nil {
				return fmt.Errorf("ingest %s: %w", tl.ID, err)
			}
			info.HTTP = addr
			d.log.Info("recency endpoint", "source", tl.ID, "http", "http://"+addr+recency.HTTPPath)
		}
		if sm != nil {
			go sm.probeLag(ctx, tl.Prober, tl.Upstream, 2*time.Second)
		}
	}
	if err := st.WriteSourceInfo(info); err != nil {
		return fmt.Errorf("ingest %s: %w", tl.ID, err)
	}
	t.info = info
	return nil
}

// collection checks that c may be written by tl and returns its shard,
// created with its schema when it does not exist yet (so that an empty
// collection still has an upper that follows the source).
func (d *driver) collection(ctx context.Context, tl Timeline, c Collection) (*store.Shard, error) {
	sh, err := d.st.Shard(ctx, c.Name)
	if errors.Is(err, store.ErrNotFound) {
		h := pipe.Header{Kind: pipe.KindData, Collection: c.Name, Source: tl.ID, Domain: frontier.DomainSystem}
		md := mergeMetadata(h.Metadata(), c.Schema.Metadata())
		sh, err = d.st.CreateShard(ctx, c.Name, arrow.NewSchema(c.Schema.Fields(), &md))
		if err != nil {
			return nil, fmt.Errorf("ingest %s: %w", tl.ID, err)
		}
		return sh, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", tl.ID, err)
	}
	if err := d.st.CheckOwner(ctx, c.Name, tl.ID); err != nil {
		return nil, fmt.Errorf("ingest %s: %w", tl.ID, err)
	}
	if c.Check != nil {
		if err := c.Check(sh.Schema()); err != nil {
			return nil, fmt.Errorf("ingest %s: collection %s: %w", tl.ID, c.Name, err)
		}
	}
	return sh, nil
}

// shardSource is the source id a shard records (rtr.source).
func shardSource(sh *store.Shard) string {
	src, _ := sh.Schema().Metadata().GetValue(pipe.KeySource)
	return src
}

// mergeMetadata is base with the keys of extra that base does not have
// (such as rtr.key, or a source's own keys).
func mergeMetadata(base, extra arrow.Metadata) arrow.Metadata {
	keys, vals := base.Keys(), base.Values()
	for i, k := range extra.Keys() {
		if base.FindKey(k) < 0 {
			keys, vals = append(keys, k), append(vals, extra.Values()[i])
		}
	}
	return arrow.NewMetadata(keys, vals)
}

// snapshot produces the snapshots of t's collections whose time-0 contents
// are not durable, binds and commits them.
func (d *driver) snapshot(ctx context.Context, sn Snapshotter, t *timeline) error {
	var names []string
	for _, c := range t.Collections {
		names = append(names, c.Name)
	}
	need, err := needSnapshot(ctx, d.st, t.rc.Bindings(), names)
	if err != nil {
		return err
	}
	if len(need) > 0 {
		start := frontier.Empty(t.Domain)
		if bs := t.rc.Bindings(); len(bs) > 0 {
			start = bs[0].Frontier
		}
		d.log.Info("snapshot", "source", t.ID, "tables", need, "start", start.String())
		began := time.Now()
		if err := sn.Snapshot(ctx, t.ID, need, start, d); err != nil {
			return fmt.Errorf("ingest %s: %w", t.ID, err)
		}
		if err := bindSnapshot(ctx, &t.mu, t.rc, t.w); err != nil {
			return err
		}
		d.log.Info("snapshot done", "source", t.ID, "collections", len(need), "took", time.Since(began).Round(time.Millisecond).String())
	}
	if c, ok := sn.(snapshotCommitter); ok {
		if err := c.snapshotCommitted(t.ID); err != nil {
			return fmt.Errorf("ingest %s: %w", t.ID, err)
		}
	}
	if len(t.rc.Bindings()) == 0 {
		return fmt.Errorf("ingest %s: no binding after the snapshot", t.ID)
	}
	return nil
}

// snapshotCommitter is a Snapshotter that keeps something of its
// snapshots until they are committed (a resumable snapshot's record).
type snapshotCommitter interface {
	snapshotCommitted(timeline string) error
}

// DataStaged hands the reclocker a collection's staged snapshot rows (a
// resumable snapshot's copy); a collection with a definite error drops
// them.
func (d *driver) DataStaged(collection string, in *arrow.Schema, stage *store.Stage, part string) error {
	taken := false
	err := d.live(collection, func(t *timeline) error {
		taken = true
		return t.rc.DataStaged(d.ctx, collection, in, stage, part)
	})
	if !taken {
		stage.Release()
	}
	return err
}

// ack implements Ack: the frontier of the last binding below which every
// collection the timeline's upstream position serves is durable.
func (d *driver) ack(ctx context.Context, id string) (frontier.Frontier, error) {
	for _, t := range d.tls {
		if t.ID != id {
			continue
		}
		t.mu.Lock()
		colls := slices.Clone(t.ackColls)
		t.mu.Unlock()
		u, err := d.st.LeastUpper(ctx, colls)
		if err != nil {
			return frontier.Frontier{}, err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		return durableFrontier(t.rc.Bindings(), u, t.Domain), nil
	}
	return frontier.Frontier{}, fmt.Errorf("ingest: acknowledge unknown source %q", id)
}

// close releases every timeline, last started first.
func (d *driver) close() {
	for i := len(d.tls) - 1; i >= 0; i-- {
		t := d.tls[i]
		if t.rc != nil {
			t.rc.Close()
		}
		if t.srv != nil {
			t.srv.Close()
		} else {
			closeProber(t.Timeline)
		}
		if t.w != nil {
			t.w.Close()
		}
		t.lock.Unlock()
	}
}

func (d *driver) timeline(collection string) (*timeline, error) {
	t := d.byColl[collection]
	if t == nil {
		return nil, fmt.Errorf("data of unknown collection %q", collection)
	}
	return t, nil
}

// live runs fn under collection's timeline lock unless the collection has
// a definite error (then it gets nothing more).
func (d *driver) live(collection string, fn func(t *timeline) error) error {
	t, err := d.timeline(collection)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.errored[collection] {
		return nil
	}
	return fn(t)
}

// Data implements pipe.Sink.
func (d *driver) Data(collection string, rec arrow.Record) error {
	return d.live(collection, func(t *timeline) error { return t.rc.Data(d.ctx, collection, rec) })
}

// Progress implements pipe.Sink: collection "" is every timeline of the
// frontier's domain.
func (d *driver) Progress(collection string, upper frontier.Frontier) error {
	if collection != "" {
		t, err := d.timeline(collection)
		if err != nil {
			return err
		}
		return d.progress(t, upper)
	}
	for _, t := range d.tls {
		if t.Domain == upper.Domain() {
			if err := d.progress(t, upper); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *driver) progress(t *timeline, upper frontier.Frontier) error {
	if d.opts.Metrics != nil {
		d.opts.Metrics.source(t.ID).sourceProgress(upper)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rc.SourceProgress(d.ctx, upper)
}

// Error implements pipe.Sink: the collection's definite error, recorded at
// its time; the collection gets no more data.
func (d *driver) Error(collection string, at frontier.Time, msg string) error {
	return d.live(collection, func(t *timeline) error {
		t.errored[collection] = true
		if d.opts.Metrics != nil {
			d.opts.Metrics.source(t.ID).Error("definite")
		}
		return t.rc.Error(d.ctx, collection, at, strings.TrimSpace(msg))
	})
}

// Reset implements pipe.Sink: from its time on, the collection holds only
// what follows (a TRUNCATE; a re-snapshot or schema change with the new
// contents).
//
// A reset after a definite error (a re-snapshot) clears it: the collection
// gets data again.
func (d *driver) Reset(collection string, at frontier.Time, schema *arrow.Schema) error {
	t, err := d.timeline(collection)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.errored, collection)
	return t.rc.Reset(d.ctx, collection, at, schema)
}

// schemaOf is StreamRequest.Schema.
func (d *driver) schemaOf(collection string) *arrow.Schema {
	sh, err := d.st.Shard(d.ctx, collection)
	if err != nil || sh.Refresh(d.ctx) != nil {
		return nil
	}
	if u := sh.Upper(); u > 0 {
		// A generation starting at the upper (committed by a re-snapshot
		// killed before its contents were) is not in force yet: the
		// stream resumes below it, in the columns before it.
		return sh.SchemaAt(u - 1)
	}
	return sh.Schema()
}

// add is StreamRequest.Add.
func (d *driver) add(id string, c Collection) error {
	if d.byColl[c.Name] != nil {
		return nil
	}
	var t *timeline
	for _, x := range d.tls {
		if x.ID == id {
			t = x
		}
	}
	if t == nil {
		return fmt.Errorf("ingest: add %s to unknown source %q", c.Name, id)
	}
	sh, err := d.collection(d.ctx, t.Timeline, c)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shards[c.Name] = sh
	t.Collections = append(t.Collections, c)
	d.byColl[c.Name] = t
	if !slices.Contains(t.ackColls, c.Name) {
		t.ackColls = append(t.ackColls, c.Name)
	}
	t.w.add(c.Name)
	t.info.Collections = slices.Clone(t.ackColls)
	if err := d.st.WriteSourceInfo(t.info); err != nil {
		return fmt.Errorf("ingest %s: %w", t.ID, err)
	}
	d.log.Info("collection added", "source", t.ID, "collection", c.Name)
	return nil
}
