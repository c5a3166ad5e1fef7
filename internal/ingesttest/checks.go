package ingesttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	// Keys are, per collection, how many of its leading columns form its
	// key (absent: 1, the bank's account id). No key has two rows at any
	// time.
	Keys map[string]int
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
	keys     map[string]int // Layout.Keys
}

func openSource(ctx context.Context, st *store.Store, sc SourceColls, keys map[string]int) (*sourceStore, error) {
	bs, _, err := st.Bindings(ctx, sc.ID)
	if err != nil {
		return nil, fmt.Errorf("bindings of %s: %w", sc.ID, err)
	}
	s := &sourceStore{id: sc.ID, bindings: bs, shards: map[string]*store.Shard{}, keys: keys}
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

// key is how many leading columns form collection c's key.
func (s *sourceStore) key(c string) int {
	if n, ok := s.keys[c]; ok {
		return n
	}
	return 1
}

// rowsAt reads the source's collections as of t, checking that every row
// and every key is there once.
func (s *sourceStore) rowsAt(ctx context.Context, t uint64) (Rows, error) {
	out := Rows{}
	for c, sh := range s.shards {
		rows, err := ReadRows(ctx, sh, t)
		if err != nil {
			return nil, err
		}
		if err := checkRows(rows, s.key(c)); err != nil {
			return nil, fmt.Errorf("%s as of %d: %w", c, t, err)
		}
		out[c] = rows
	}
	return out, nil
}

// stateAt reads the source's bank collections as of t, checking that
// every account is present once.
func (s *sourceStore) stateAt(ctx context.Context, t uint64) (State, error) {
	rows, err := s.rowsAt(ctx, t)
	if err != nil {
		return nil, err
	}
	return bankState(rows)
}

// Rows are collections' contents as rows: collection -> row -> its
// multiplicity, a row being its columns' values as text (Arrow's
// ValueStr, a null as "(null)") joined by "|".
type Rows map[string]map[string]int64

// ReadRows reads a collection as of t: row -> multiplicity (see Rows),
// whatever the multiplicities are.
func ReadRows(ctx context.Context, sh *store.Shard, t uint64) (map[string]int64, error) {
	rec, err := sh.ReadAsOf(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("read %s as of %d: %w", sh.Name(), t, err)
	}
	defer rec.Release()
	us, err := updates(sh.Name(), rec)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, u := range us {
		if out[u.row] += u.diff; out[u.row] == 0 {
			delete(out, u.row)
		}
	}
	return out, nil
}

// readAccounts reads a bank collection as of t: its first column is the
// account id, its second the balance (an integer, also as JSON text).
func readAccounts(ctx context.Context, sh *store.Shard, t uint64) (map[string]int64, error) {
	rows, err := ReadRows(ctx, sh, t)
	if err != nil {
		return nil, err
	}
	if err := checkRows(rows, 1); err != nil {
		return nil, fmt.Errorf("%s as of %d: %w", sh.Name(), t, err)
	}
	return accounts(rows)
}

// checkRows checks that every row is there once and that no two share a
// key (their first key columns).
func checkRows(rows map[string]int64, key int) error {
	keys := map[string]string{}
	for row, m := range rows {
		if m != 1 {
			return fmt.Errorf("row %s has multiplicity %d", row, m)
		}
		parts := strings.SplitN(row, "|", key+1)
		k := strings.Join(parts[:min(key, len(parts))], "|")
		if other, dup := keys[k]; dup {
			return fmt.Errorf("key %s present twice (rows %s and %s)", k, other, row)
		}
		keys[k] = row
	}
	return nil
}

// bankState is the bank contents of rows checked by checkRows.
func bankState(rows Rows) (State, error) {
	out := State{}
	for c, rs := range rows {
		var err error
		if out[c], err = accounts(rs); err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
	}
	return out, nil
}

// accounts are a bank collection's rows "id|balance" as account ->
// balance.
func accounts(rows map[string]int64) (map[string]int64, error) {
	out := map[string]int64{}
	for row := range rows {
		id, balance, ok := strings.Cut(row, "|")
		if !ok || strings.Contains(balance, "|") {
			return nil, fmt.Errorf("row %s is not an account id and a balance", row)
		}
		n, err := strconv.ParseInt(balance, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("account %s: balance %q: %w", id, balance, err)
		}
		out[id] = n
	}
	return out, nil
}

// update is one update of a collection as the store holds it.
type update struct {
	row  string // see Rows
	time uint64 // 0 when the record has no _time
	diff int64
}

// updates are rec's updates: every column but _time (in changes) and
// _diff is the row's.
func updates(coll string, rec arrow.Record) ([]update, error) {
	var times *array.Uint64
	var diffs *array.Int64
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		switch f.Name {
		case pipe.ColTime:
			times, _ = rec.Column(i).(*array.Uint64)
		case pipe.ColDiff:
			diffs, _ = rec.Column(i).(*array.Int64)
		default:
			cols = append(cols, rec.Column(i))
		}
	}
	if diffs == nil || len(cols) == 0 {
		return nil, fmt.Errorf("read %s: want columns and _diff, have %s", coll, rec.Schema())
	}
	out := make([]update, rec.NumRows())
	vals := make([]string, len(cols))
	for i := range out {
		for c, a := range cols {
			if a.IsNull(i) {
				vals[c] = "(null)"
			} else {
				vals[c] = a.ValueStr(i)
			}
		}
		out[i] = update{row: strings.Join(vals, "|"), diff: diffs.Value(i)}
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
	rows    Rows
}

type replayed struct {
	coll string
	update
}

// newReplay reads the source's updates up to time last, checking that
// every change sits at a binding time.
func newReplay(ctx context.Context, src *sourceStore, last uint64) (*replay, error) {
	r := &replay{src: src, rows: Rows{}}
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
		us, err := updates(c, base)
		base.Release()
		if err != nil {
			return nil, err
		}
		for _, u := range us {
			u.time = sh.Since()
			r.updates = append(r.updates, replayed{c, u})
		}
		rec, err := sh.Changes(ctx, sh.Since(), last)
		if err != nil {
			return nil, fmt.Errorf("changes of %s up to %d: %w", c, last, err)
		}
		us, err = updates(c, rec)
		rec.Release()
		if err != nil {
			return nil, err
		}
		for _, u := range us {
			if !times[u.time] {
				return nil, fmt.Errorf("%s has an update at %d, which is no binding time of source %s", c, u.time, src.id)
			}
			r.updates = append(r.updates, replayed{c, u})
		}
	}
	sort.SliceStable(r.updates, func(i, j int) bool { return r.updates[i].time < r.updates[j].time })
	return r, nil
}

// read is the contents as of binding time t (never decreasing from one
// call to the next) replayed; with asOf they are also read as of t, which
// must agree.
func (r *replay) read(ctx context.Context, t uint64, asOf bool) (Rows, error) {
	s, err := r.at(t)
	if err != nil || !asOf {
		return s, err
	}
	got, err := r.src.rowsAt(ctx, t)
	if err != nil {
		return nil, err
	}
	if d := Diff(got, s); d != "" {
		return nil, fmt.Errorf("the contents read as of %d differ from the collections' since and changes replayed: %s", t, d)
	}
	return got, nil
}

// at applies the updates up to t (t never decreasing from one call to
// the next) and returns a copy of the contents, checking that every row
// and every key is there once.
func (r *replay) at(t uint64) (Rows, error) {
	for ; r.next < len(r.updates) && r.updates[r.next].time <= t; r.next++ {
		u := r.updates[r.next]
		if r.rows[u.coll][u.row] += u.diff; r.rows[u.coll][u.row] == 0 {
			delete(r.rows[u.coll], u.row)
		}
	}
	out := Rows{}
	for c, rows := range r.rows {
		if err := checkRows(rows, r.src.key(c)); err != nil {
			return nil, fmt.Errorf("%s replayed to %d: %w", c, t, err)
		}
		out[c] = maps.Clone(rows)
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
		src, err := openSource(ctx, st, sc, lay.Keys)
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
			rows, err := rp.read(ctx, b.Time, true)
			var got State
			if err == nil {
				got, err = bankState(rows)
			}
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
		src, err := openSource(ctx, st, sc, lay.Keys)
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

// RecordReads reads every readable binding time of every source: Walk
// without a visit.
func RecordReads(ctx context.Context, dir string, lay Layout) (Reads, error) {
	return Walk(ctx, dir, lay, WalkOptions{})
}

// WalkOptions are what Walk does beyond its own checks.
type WalkOptions struct {
	// AsOf says at which of a source's n readable bindings (the i-th,
	// from 0) the contents are also read as of the binding's time (nil:
	// the last one and every 97th; CheckTimes reads every one both
	// ways).
	AsOf func(i, n int) bool
	// Visit, if set, sees every source's contents at each of its
	// readable bindings, in time order (rows are its own); an error ends
	// the walk with it.
	Visit func(source string, b frontier.Binding, rows Rows) error
}

// Walk reads every readable binding time of every source of lay: its
// collections rebuilt from their since and changes (every change at a
// binding time), no row twice and no key (Layout.Keys) twice at any of
// them, and read as of the time alike where o.AsOf says. It returns the
// reads; a store or a source not there yet has none.
func Walk(ctx context.Context, dir string, lay Layout, o WalkOptions) (Reads, error) {
	st, err := openStore(ctx, dir)
	if errors.Is(err, store.ErrNoStore) {
		return Reads{}, nil
	}
	if err != nil {
		return nil, err
	}
	asOf := o.AsOf
	if asOf == nil {
		asOf = func(i, n int) bool { return i == n-1 || i%97 == 0 }
	}
	out := Reads{}
	for _, sc := range lay.Sources {
		out[sc.ID] = map[uint64]uint64{}
		src, err := openSource(ctx, st, sc, lay.Keys)
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
			rows, err := rp.read(ctx, b.Time, asOf(i, len(src.readable)))
			if err == nil && o.Visit != nil {
				err = o.Visit(sc.ID, b, rows)
			}
			if err != nil {
				return nil, fmt.Errorf("source %s binding %d (time %d, frontier %s): %w", sc.ID, i, b.Time, b.Frontier, err)
			}
			out[sc.ID][b.Time] = hashState(rows)
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
	src, err := openSource(ctx, st, sc, nil)
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
