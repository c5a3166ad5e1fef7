package store

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
)

// ConsolidateOptions say which updates Consolidate takes and what it
// returns.
type ConsolidateOptions struct {
	// Lo and Hi select the updates with Lo <= _time < Hi. Hi 0 means no
	// upper bound.
	Lo, Hi uint64
	// KeepTime consolidates per (row, time) and returns the user columns,
	// _time and _diff sorted by time then row (what Shard.Changes returns).
	// Otherwise updates are consolidated per row over all their times and
	// the result is the user columns and _diff (the multiplicity), sorted by
	// row (what Shard.ReadAsOf returns).
	KeepTime bool
}

// Consolidate sums the diffs of identical updates of recs and drops those
// that sum to zero, with the store's row order and equality (so a NaN
// equals itself and -0 differs from +0, as in ReadAsOf). Each record of
// recs has the fields of user, in order, then _time (uint64) and _diff
// (int64), and nothing else. The inputs need not be sorted; they are not
// retained. The caller releases the result.
func Consolidate(user []arrow.Field, recs []arrow.Record, opts ConsolidateOptions) (arrow.Record, error) {
	n := len(user)
	for i, rec := range recs {
		fs := rec.Schema().Fields()
		if len(fs) != n+2 || fs[n].Name != TimeColumn || fs[n+1].Name != DiffColumn ||
			!arrow.TypeEqual(fs[n].Type, arrow.PrimitiveTypes.Uint64) || !arrow.TypeEqual(fs[n+1].Type, arrow.PrimitiveTypes.Int64) {
			return nil, fmt.Errorf("consolidate: record %d: want the user columns, then _time uint64 and _diff int64: %w", i, ErrInvalid)
		}
		for j, f := range user {
			if fs[j].Name != f.Name || !arrow.TypeEqual(fs[j].Type, f.Type) {
				return nil, fmt.Errorf("consolidate: record %d: column %d is %s %s, want %s %s: %w", i, j, fs[j].Name, fs[j].Type, f.Name, f.Type, ErrInvalid)
			}
		}
		if rec.Column(n).NullN() > 0 || rec.Column(n+1).NullN() > 0 {
			return nil, fmt.Errorf("consolidate: record %d: _time and _diff must not be null: %w", i, ErrInvalid)
		}
	}
	rs, err := newRunSet(user)
	if err != nil {
		return nil, fmt.Errorf("consolidate: %w", err)
	}
	defer rs.release()
	var es []ent
	for _, rec := range recs {
		r := rs.add(rec)
		for i, t := range rs.times[r] {
			if t < opts.Lo || (opts.Hi != 0 && t >= opts.Hi) {
				continue
			}
			e := ent{time: t, diff: rs.diffs[r][i], run: uint32(r), row: uint32(i)}
			if n > 0 {
				e.pre = rs.cols[0].prefix(r, i)
			}
			es = append(es, e)
		}
	}
	schema := arrow.NewSchema(user, nil)
	if opts.KeepTime {
		rs.sortTimeRow(es)
		return rs.build(withColumns(schema, timeField, diffField), rs.consolidateRowTime(es), true), nil
	}
	rs.sortRowTime(es)
	return rs.build(withColumns(schema, diffField), rs.consolidateRow(es), false), nil
}
