package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// CompactResult reports what a compaction of one shard did.
type CompactResult struct {
	Name string
	Kind string
	// Committed reports whether a new manifest version was written.
	Committed bool
	// GaveUp reports that a concurrent compaction changed the batches
	// first; nothing was changed by this one (try again later).
	GaveUp bool
	// Merged batch files were replaced by Written new ones.
	Merged, Written int
	// RowsBefore and RowsAfter count the rows of the merged batches
	// before and after consolidation.
	RowsBefore, RowsAfter int64
	// OldSince and Since are the since before and after.
	OldSince, Since uint64
	// DroppedGenerations counts the generations removed because a later
	// one starts at or before the new since (their batches left the
	// manifest; their files are removed like other unreferenced ones).
	DroppedGenerations int
	// Removed counts files removed: old manifests, unreferenced batches and
	// stray temporary files.
	Removed int
}

// mergeGroup is a run of consecutive batches replaced by out (nil when
// everything in them cancelled out).
type mergeGroup struct {
	files []string
	in    []BatchMeta
	out   []BatchMeta
}

// planMerges picks runs of consecutive batches to merge, size-tiered:
// scanning oldest to newest, a run is merged into the one after it while
// the older is at most twice the newer's rows. Afterwards run sizes shrink
// geometrically towards the newest, so a shard holds O(log rows) batches
// and each row is rewritten O(log rows) times.
func planMerges(bs []BatchMeta) [][2]int {
	type grp struct {
		lo, hi int
		rows   int64
	}
	var st []grp
	for i, b := range bs {
		st = append(st, grp{i, i + 1, max(b.Rows, 1)})
		for len(st) >= 2 && st[len(st)-2].rows <= 2*st[len(st)-1].rows {
			a, c := st[len(st)-2], st[len(st)-1]
			st = append(st[:len(st)-2], grp{a.lo, c.hi, a.rows + c.rows})
		}
	}
	var out [][2]int
	for _, g := range st {
		if g.hi-g.lo >= 2 {
			out = append(out, [2]int{g.lo, g.hi})
		}
	}
	return out
}

// sinceFor returns the since compaction advances to: upper - Retain, never
// backwards and never beyond upper-1.
func (sh *Shard) sinceFor(m *Manifest) uint64 {
	s := m.Since
	r := sh.st.opts.Retain
	if r < 0 || m.Upper == 0 {
		return s
	}
	ms := uint64(r.Milliseconds())
	if m.Upper > ms {
		s = max(s, m.Upper-ms)
	}
	return min(s, m.Upper-1)
}

// Compact merges small batches (size-tiered, within each generation),
// advances since to upper - Retain, rewrites merged updates at times below
// since to since and consolidates them, drops the generations a later one
// supersedes at or before since (no read at since or after sees them),
// then commits a new manifest under the same compare-and-append rule as
// appends. Reads at times >= the new since are
// unchanged. A compaction that loses the race to an append rebases onto
// it; one that loses to another compaction gives up and removes its files.
// Finally old manifests, unreferenced batch files and stray temporary
// files older than the grace period are removed.
func (sh *Shard) Compact(ctx context.Context) (CompactResult, error) {
	res := CompactResult{Name: sh.name, Kind: sh.kind}
	m, err := sh.refresh(ctx)
	if err != nil {
		return res, err
	}
	since := sh.sinceFor(m)
	res.OldSince, res.Since = m.Since, m.Since
	var groups []mergeGroup
	var ranges [][2]int
	gs, err := sh.gensOf(m)
	if err != nil {
		return res, fmt.Errorf("compact %s: %w", sh.what(), err)
	}
	if sh.kind == kindRemap {
		if len(m.Batches) >= 2 || (len(m.Batches) == 1 && m.Batches[0].Lower < since) {
			ranges = [][2]int{{0, len(m.Batches)}}
		}
	} else {
		ranges = planGenerations(m.Batches, gs[max(0, genAt(gs, since))].start)
	}
	cleanup := func() {
		for _, g := range groups {
			for _, b := range g.out {
				sh.st.fs.Remove(filepath.Join(sh.dir, b.File))
			}
		}
	}
	for _, r := range ranges {
		in := m.Batches[r[0]:r[1]]
		var out []BatchMeta
		var before int64
		if sh.kind == kindRemap {
			var o *BatchMeta
			o, before, err = sh.mergeRemap(ctx, in, since)
			if o != nil {
				out = []BatchMeta{*o}
			}
		} else {
			g := gs[genAt(gs, in[0].Generation)]
			out, before, err = sh.mergeData(ctx, in, since, g)
		}
		if err != nil {
			cleanup()
			return res, fmt.Errorf("compact %s: %w", sh.what(), err)
		}
		g := mergeGroup{in: in, out: out}
		for _, b := range in {
			g.files = append(g.files, b.File)
		}
		groups = append(groups, g)
		res.RowsBefore += before
		for _, b := range out {
			res.RowsAfter += b.Rows
		}
	}
	if len(groups) > 0 || since != m.Since || genIndex(m.gens(), since) > 0 {
		for attempt := 0; ; attempt++ {
			next, dropped, ok := applyGroups(m, groups, since)
			if !ok || attempt > maxCommitRetries {
				cleanup()
				res.GaveUp = true
				break
			}
			retire(m, next, sh.st.opts.Now(), sh.st.opts.Grace)
			linked, err := sh.commit(ctx, m, next)
			if errors.Is(err, errLostRace) {
				if m, err = sh.refresh(ctx); err != nil {
					cleanup()
					return res, err
				}
				continue
			}
			if err != nil {
				// A failed directory sync after the link leaves the commit
				// in doubt; its batches must stay.
				if !linked {
					cleanup()
				}
				return res, err
			}
			res.Committed, res.Since, res.DroppedGenerations = true, next.Since, dropped
			for _, g := range groups {
				res.Merged += len(g.files)
				res.Written += len(g.out)
			}
			break
		}
	}
	n, err := sh.gc(ctx)
	res.Removed = n
	if err != nil {
		return res, fmt.Errorf("compact %s: %w", sh.what(), err)
	}
	return res, nil
}

// maxFanIn bounds the runs one merge reads at once: a merge holds a row
// group of each (up to DefaultGroupRows rows), so an ingest that commits
// every second and compacts every minute would otherwise merge sixty
// runs at a time (a Kafka upsert topic at 40,000 records/s held 220 MB of
// row groups that way).
const maxFanIn = 16

// fanIn cuts the runs [r[0], r[1]) into consecutive merges of at most
// maxFanIn runs each, of about equal size; later compactions merge the
// outputs (size-tiered, planMerges).
func fanIn(r [2]int) [][2]int {
	n := r[1] - r[0]
	k := (n + maxFanIn - 1) / maxFanIn
	if k <= 1 {
		return [][2]int{r}
	}
	var out [][2]int
	for i := range k {
		lo, hi := r[0]+i*n/k, r[0]+(i+1)*n/k
		out = append(out, [2]int{lo, hi})
	}
	return out
}

// planGenerations plans merges (planMerges) within each generation from
// the one starting at from on; the batches of a generation are
// consecutive, as generations partition time.
func planGenerations(bs []BatchMeta, from uint64) [][2]int {
	var out [][2]int
	for i := 0; i < len(bs); {
		j := i + 1
		for j < len(bs) && bs[j].Generation == bs[i].Generation {
			j++
		}
		if bs[i].Generation >= from {
			// Plan over runs (a head file and its continuations), then
			// map the runs back to batch indexes.
			var heads []int
			var sizes []BatchMeta
			for k := i; k < j; k++ {
				if !bs[k].Cont {
					heads = append(heads, k)
					sizes = append(sizes, BatchMeta{})
				}
				sizes[len(sizes)-1].Rows += bs[k].Rows
			}
			heads = append(heads, j)
			for _, r := range planMerges(sizes) {
				for _, c := range fanIn(r) {
					out = append(out, [2]int{heads[c[0]], heads[c[1]]})
				}
			}
		}
		i = j
	}
	return out
}

// applyGroups derives the next manifest from base: each group's batches,
// which must still be consecutive in base, are replaced by its output; since
// advances, and the generations before the one in force at since are
// dropped with their batches (dropped counts them). ok is false when base
// no longer holds a group's batches (a concurrent compaction replaced
// them) or base's since is beyond ours.
func applyGroups(base *Manifest, groups []mergeGroup, since uint64) (next *Manifest, dropped int, ok bool) {
	if base.Since > since {
		return nil, 0, false
	}
	next = base.clone()
	next.Version = base.Version + 1
	next.Since = since
	bs := next.Batches
	for _, g := range groups {
		at := -1
		for i := range bs {
			if bs[i].File == g.files[0] {
				at = i
				break
			}
		}
		if at < 0 || at+len(g.files) > len(bs) {
			return nil, 0, false
		}
		for k, f := range g.files {
			if bs[at+k].File != f {
				return nil, 0, false
			}
		}
		bs = append(append(append([]BatchMeta(nil), bs[:at]...), g.out...), bs[at+len(g.files):]...)
	}
	if gens := next.gens(); genIndex(gens, since) > 0 {
		k := genIndex(gens, since)
		kept := bs[:0:0]
		for _, b := range bs {
			if b.Generation >= gens[k].Start {
				kept = append(kept, b)
			}
		}
		bs, dropped = kept, k
		next.setGens(slicesClone(gens[k:]))
	}
	next.Batches = bs
	if next.Batches == nil {
		next.Batches = []BatchMeta{}
	}
	return next, dropped, true
}

// mergeData merges the runs of data batches in (of generation g) into
// one run of bounded files: times below since advance to since, and the
// runs, each sorted by (row, time), are merged a row group of each at a
// time and consolidated (mergeRuns), so memory holds a window of each
// run, not the runs. The result is nil when everything cancels.
func (sh *Shard) mergeData(ctx context.Context, in []BatchMeta, since uint64, g gen) ([]BatchMeta, int64, error) {
	var before int64
	lower, upper := in[0].Lower, uint64(0)
	for _, b := range in {
		upper = max(upper, b.Upper)
		before += b.Rows
		if b.Lower < since {
			// Advanced times are since, so the run reaches since+1.
			upper = max(upper, since+1)
		}
	}
	srcs, closeAll, err := sh.openSources(ctx, g, in, 0, math.MaxUint64)
	if err != nil {
		return nil, 0, err
	}
	defer closeAll()
	next, stop := mergeBatches(ctx, g.sc.user.Fields(), g.sc.batch, srcs, mergeOpts{hi: math.MaxUint64, advance: since})
	defer stop()
	out, err := sh.writeRun(ctx, lower, upper, g.start, g.sc.batch, next)
	if err != nil {
		return nil, 0, err
	}
	return out, before, nil
}

// gc removes manifests older than the kept versions, batch files no kept
// manifest references, and stray temporary files, when older than the
// grace period (younger files may belong to a commit in flight elsewhere).
func (sh *Shard) gc(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("clean up: %w", err)
	}
	ents, err := sh.st.fs.ReadDir(sh.dir)
	if err != nil {
		return 0, fmt.Errorf("clean up: %w", err)
	}
	var versions []uint64
	for _, e := range ents {
		if v, ok := parseManifestName(e.Name()); ok {
			versions = append(versions, v)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] > versions[j] })
	removed := 0
	keep := sh.st.opts.KeepManifests
	for i, v := range versions {
		if i >= keep && sh.st.fs.Remove(filepath.Join(sh.dir, manifestName(v))) == nil {
			removed++
		}
	}
	if len(versions) > keep {
		versions = versions[:keep]
	}
	referenced := map[string]bool{}
	now := sh.st.opts.Now()
	for _, v := range versions {
		b, err := readFile(sh.st.fs, filepath.Join(sh.dir, manifestName(v)))
		if err != nil {
			// Removed meanwhile by a newer writer: skip batch removal this
			// time rather than guess.
			return removed, nil
		}
		m, err := decodeManifest(b)
		if err != nil {
			return removed, nil
		}
		for _, bm := range m.Batches {
			referenced[bm.File] = true
		}
		// Replaced by a compaction less than the grace period ago: a
		// reader of an older version may still be reading it.
		for _, r := range m.Retired {
			if now.Sub(time.UnixMilli(r.At)) < sh.st.opts.Grace {
				referenced[r.File] = true
			}
		}
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".arrow") || strings.HasPrefix(e.Name(), tmpPrefix) || referenced[e.Name()] {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < sh.st.opts.Grace {
			continue
		}
		if sh.st.fs.Remove(filepath.Join(sh.dir, e.Name())) == nil {
			removed++
		}
	}
	removed += sh.sweepTemps(ents)
	return removed, nil
}
