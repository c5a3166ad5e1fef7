package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"
)

// Small binary COPYs go to the server together, as one simple query of
// several COPY ... TO STDOUT (FORMAT binary) statements: one round trip
// for many small tables instead of one each. Their outputs arrive one
// after another as CopyData messages; a binary COPY output is framed (a
// header, tuples of counted fields, a trailer), so following the framing
// tells exactly where each statement's output ends.

// Limits of one batch: the tables' heap pages (so a batch is small), and
// statements.
const (
	batchPages      = minRangePages
	batchStatements = 500
)

// binFramer follows the framing of one COPY binary output.
type binFramer struct {
	stage  int
	part   [19]byte // the fixed-size piece being read
	have   int
	skip   int // bytes of header extension or field data still to pass
	fields int // fields of the tuple still to read
}

const (
	frameHeader = iota // signature, flags, extension length
	frameCount         // a tuple's field count, or the trailer
	frameLen           // a field's length
)

var frameNeed = [...]int{frameHeader: len(binarySignature) + 8, frameCount: 2, frameLen: 4}

// feed passes the bytes of p that belong to the output, and reports
// whether the output ended (after its trailer) within them.
func (f *binFramer) feed(p []byte) (used int, end bool, err error) {
	be := binary.BigEndian
	for used < len(p) {
		if f.skip > 0 {
			n := min(f.skip, len(p)-used)
			f.skip -= n
			used += n
			continue
		}
		need := frameNeed[f.stage]
		n := copy(f.part[f.have:need], p[used:])
		f.have += n
		used += n
		if f.have < need {
			return used, false, nil
		}
		f.have = 0
		switch f.stage {
		case frameHeader:
			if !bytes.Equal(f.part[:len(binarySignature)], binarySignature) {
				return used, false, fmt.Errorf("%w: no PGCOPY signature", errBinary)
			}
			f.skip = int(be.Uint32(f.part[len(binarySignature)+4:]))
			f.stage = frameCount
		case frameCount:
			c := int(int16(be.Uint16(f.part[:2])))
			if c == -1 {
				return used, true, nil
			}
			if c < 0 {
				return used, false, fmt.Errorf("%w: tuple of %d fields", errBinary, c)
			}
			if f.fields = c; c > 0 {
				f.stage = frameLen
			}
		case frameLen:
			l := int(int32(be.Uint32(f.part[:4])))
			if l < -1 {
				return used, false, fmt.Errorf("%w: field of length %d", errBinary, l)
			}
			f.skip = max(l, 0)
			if f.fields--; f.fields == 0 {
				f.stage = frameCount
			}
		}
	}
	return used, false, nil
}

// splitWriter hands the concatenated outputs of n binary COPYs to one
// writer each: start(i) returns the i-th output's, end(i) is called after
// its trailer.
type splitWriter struct {
	n     int
	start func(i int) io.Writer
	end   func(i int) error

	i   int // outputs ended
	cur io.Writer
	f   binFramer
}

func (s *splitWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if s.i >= s.n {
			return 0, fmt.Errorf("%w: output after the last COPY's trailer", errBinary)
		}
		if s.cur == nil {
			s.cur = s.start(s.i)
		}
		n, end, err := s.f.feed(p)
		if err != nil {
			return 0, err
		}
		if _, err := s.cur.Write(p[:n]); err != nil {
			return 0, err
		}
		p = p[n:]
		if end {
			if err := s.end(s.i); err != nil {
				return 0, err
			}
			s.i, s.cur, s.f = s.i+1, nil, binFramer{}
		}
	}
	return total, nil
}

// takeBatch returns k and the binary tasks that follow it in queue, while
// they are small, without waiting for any; a task it took but could not
// add is returned as next.
func takeBatch(k task, queue <-chan task) (tasks []task, next *task) {
	tasks = []task{k}
	if k.tb.decs == nil {
		return tasks, nil
	}
	pages := k.pages()
	for len(tasks) < batchStatements && pages < batchPages {
		select {
		case m, ok := <-queue:
			if !ok {
				return tasks, nil
			}
			if m.tb.decs == nil || pages+m.pages() > batchPages {
				return tasks, &m
			}
			tasks = append(tasks, m)
			pages += m.pages()
		default:
			return tasks, nil
		}
	}
	return tasks, nil
}

// pages is the task's size in heap pages, as far as it is known.
func (k task) pages() int64 {
	if k.chunk != nil && k.tb.ck != nil {
		return max(k.tb.relpages/int64(len(k.tb.ck.chunks)), 1)
	}
	if k.ranged {
		if k.hi < 0 {
			return max(k.tb.relpages-k.lo, 1)
		}
		return k.hi - k.lo
	}
	return max(k.tb.relpages, 1)
}

// copyBinary runs binary COPY tasks in one round trip.
func copyBinary(ctx context.Context, conn *pgx.Conn, cfg Config, consts *constants, bins map[*table]*binCopier, tasks []task, out chan<- batch) error {
	copiers := make([]*copier, len(tasks))
	bads := make([]error, len(tasks))
	var cur *binCopier
	sw := &splitWriter{n: len(tasks),
		start: func(i int) io.Writer {
			k := tasks[i]
			c := &copier{ctx: ctx, tb: k.tb, consts: consts, out: out, maxRows: cfg.BatchRows, maxBytes: cfg.BatchBytes, chunk: k.chunk}
			copiers[i] = c
			bc := bins[k.tb]
			if bc == nil {
				bc = newBinCopier(c, memory.DefaultAllocator, k.tb.decs)
				bins[k.tb] = bc
			}
			bc.base, bc.header, bc.trailer, bc.buf = c, false, false, bc.buf[:0]
			cur = bc
			return bc
		},
		end: func(i int) error {
			bads[i] = cur.bad
			if err := cur.finish(); err != nil {
				return err
			}
			if cur.bad != nil {
				return nil
			}
			return copiers[i].chunkDone()
		},
	}
	sqls := make([]string, len(tasks))
	for i, k := range tasks {
		sqls[i] = k.sql()
	}
	if _, err := conn.PgConn().CopyTo(ctx, sw, strings.Join(sqls, "; ")); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("copy %s: %w", tasks[min(sw.i, len(tasks)-1)].tb.name, err)
	}
	if sw.i != len(tasks) {
		return fmt.Errorf("copy %s: %w: the output ends without its trailer", tasks[sw.i].tb.name, errBinary)
	}
	for i, bad := range bads {
		if bad != nil {
			if err := failTable(ctx, copiers[i], diagnoseBinary(ctx, conn, tasks[i], bad)); err != nil {
				return err
			}
		}
	}
	return nil
}
