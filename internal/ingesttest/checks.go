package ingesttest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// Layout says how an upstream's collections map to sources in the store.
type Layout struct {
	// Sources are the store's source ids with their collections
	// (PostgreSQL, MySQL: one; Kafka: one per topic).
	Sources []SourceColls
	// Atomic: an upstream transaction reaches the store as a whole, at one
	// time, across collections (so the bank's sum holds at every time).
	// Otherwise each write is its own unit, per collection.
	Atomic bool
}

// SourceColls is a source id and its collections.
type SourceColls struct {
	ID          string
	Collections []string
}

// Collections are every collection of the layout.
func (l Layout) Collections() []string {
	var out []string
	for _, s := range l.Sources {
		out = append(out, s.Collections...)
	}
	return out
}

// sourceStore is one source of a store, opened for reading.
type sourceStore struct {
	id       string
	bindings []frontier.Binding
	readable []frontier.Binding // every collection readable at their time
	shards   map[string]*store.Shard
}

func openSource(ctx context.Context, st *store.Store, sc SourceColls) (*sourceStore, error) {
	bs, _, err := st.Bindings(ctx, sc.ID)
	if err != nil {
		return nil, fmt.Errorf("bindings of %s: %w", sc.ID, err)
	}
	s := &sourceStore{id: sc.ID, bindings: bs, shards: map[string]*store.Shard{}}
	minUpper, maxSince := uint64(1<<63), uint64(0)
	for _, c := range sc.Collections {
		sh, err := st.Shard(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("collection %s: %w", c, err)
		}
		if err := sh.Refresh(ctx); err != nil {
			return nil, fmt.Errorf("collection %s: %w", c, err)
		}
		s.shards[c] = sh
		minUpper, maxSince = min(minUpper, sh.Upper()), max(maxSince, sh.Since())
	}
	for i, b := range bs {
		if i > 0 && (b.Time <= bs[i-1].Time || !b.Frontier.Covers(bs[i-1].Frontier)) {
			return nil, fmt.Errorf("bindings %d and %d of %s do not grow: %v then %v", i-1, i, sc.ID, bs[i-1], b)
		}
		if b.Time >= maxSince && b.Time < minUpper {
			s.readable = append(s.readable, b)
		}
	}
	return s, nil
}

// stateAt reads the source's collections as of t, checking that every
// account is present once.
func (s *sourceStore) stateAt(ctx context.Context, t uint64) (State, error) {
	out := State{}
	for c, sh := range s.shards {
		rows, err := readAccounts(ctx, sh, t)
		if err != nil {
			return nil, err
		}
		out[c] = rows
	}
	return out, nil
}

// readAccounts reads a bank collection as of t: its first column is the
// account id, its second the balance (an integer, also as JSON text).
func readAccounts(ctx context.Context, sh *store.Shard, t uint64) (map[string]int64, error) {
	rec, err := sh.ReadAsOf(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("read %s as of %d: %w", sh.Name(), t, err)
	}
	defer rec.Release()
	rows, err := bankRows(sh.Name(), rec)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range rows {
		if r.diff != 1 {
			return nil, fmt.Errorf("%s as of %d: row %s|%s has multiplicity %d", sh.Name(), t, r.id, r.balance, r.diff)
		}
		if err := addAccount(out, r.id, r.balance); err != nil {
			return nil, fmt.Errorf("%s as of %d: %w", sh.Name(), t, err)
		}
	}
	return out, nil
}

// addAccount adds account id with balance (text) to rows, once.
func addAccount(rows map[string]int64, id, balance string) error {
	if _, dup := rows[id]; dup {
		return fmt.Errorf("account %s present twice", id)
	}
	n, err := strconv.ParseInt(balance, 10, 64)
	if err != nil {
		return fmt.Errorf("account %s: balance %q: %w", id, balance, err)
	}
	rows[id] = n
	return nil
}

// bankRow is one update of a bank collection as the store holds it.
type bankRow struct {
	id, balance string
	time        uint64 // 0 when the record has no _time
	diff        int64
}

// bankRows are rec's updates: the first column is the account id, the
// second the balance, then _time (in changes) and _diff.
func bankRows(coll string, rec arrow.Record) ([]bankRow, error) {
	var times *array.Uint64
	var diffs *array.Int64
	for i, f := range rec.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime:
			times, _ = rec.Column(i).(*array.Uint64)
		case pipe.ColDiff:
			diffs, _ = rec.Column(i).(*array.Int64)
		}
	}
	if diffs == nil || rec.NumCols() < 3 {
		return nil, fmt.Errorf("read %s: want id and balance columns and _diff, have %s", coll, rec.Schema())
	}
	out := make([]bankRow, rec.NumRows())
	for i := range out {
		out[i] = bankRow{id: rec.Column(0).ValueStr(i), balance: rec.Column(1).ValueStr(i), diff: diffs.Value(i)}
		if times != nil {
			out[i].time = times.Value(i)
		}
	}
	return out, nil
}

// replay is a source's collections rebuilt from the store's updates
// rather than read as of a time: every collection as of its since, then
// its changes up to the last readable binding, applied in time order.
type replay struct {
	src     *sourceStore
	updates []replayed
	next    int
	rows    map[string]map[string]int64 // collection -> "id|balance" -> multiplicity
}

type replayed struct {
	coll string
	bankRow
}

// newReplay reads the source's updates up to time last, checking that
// every change sits at a binding time.
func newReplay(ctx context.Context, src *sourceStore, last uint64) (*replay, error) {
	r := &replay{src: src, rows: map[string]map[string]int64{}}
	times := map[uint64]bool{}
	for _, b := range src.bindings {
		times[b.Time] = true
	}
	for c, sh := range src.shards {
		r.rows[c] = map[string]int64{}
		base, err := sh.ReadAsOf(ctx, sh.Since())
		if err != nil {
			return nil, fmt.Errorf("read %s as of its since %d: %w", c, sh.Since(), err)
		}
		rows, err := bankRows(c, base)
		base.Release()
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			row.time = sh.Since()
			r.updates = append(r.updates, replayed{c, row})
		}
		rec, err := sh.Changes(ctx, sh.Since(), last)
		if err != nil {
			return nil, fmt.Errorf("changes of %s up to %d: %w", c, last, err)
		}
		rows, err = bankRows(c, rec)
		rec.Release()
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			if !times[row.time] {
				return nil, fmt.Errorf("%s has an update at %d, which is no binding time of source %s", c, row.time, src.id)
			}
			r.updates = append(r.updates, replayed{c, row})
		}
	}
	sort.SliceStable(r.updates, func(i, j int) bool { return r.updates[i].time < r.updates[j].time })
	return r, nil
}

// read is the contents as of binding time t (never decreasing from one
// call to the next) replayed; with asOf they are also read as of t, which
// must agree.
func (r *replay) read(ctx context.Context, t uint64, asOf bool) (State, error) {
	s, err := r.at(t)
	if err != nil || !asOf {
		return s, err
	}
	got, err := r.src.stateAt(ctx, t)
	if err != nil {
		return nil, err
	}
	if d := Diff(got, s); d != "" {
		return nil, fmt.Errorf("the contents read as of %d differ from the collections' since and changes replayed: %s", t, d)
	}
	return got, nil
}

// at applies the updates up to t (t never decreasing from one call to
// the next) and returns the contents, checking that every row is there
// once.
func (r *replay) at(t uint64) (State, error) {
	for ; r.next < len(r.updates) && r.updates[r.next].time <= t; r.next++ {
		u := r.updates[r.next]
		row := u.id + "|" + u.balance
		if r.rows[u.coll][row] += u.diff; r.rows[u.coll][row] == 0 {
			delete(r.rows[u.coll], row)
		}
	}
	out := State{}
	for c, rows := range r.rows {
		out[c] = map[string]int64{}
		for row, m := range rows {
			id, bal, _ := strings.Cut(row, "|")
			if m != 1 {
				return nil, fmt.Errorf("%s replayed to %d: row %s has multiplicity %d", c, t, row, m)
			}
			if err := addAccount(out[c], id, bal); err != nil {
				return nil, fmt.Errorf("%s replayed to %d: %w", c, t, err)
			}
		}
	}
	return out, nil
}

func openStore(ctx context.Context, dir string) (*store.Store, error) {
	return store.Open(ctx, dir, store.Options{MustExist: true})
}

// TimesReport is what CheckTimes verified.
type TimesReport struct {
	// Bindings is the number of readable bindings checked, over every
	// source.
	Bindings int
	// Reached is, per source, the longest prefix of the log (in the
	// source's units) a binding showed, of Units.
	Reached, Units map[string]int
}

// CheckTimes is check 2, "changes at their source time, progress only
// when complete": for every source of the store dir and every readable
// binding, the contents as of the binding's time equal the upstream after
// a prefix of the log's transactions (of the source's units, see Layout)
// that the binding's frontier allows (every unit surely below it in,
// every unit surely not below it out), the prefix never shrinking from
// one binding to the next; with an atomic layout the bank's sum holds at
// every time. The contents read as of a binding's time are also the
// collections rebuilt from their since and changes, every row once, and
// every change sits at a binding time.
func CheckTimes(ctx context.Context, dir string, lay Layout, log *Log) (TimesReport, error) {
	rep := TimesReport{Reached: map[string]int{}, Units: map[string]int{}}
	st, err := openStore(ctx, dir)
	if err != nil {
		return rep, err
	}
	initial, txns := log.Read()
	wantSum := initial.Sum()
	for _, sc := range lay.Sources {
		src, err := openSource(ctx, st, sc)
		if err != nil {
			return rep, err
		}
		if len(src.readable) == 0 {
			return rep, fmt.Errorf("source %s: no readable binding (of %d)", sc.ID, len(src.bindings))
		}
		coll := ""
		if !lay.Atomic {
			if len(sc.Collections) != 1 {
				return rep, fmt.Errorf("source %s: a non-atomic layout has one collection per source, not %v", sc.ID, sc.Collections)
			}
			coll = sc.Collections[0]
		}
		units := steps(txns, coll)
		// The state after each prefix, restricted to the source's
		// collections, as a hash.
		model := State{}
		for _, c := range sc.Collections {
			model[c] = map[string]int64{}
			for k, v := range initial[c] {
				model[c][k] = v
			}
		}
		hashes := []uint64{hashState(model)}
		for _, u := range units {
			h := hashes[len(hashes)-1]
			for _, s := range u.sets {
				if old, ok := model[s.Coll][s.ID]; ok {
					h -= rowHash(s.Coll, s.ID, old)
				}
				model.apply(s)
				if s.Op != Delete {
					h += rowHash(s.Coll, s.ID, s.Balance)
				}
			}
			hashes = append(hashes, h)
		}
		prev := 0
		first := src.bindings[0].Time
		rp, err := newReplay(ctx, src, src.readable[len(src.readable)-1].Time)
		if err != nil {
			return rep, fmt.Errorf("source %s: %w", sc.ID, err)
		}
		for i, b := range src.readable {
			got, err := rp.read(ctx, b.Time, true)
			if err != nil {
				return rep, fmt.Errorf("source %s binding %d: %w", sc.ID, i, err)
			}
			if lay.Atomic {
				if s := got.Sum(); s != wantSum {
					return rep, fmt.Errorf("source %s binding %d (time %d, frontier %s): the sum of balances is %d, want %d (a transaction is split)", sc.ID, i, b.Time, b.Frontier, s, wantSum)
				}
			}
			lo, hi := 0, 0
			for k, u := range units {
				in, maybe := true, true
				for _, p := range u.pos {
					in = in && p.surely(b.Frontier)
					maybe = maybe && p.maybe(b.Frontier)
				}
				if in {
					lo = k + 1
				}
				if maybe && hi == k {
					hi = k + 1
				}
			}
			if b.Time == first {
				// Time 0, a snapshot: its frontier stands for a position
				// (a slot's start) the frontier does not name.
				lo, hi = 0, len(units)
			}
			if hi < lo {
				hi = lo
			}
			from := max(lo, prev)
			h := hashState(got)
			found := -1
			for k := from; k <= hi && k < len(hashes); k++ {
				if hashes[k] == h {
					found = k
					break
				}
			}
			if found < 0 {
				want := prefixState(initial, units, sc.Collections, from)
				return rep, fmt.Errorf("source %s binding %d (time %d, frontier %s): the contents are not the upstream after %d..%d of %d transactions (the frontier allows %d..%d, earlier bindings showed %d); against %d: %s",
					sc.ID, i, b.Time, b.Frontier, from, hi, len(units), lo, hi, prev, from, Diff(got, want))
			}
			prev = found
			rep.Bindings++
		}
		rep.Reached[sc.ID], rep.Units[sc.ID] = prev, len(units)
	}
	return rep, nil
}

func prefixState(initial State, units []step, colls []string, n int) State {
	s := State{}
	for _, c := range colls {
		s[c] = map[string]int64{}
		for k, v := range initial[c] {
			s[c][k] = v
		}
	}
	for _, u := range units[:min(n, len(units))] {
		for _, set := range u.sets {
			if s[set.Coll] != nil {
				s.apply(set)
			}
		}
	}
	return s
}

// Latest reads every source's collections as of its last readable binding
// (a source without one is left out).
func Latest(ctx context.Context, dir string, lay Layout) (State, error) {
	st, err := openStore(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := State{}
	for _, sc := range lay.Sources {
		src, err := openSource(ctx, st, sc)
		if err != nil {
			return nil, err
		}
		if len(src.readable) == 0 {
			continue
		}
		s, err := src.stateAt(ctx, src.readable[len(src.readable)-1].Time)
		if err != nil {
			return nil, err
		}
		for c, rows := range s {
			out[c] = rows
		}
	}
	return out, nil
}

// Reads are a store's contents at every readable binding: source and
// time -> hash of the source's collections.
type Reads map[string]map[uint64]uint64

// RecordReads reads every readable binding time of every source: from its
// since and changes replayed, and as of the time for the last one and
// every 97th (CheckTimes reads every one both ways).
func RecordReads(ctx context.Context, dir string, lay Layout) (Reads, error) {
	st, err := openStore(ctx, dir)
	if errors.Is(err, store.ErrNoStore) {
		return Reads{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := Reads{}
	for _, sc := range lay.Sources {
		out[sc.ID] = map[uint64]uint64{}
		src, err := openSource(ctx, st, sc)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(src.readable) == 0 {
			continue
		}
		rp, err := newReplay(ctx, src, src.readable[len(src.readable)-1].Time)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", sc.ID, err)
		}
		for i, b := range src.readable {
			s, err := rp.read(ctx, b.Time, i == len(src.readable)-1 || i%97 == 0)
			if err != nil {
				return nil, fmt.Errorf("source %s binding %d: %w", sc.ID, i, err)
			}
			out[sc.ID][b.Time] = hashState(s)
		}
	}
	return out, nil
}

// CompareReads is check 4's comparison: every time read before reads the
// same after.
func CompareReads(before, after Reads) error {
	for src, times := range before {
		for t, h := range times {
			got, ok := after[src][t]
			if !ok {
				return fmt.Errorf("source %s: time %d was readable and is not any more", src, t)
			}
			if got != h {
				return fmt.Errorf("source %s: the contents as of time %d changed", src, t)
			}
		}
	}
	return nil
}

// CollectionError returns the first definite error recorded in
// collection's shard, "" when there is none.
func CollectionError(ctx context.Context, dir, collection string) (string, error) {
	st, err := openStore(ctx, dir)
	if err != nil {
		return "", err
	}
	sh, err := st.Shard(ctx, collection)
	if err != nil {
		return "", err
	}
	in, err := sh.Info(ctx)
	if err != nil {
		return "", err
	}
	if len(in.Errors) == 0 {
		return "", nil
	}
	return in.Errors[0].Message, nil
}

// Durable is the store's durable frontier of source, empty when it has
// none yet or when it is the first binding's (time 0's, which stands for
// a position it does not name when it is a snapshot's).
func Durable(ctx context.Context, dir, source string) (frontier.Frontier, error) {
	st, err := openStore(ctx, dir)
	if err != nil {
		return frontier.Frontier{}, err
	}
	bs, _, err := st.Bindings(ctx, source)
	if errors.Is(err, store.ErrNotFound) || err == nil && len(bs) == 0 {
		return frontier.Frontier{}, nil
	}
	if err != nil {
		return frontier.Frontier{}, err
	}
	d, err := st.DurableFrontier(ctx, source)
	if err != nil || d.Equal(bs[0].Frontier) {
		return frontier.Frontier{}, err
	}
	return d, nil
}

// FirstBinding is the time and contents of a source's first binding (time
// 0's), and whether it is readable.
func FirstBinding(ctx context.Context, dir string, sc SourceColls) (uint64, State, error) {
	st, err := openStore(ctx, dir)
	if err != nil {
		return 0, nil, err
	}
	src, err := openSource(ctx, st, sc)
	if err != nil {
		return 0, nil, err
	}
	if len(src.readable) == 0 || len(src.bindings) == 0 || src.readable[0].Time != src.bindings[0].Time {
		return 0, nil, fmt.Errorf("source %s: the first binding is not readable (bindings %d, readable %d)", sc.ID, len(src.bindings), len(src.readable))
	}
	s, err := src.stateAt(ctx, src.bindings[0].Time)
	return src.bindings[0].Time, s, err
}

// ReadLast reads collection as of the last time it is complete, for the
// error a read gives.
func ReadLast(ctx context.Context, dir, collection string) error {
	st, err := openStore(ctx, dir)
	if err != nil {
		return err
	}
	sh, err := st.Shard(ctx, collection)
	if err != nil {
		return err
	}
	if err := sh.Refresh(ctx); err != nil {
		return err
	}
	if sh.Upper() == 0 {
		return fmt.Errorf("%s has no complete time", collection)
	}
	rec, err := sh.ReadAsOf(ctx, sh.Upper()-1)
	if err == nil {
		rec.Release()
	}
	return err
}
