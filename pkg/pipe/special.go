package pipe

import (
	"fmt"
	"io"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// each calls fn for every record left in the stream, releasing it after.
func (s *Stream) each(fn func(rec arrow.Record, batch int) error) error {
	for {
		b := s.batch
		rec, err := s.NextRecord()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		err = fn(rec, b)
		rec.Release()
		if err != nil {
			return err
		}
	}
}

// invalid records a sticky FormatError for a decoded value.
func (s *Stream) invalid(batch int, col string, format string, args ...any) error {
	return s.r.fail(s.Index, batch, col, "", fmt.Errorf(format, args...))
}

func (s *Stream) wantKind(k Kind, op string) error {
	if s.Header.Kind != k {
		return fmt.Errorf("%s: stream %d is a %s stream, not a %s stream", op, s.Index, s.Header.Kind, k)
	}
	return nil
}

// ReadProgress reads the rest of a progress stream and returns its
// frontier. Each row is one partition with a non-zero upper; a partition
// may appear only once and must be valid for the domain. No rows is the
// empty frontier.
func (s *Stream) ReadProgress() (frontier.Frontier, error) {
	if err := s.wantKind(KindProgress, "read progress"); err != nil {
		return frontier.Frontier{}, err
	}
	parts := map[string]uint64{}
	err := s.each(func(rec arrow.Record, b int) error {
		ps := rec.Column(0).(*array.String)
		ups := rec.Column(1).(*array.Uint64)
		for i := 0; i < int(rec.NumRows()); i++ {
			p, u := ps.Value(i), ups.Value(i)
			if u == 0 {
				return s.invalid(b, ColUpper, "row %d: partition %q has upper 0: leave partitions at 0 out of a progress stream", i, p)
			}
			if _, dup := parts[p]; dup {
				return s.invalid(b, ColPartition, "row %d: partition %q appears twice", i, p)
			}
			parts[p] = u
			if _, err := frontier.New(s.Header.Domain, map[string]uint64{p: 1}); err != nil {
				return s.r.fail(s.Index, b, ColPartition, fmt.Sprintf("row %d", i), err)
			}
		}
		return nil
	})
	if err != nil {
		return frontier.Frontier{}, err
	}
	f, err := frontier.New(s.Header.Domain, parts)
	if err != nil {
		return frontier.Frontier{}, s.r.fail(s.Index, -1, ColPartition, "", err)
	}
	return f, nil
}

// ReadBindings reads the rest of a bindings stream and returns its
// bindings in order. Rows with equal _time form one binding; times ascend
// strictly from binding to binding and frontiers only grow. A binding with
// the empty frontier is one row with _partition "" and _upper 0.
func (s *Stream) ReadBindings() ([]frontier.Binding, error) {
	if err := s.wantKind(KindBindings, "read bindings"); err != nil {
		return nil, err
	}
	var (
		out      []frontier.Binding
		cur      map[string]uint64
		curTime  uint64
		curEmpty bool // the group is the empty-frontier marker row
		curBatch int
		open     bool
	)
	closeGroup := func() error {
		if !open {
			return nil
		}
		open = false
		f, err := frontier.New(s.Header.Domain, cur)
		if err != nil {
			return s.r.fail(s.Index, curBatch, ColPartition, fmt.Sprintf("binding at %d", curTime), err)
		}
		if n := len(out); n > 0 && !f.Covers(out[n-1].Frontier) {
			return s.invalid(curBatch, ColUpper, "binding at %d (%s) does not cover the binding at %d (%s): bindings only grow", curTime, f, out[n-1].Time, out[n-1].Frontier)
		}
		out = append(out, frontier.Binding{Time: curTime, Frontier: f})
		return nil
	}
	err := s.each(func(rec arrow.Record, b int) error {
		ts := rec.Column(0).(*array.Uint64)
		ps := rec.Column(1).(*array.String)
		ups := rec.Column(2).(*array.Uint64)
		for i := 0; i < int(rec.NumRows()); i++ {
			t, p, u := ts.Value(i), ps.Value(i), ups.Value(i)
			if !open || t != curTime {
				if open && t < curTime {
					return s.invalid(b, ColTime, "row %d: binding at %d comes after the binding at %d: bindings must ascend strictly by _time", i, t, curTime)
				}
				if err := closeGroup(); err != nil {
					return err
				}
				open, cur, curTime, curEmpty, curBatch = true, map[string]uint64{}, t, false, b
				if p == "" && u == 0 {
					curEmpty = true
					continue
				}
			} else if curEmpty || (p == "" && u == 0) {
				return s.invalid(b, ColUpper, "row %d: the binding at %d mixes the empty-frontier row (_partition \"\", _upper 0) with other rows", i, t)
			}
			if u == 0 {
				return s.invalid(b, ColUpper, "row %d: partition %q has upper 0 (only the empty-frontier row of a binding, with _partition \"\", may have _upper 0)", i, p)
			}
			if _, dup := cur[p]; dup {
				return s.invalid(b, ColPartition, "row %d: partition %q appears twice in the binding at %d", i, p, t)
			}
			cur[p] = u
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := closeGroup(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, s.invalid(-1, "", "bindings stream has no rows: it must hold at least one binding")
	}
	return out, nil
}

// ReadError reads the rest of an error stream: the time from which the
// error holds and its message. The stream must hold exactly one row.
func (s *Stream) ReadError() (t uint64, msg string, err error) {
	if err := s.wantKind(KindError, "read error stream"); err != nil {
		return 0, "", err
	}
	rows := 0
	err = s.each(func(rec arrow.Record, b int) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			if rows > 0 {
				return s.invalid(b, "", "error stream has more than one row")
			}
			rows++
			t = rec.Column(0).(*array.Uint64).Value(i)
			msg = rec.Column(1).(*array.String).Value(i)
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	if rows != 1 {
		return 0, "", s.invalid(-1, "", "error stream has no rows: it must hold exactly one")
	}
	return t, msg, nil
}

// ReadReset reads a reset stream's time and, when rtr.schema says the
// schema changes there, the collection's new user schema (else nil).
func (s *Stream) ReadReset() (t uint64, schema *arrow.Schema, err error) {
	if err := s.wantKind(KindReset, "read reset stream"); err != nil {
		return 0, nil, err
	}
	rows := 0
	err = s.each(func(rec arrow.Record, b int) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			if rows > 0 {
				return s.invalid(b, "", "reset stream has more than one row")
			}
			rows++
			t = rec.Column(0).(*array.Uint64).Value(i)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	if rows != 1 {
		return 0, nil, s.invalid(-1, "", "reset stream has no rows: it must hold exactly one")
	}
	return t, s.Header.Schema, nil
}
