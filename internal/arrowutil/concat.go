// Package arrowutil holds the small Arrow helpers several packages need.
package arrowutil

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// Concat joins records of one schema into one record (nil when recs is
// empty; recs[0] retained when there is one). The caller releases it.
func Concat(schema *arrow.Schema, recs []arrow.Record, mem memory.Allocator) (arrow.Record, error) {
	switch len(recs) {
	case 0:
		return nil, nil
	case 1:
		recs[0].Retain()
		return recs[0], nil
	}
	cols := make([]arrow.Array, schema.NumFields())
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	for i := range cols {
		parts := make([]arrow.Array, len(recs))
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			for _, done := range cols[:i] {
				done.Release()
			}
			return nil, fmt.Errorf("concatenate column %s: %w", schema.Field(i).Name, err)
		}
		cols[i] = c
	}
	rec := array.NewRecord(schema, cols, n)
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// Take returns the rows of rec at the given ascending indices (rec
// itself, retained, when they are all of them). The caller releases it.
func Take(rec arrow.Record, rows []int, mem memory.Allocator) (arrow.Record, error) {
	if len(rows) == int(rec.NumRows()) {
		rec.Retain()
		return rec, nil
	}
	// Runs of consecutive rows become slices; concatenate them.
	var parts []arrow.Record
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j] == rows[j-1]+1 {
			j++
		}
		parts = append(parts, rec.NewSlice(int64(rows[i]), int64(rows[j-1]+1)))
		i = j
	}
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	out, err := Concat(rec.Schema(), parts, mem)
	if err != nil {
		return nil, fmt.Errorf("take rows: %w", err)
	}
	return out, nil
}

// RecordBytes is the size of rec's buffers (shared buffers counted in
// full), to weigh records against a memory budget.
func RecordBytes(rec arrow.Record) int64 {
	var n int64
	var add func(d arrow.ArrayData)
	add = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			add(c)
		}
	}
	for _, c := range rec.Columns() {
		add(c.Data())
	}
	return n
}
