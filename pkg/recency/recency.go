// Package recency answers the question real-time recency asks: everything
// that was visible upstream when I asked, is it in the store yet, and at
// which system time can I read it?
//
// Wait does three things:
//
//  1. it fetches the upstream frontier U with the source's probe
//     (pkg/frontier/probe: for PostgreSQL pg_current_wal_insert_lsn());
//  2. it waits for the first binding (t, F) of the source's remap shard
//     whose frontier covers U (frontier.Covers(F, U)), and for every
//     collection of the source to be durable past t (upper > t);
//  3. it returns t: a read of any of those collections as of t sees every
//     change that was visible upstream when Wait was called.
//
// Nothing here knows what kind of source it waits for: a source plugs in
// with its frontier probe alone (and, for the daemon path, an ingest that
// lends its bindings, see Server).
//
// When an ingest runs with a recency Server (rtrctl ingest starts one on a
// unix socket in the store), Wait asks it instead: the server batches
// waiters into probe rounds over one upstream connection, nudges the
// change stream and mints a binding as soon as a waiter's frontier is
// covered. Without a server (or when it does not answer), Wait works
// directly against the upstream and the store. docs/real-time-recency.md
// describes both and the line protocol.
package recency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// DefaultTimeout bounds a wait when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// ExitNotRecent is the exit status of a wait that did not reach recency
// (rtrctl's exitRecencyWait). NotRecentError.ExitCode returns it.
const ExitNotRecent = 3

// Result is a successful wait.
type Result struct {
	// Time is t, milliseconds since the Unix epoch: every collection of the
	// source is durable past t, and its contents as of t hold everything
	// that was visible upstream when the wait began.
	Time uint64 `json:"time"`
	// Upstream is the upstream frontier U the wait started from.
	Upstream frontier.Frontier `json:"upstream"`
	// Binding is the frontier F of the binding at t; it covers Upstream.
	Binding frontier.Frontier `json:"binding"`
	// Source is the source id in the store.
	Source string `json:"source"`
	// Via says who answered: "daemon" (the ingest's recency server on
	// its socket), "daemon-http" (the same over loopback HTTP) or "direct".
	Via string `json:"via"`
}

// Options configure Wait. The zero value waits for the store's only
// source, through its ingest's socket if one answers, for DefaultTimeout.
type Options struct {
	// Source is the source id in the store. Empty: the source of
	// Collection when that is set, else the store's only source.
	Source string
	// Collection names a collection whose source to wait for (when Source
	// is empty); `read --recent` passes the collection it reads.
	Collection string
	// Timeout bounds the wait; zero means DefaultTimeout.
	Timeout time.Duration
	// Started is when the wait began (the timeout counts from it: a
	// caller that waited for the store to appear passes its start); zero
	// means now.
	Started time.Time
	// Prober, when set, reads the upstream on the direct path (the caller
	// keeps it open between waits and closes it).
	Prober probe.Prober
	// Recorded, when Prober is nil, makes the direct path's prober of the
	// upstream the ingest recorded in the store (store.SourceInfo), with
	// Password in place of its masked password (empty Password: none, so
	// the driver's environment applies, e.g. PGPASSWORD). The caller knows
	// the source kinds; this package does not.
	Recorded func(info store.SourceInfo, password string) (probe.Prober, error)
	Password string
	// NoDaemon skips the ingest's socket and always waits directly.
	NoDaemon bool
	// WaitForIngest keeps waiting when no ingest is running and the store
	// is behind the upstream. Without it Wait fails at once with a
	// *NotRecentError saying so: nothing would ever catch up.
	WaitForIngest bool
	// Poll is how often the direct path re-reads the store; zero means
	// 10ms.
	Poll time.Duration
	// Logger gets warnings about retried probes; nil means slog.Default().
	Logger *slog.Logger
	// Now is the wall clock (for ages in messages); nil means time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	return o
}

// ErrNotRecent is wrapped by every *NotRecentError.
var ErrNotRecent = errors.New("recency not reached")

// NotRecentError says a wait did not reach recency, and how far it got.
// Its exit code is ExitNotRecent (3).
type NotRecentError struct {
	Source string `json:"source"`
	// Reason is "timed out after 2s", "no ingest is running", ...
	Reason string `json:"reason"`
	// Upstream is the upstream frontier the wait was for (nil: no probe
	// succeeded; ProbeError says why).
	Upstream   *frontier.Frontier `json:"upstream,omitempty"`
	ProbeError string             `json:"probe_error,omitempty"`
	// Ingested is the frontier of the source's last binding, bound at
	// LastBinding (ms); nil when the source has no binding yet.
	Ingested    *frontier.Frontier `json:"ingested,omitempty"`
	LastBinding uint64             `json:"last_binding_time,omitempty"`
	// Age is the time from the last binding to the error (system clock).
	Age time.Duration `json:"age_ns,omitempty"`
	// Bound is the time of the covering binding when one was found but
	// the collections were not yet durable past it (Durable is their
	// least upper).
	Bound   uint64 `json:"bound,omitempty"`
	Durable uint64 `json:"durable,omitempty"`
	// Running says whether an ingest held the source's lock.
	Running bool `json:"ingest_running"`
}

func (e *NotRecentError) Error() string {
	var parts []string
	if e.Upstream != nil {
		parts = append(parts, "upstream at "+e.Upstream.String())
	} else if e.ProbeError != "" {
		parts = append(parts, "upstream frontier unknown (probe failed: "+e.ProbeError+")")
	} else {
		parts = append(parts, "upstream frontier unknown")
	}
	if e.Ingested != nil {
		s := fmt.Sprintf("ingested up to %s (last binding at %d", e.Ingested.String(), e.LastBinding)
		if e.Age > 0 {
			s += fmt.Sprintf(", %s ago", e.Age.Round(time.Millisecond))
		}
		parts = append(parts, s+")")
	} else {
		parts = append(parts, "nothing ingested yet (no binding)")
	}
	if e.Bound != 0 {
		parts = append(parts, fmt.Sprintf("bound at %d but collections durable only below %d", e.Bound, e.Durable))
	}
	if e.Running {
		parts = append(parts, "an ingest is running")
	} else if !strings.Contains(e.Reason, "no ingest") {
		parts = append(parts, "no ingest is running")
	}
	if e.Source == "" {
		// Nothing to say about a source the store does not have yet.
		return "wait-recent: " + e.Reason
	}
	return fmt.Sprintf("wait-recent %s: %s: %s", e.Source, e.Reason, strings.Join(parts, ", "))
}

// Unwrap makes errors.Is(err, ErrNotRecent) hold.
func (e *NotRecentError) Unwrap() error { return ErrNotRecent }

// ExitCode is ExitNotRecent.
func (e *NotRecentError) ExitCode() int { return ExitNotRecent }

// Hint says what to do.
func (e *NotRecentError) Hint() string {
	if e.Source == "" {
		return "start 'rtrctl ingest --store DIR ...' (wait-recent waits for it to create the store and its source until --timeout), or check the store directory"
	}
	if !e.Running {
		return fmt.Sprintf("start the ingest of source %s (rtrctl ingest --store DIR --source-id %s ...), or pass --wait-for-ingest to wait for one", e.Source, e.Source)
	}
	if e.Upstream == nil {
		return "the upstream could not be probed: check that it is reachable (rtrctl frontier), or pass a longer --timeout"
	}
	return "ingestion is behind the upstream: pass a longer --timeout, or see 'rtrctl status' for the lag"
}

// Wait waits until every change visible upstream at the call is durable in
// the store for the source, and returns the system time t to read at. On
// a timeout, or when no ingest runs to catch up (see
// Options.WaitForIngest), it returns a *NotRecentError.
func Wait(ctx context.Context, st *store.Store, opts Options) (Result, error) {
	opts = opts.withDefaults()
	deadline := opts.Started.Add(opts.Timeout)
	src, err := waitSource(ctx, st, opts, deadline)
	if err != nil {
		return Result{}, err
	}
	info, infoErr := st.ReadSourceInfo(src)
	for !opts.NoDaemon && infoErr == nil && (info.Socket != "" || info.HTTP != "") {
		res, answered, err := askEndpoints(ctx, src, info, time.Until(deadline), opts.Logger)
		if answered {
			return res, err
		}
		// The source is locked but its endpoints do not answer: an
		// ingest that is starting holds the lock before it rewrites the
		// info of the run before it (and serves from then on). Wait for
		// it; once unlocked, no ingest runs and the direct path says so.
		if !st.Local() || !st.LockHeld(src) || !time.Now().Before(deadline) {
			// On object storage the socket may be on another host: wait
			// on the store itself (new manifest versions).
			break
		}
		if err := sleepCtx(ctx, min(20*time.Millisecond, time.Until(deadline))); err != nil {
			return Result{}, fmt.Errorf("wait-recent %s: %w", src, err)
		}
		info, infoErr = st.ReadSourceInfo(src)
	}
	prober := opts.Prober
	if prober == nil {
		p, err := recordedProber(src, opts, info, infoErr)
		if err != nil {
			return Result{}, err
		}
		defer p.Close()
		prober = p
	}
	d := &direct{st: st, src: src, opts: opts, prober: prober, deadline: deadline}
	res, err := d.wait(ctx)
	if err == nil {
		res.Source, res.Via = src, "direct"
	}
	return res, err
}

// askEndpoints asks the ingest's socket, then its HTTP endpoint; answered
// says whether one of them answered (with res or err).
func askEndpoints(ctx context.Context, src string, info store.SourceInfo, timeout time.Duration, log *slog.Logger) (res Result, answered bool, err error) {
	if info.Socket != "" {
		res, answered, err = askDaemon(ctx, info.Socket, timeout)
		if answered {
			if err == nil {
				res.Source, res.Via = src, "daemon"
			}
			return res, true, err
		}
		log.Debug("wait-recent: no answer from the ingest's socket", "socket", info.Socket, "error", err)
	}
	if info.HTTP != "" {
		res, answered, err = askHTTP(ctx, info.HTTP, timeout)
		if answered {
			if err == nil {
				res.Source, res.Via = src, "daemon-http"
			}
			return res, true, err
		}
		log.Debug("wait-recent: no answer from the ingest's HTTP endpoint", "http", info.HTTP, "error", err)
	}
	return Result{}, false, nil
}

// waitSource is ResolveSource, waiting until the deadline while the store
// has no source yet (or not the collection asked for): an ingest that is
// starting creates them.
func waitSource(ctx context.Context, st *store.Store, opts Options, deadline time.Time) (string, error) {
	for {
		src, err := ResolveSource(ctx, st, opts.Source, opts.Collection)
		if err == nil {
			err = recorded(ctx, st, src)
		}
		if err == nil || !errors.Is(err, errNoSourceYet) {
			return src, err
		}
		if !time.Now().Before(deadline) {
			return "", &NotRecentError{Source: opts.Source, Reason: fmt.Sprintf("timed out after %s: %v", opts.Timeout, err)}
		}
		if err := sleepCtx(ctx, min(opts.Poll, time.Until(deadline))); err != nil {
			return "", fmt.Errorf("wait-recent: %w", err)
		}
	}
}

// recorded fails with errNoSourceYet when the store knows nothing of src:
// no ingest recorded it, and it has no binding.
func recorded(ctx context.Context, st *store.Store, src string) error {
	if _, err := st.ReadSourceInfo(src); !errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if _, err := st.Remap(ctx, src); !errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("wait-recent: the store %s has no source %s yet: %w", st.Dir(), src, errNoSourceYet)
}

// errNoSourceYet marks what an ingest that is starting creates: a store's
// first source, a collection.
var errNoSourceYet = errors.New("not in the store yet")

// OpenStore opens the store in dir for a wait, waiting until timeout
// (from started) for an ingest that is starting to create it.
func OpenStore(ctx context.Context, dir string, started time.Time, timeout time.Duration) (*store.Store, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := started.Add(timeout)
	for {
		st, err := store.Open(ctx, dir, store.Options{MustExist: true})
		if err == nil || !errors.Is(err, store.ErrNoStore) {
			return st, err
		}
		if !time.Now().Before(deadline) {
			return nil, &NotRecentError{Reason: fmt.Sprintf("timed out after %s: there is no store in %s (yet)", timeout, dir)}
		}
		if err := sleepCtx(ctx, min(10*time.Millisecond, time.Until(deadline))); err != nil {
			return nil, fmt.Errorf("wait-recent: %w", err)
		}
	}
}

// recordedProber is the direct path's prober of the upstream the ingest
// recorded.
func recordedProber(src string, opts Options, info store.SourceInfo, infoErr error) (probe.Prober, error) {
	if infoErr != nil {
		if errors.Is(infoErr, store.ErrNotFound) {
			return nil, hint.Wrap(fmt.Errorf("wait-recent %s: the store does not say which upstream source %s reads (no ingest has recorded it): %w", src, src, infoErr),
				"name the upstream: --source pg --dsn ..., or run 'rtrctl ingest' into this store first")
		}
		return nil, fmt.Errorf("wait-recent %s: %w", src, infoErr)
	}
	if opts.Recorded == nil {
		return nil, fmt.Errorf("wait-recent %s: no way to probe a recorded %s upstream was given", src, info.Kind)
	}
	p, err := opts.Recorded(info, opts.Password)
	if err != nil {
		return nil, fmt.Errorf("wait-recent %s: %w", src, err)
	}
	return p, nil
}

// ResolveSource picks the source to wait for: source if set, else the
// source of collection (its schema's rtr.source), else the store's only
// source.
func ResolveSource(ctx context.Context, st *store.Store, source, collection string) (string, error) {
	if source != "" {
		return source, nil
	}
	if collection != "" {
		sh, err := st.Shard(ctx, collection)
		if errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("wait-recent: collection %s is %w: %w", collection, errNoSourceYet, err)
		}
		if err != nil {
			return "", fmt.Errorf("wait-recent: %w", err)
		}
		if src, ok := sh.Schema().Metadata().GetValue(pipe.KeySource); ok && src != "" {
			return src, nil
		}
		return "", hint.Wrap(fmt.Errorf("wait-recent: collection %s does not say which source it came from", collection),
			"name the source id with --source-id")
	}
	srcs, err := st.Sources(ctx)
	if err != nil {
		return "", fmt.Errorf("wait-recent: %w", err)
	}
	if len(srcs) == 0 {
		// An ingest that just started has recorded its source but bound
		// nothing yet.
		if srcs, err = st.RecordedSources(); err != nil {
			return "", fmt.Errorf("wait-recent: %w", err)
		}
	}
	switch len(srcs) {
	case 1:
		return srcs[0], nil
	case 0:
		return "", hint.Wrap(fmt.Errorf("wait-recent: the store %s has no source yet: %w", st.Dir(), errNoSourceYet),
			"start 'rtrctl ingest --store DIR ...' first")
	}
	return "", hint.Wrap(fmt.Errorf("wait-recent: the store %s has %d sources (%s); which one?", st.Dir(), len(srcs), strings.Join(srcs, ", ")),
		"name it with --source-id")
}

// firstCovering returns the index of the first binding whose frontier
// covers u, or -1. Frontiers only grow along the bindings, so covering is
// monotone: binary search.
func firstCovering(bs []frontier.Binding, u frontier.Frontier) int {
	k := sort.Search(len(bs), func(i int) bool { return bs[i].Frontier.Covers(u) })
	if k == len(bs) {
		return -1
	}
	return k
}

// durableUpper is the least upper of the source's collections, refreshed
// from the store (with no collection, nothing is missing: the maximum).
func durableUpper(ctx context.Context, st *store.Store, collections []string) (uint64, error) {
	if len(collections) == 0 {
		return math.MaxUint64, nil
	}
	return st.LeastUpper(ctx, collections)
}

func ageOf(now time.Time, ms uint64) time.Duration {
	if ms == 0 {
		return 0
	}
	return now.Sub(time.UnixMilli(int64(ms)))
}
