// Package bench runs open-loop load tests of rtrctl ingest: a producer (a
// Kafka producer, or a PostgreSQL writer) writes at a fixed rate whatever
// ingest does, while `rtrctl ingest` runs as a separate process, so that
// its CPU and memory are measured on their own. Every 100 ms the store's
// durable frontier is read and compared with what the upstream has
// acknowledged: the lag in records (or WAL bytes) and in seconds (the age
// of the oldest acknowledged record that is not durable in the store yet,
// looked up exactly in a timeline of acknowledgements). At the end the
// producer stops, ingest must catch up exactly, and a summary is returned.
//
// It is what `rtrctl bench kafka` and `rtrctl bench pg` run; the command
// line only parses flags.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rtrctl/rtrctl/pkg/store"
)

// resumeMsg is the ingest's log message carrying each source's resume
// position ("from"), the same for every source kind.
const resumeMsg = "resume"

// Defaults.
const (
	DefaultDrainTimeout = 120 * time.Second
	// sampleEvery is how often the store and the ingest process are read.
	sampleEvery = 100 * time.Millisecond
	// fastEvery is how often the store is read while a restart has not
	// caught up yet, to time it finer.
	fastEvery = 20 * time.Millisecond
	// readyTimeout bounds the start of the ingest process.
	readyTimeout = 60 * time.Second
)

// Common are the settings shared by every benchmark.
type Common struct {
	// Duration is how long the producer writes.
	Duration time.Duration
	// RestartEvery, when positive, SIGKILLs the ingest process this often
	// while the producer writes and starts it again at once.
	RestartEvery time.Duration
	// StoreDir is the store; it must not exist or be empty. "" means a
	// temporary directory, removed at the end.
	StoreDir string
	// Rtrctl is the rtrctl binary run as `rtrctl ingest`.
	Rtrctl string
	// IngestFlags are more flags of every `rtrctl ingest` (e.g.
	// --state-cache=64MiB), after the workload's own.
	IngestFlags []string
	// IngestEnv is more environment of every `rtrctl ingest` (e.g.
	// RTR_MEMORY_LIMIT=512MiB: the bench process and its broker keep
	// their own budget).
	IngestEnv []string
	// DrainTimeout bounds the wait for ingest to catch up after the
	// producer stopped (DefaultDrainTimeout when 0).
	DrainTimeout time.Duration
	// Progress receives one line per second; nil discards them.
	Progress io.Writer
	// IngestLog, when set, is the file ingest's stderr is appended to
	// (every process of the run); "" means a file next to the store.
	IngestLog string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Result is the summary of a run. Counts are records (Kafka) or
// transactions (PostgreSQL).
type Result struct {
	Source     string  `json:"source"`
	Envelope   string  `json:"envelope,omitempty"`
	TargetRate float64 `json:"target_rate"`
	Seconds    float64 `json:"seconds"`
	// Sent: acknowledged by the upstream; Ingested: durable in the store.
	Sent     int64 `json:"sent"`
	Ingested int64 `json:"ingested"`
	// PreloadRecords were written (and made durable, in PreloadSeconds)
	// before the timed run; Sent and Ingested count them too, Rate does
	// not.
	PreloadRecords int64   `json:"preload_records,omitempty"`
	PreloadSeconds float64 `json:"preload_seconds,omitempty"`
	// Rows: PostgreSQL rows written (Sent is transactions).
	Rows int64 `json:"rows,omitempty"`
	// Rate is Sent over the producer's run time.
	Rate float64 `json:"rate"`
	// ProducerMaxBehindSeconds is how far the producer itself fell behind
	// its schedule at worst (it cannot produce faster than that).
	ProducerMaxBehindSeconds float64 `json:"producer_max_behind_seconds"`
	LagP50Seconds            float64 `json:"lag_p50_seconds"`
	LagP99Seconds            float64 `json:"lag_p99_seconds"`
	LagMaxSeconds            float64 `json:"lag_max_seconds"`
	MaxLagRecords            int64   `json:"max_lag_records"`
	// MaxLagWALBytes: PostgreSQL, insert LSN minus the durable frontier.
	MaxLagWALBytes int64 `json:"max_lag_wal_bytes,omitempty"`
	// DrainSeconds: from the producer's stop to ingested == sent.
	DrainSeconds float64 `json:"drain_seconds"`
	// PeakRSSBytes and CPUSeconds (user+system) of the ingest processes:
	// the largest peak, the sum of CPU time.
	PeakRSSBytes int64     `json:"peak_rss_bytes"`
	CPUSeconds   float64   `json:"cpu_seconds"`
	Samples      int       `json:"samples"`
	Restarts     []Restart `json:"restarts"`
	// Timeline is every 100 ms sample (for plots); not in the JSON.
	Timeline []Sample `json:"-"`
}

// Restart is one SIGKILL and restart of ingest.
type Restart struct {
	// AtSeconds: since the producer started.
	AtSeconds float64 `json:"at_seconds"`
	// SentAtRestart: acknowledged upstream when the new process started.
	SentAtRestart int64 `json:"sent_at_restart"`
	// DurableAtKill: ingested (durable) right after the kill.
	DurableAtKill int64 `json:"durable_at_kill"`
	// ResumeFrom: where the new process resumed, from its log line
	// "resume ... from=" (Kafka) or "replicate ... from=" (PostgreSQL);
	// ResumeRecords is its sum over partitions (Kafka).
	ResumeFrom    string `json:"resume_from"`
	ResumeRecords int64  `json:"resume_records,omitempty"`
	// FirstProgressSeconds: restart to the first move of the store's
	// durable frontier; CatchUpSeconds: restart to ingested >=
	// SentAtRestart. -1: did not happen before the next restart or the end.
	FirstProgressSeconds float64 `json:"first_progress_seconds"`
	CatchUpSeconds       float64 `json:"catch_up_seconds"`
}

// Sample is one measurement.
type Sample struct {
	At         time.Duration // since the producer started
	Sent       int64
	Ingested   int64
	LagUnits   int64 // records or WAL bytes
	LagSeconds float64
	RSSBytes   int64
}

// observation is what a workload reports about upstream and store.
type observation struct {
	sent, ingested int64
	rows           int64
	lagUnits       int64
	lagSeconds     float64
	// caughtUp: everything acknowledged so far is durable.
	caughtUp bool
	// position grows when the durable frontier moves.
	position int64
}

// workload is the upstream side of a benchmark.
type workload interface {
	// source is the store source id ingest writes.
	source() string
	// ingestArgs are the arguments of `rtrctl ingest` and its extra
	// environment.
	ingestArgs(storeDir string) (args, env []string)
	// resumeRecords sums a resume position, where that means something.
	resumeRecords(from string) int64
	// produce writes at the configured rate until ctx ends or d passed,
	// then waits for every acknowledgement. It reports how far it fell
	// behind its own schedule.
	produce(ctx context.Context, d time.Duration) (behind time.Duration, err error)
	// observe reads the store's durable frontier and the upstream.
	observe(ctx context.Context, st *store.Store, now time.Time) (observation, error)
	// nudge is called every second while draining (PostgreSQL writes a
	// little WAL elsewhere so the stream's position moves past the end).
	nudge(ctx context.Context) error
	// units names the lag units in progress lines ("records").
	units() string
	// what names the counted things ("records", "txns").
	what() string
}

// run is one benchmark run.
type run struct {
	cfg    Common
	w      workload
	log    *slog.Logger
	res    *Result
	dir    string
	logf   string
	procs  []*ingestProc
	cur    *ingestProc
	st     *store.Store
	start  time.Time
	lagAll []float64
}

func (c *Common) check() error {
	if c.Duration <= 0 {
		return errors.New("the run needs a positive duration")
	}
	if c.Rtrctl == "" {
		return errors.New("no rtrctl binary given")
	}
	if c.RestartEvery < 0 {
		return errors.New("negative restart interval")
	}
	return nil
}

// execute runs the benchmark: ingest, producer, sampling, restarts, drain.
func execute(ctx context.Context, cfg Common, w workload, res *Result) (err error) {
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	r := &run{cfg: cfg, w: w, log: cfg.Logger, res: res}
	if r.log == nil {
		r.log = slog.Default()
	}
	dir := cfg.StoreDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "rtr-bench-")
		if err != nil {
			return fmt.Errorf("bench: create store dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "store")
	} else if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("bench: store %s is not empty: the benchmark starts from an empty store", dir)
	}
	r.dir = dir
	r.logf = cfg.IngestLog
	if r.logf == "" {
		r.logf = filepath.Clean(dir) + ".ingest.log"
		if cfg.StoreDir == "" {
			defer os.Remove(r.logf)
		}
	}
	if err := os.WriteFile(r.logf, nil, 0o644); err != nil {
		return fmt.Errorf("bench: ingest log: %w", err)
	}
	defer func() {
		for _, p := range r.procs {
			p.kill()
		}
		if r.cur != nil && err != nil {
			err = fmt.Errorf("%w\ningest log (%s), last lines:\n%s", err, r.logf, tailFile(r.logf, 15))
		}
	}()

	// Ingest first; the clock starts when it is ready (it has resumed
	// from the empty store), so its process start is not counted as lag.
	if err := r.startIngest(ctx); err != nil {
		return err
	}
	if _, err := r.waitResume(ctx, r.cur); err != nil {
		return err
	}
	if r.st, err = r.openStore(ctx); err != nil {
		return err
	}

	if pl, ok := w.(preloader); ok {
		if err := r.preload(ctx, pl); err != nil {
			return err
		}
	}

	pctx, cancelProduce := context.WithCancel(ctx)
	defer cancelProduce()
	type produced struct {
		behind time.Duration
		err    error
	}
	pdone := make(chan produced, 1)
	r.start = time.Now()
	go func() {
		b, err := w.produce(pctx, cfg.Duration)
		pdone <- produced{b, err}
	}()

	tick := time.NewTicker(fastEvery)
	defer tick.Stop()
	var (
		lastSample  time.Time
		stopped     time.Time
		nextLine    = time.Second
		lastRestart = r.start
		restarts    []*restartState
		maxLagU     int64
		maxLagS     float64
		last        observation
		lastNudge   time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-pdone:
			if p.err != nil {
				return fmt.Errorf("bench: producer: %w", p.err)
			}
			res.ProducerMaxBehindSeconds = p.behind.Seconds()
			stopped = time.Now()
			res.Seconds = stopped.Sub(r.start).Seconds()
			pdone = nil
		case <-tick.C:
		}
		now := time.Now()
		pending := false
		for _, rs := range restarts {
			r.findResume(rs)
			pending = pending || rs.CatchUpSeconds < 0 || !rs.resumed
		}
		full := now.Sub(lastSample) >= sampleEvery-fastEvery/2 || pdone == nil
		if !full && !pending {
			continue
		}
		if r.cur.exited() {
			return fmt.Errorf("bench: rtrctl ingest exited on its own (%s)", r.cur.exitText())
		}
		r.cur.sample()
		o, err := w.observe(ctx, r.st, now)
		if err != nil {
			return err
		}
		last = o
		for _, rs := range restarts {
			rs.update(now, o)
		}
		if !full {
			continue
		}
		lastSample = now
		elapsed := now.Sub(r.start)
		res.Timeline = append(res.Timeline, Sample{At: elapsed, Sent: o.sent, Ingested: o.ingested, LagUnits: o.lagUnits, LagSeconds: o.lagSeconds, RSSBytes: r.cur.rss})
		r.lagAll = append(r.lagAll, o.lagSeconds)
		maxLagU = max(maxLagU, o.lagUnits)
		maxLagS = max(maxLagS, o.lagSeconds)
		if elapsed >= nextLine || (!stopped.IsZero() && o.caughtUp) {
			for nextLine <= elapsed {
				nextLine += time.Second
			}
			fmt.Fprintf(cfg.Progress, "after %6.1fs sent %d %s, ingested %d; lag %d %s (%.3f s); max lag %d %s (%.3f s); ingest rss %d MiB, cpu %.1f s\n",
				elapsed.Seconds(), o.sent, w.what(), o.ingested, o.lagUnits, w.units(), o.lagSeconds, maxLagU, w.units(), maxLagS,
				r.peakRSS()>>20, r.cpuSeconds())
		}
		if !stopped.IsZero() {
			if o.caughtUp {
				res.DrainSeconds = now.Sub(stopped).Seconds()
				break
			}
			if now.Sub(stopped) > cfg.DrainTimeout {
				return fmt.Errorf("bench: ingest did not catch up within %s of the producer's stop: sent %d, ingested %d", cfg.DrainTimeout, o.sent, o.ingested)
			}
			if now.Sub(lastNudge) >= time.Second {
				lastNudge = now
				if err := w.nudge(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if cfg.RestartEvery > 0 && now.Sub(lastRestart) >= cfg.RestartEvery && now.Sub(r.start) < cfg.Duration-cfg.RestartEvery/4 {
			rs, err := r.restart(ctx)
			if err != nil {
				return err
			}
			lastRestart = rs.at
			restarts = append(restarts, rs)
		}
	}

	// Stop ingest cleanly and collect its figures.
	if err := r.cur.stop(30 * time.Second); err != nil {
		return err
	}
	r.cur = nil
	res.Sent, res.Ingested, res.Rows = last.sent, last.ingested, last.rows
	if res.Seconds > 0 {
		res.Rate = float64(res.Sent-res.PreloadRecords) / res.Seconds
	}
	res.MaxLagRecords = maxLagU
	res.LagMaxSeconds = maxLagS
	res.LagP50Seconds = percentile(r.lagAll, 0.50)
	res.LagP99Seconds = percentile(r.lagAll, 0.99)
	res.Samples = len(r.lagAll)
	res.PeakRSSBytes = r.peakRSS()
	res.CPUSeconds = r.cpuSeconds()
	res.Restarts = []Restart{}
	for _, rs := range restarts {
		r.findResume(rs)
		if !rs.resumed {
			return fmt.Errorf("bench: the ingest started at %.1f s never logged %q", rs.AtSeconds, resumeMsg)
		}
		res.Restarts = append(res.Restarts, rs.Restart)
	}
	return nil
}

// preloader is a workload that writes a preload before the timed run
// (bench kafka --preload-keys: every key once, so the state holds them
// all from the first second on).
type preloader interface {
	// preload writes the preload as fast as the upstream takes it and
	// waits for its acknowledgements; it returns how many it wrote (0:
	// none configured).
	preload(ctx context.Context) (int64, error)
}

// preload writes the workload's preload and waits until ingest has it all
// durable, sampling the ingest's RSS on the way (its peak counts), so the
// clock of the timed run starts over a full state.
func (r *run) preload(ctx context.Context, pl preloader) error {
	began := time.Now()
	n, err := pl.preload(ctx)
	if err != nil {
		return fmt.Errorf("bench: preload: %w", err)
	}
	if n == 0 {
		return nil
	}
	produced := time.Since(began)
	next := time.Now()
	for {
		if r.cur.exited() {
			return fmt.Errorf("bench: rtrctl ingest exited during the preload (%s)", r.cur.exitText())
		}
		r.cur.sample()
		o, err := r.w.observe(ctx, r.st, time.Now())
		if err != nil {
			return err
		}
		if o.caughtUp || time.Now().After(next) {
			next = next.Add(time.Second)
			fmt.Fprintf(r.cfg.Progress, "preload after %6.1fs: sent %d %s, ingested %d; ingest rss %d MiB, cpu %.1f s\n",
				time.Since(began).Seconds(), o.sent, r.w.what(), o.ingested, r.peakRSS()>>20, r.cpuSeconds())
		}
		if o.caughtUp {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sampleEvery):
		}
	}
	r.res.PreloadRecords, r.res.PreloadSeconds = n, time.Since(began).Seconds()
	r.log.Info("bench: preload durable", "records", n, "produced_in", produced.Round(time.Millisecond), "durable_in", time.Since(began).Round(time.Millisecond))
	return nil
}

// restartState follows one restart until it has caught up.
type restartState struct {
	Restart
	at       time.Time
	position int64
	proc     *ingestProc
	resumed  bool
}

func (rs *restartState) update(now time.Time, o observation) {
	if rs.FirstProgressSeconds < 0 && o.position > rs.position {
		rs.FirstProgressSeconds = now.Sub(rs.at).Seconds()
	}
	if rs.CatchUpSeconds < 0 && o.ingested >= rs.SentAtRestart {
		rs.CatchUpSeconds = now.Sub(rs.at).Seconds()
	}
}

// restart SIGKILLs ingest, notes what is durable and starts it again. The
// resume position is read from the new process's log as it appears.
func (r *run) restart(ctx context.Context) (*restartState, error) {
	r.cur.kill()
	o, err := r.w.observe(ctx, r.st, time.Now())
	if err != nil {
		return nil, err
	}
	if err := r.startIngest(ctx); err != nil {
		return nil, err
	}
	at := r.cur.started
	o2, err := r.w.observe(ctx, r.st, at)
	if err != nil {
		return nil, err
	}
	return &restartState{
		Restart: Restart{AtSeconds: at.Sub(r.start).Seconds(), SentAtRestart: o2.sent, DurableAtKill: o.ingested,
			FirstProgressSeconds: -1, CatchUpSeconds: -1},
		at: at, position: o.position, proc: r.cur,
	}, nil
}

// findResume fills in the resume position once the process logged it.
func (r *run) findResume(rs *restartState) {
	if rs.resumed {
		return
	}
	if from, ok := findResume(r.logf, rs.proc.logOffset, resumeMsg); ok {
		rs.resumed = true
		rs.ResumeFrom = from
		rs.ResumeRecords = r.w.resumeRecords(from)
		r.log.Info("bench: ingest restarted", "at_seconds", fmt.Sprintf("%.1f", rs.AtSeconds), "durable_at_kill", rs.DurableAtKill, "resume_from", from)
	}
}

func (r *run) startIngest(ctx context.Context) error {
	args, env := r.w.ingestArgs(r.dir)
	p, err := startIngest(r.cfg.Rtrctl, append(args, r.cfg.IngestFlags...), append(env, r.cfg.IngestEnv...), r.logf)
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p)
	r.cur = p
	return nil
}

// waitResume waits for p's resume log line and returns its position.
func (r *run) waitResume(ctx context.Context, p *ingestProc) (string, error) {
	deadline := time.Now().Add(readyTimeout)
	for {
		if from, ok := findResume(r.logf, p.logOffset, resumeMsg); ok {
			return from, nil
		}
		if p.exited() {
			return "", fmt.Errorf("bench: rtrctl ingest exited before it resumed (%s)", p.exitText())
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("bench: rtrctl ingest did not log %q within %s", resumeMsg, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *run) openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, r.dir, store.Options{MustExist: true})
	if err != nil {
		return nil, fmt.Errorf("bench: open store: %w", err)
	}
	return st, nil
}

func (r *run) peakRSS() int64 {
	var m int64
	for _, p := range r.procs {
		m = max(m, p.peakRSS())
	}
	return m
}

func (r *run) cpuSeconds() float64 {
	var s float64
	for _, p := range r.procs {
		s += p.cpuSeconds()
	}
	return s
}

// percentile is the nearest-rank percentile q (0..1) of xs; 0 when empty.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// tailFile returns the last n lines of path.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FormatText writes the summary for people.
func FormatText(w io.Writer, res *Result) error {
	var b strings.Builder
	unit := "records"
	if res.Source == "pg" {
		unit = "txns"
	}
	fmt.Fprintf(&b, "summary: %s", res.Source)
	if res.Envelope != "" {
		fmt.Fprintf(&b, " (envelope %s)", res.Envelope)
	}
	fmt.Fprintf(&b, ", target %.0f %s/s for %.1f s\n", res.TargetRate, unit, res.Seconds)
	fmt.Fprintf(&b, "  sent %d %s, ingested %d", res.Sent, unit, res.Ingested)
	if res.Rows > 0 {
		fmt.Fprintf(&b, " (%d rows)", res.Rows)
	}
	fmt.Fprintf(&b, "; sustained rate %.0f %s/s\n", res.Rate, unit)
	if res.PreloadRecords > 0 {
		fmt.Fprintf(&b, "  preload: %d %s before the timed run, durable in %.1f s (counted in sent and ingested, not in the rate)\n", res.PreloadRecords, unit, res.PreloadSeconds)
	}
	if res.ProducerMaxBehindSeconds > 0.1 {
		fmt.Fprintf(&b, "  warning: the producer itself fell up to %.2f s behind its schedule\n", res.ProducerMaxBehindSeconds)
	}
	fmt.Fprintf(&b, "  lag p50 %.3f s, p99 %.3f s, max %.3f s (%d samples); max lag %d %s", res.LagP50Seconds, res.LagP99Seconds, res.LagMaxSeconds, res.Samples, res.MaxLagRecords, unit)
	if res.MaxLagWALBytes > 0 {
		fmt.Fprintf(&b, ", %d WAL bytes", res.MaxLagWALBytes)
	}
	fmt.Fprintf(&b, "\n  drain %.3f s; ingest peak RSS %d MiB, CPU %.1f s (%.0f%% of one core)\n", res.DrainSeconds, res.PeakRSSBytes>>20, res.CPUSeconds,
		100*res.CPUSeconds/math.Max(res.Seconds+res.DrainSeconds, 0.001))
	for i, rs := range res.Restarts {
		fmt.Fprintf(&b, "  restart %d at %.1f s: durable at kill %d, resumed from %s", i+1, rs.AtSeconds, rs.DurableAtKill, rs.ResumeFrom)
		if rs.ResumeRecords > 0 {
			fmt.Fprintf(&b, " (%d records)", rs.ResumeRecords)
		}
		fmt.Fprintf(&b, "; first progress %s, caught up %s\n", secs(rs.FirstProgressSeconds), secs(rs.CatchUpSeconds))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func secs(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.3f s", s)
}
