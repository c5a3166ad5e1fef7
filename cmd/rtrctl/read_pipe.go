package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/internal/render"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// pipeCollection is what a pipe carries of one collection.
type pipeCollection struct {
	domain frontier.Domain
	user   []arrow.Field  // nil until a data stream is seen
	recs   []arrow.Record // as the pipe carries them
	// resets split the records at each reset of the collection (a
	// TRUNCATE, a re-snapshot): from its time on only the records after
	// it count. Narrowed away by segment.
	resets []pipeReset
	maxPos uint64  // the largest _time seen
	errAt  *uint64 // the first definite error, if any
	errMsg string
	seen   bool // any stream of the collection, progress included
	// sourceWide says the pipe has progress of the whole source (no
	// collection), as replicate writes: a collection may then simply have
	// had no changes.
	sourceWide bool
}

// pipeReset is a reset at time at: recs and user from it up to the next
// one; the records before the first reset are in pipeCollection itself.
type pipeReset struct {
	at   uint64
	user []arrow.Field
	recs []arrow.Record
}

// segment narrows pc to the records that hold at times lo..hi: those
// after the last reset at or below lo, with its columns. A reset inside
// lo..hi leaves no single answer: an error names it.
func (pc *pipeCollection) segment(lo, hi uint64) error {
	for _, r := range pc.resets {
		if r.at > lo && r.at <= hi {
			return hint.Wrap(fmt.Errorf("the pipe resets the collection (a TRUNCATE or re-snapshot) at time %d, inside the times read", r.at),
				fmt.Sprintf("read --changes --to %d, or --from %d", r.at-1, r.at-1))
		}
	}
	chosen := -1
	for i, r := range pc.resets {
		if r.at <= lo {
			chosen = i
		}
	}
	if chosen >= 0 {
		pc.releaseRecs()
		pc.user, pc.recs = pc.resets[chosen].user, pc.resets[chosen].recs
		pc.resets[chosen].recs = nil
	}
	pc.dropResets()
	return nil
}

func (pc *pipeCollection) releaseRecs() {
	for _, r := range pc.recs {
		r.Release()
	}
	pc.recs = nil
}

func (pc *pipeCollection) dropResets() {
	for _, r := range pc.resets {
		for _, rec := range r.recs {
			rec.Release()
		}
	}
	pc.resets = nil
}

func (pc *pipeCollection) release() {
	pc.dropResets()
	pc.releaseRecs()
}

// readPipeCollection reads the whole pipe on r and keeps the data and
// error streams of collection; it returns the names of the other
// collections it carried too.
func readPipeCollection(ctx context.Context, r io.Reader, collection string) (*pipeCollection, []string, error) {
	pr := pipe.NewReader(r, memory.DefaultAllocator)
	defer pr.Close()
	pc := &pipeCollection{}
	others := map[string]bool{}
	ok := false
	defer func() {
		if !ok {
			pc.release()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("read pipe: %w", err)
		}
		s, err := pr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read pipe: %w", err)
		}
		h := s.Header
		if h.Kind == pipe.KindProgress && h.Collection == "" {
			pc.sourceWide = true
		}
		if h.Collection != collection {
			if h.Collection != "" {
				others[h.Collection] = true
			}
			continue
		}
		if pc.seen && pc.domain != h.Domain {
			return nil, nil, fmt.Errorf("read pipe: stream %d: %s is at %s times, but earlier streams had %s times", s.Index, collection, h.Domain, pc.domain)
		}
		pc.seen, pc.domain = true, h.Domain
		switch h.Kind {
		case pipe.KindError:
			t, msg, err := s.ReadError()
			if err != nil {
				return nil, nil, fmt.Errorf("read pipe: %w", err)
			}
			if pc.errAt == nil || t < *pc.errAt {
				pc.errAt, pc.errMsg = &t, msg
			}
		case pipe.KindData:
			if err := pc.addStream(s); err != nil {
				return nil, nil, err
			}
		case pipe.KindReset:
			t, schema, err := s.ReadReset()
			if err != nil {
				return nil, nil, fmt.Errorf("read pipe: %w", err)
			}
			user := pc.lastUser()
			if schema != nil {
				user = schema.Fields()
			}
			pc.resets = append(pc.resets, pipeReset{at: t, user: user})
		}
	}
	names := make([]string, 0, len(others))
	for n := range others {
		names = append(names, n)
	}
	sort.Strings(names)
	ok = true
	return pc, names, nil
}

// lastUser is the columns of the last reset, or of the records before
// any.
func (pc *pipeCollection) lastUser() []arrow.Field {
	if n := len(pc.resets); n > 0 {
		return pc.resets[n-1].user
	}
	return pc.user
}

func (pc *pipeCollection) addStream(s *pipe.Stream) error {
	var user []arrow.Field
	for _, f := range s.Schema.Fields() {
		if !strings.HasPrefix(f.Name, "_") {
			user = append(user, f)
		}
	}
	want, recs := &pc.user, &pc.recs
	if n := len(pc.resets); n > 0 {
		want, recs = &pc.resets[n-1].user, &pc.resets[n-1].recs
	}
	if *want == nil {
		*want = user
	} else if d := userFieldsDiff(user, *want); d != "" {
		return fmt.Errorf("read pipe: stream %d: the columns of %s changed without a reset: %s", s.Index, s.Header.Collection, d)
	}
	for {
		rec, err := s.NextRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read pipe: %w", err)
		}
		_, times, _, _ := pipe.SplitData(rec)
		for _, t := range times.Uint64Values() {
			pc.maxPos = max(pc.maxPos, t)
		}
		*recs = append(*recs, rec)
	}
}

func userFieldsDiff(got, want []arrow.Field) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d columns, earlier %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name != want[i].Name || !arrow.TypeEqual(got[i].Type, want[i].Type) {
			return fmt.Sprintf("column %d is %s %s, earlier %s %s", i, got[i].Name, got[i].Type, want[i].Name, want[i].Type)
		}
	}
	return ""
}

// consolidationInput rearranges the pipe's records for store.Consolidate:
// the user columns (then _partition as one more, when withPartition),
// then _time and _diff. The caller releases them.
func (pc *pipeCollection) consolidationInput(withPartition bool) ([]arrow.Field, []arrow.Record) {
	user := append([]arrow.Field(nil), pc.user...)
	if withPartition {
		user = append(user, arrow.Field{Name: pipe.ColPartition, Type: arrow.BinaryTypes.String})
	}
	schema := arrow.NewSchema(append(append([]arrow.Field(nil), user...),
		arrow.Field{Name: store.TimeColumn, Type: arrow.PrimitiveTypes.Uint64},
		arrow.Field{Name: store.DiffColumn, Type: arrow.PrimitiveTypes.Int64}), nil)
	out := make([]arrow.Record, 0, len(pc.recs))
	for _, rec := range pc.recs {
		cols, times, diffs, parts := pipe.SplitData(rec)
		cs := append([]arrow.Array(nil), cols...)
		if withPartition {
			cs = append(cs, parts)
		}
		cs = append(cs, times, diffs)
		out = append(out, array.NewRecord(schema, cs, rec.NumRows()))
	}
	return user, out
}

// runReadPipe is `rtrctl read - COLLECTION`: it reads the pipe on stdin and
// prints COLLECTION's consolidated contents or changes.
func runReadPipe(ctx context.Context, stdin io.Reader, w, stderr io.Writer, opts readOptions) error {
	pc, others, err := readPipeCollection(ctx, stdin, opts.collection)
	if err != nil {
		return err
	}
	defer pc.release()
	if !pc.seen {
		h := "the pipe on stdin carries no collections"
		if len(others) > 0 {
			h = "collections in the pipe: " + strings.Join(others, ", ")
		}
		if !pc.sourceWide {
			return hint.Wrap(fmt.Errorf("read - %s: the pipe on stdin carries nothing of %s", opts.collection, opts.collection), h)
		}
		// Replication progress covers every collection: no changes of it.
		fmt.Fprintf(stderr, "read - %s: the pipe carries no rows of it (%s)\n", opts.collection, h)
		return nil
	}
	d := pc.domain
	if d.Partitioned() && (opts.asOf != nil || opts.from != nil || opts.to != nil) {
		return usagef("read the whole pipe, or --changes, without --as-of/--from/--to", "%s is at %s times, which are partitioned: --as-of, --from and --to need an unpartitioned domain (lsn, system_ms)", opts.collection, d)
	}
	if d.Partitioned() && !opts.changes && opts.format == "arrow" {
		return usagef("use --changes --format arrow", "%s is at %s times, which are partitioned: its contents have no single time to write as _time", opts.collection, d)
	}
	// A definite error counts when it is at or below the last time read.
	last := uint64(math.MaxUint64)
	if opts.asOf != nil {
		last = *opts.asOf
	} else if opts.to != nil {
		last = *opts.to
	}
	if pc.errAt != nil && *pc.errAt <= last {
		return hint.Wrap(fmt.Errorf("read - %s: the collection has a definite error from time %d on: %s", opts.collection, *pc.errAt, pc.errMsg),
			"what came before it is readable with --as-of or --changes --to a time below the error's (unpartitioned domains)")
	}
	lo, hi := last, last
	if opts.changes {
		lo = 0
		if opts.from != nil {
			lo = *opts.from + 1
		}
	}
	if err := pc.segment(lo, hi); err != nil {
		return fmt.Errorf("read - %s: %w", opts.collection, err)
	}
	if pc.user == nil {
		// Only progress (e.g. a snapshot of an empty table): nothing to print,
		// and no schema to print a header with.
		if opts.format == "arrow" {
			return nil
		}
		fmt.Fprintf(stderr, "read - %s: the pipe carries no rows of it\n", opts.collection)
		return nil
	}
	cOpts := store.ConsolidateOptions{KeepTime: opts.changes}
	if opts.changes {
		if opts.from != nil {
			if *opts.from == math.MaxUint64 {
				return usagef("use a smaller --from", "no time is after --from %d", *opts.from)
			}
			cOpts.Lo = *opts.from + 1
		}
		if opts.to != nil && *opts.to < math.MaxUint64 {
			cOpts.Hi = *opts.to + 1
		}
		if opts.from != nil && opts.to != nil && *opts.from > *opts.to {
			return usagef("use --from T1 --to T2 with T1 <= T2", "--from %d is after --to %d", *opts.from, *opts.to)
		}
	} else if opts.asOf != nil && *opts.asOf < math.MaxUint64 {
		cOpts.Hi = *opts.asOf + 1
	}
	withPartition := opts.changes && d.Partitioned()
	user, in := pc.consolidationInput(withPartition)
	rec, err := store.Consolidate(user, in, cOpts)
	for _, r := range in {
		r.Release()
	}
	if err != nil {
		return fmt.Errorf("read - %s: %w", opts.collection, err)
	}
	defer rec.Release()
	if opts.changes {
		if withPartition {
			// user..., _partition, _time, _diff -> user..., _time, _diff, _partition
			n := int(rec.NumCols())
			fields := rec.Schema().Fields()
			order := append(append(make([]int, 0, n), seq(n-3)...), n-2, n-1, n-3)
			fs := make([]arrow.Field, n)
			cs := make([]arrow.Array, n)
			for i, j := range order {
				fs[i], cs[i] = fields[j], rec.Column(j)
			}
			moved := array.NewRecord(arrow.NewSchema(fs, nil), cs, rec.NumRows())
			defer moved.Release()
			rec = moved
		}
		if opts.format == "arrow" {
			return writeArrow(w, opts.collection, d, rec)
		}
		if opts.format == "parquet" {
			return writeParquet(w, rec, map[string]string{"rtrctl.collection": opts.collection}, nil)
		}
		return render.Rows(w, opts.format, rec, nil)
	}
	diffIdx := int(rec.NumCols()) - 1
	diffs := rec.Column(diffIdx).(*array.Int64)
	if opts.format == "arrow" {
		t := pc.maxPos
		if opts.asOf != nil {
			t = *opts.asOf
		}
		withTime, err := addTimeColumn(rec, t)
		if err != nil {
			return err
		}
		defer withTime.Release()
		return writeArrow(w, opts.collection, d, withTime)
	}
	negative := 0
	for i := 0; i < diffs.Len(); i++ {
		if diffs.Value(i) < 0 {
			negative++
		}
	}
	if negative > 0 {
		// A pipe may hold deletes of rows it never inserted (replication
		// without its snapshot): show every row with its multiplicity.
		fmt.Fprintf(stderr, "read - %s: %d rows have a negative multiplicity (deletes of rows the pipe never inserted, e.g. replication without its snapshot); printing each row once with its _diff\n", opts.collection, negative)
		if opts.format == "parquet" {
			return writeParquet(w, rec, map[string]string{"rtrctl.collection": opts.collection}, nil)
		}
		return render.Rows(w, opts.format, rec, nil)
	}
	if opts.format == "parquet" {
		return writeParquet(w, rec, map[string]string{"rtrctl.collection": opts.collection}, func(rec arrow.Record, write func(arrow.Record) error) error {
			return writeCopies(rec, opts.collection, pc.maxPos, write)
		})
	}
	cols := make([]arrow.Array, diffIdx)
	for j := range cols {
		cols[j] = rec.Column(j)
	}
	userRec := array.NewRecord(arrow.NewSchema(rec.Schema().Fields()[:diffIdx], nil), cols, rec.NumRows())
	defer userRec.Release()
	return render.Rows(w, opts.format, userRec, func(i int) int64 { return diffs.Value(i) })
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
