package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// table is one table being snapshotted.
type table struct {
	t        *pgarrow.Table
	rel      relName
	name     string        // collection name (pgarrow.CollectionName)
	schema   *arrow.Schema // data schema: columns, _time, _diff
	relkind  string        // pg_class.relkind
	relpages int64         // pg_class.relpages (an estimate)
	tuples   int64         // pg_class.reltuples, 0 when unknown
	ranges   int           // COPY tasks it was split into
	rows     int64         // rows copied
	rewound  int64         // changes rewound
	colsSQL  string        // quoted column list
	decs     []binDecoder  // binary COPY decoders; nil: COPY text
	key      []string      // replica identity key when not FULL (Config.KeyedIdentity)
	// failed is set when a row failed to convert: the table has a definite
	// error (sent once, as a batch with err), and its copy stops.
	failed atomic.Bool
	errMsg string // the error, once the sink has it (sink goroutine only)
	// ck is the table's chunking in a resumable snapshot (nil: copied
	// whole at one LSN).
	ck *chunking
}

// task is one COPY: a whole table, or the ctid range of heap pages
// [lo, hi) of it (hi < 0: to the end).
type task struct {
	tb     *table
	lo, hi int64
	ranged bool
	// chunk is set for a chunk of a resumable snapshot: its rows are
	// those of where (empty: the whole table).
	chunk *ChunkRef
	where string
}

// sql returns the COPY statement of the task.
func (k task) sql() string {
	if k.tb.decs != nil {
		return k.copySQL() + " (FORMAT binary)"
	}
	return k.copySQL()
}

func (k task) copySQL() string {
	switch {
	case k.where != "":
		return fmt.Sprintf("COPY (SELECT %s FROM ONLY %s WHERE %s) TO STDOUT", k.tb.colsSQL, k.tb.rel.SQL(), k.where)
	case k.ranged && k.hi >= 0:
		return fmt.Sprintf("COPY (SELECT %s FROM ONLY %s WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid) TO STDOUT",
			k.tb.colsSQL, k.tb.rel.SQL(), k.lo, k.hi)
	case k.ranged:
		return fmt.Sprintf("COPY (SELECT %s FROM ONLY %s WHERE ctid >= '(%d,0)'::tid) TO STDOUT", k.tb.colsSQL, k.tb.rel.SQL(), k.lo)
	case k.tb.relkind == "r" && k.tb.colsSQL != "":
		return fmt.Sprintf("COPY %s (%s) TO STDOUT", k.tb.rel.SQL(), k.tb.colsSQL)
	default:
		return fmt.Sprintf("COPY (SELECT %s FROM %s) TO STDOUT", k.tb.colsSQL, k.tb.rel.SQL())
	}
}

// splitPages cuts relpages heap pages into ranges of rangePages pages; the
// last range is open-ended, so pages added since relpages was measured are
// still copied. It returns nil when the table is not worth splitting.
func splitPages(relpages, rangePages int64) [][2]int64 {
	if rangePages <= 0 || relpages <= rangePages {
		return nil
	}
	var out [][2]int64
	for lo := int64(0); ; lo += rangePages {
		if lo+rangePages >= relpages {
			return append(out, [2]int64{lo, -1})
		}
		out = append(out, [2]int64{lo, lo + rangePages})
	}
}

// columnList quotes the column names for a SELECT or COPY list.
func columnList(t *pgarrow.Table) string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	return strings.Join(names, ", ")
}

// batch is a record of copied rows of one table, ready for the sink, or
// (err set, rec nil) the table's definite error, or (done set, rec nil)
// the end of a chunk.
type batch struct {
	tb    *table
	rec   arrow.Record
	err   string
	chunk *ChunkRef
	done  bool
}

// constants holds the _time (all 0) and _diff (all +1) buffers shared by
// every record a worker makes: Go memory, never freed by Release.
type constants struct {
	zeros []byte
	ones  []byte
}

func newConstants(n int) *constants {
	ones := make([]int64, n)
	for i := range ones {
		ones[i] = 1
	}
	return &constants{zeros: make([]byte, 8*n), ones: arrow.Int64Traits.CastToBytes(ones)}
}

// timeDiff returns _time = 0 and _diff = +1 arrays of n rows.
func (c *constants) timeDiff(n int) (arrow.Array, arrow.Array) {
	t := array.NewData(arrow.PrimitiveTypes.Uint64, n, []*memory.Buffer{nil, memory.NewBufferBytes(c.zeros[:8*n])}, nil, 0, 0)
	d := array.NewData(arrow.PrimitiveTypes.Int64, n, []*memory.Buffer{nil, memory.NewBufferBytes(c.ones[:8*n])}, nil, 0, 0)
	defer t.Release()
	defer d.Release()
	return array.MakeFromData(t), array.MakeFromData(d)
}

// copier turns the COPY text output of one task into records. It is the
// io.Writer that pgconn.CopyTo writes the CopyData messages to.
type copier struct {
	ctx      context.Context
	tb       *table
	rb       *pgarrow.RowBuilder
	consts   *constants
	out      chan<- batch
	maxRows  int
	maxBytes int
	chunk    *ChunkRef // the task's chunk in a resumable snapshot

	row     copyRow
	partial []byte // an incomplete line carried over to the next Write
	bytes   int    // text bytes in the builder
	lineNo  int64
	// bad is the first row that failed to convert; the rest of the
	// output is then ignored (the COPY runs to its end, so that the
	// connection stays usable for the other tables).
	bad *badRow
	// diagnose only looks for a bad row (the text copy that names the row
	// a binary copy failed on): it sends nothing.
	diagnose bool
}

// badRow is a row that failed to convert.
type badRow struct {
	line  int64
	err   error
	vals  [][]byte
	nulls []bool
}

// stopped says whether the rest of the output is to be ignored.
func (c *copier) stopped() bool { return c.bad != nil || c.tb.failed.Load() }

// Write parses every complete line of p. The server sends one row per
// CopyData message, but nothing here depends on it.
func (c *copier) Write(p []byte) (int, error) {
	n := len(p)
	if c.stopped() {
		return n, nil
	}
	if len(c.partial) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.partial = append(c.partial, p...)
			return n, nil
		}
		c.partial = append(c.partial, p[:i]...)
		if err := c.line(c.partial); err != nil {
			return 0, err
		}
		c.partial = c.partial[:0]
		p = p[i+1:]
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.partial = append(c.partial, p...)
			break
		}
		if err := c.line(p[:i]); err != nil {
			return 0, err
		}
		p = p[i+1:]
	}
	return n, nil
}

func (c *copier) line(l []byte) error {
	if c.stopped() {
		return nil
	}
	c.lineNo++
	if err := c.row.split(l, len(c.tb.t.Columns)); err != nil {
		return fmt.Errorf("copy %s: row %d: %w", c.tb.name, c.lineNo, err)
	}
	if err := c.rb.AppendText(c.row.vals, c.row.nulls); err != nil {
		// The row's value has no Arrow form: the table fails, not the
		// snapshot.
		b := &badRow{line: c.lineNo, err: err, nulls: append([]bool(nil), c.row.nulls...)}
		for _, v := range c.row.vals {
			b.vals = append(b.vals, append([]byte(nil), v...))
		}
		c.bad = b
		if !c.diagnose {
			c.tb.failed.Store(true)
		}
		return nil
	}
	c.bytes += len(l)
	if !c.diagnose && (c.rb.Len() >= c.maxRows || c.bytes >= c.maxBytes) {
		return c.flush()
	}
	return nil
}

// flush sends the rows built so far as one record.
func (c *copier) flush() error {
	if len(c.partial) > 0 {
		return fmt.Errorf("copy %s: %w: the output ends inside a row", c.tb.name, errCopyFormat)
	}
	n := c.rb.Len()
	if n == 0 {
		return nil
	}
	c.bytes = 0
	return c.send(c.rb.NewArrays(), n)
}

// send adds _time and _diff to the n rows of cols and sends them on.
func (c *copier) send(cols []arrow.Array, n int) error {
	tm, df := c.consts.timeDiff(n)
	cols = append(cols, tm, df)
	rec := array.NewRecord(c.tb.schema, cols, int64(n))
	for _, a := range cols {
		a.Release()
	}
	select {
	case c.out <- batch{tb: c.tb, rec: rec, chunk: c.chunk}:
		return nil
	case <-c.ctx.Done():
		rec.Release()
		return c.ctx.Err()
	}
}

// chunkDone tells the sink goroutine that every row of the copier's
// chunk was sent (nothing for a copy that is not a chunk).
func (c *copier) chunkDone() error {
	if c.chunk == nil || c.stopped() {
		return nil
	}
	select {
	case c.out <- batch{tb: c.tb, chunk: c.chunk, done: true}:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// dataSchema is the schema of a table's data records.
func dataSchema(t *pgarrow.Table) *arrow.Schema {
	return pipe.DataSchema(t.Fields(), frontier.DomainLSN, arrow.Metadata{})
}
