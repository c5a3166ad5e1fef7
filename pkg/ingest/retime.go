package ingest

import (
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/rtrctl/rtrctl/internal/arrowutil"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// retimedRows hands over to sink the rows of rec at indexes rows (none
// when it is empty) at source time at, with their diffs negated when
// negate: the held changes a re-snapshot's copy is rewound by, at the
// reset's time.
func retimedRows(sink pipe.Sink, coll string, rec arrow.Record, rows []int, at frontier.Time, negate bool) error {
	if len(rows) == 0 {
		return nil
	}
	if len(rows) < int(rec.NumRows()) {
		sub, err := arrowutil.Take(rec, rows, memory.DefaultAllocator)
		if err != nil {
			return err
		}
		defer sub.Release()
		rec = sub
	}
	return retimedTo(sink, coll, rec, at, negate)
}

// retimedTo hands over to sink every row of rec at source time at (its
// partition too, when rec has _partition), with their diffs negated when
// negate: a re-snapshot's copy at the reset's time.
func retimedTo(sink pipe.Sink, coll string, rec arrow.Record, at frontier.Time, negate bool) error {
	out := retimed(rec, at, negate)
	defer out.Release()
	return sink.Data(coll, out)
}

// retimed returns rec's rows at source time at, with their diffs negated
// when negate (the caller releases it).
func retimed(rec arrow.Record, at frontier.Time, negate bool) arrow.Record {
	n := int(rec.NumRows())
	_, _, diffs, parts := pipe.SplitData(rec)
	user := int(rec.NumCols()) - 2
	if parts != nil {
		user--
	}
	tb := array.NewUint64Builder(memory.DefaultAllocator)
	defer tb.Release()
	db := array.NewInt64Builder(memory.DefaultAllocator)
	defer db.Release()
	pb := array.NewStringBuilder(memory.DefaultAllocator)
	defer pb.Release()
	for i := 0; i < n; i++ {
		tb.Append(at.Pos)
		d := diffs.Value(i)
		if negate {
			d = -d
		}
		db.Append(d)
		pb.Append(at.Partition)
	}
	ta, da := tb.NewArray(), db.NewArray()
	defer ta.Release()
	defer da.Release()
	cols := append(slices.Clone(rec.Columns()[:user]), ta, da)
	if parts != nil {
		pa := pb.NewArray()
		defer pa.Release()
		cols = append(cols, pa)
	}
	return array.NewRecord(rec.Schema(), cols, int64(n))
}

// closed reports whether ch is closed (a re-snapshot's copy is done).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
