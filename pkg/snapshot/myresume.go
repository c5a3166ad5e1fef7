package snapshot

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/go-mysql-org/go-mysql/client"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// A resumable MySQL/MariaDB snapshot (MySQLConfig.Resume) uses the plan of
// resume.go: time 0 is the plan's Start, a GTID position fixed when the
// plan is made (the first attempt's own consistent snapshot, or
// MySQLConfig.Start), and each chunk records the position of the
// consistent snapshot it was copied in. A later attempt copies the
// chunks not done in a snapshot of its own, and the rewind negates every
// change at t with Start <= t < (the position of the chunk the changed
// row's key chooses), exactly as PostgreSQL's per-chunk LSNs
// (docs/snapshot.md, "Resuming", docs/mysql.md).

// myChunks is a table's chunking in a resumable snapshot: which chunk a
// row belongs to and the snapshot each chunk was copied in.
type myChunks struct {
	ck    chunking
	snaps []frontier.Frontier
}

// snapOf returns the snapshot the chunk of row i of cols was copied in.
func (c *myChunks) snapOf(cols []arrow.Array, i int) frontier.Frontier {
	return c.snaps[c.ck.chunkOf(cols, i)]
}

// latest is the newest snapshot a chunk was copied in.
func (c *myChunks) latest() frontier.Frontier {
	out := c.snaps[0]
	for _, s := range c.snaps[1:] {
		if j, err := frontier.Join(out, s); err == nil {
			out = j
		}
	}
	return out
}

// myKeyCol returns the index of integer column name of t, or -1.
func myKeyCol(t *myarrow.Table, name string) int {
	for i, c := range t.Columns {
		if c.Name == name && (c.Kind == myarrow.KindInt || c.Kind == myarrow.KindUint) {
			return i
		}
	}
	return -1
}

// keepPlanMySQL returns the start position of plan p when it can be
// resumed for tabs: start (MySQLConfig.Start) unset or p's, snapshot (the
// new attempt's) at or beyond it (not another server, not a reset
// binlog), and every table planned with the same columns and chunk
// column.
func keepPlanMySQL(p *Plan, mariaDB bool, start, snapshot frontier.Frontier, tabs []*myTab) (frontier.Frontier, bool) {
	if p == nil || p.Partition == "" {
		return frontier.Frontier{}, false
	}
	_, ps, err := replicate.ParsePosition(mariaDB, p.Start)
	if err != nil || ps.Domain() != snapshot.Domain() || !snapshot.Covers(ps) {
		return frontier.Frontier{}, false
	}
	if start.Domain() != "" {
		zero := frontier.Empty(snapshot.Domain()).With(p.Partition, 1)
		a, err1 := frontier.Join(ps, zero)
		b, err2 := frontier.Join(start, zero)
		if err1 != nil || err2 != nil || !a.Equal(b) {
			return frontier.Frontier{}, false
		}
	}
	for _, tb := range tabs {
		pt := p.table(tb.t.QualifiedName())
		if pt == nil || pt.Columns != columnsHash(tb.t.Fields()) || len(pt.Chunks) == 0 {
			return frontier.Frontier{}, false
		}
		if pt.Column != "" && myKeyCol(tb.t, pt.Column) < 0 {
			return frontier.Frontier{}, false
		}
		for _, c := range pt.Chunks {
			if c.Pos == "" {
				continue
			}
			if _, f, err := replicate.ParsePosition(mariaDB, c.Pos); err != nil || !snapshot.Covers(f) {
				return frontier.Frontier{}, false
			}
		}
	}
	return ps, true
}

// newPlanMySQL cuts the tables into chunks of about chunkRows rows: a
// table whose primary key's first column is an integer, with more than
// two chunks' worth of estimated rows, into ranges of it from its least
// to its greatest value (read in w's snapshot; the first and last range
// open-ended), any other table whole.
func newPlanMySQL(ctx context.Context, w *client.Conn, tabs []*myTab, start, part string, chunkRows int64) (*Plan, error) {
	var total int64
	for _, tb := range tabs {
		total += tb.t.Rows
	}
	if chunkRows <= 0 {
		chunkRows = min(max(total/32, 10_000), 1_000_000)
	}
	p := &Plan{Start: start, Partition: part}
	for _, tb := range tabs {
		t := tb.t
		pt := PlanTable{Name: t.QualifiedName(), Columns: columnsHash(t.Fields()), EstimatedRows: t.Rows}
		if n := t.Rows / chunkRows; n > 2 && len(t.PrimaryKey) > 0 {
			if col := t.Columns[t.PrimaryKey[0]].Name; myKeyCol(t, col) >= 0 {
				pk := myarrow.QuoteIdent(col)
				r, err := upstream.Execute(ctx, w, fmt.Sprintf("SELECT CAST(MIN(%s) AS DECIMAL(65,0)), CAST(MAX(%s) AS DECIMAL(65,0)) FROM %s", pk, pk, t.SQL()))
				if err != nil {
					return nil, fmt.Errorf("plan chunks of %s: %w", t.QualifiedName(), err)
				}
				los, _ := r.GetString(0, 0)
				his, _ := r.GetString(0, 1)
				lo, err1 := strconv.ParseInt(los, 10, 64)
				hi, err2 := strconv.ParseInt(his, 10, 64)
				// (An unsigned key beyond int64 stays one chunk.)
				if err1 == nil && err2 == nil && hi > lo {
					pt.Column, pt.Chunks = col, keyRanges(lo, hi, n)
				}
			}
		}
		if len(pt.Chunks) == 0 {
			pt.Chunks = []Chunk{{}}
		}
		p.Tables = append(p.Tables, pt)
	}
	return p, nil
}

// resumeTasksMySQL returns the copy tasks of the chunks of rp not done,
// larger tables first, and gives each table its chunking.
func resumeTasksMySQL(rp *Plan, tabs []*myTab) []myTask {
	order := append([]*myTab(nil), tabs...)
	slices.SortStableFunc(order, func(a, b *myTab) int { return cmp.Compare(b.t.Rows, a.t.Rows) })
	var tasks []myTask
	for _, tb := range order {
		ti := slices.IndexFunc(rp.Tables, func(pt PlanTable) bool { return pt.Name == tb.t.QualifiedName() })
		pt := &rp.Tables[ti]
		tb.ranges = len(pt.Chunks)
		tb.chunks = &myChunks{ck: chunking{col: -1, chunks: pt.Chunks}}
		if pt.Column != "" {
			tb.chunks.ck.col = myKeyCol(tb.t, pt.Column)
		}
		for ci, c := range pt.Chunks {
			if c.Done() {
				continue
			}
			tasks = append(tasks, myTask{tb: tb, chunk: &ChunkRef{Table: ti, Chunk: ci}, where: c.where(pt.Column, myarrow.QuoteIdent), ranged: pt.Column != ""})
		}
	}
	return tasks
}

// chunkSnapshots parses the position every chunk of tb was copied in,
// once all are done: cur, this attempt's snapshot, for a chunk without
// one (copied now at an empty GTID position).
func (tb *myTab) chunkSnapshots(mariaDB bool, cur frontier.Frontier) error {
	c := tb.chunks
	c.snaps = make([]frontier.Frontier, len(c.ck.chunks))
	for i, ch := range c.ck.chunks {
		if ch.Pos == "" {
			c.snaps[i] = cur
			continue
		}
		_, f, err := replicate.ParsePosition(mariaDB, ch.Pos)
		if err != nil {
			return fmt.Errorf("chunk %d of %s: position %q: %w", i, tb.t.QualifiedName(), ch.Pos, err)
		}
		c.snaps[i] = f
	}
	return nil
}
