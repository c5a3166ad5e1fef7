package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/store"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show how far each collection of a store is ingested",
		ArgsUsage: "DIR",
		Description: `For every collection: its durable upper as a system time (milliseconds since
the Unix epoch) and as its source's frontier, rows, batches, size and last
error; for every source: whether an ingest holds it, its last binding and,
when its upstream is named, the upstream frontier and the lag behind it.

The lag is the upstream frontier minus the last binding's frontier, summed
over partitions, in the positions of the source's kind: WAL bytes (pg),
transactions (mysql, mariadb) or records (kafka), as the rtr_lag_positions
metric of 'rtrctl ingest'; and the age of that binding in ms (0 when caught
up). With it, what the upstream keeps for the source to resume from: the
WAL a pg source's replication slot holds back (and its wal_status and
safe_wal_size), or how long a mysql server keeps binlogs and the headroom
left after the lag. Without --dsn, --brokers or --probe-recorded status
reads only the store and probes nothing.

Each source is measured as its own kind (the one its ingest recorded, else
the one of its frontiers): --dsn is parsed as a PostgreSQL DSN for pg
sources and as a MySQL DSN for mysql sources; --brokers measures every
kafka source, each at the topic its ingest recorded. In a store with
sources of several kinds, a source the flags do not fit (a postgres:// DSN,
a mysql source) is skipped with a note; a --dsn or --brokers that fits no
source of the store is an error. A --dsn measures every source of its kind:
when sources of one kind come from several servers, only the lag of those
on the server it names means anything.

While an ingest's initial snapshot runs, or after one was interrupted
(it resumes at the next ingest), a SNAPSHOT section shows per table the
rows copied, the estimate (pg_class.reltuples; MySQL: TABLE_ROWS), the chunks done, the rate
and the time left; the source is listed before it has any binding.

--probe-recorded measures the sources the flags do not name against the
upstream their ingest recorded in the store, as wait-recent does. The store
holds no password: PostgreSQL takes it from PGPASSWORD or ~/.pgpass; name a
mysql source that needs one with --dsn. An upstream that cannot be probed
fails the command (exit 1).

Examples:
  rtrctl status ./data
  rtrctl status ./data --dsn postgres://app@127.0.0.1/app --output json
  rtrctl status ./data --dsn 'app:secret@tcp(127.0.0.1:3306)/app'
  rtrctl status ./data --brokers 127.0.0.1:9092
  rtrctl status ./data --dsn 'app:secret@tcp(127.0.0.1:3306)/app' --brokers 127.0.0.1:9092
  PGPASSWORD=secret rtrctl status ./data --probe-recorded

--output json gives the same with system times as numbers; per source
"upstream" (a frontier), "lag_positions", "lag_wal_bytes" (pg sources
only, the same number), "lag_ms" when measured, "lag_note" when skipped, "retention" and
"binlog_headroom_seconds", and "snapshot" while an initial snapshot runs or
was interrupted: {"running", "phase", "started", "updated", "tables": [{"name",
"rows", "bytes", "resumed_rows", "estimated_rows", "chunks", "chunks_done",
"rows_per_s", "eta_s"}]} (docs/operations.md, Metrics).`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "dsn", Usage: "measure the store's pg sources against this PostgreSQL DSN, or its mysql sources against this MySQL/MariaDB DSN (forms as for 'rtrctl ingest')"},
			dsnFileFlag(),
			&cli.StringFlag{Name: "brokers", Usage: "measure the store's kafka sources against these brokers, host:port[,host:port]"},
			&cli.BoolFlag{Name: "probe-recorded", Usage: "measure the sources --dsn and --brokers do not name against the upstream their ingest recorded"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
		}, kafkaSecurityFlags()...),
		Action: func(c *cli.Context) error {
			dir, err := oneArg(c, "DIR")
			if err != nil {
				return err
			}
			out := c.String("output")
			if out != "text" && out != "json" {
				return usagef("use --output text or json", "bad --output %q", out)
			}
			opts := statusOptions{dir: dir, output: out, recorded: c.Bool("probe-recorded"), flags: map[string]bool{}}
			for _, k := range sourceKinds {
				if c.String(k.upstreamFlag) != "" || k.upstreamFlag == "dsn" && c.String("dsn-file") != "" {
					opts.flags[k.upstreamFlag] = true
				}
			}
			opts.upstream = func(k *sourceKind, info store.SourceInfo) (sourceUpstream, error) { return k.upstreamFor(c, info) }
			return runStatus(c.Context, c.App.Writer, opts)
		},
	}
}

type statusOptions struct {
	dir, output string
	// flags are the upstream flags given (sourceKind.upstreamFlag: dsn,
	// brokers); upstream parses them as kind k for a source of the store.
	flags    map[string]bool
	upstream func(k *sourceKind, info store.SourceInfo) (sourceUpstream, error)
	// recorded measures the sources the flags do not name against the
	// upstream their ingest recorded (--probe-recorded).
	recorded bool
}

// statusJSON is the JSON form of `rtrctl status`. System times are numbers
// (milliseconds since the Unix epoch).
type statusJSON struct {
	Collections []collectionStatus `json:"collections"`
	Sources     []sourceStatus     `json:"sources"`
}

type collectionStatus struct {
	Name      string             `json:"name"`
	Source    string             `json:"source,omitempty"`
	Since     uint64             `json:"since"`
	Upper     uint64             `json:"upper"`
	Frontier  *frontier.Frontier `json:"frontier,omitempty"`
	Rows      int64              `json:"rows"`
	Batches   int                `json:"batches"`
	Bytes     int64              `json:"bytes"`
	LastError string             `json:"last_error,omitempty"`
}

type sourceStatus struct {
	Name      string             `json:"name"`
	Kind      string             `json:"kind,omitempty"`
	Running   bool               `json:"ingest_running"`
	Bindings  int                `json:"bindings"`
	LastBound uint64             `json:"last_binding_time"`
	Frontier  *frontier.Frontier `json:"frontier,omitempty"`
	Upstream  *frontier.Frontier `json:"upstream,omitempty"`
	// LagPositions is Upstream minus Frontier summed over partitions
	// (frontier.Lag), in the unit of their domain; LagBytes is the same
	// for pg sources, whose positions are WAL bytes.
	LagPositions *uint64 `json:"lag_positions,omitempty"`
	LagBytes     *uint64 `json:"lag_wal_bytes,omitempty"`
	// LagMillis is the age of the last binding, 0 when caught up.
	LagMillis *int64 `json:"lag_ms,omitempty"`
	// LagNote says why the lag was not measured when an upstream was named
	// but does not fit the source.
	LagNote string `json:"lag_note,omitempty"`
	// Retention is what the upstream keeps for the source to resume from
	// (a PostgreSQL slot's retained WAL, a MySQL server's binlog expiry),
	// when measured; RetentionNote says why it could not be read.
	Retention     *probe.Retention `json:"retention,omitempty"`
	RetentionNote string           `json:"retention_note,omitempty"`
	// BinlogHeadroomSeconds is the binlog retention minus the lag: about
	// how long the source may stay behind before the server may purge a
	// binlog it needs.
	BinlogHeadroomSeconds *float64 `json:"binlog_headroom_seconds,omitempty"`
	// Snapshot is the progress of the source's initial snapshot while it
	// runs, or of one that was interrupted (it resumes at the next
	// ingest); omitted once it is committed.
	Snapshot *snapshotStatus `json:"snapshot,omitempty"`
}

// snapshotStatus is a source's initial snapshot in status.
type snapshotStatus struct {
	// Running: an ingest holds the source; else interrupted.
	Running bool `json:"running"`
	// Phase is copy, rewind or commit; Updated when the ingest last
	// reported (RFC 3339).
	Phase   string                  `json:"phase"`
	Started time.Time               `json:"started"`
	Updated time.Time               `json:"updated"`
	Tables  []*ingest.TableProgress `json:"tables"`
}

func runStatus(ctx context.Context, w io.Writer, opts statusOptions) error {
	st, err := store.Open(ctx, opts.dir, store.Options{MustExist: true})
	if err != nil {
		return err
	}
	var out statusJSON
	sources, err := st.Sources(ctx)
	if err != nil {
		return err
	}
	// A source whose first snapshot runs has no bindings yet.
	recorded, err := st.RecordedSources()
	if err != nil {
		return err
	}
	for _, src := range recorded {
		if p, _ := snapshotProgress(st, src); p != nil && !slices.Contains(sources, src) {
			sources = append(sources, src)
		}
	}
	sort.Strings(sources)
	bindings := map[string][]frontier.Binding{}
	// Which upstream each source is measured against is settled for all
	// of them before any is probed: a flag that fits no source fails
	// before any connection.
	ups := newStatusUpstreams(opts)
	defer ups.close()
	out.Sources = make([]sourceStatus, len(sources))
	for i, src := range sources {
		bs, _, err := st.Bindings(ctx, src)
		if err != nil && !errors.Is(err, store.ErrNotFound) { // none yet: an initial snapshot
			return err
		}
		bindings[src] = bs
		s := &out.Sources[i]
		*s = sourceStatus{Name: src, Running: st.LockHeld(src), Bindings: len(bs)}
		if p, running := snapshotProgress(st, src); p != nil {
			s.Snapshot = &snapshotStatus{Running: running, Phase: p.Phase, Started: p.Started, Updated: p.Updated, Tables: p.Tables}
		}
		if len(bs) > 0 {
			last := bs[len(bs)-1]
			s.LastBound, s.Frontier = last.Time, &last.Frontier
		}
		info, err := st.ReadSourceInfo(src)
		recorded := err == nil
		if recorded {
			s.Kind = info.Kind
		} else if !errors.Is(err, store.ErrNotFound) && ups.asked() {
			return fmt.Errorf("status %s: %w", src, err)
		}
		if err := ups.pick(s, info, recorded); err != nil {
			return err
		}
	}
	if err := ups.check(out.Sources); err != nil {
		return err
	}
	if err := ups.measure(ctx, bindings); err != nil {
		return err
	}
	names, err := st.Collections(ctx)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		sh, err := st.Shard(ctx, n)
		if err != nil {
			return err
		}
		info, err := sh.Info(ctx)
		if err != nil {
			return err
		}
		cs := collectionStatus{Name: n, Since: info.Since, Upper: info.Upper, Rows: info.Rows, Batches: len(info.Batches), Bytes: info.Bytes}
		if src, ok := info.Schema.Metadata().GetValue("rtr.source"); ok {
			cs.Source = src
			if bs := bindings[src]; len(bs) > 0 {
				k := sort.Search(len(bs), func(i int) bool { return bs[i].Time >= info.Upper })
				if k > 0 {
					f := bs[k-1].Frontier
					cs.Frontier = &f
				}
			}
		}
		if len(info.Errors) > 0 {
			e := info.Errors[len(info.Errors)-1]
			cs.LastError = fmt.Sprintf("at %d: %s", e.Time, e.Message)
		}
		out.Collections = append(out.Collections, cs)
	}
	if opts.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COLLECTION\tSOURCE\tUPPER\tFRONTIER\tROWS\tBATCHES\tBYTES\tLAST ERROR")
	for _, c := range out.Collections {
		f := "-"
		if c.Frontier != nil {
			f = c.Frontier.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", c.Name, c.Source, c.Upper, f, c.Rows, c.Batches, c.Bytes, c.LastError)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SOURCE\tKIND\tINGEST\tBINDINGS\tLAST BINDING\tFRONTIER\tUPSTREAM\tLAG\tNOTE")
	for _, s := range out.Sources {
		running := "stopped"
		if s.Running {
			running = "running"
		}
		f, up, lag := "-", "-", "-"
		if s.Frontier != nil {
			f = s.Frontier.String()
		}
		if s.Upstream != nil {
			up = s.Upstream.String()
		}
		if s.LagPositions != nil {
			lag = fmt.Sprintf("%d %s, %d ms", *s.LagPositions, s.Upstream.Domain().Unit(), *s.LagMillis)
		}
		note := s.LagNote
		if r := retentionNote(s); r != "" {
			note = strings.TrimPrefix(note+"; "+r, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, running, s.Bindings, s.LastBound, f, up, lag, note)
	}
	printSnapshots(tw, out.Sources)
	return tw.Flush()
}

// printSnapshots prints the initial snapshots that run or were
// interrupted, a line per table.
func printSnapshots(tw io.Writer, sources []sourceStatus) {
	header := false
	for _, s := range sources {
		sn := s.Snapshot
		if sn == nil {
			continue
		}
		if !header {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "SNAPSHOT\tTABLE\tSTATE\tROWS\tEST. ROWS\tCHUNKS\tROWS/S\tETA")
			header = true
		}
		state := sn.Phase
		if !sn.Running {
			state = "interrupted (resumes at the next ingest)"
		}
		for _, tp := range sn.Tables {
			eta := "-"
			if tp.ETASeconds != nil && sn.Running {
				eta = (time.Duration(*tp.ETASeconds * float64(time.Second))).Round(time.Second).String()
			}
			est := "-"
			if tp.EstimatedRows > 0 {
				est = fmt.Sprint(tp.EstimatedRows)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d\t%d\t%s\n", s.Name, tp.Name, state, tp.Rows, est, tp.ChunksDone, tp.Chunks, tp.RowsPerSecond, eta)
		}
	}
}

// statusUpstreams settles which upstream status measures each source
// against, then measures them.
type statusUpstreams struct {
	opts    statusOptions
	fits    map[string]int     // upstream flag -> sources it names
	misfits map[string][]error // upstream flag -> why it fits no source of its kinds
	probes  []sourceProbe
}

// sourceProbe is the prober of one source's upstream.
type sourceProbe struct {
	// upstream is the upstream info the ingest recorded (the slot).
	upstream map[string]string
	s        *sourceStatus
	p        probe.Prober
}

func newStatusUpstreams(opts statusOptions) *statusUpstreams {
	return &statusUpstreams{opts: opts, fits: map[string]int{}, misfits: map[string][]error{}}
}

// asked reports whether any upstream was asked to be probed.
func (u *statusUpstreams) asked() bool { return len(u.opts.flags) > 0 || u.opts.recorded }

// pick chooses the upstream of source s, which the store recorded as info
// (when recorded): the one the flags name for its kind, else with
// --probe-recorded the recorded one. A source measured against none gets
// a note saying why, when some upstream was named.
func (u *statusUpstreams) pick(s *sourceStatus, info store.SourceInfo, recorded bool) error {
	if !u.asked() {
		return nil
	}
	var k *sourceKind
	switch {
	case recorded:
		if k = kindNamed(info.Kind); k == nil {
			s.LagNote = fmt.Sprintf("not measured: this rtrctl does not know the source kind %q", info.Kind)
			return nil
		}
	case s.Frontier != nil:
		// A store the stages wrote by hand: the kind of its frontiers.
		k, info = kindOfDomain(s.Frontier.Domain()), store.SourceInfo{Source: s.Name}
	}
	if k == nil {
		s.LagNote = "not measured: the store does not say which kind of upstream the source reads"
		return nil
	}
	s.LagNote = fmt.Sprintf("not measured: name its upstream with --%s", k.upstreamFlag)
	var p probe.Prober
	if flag := k.upstreamFlag; u.opts.flags[flag] {
		up, err := u.opts.upstream(k, info)
		if err != nil {
			u.misfits[flag] = append(u.misfits[flag], fmt.Errorf("%s source %s: %w", k.name, s.Name, err))
			s.LagNote = fmt.Sprintf("not measured: --%s is not the upstream of a %s source: %v", flag, k.name, err)
		} else {
			u.fits[flag]++
			if p, err = up.Prober(); err != nil {
				return fmt.Errorf("status %s: %w", s.Name, err)
			}
		}
	}
	if p == nil && u.opts.recorded {
		if !recorded {
			s.LagNote = fmt.Sprintf("not measured: no ingest recorded its upstream; name it with --%s", k.upstreamFlag)
			return nil
		}
		// As wait-recent: no password, so the driver's environment
		// applies (PGPASSWORD, ~/.pgpass).
		var err error
		if p, err = recordedProber(info, ""); err != nil {
			return fmt.Errorf("status %s: %w", s.Name, err)
		}
	}
	if p != nil {
		s.LagNote = ""
		u.probes = append(u.probes, sourceProbe{upstream: info.Upstream, s: s, p: p})
	}
	return nil
}

// measure probes the upstream of every source picked that has bindings and
// sets its upstream frontier and lag.
func (u *statusUpstreams) measure(ctx context.Context, bindings map[string][]frontier.Binding) error {
	for _, sp := range u.probes {
		bs := bindings[sp.s.Name]
		if len(bs) == 0 {
			continue // nothing ingested to be behind by
		}
		if err := measureLag(ctx, sp.s, bs[len(bs)-1], sp.p, sp.upstream); err != nil {
			return err
		}
	}
	return nil
}

func (u *statusUpstreams) close() {
	for _, sp := range u.probes {
		sp.p.Close()
	}
}

// measureLag probes s's upstream and sets its upstream frontier and its
// lag behind it: the rtr_lag_positions of 'rtrctl ingest', and the age of
// the last binding (0 when caught up).
func measureLag(ctx context.Context, s *sourceStatus, last frontier.Binding, p probe.Prober, upstream map[string]string) error {
	res, err := p.Probe(ctx)
	if err != nil {
		return fmt.Errorf("status %s: %w", s.Name, err)
	}
	s.Upstream = &res.Frontier
	lag, err := frontier.Lag(res.Frontier, last.Frontier)
	if err != nil {
		s.LagNote = fmt.Sprintf("not measured: the upstream's frontier is of domain %s, the source's of %s (another server?)", res.Frontier.Domain(), last.Frontier.Domain())
		return nil
	}
	ms := time.Now().UnixMilli() - int64(last.Time)
	if lag == 0 {
		ms = 0
	}
	s.LagPositions, s.LagMillis = &lag, &ms
	if res.Frontier.Domain() == frontier.DomainLSN {
		s.LagBytes = &lag
	}
	if r, ok := p.(probe.Retainer); ok {
		ret, err := r.Retention(ctx, upstream)
		if err != nil {
			s.RetentionNote = err.Error()
			return nil
		}
		s.Retention = &ret
		if ret.BinlogRetentionSeconds != nil {
			h := *ret.BinlogRetentionSeconds - float64(ms)/1000
			s.BinlogHeadroomSeconds = &h
		}
	}
	return nil
}

// retentionNote says in words what the upstream retains for s.
func retentionNote(s sourceStatus) string {
	r := s.Retention
	switch {
	case s.RetentionNote != "":
		return "retention not read: " + s.RetentionNote
	case r == nil:
		return ""
	case r.Slot != "":
		note := fmt.Sprintf("slot %s", r.Slot)
		if r.RetainedBytes != nil {
			note += fmt.Sprintf(" retains %d WAL bytes", *r.RetainedBytes)
		}
		if r.WALStatus != "" {
			note += " (" + r.WALStatus + ")"
		}
		if r.SafeWALSize != nil {
			note += fmt.Sprintf(", %d bytes before it may be lost", *r.SafeWALSize)
		}
		return note
	case s.BinlogHeadroomSeconds != nil:
		return fmt.Sprintf("binlogs kept %s, headroom %s", time.Duration(*r.BinlogRetentionSeconds*float64(time.Second)), time.Duration(*s.BinlogHeadroomSeconds*float64(time.Second)).Round(time.Second))
	}
	return "binlogs never expire"
}

// check fails when an upstream flag given fits no source of the
// store: a --dsn of a kind the store has no source of, or one that does
// not parse.
func (u *statusUpstreams) check(sources []sourceStatus) error {
	for _, flag := range slices.Sorted(maps.Keys(u.opts.flags)) {
		if u.fits[flag] > 0 {
			continue
		}
		if errs := u.misfits[flag]; len(errs) > 0 {
			var hints []string
			for _, e := range errs {
				if h := hint.Of(e); h != "" && !slices.Contains(hints, h) {
					hints = append(hints, h)
				}
			}
			return hint.Wrap(fmt.Errorf("status: --%s fits no source of the store: %w", flag, errors.Join(errs...)), strings.Join(hints, "; or "))
		}
		var kinds, have []string
		for _, k := range sourceKinds {
			if k.upstreamFlag == flag {
				kinds = append(kinds, k.name)
			}
		}
		for _, s := range sources {
			kind := s.Kind
			if kind == "" {
				kind = "kind not recorded"
			}
			have = append(have, fmt.Sprintf("%s (%s)", s.Name, kind))
		}
		if len(have) == 0 {
			have = []string{"none"}
		}
		return usagef("drop --"+flag+", or name the upstream of the store's sources: "+statusFlagKinds(),
			"--%s names the upstream of %s sources, and the store has none (its sources: %s)", flag, strings.Join(kinds, " or "), strings.Join(have, ", "))
	}
	return nil
}

// statusFlagKinds says which flag names which kinds' upstream, e.g.
// "--dsn for pg or mysql, --brokers for kafka".
func statusFlagKinds() string {
	var flags []string
	kinds := map[string][]string{}
	for _, k := range sourceKinds {
		if kinds[k.upstreamFlag] == nil {
			flags = append(flags, k.upstreamFlag)
		}
		kinds[k.upstreamFlag] = append(kinds[k.upstreamFlag], k.name)
	}
	var parts []string
	for _, f := range flags {
		parts = append(parts, "--"+f+" for "+strings.Join(kinds[f], " or "))
	}
	return strings.Join(parts, ", ")
}
