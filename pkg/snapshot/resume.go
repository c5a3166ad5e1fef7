package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// A resumable snapshot (Config.Resume, MySQLConfig.Resume) copies each
// table in chunks chosen by a value of the row (a range of its primary
// key's first column when that is an integer, else the whole table),
// hands each chunk's rows to a ChunkSink and says when a chunk is
// complete. A later attempt given the plan back copies only the chunks
// not done, at a newer snapshot, and the rewind takes every chunk back to
// time 0's position (PostgreSQL: the slot's start; MySQL: the plan's
// Start) from the position it was copied at: a change's row belongs to
// the chunk its own value chooses, so each chunk's rows at the start are
// its copy minus the changes to its rows in between (docs/snapshot.md,
// "Resuming"). The same plan, chunks and rule serve both sources; only
// how a position is written differs (an LSN, a GTID position).

// Plan is how a resumable snapshot cuts its tables, and how far it got.
type Plan struct {
	// PostgreSQL: Slot and SlotLSN, the permanent slot and its start the
	// chunks are rewound to. A plan holds only while the slot is still
	// there.
	Slot    string       `json:"slot,omitempty"`
	SlotLSN frontier.LSN `json:"slot_lsn,omitempty"`
	// MySQL/MariaDB: Start is the GTID position (in the server's
	// notation, 0-1-42) time 0 holds the tables at, the chunks are
	// rewound to and the stream starts from; Partition is the _partition
	// of the time-0 rows.
	Start     string      `json:"start,omitempty"`
	Partition string      `json:"partition,omitempty"`
	Tables    []PlanTable `json:"tables"`
}

// PlanTable is one table of a plan.
type PlanTable struct {
	// Name is the collection name.
	Name string `json:"name"`
	// OID (PostgreSQL) and Columns identify the table as copied
	// (Columns: a hash of its Arrow fields); a plan whose table differs
	// is not resumed.
	OID     uint32 `json:"oid,omitempty"`
	Columns string `json:"columns"`
	// EstimatedRows is pg_class.reltuples (MySQL: information_schema
	// TABLE_ROWS) when planned (0: unknown).
	EstimatedRows int64 `json:"estimated_rows,omitempty"`
	// Column is the integer key column the chunks are ranges of; ""
	// when the table is one chunk.
	Column string  `json:"column,omitempty"`
	Chunks []Chunk `json:"chunks"`
}

// Chunk is the rows of a table with Lo <= Column < Hi (a missing bound:
// no bound; the whole table when PlanTable.Column is "").
type Chunk struct {
	Lo *int64 `json:"lo,omitempty"`
	Hi *int64 `json:"hi,omitempty"`
	// LSN (PostgreSQL) is the snapshot LSN the chunk was copied at; Pos
	// (MySQL) the GTID position of its consistent snapshot, in the
	// server's notation. Both unset while the chunk is not done.
	LSN frontier.LSN `json:"snapshot_lsn,omitempty"`
	Pos string       `json:"snapshot_pos,omitempty"`
	// Rows and Staged are the caller's (the ChunkSink's) record of the
	// done chunk: how many rows it copied and where it keeps them. PG
	// only carries them.
	Rows   int64           `json:"rows,omitempty"`
	Staged json.RawMessage `json:"staged,omitempty"`
}

// Done reports whether the chunk was copied.
func (c Chunk) Done() bool { return c.LSN != 0 || c.Pos != "" }

// ChunkRef names a chunk of a plan.
type ChunkRef struct{ Table, Chunk int }

// Resume configures a resumable snapshot.
type Resume struct {
	// Plan is an earlier attempt's, with the chunks it finished; nil for
	// none.
	Plan *Plan
	// ChunkPages is about how many heap pages a chunk has (PostgreSQL;
	// 0: 1/32 of the tables' pages, at least 128 and at most 16384).
	ChunkPages int64
	// ChunkRows is about how many rows a chunk has (MySQL; 0: 1/32 of
	// the tables' estimated rows, at least 10,000 and at most 1,000,000).
	ChunkRows int64
	// Begin is called once the plan is fixed, before anything is copied:
	// the earlier plan when it still holds (kept), else a new one with no
	// chunk done (then whatever the caller kept of the earlier one is
	// void). The snapshot sets the plan's chunks' positions as they are
	// done, from the Sink's goroutine.
	Begin func(plan *Plan, kept bool) error
}

// ChunkSink is the Sink of a resumable snapshot: copied rows come in
// ChunkData by chunk, then ChunkDone once every row of the chunk has
// been given; rewound changes and progress come as usual.
type ChunkSink interface {
	pipe.Sink
	ChunkData(c ChunkRef, collection string, rec arrow.Record) error
	ChunkDone(c ChunkRef, collection string) error
}

// columnsHash identifies a table's columns (its Arrow fields) as copied.
func columnsHash(fields []arrow.Field) string {
	sum := sha256.Sum256([]byte(arrow.NewSchema(fields, nil).String()))
	return hex.EncodeToString(sum[:12])
}

// keepPlan reports whether p can be resumed for tables with the slot at
// slotLSN.
func keepPlan(p *Plan, slot string, slotLSN frontier.LSN, tables []*table) bool {
	if p == nil || p.Slot != slot || p.SlotLSN != slotLSN {
		return false
	}
	for _, tb := range tables {
		pt := p.table(tb.name)
		if pt == nil || pt.OID != tb.t.OID || pt.Columns != columnsHash(tb.t.Fields()) || len(pt.Chunks) == 0 {
			return false
		}
		if pt.Column != "" && tb.keyCol(pt.Column) < 0 {
			return false
		}
	}
	return true
}

func (p *Plan) table(name string) *PlanTable {
	for i := range p.Tables {
		if p.Tables[i].Name == name {
			return &p.Tables[i]
		}
	}
	return nil
}

// keyCol returns the index of integer column name of tb, or -1.
func (tb *table) keyCol(name string) int {
	for i, c := range tb.t.Columns {
		if c.Name == name {
			switch tb.schema.Field(i).Type.ID() {
			case arrow.INT16, arrow.INT32, arrow.INT64:
				return i
			}
		}
	}
	return -1
}

// newPlan cuts the tables into chunks of about chunkPages heap pages: a
// table with an integer first primary key column into ranges of it from
// its least to its greatest value (the first and last open-ended),
// any other table whole.
func newPlan(ctx context.Context, conn *pgx.Conn, slot string, slotLSN frontier.LSN, tables []*table, chunkPages int64) (*Plan, error) {
	var total int64
	for _, tb := range tables {
		total += tb.relpages
	}
	if chunkPages <= 0 {
		chunkPages = min(max(total/32, 128), 16384)
	}
	p := &Plan{Slot: slot, SlotLSN: slotLSN}
	for _, tb := range tables {
		pt := PlanTable{Name: tb.name, OID: tb.t.OID, Columns: columnsHash(tb.t.Fields()), EstimatedRows: tb.tuples}
		n := tb.relpages / chunkPages
		if tb.relkind == "r" && n > 1 {
			var col string
			err := conn.QueryRow(ctx, `SELECT a.attname::text FROM pg_catalog.pg_index i
				JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
				WHERE i.indrelid = $1 AND i.indisprimary`, tb.t.OID).Scan(&col)
			if err != nil && err != pgx.ErrNoRows {
				return nil, fmt.Errorf("plan chunks of %s: %w", tb.name, err)
			}
			if col != "" && tb.keyCol(col) >= 0 {
				var lo, hi *int64
				q := fmt.Sprintf("SELECT min(%[1]s)::int8, max(%[1]s)::int8 FROM ONLY %[2]s", pgx.Identifier{col}.Sanitize(), tb.rel.SQL())
				if err := conn.QueryRow(ctx, q).Scan(&lo, &hi); err != nil {
					return nil, fmt.Errorf("plan chunks of %s: %w", tb.name, err)
				}
				if lo != nil && hi != nil && *hi > *lo {
					pt.Column, pt.Chunks = col, keyRanges(*lo, *hi, n)
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

// keyRanges cuts [lo, hi] into n ranges, the first open below and the
// last open above.
func keyRanges(lo, hi, n int64) []Chunk {
	span := uint64(hi) - uint64(lo)
	n = min(n, int64(min(span, 1<<20)))
	step := span / uint64(n)
	var out []Chunk
	var prev *int64
	for i := int64(1); i < n; i++ {
		b := int64(uint64(lo) + uint64(i)*step)
		out = append(out, Chunk{Lo: prev, Hi: &b})
		prev = &b
	}
	return append(out, Chunk{Lo: prev})
}

// where is the chunk's WHERE condition on column col ("" for none),
// quoted by quote.
func (c Chunk) where(col string, quote func(string) string) string {
	if col == "" {
		return ""
	}
	q := quote(col)
	switch {
	case c.Lo != nil && c.Hi != nil:
		return fmt.Sprintf("%s >= %d AND %s < %d", q, *c.Lo, q, *c.Hi)
	case c.Lo != nil:
		return fmt.Sprintf("%s >= %d", q, *c.Lo)
	case c.Hi != nil:
		return fmt.Sprintf("%s < %d", q, *c.Hi)
	}
	return ""
}

func (c Chunk) holds(v int64) bool {
	return (c.Lo == nil || v >= *c.Lo) && (c.Hi == nil || v < *c.Hi)
}

// pgQuote quotes a PostgreSQL identifier.
func pgQuote(col string) string { return pgx.Identifier{col}.Sanitize() }

// chunking is a table's chunks in a resumable snapshot, for the rewind:
// which chunk a row of it belongs to, hence where it was copied.
type chunking struct {
	col    int // index of the key column; -1: one chunk
	chunks []Chunk
}

// chunkOf returns the index of the chunk of row i of cols.
func (ck *chunking) chunkOf(cols []arrow.Array, i int) int {
	if ck.col < 0 || len(ck.chunks) == 1 {
		return 0
	}
	var v int64
	switch a := cols[ck.col].(type) {
	case *array.Int8:
		v = int64(a.Value(i))
	case *array.Int16:
		v = int64(a.Value(i))
	case *array.Int32:
		v = int64(a.Value(i))
	case *array.Int64:
		v = a.Value(i)
	case *array.Uint8:
		v = int64(a.Value(i))
	case *array.Uint16:
		v = int64(a.Value(i))
	case *array.Uint32:
		v = int64(a.Value(i))
	case *array.Uint64:
		if a.Value(i) > math.MaxInt64 {
			return len(ck.chunks) - 1 // above every bound: the last chunk, open above
		}
		v = int64(a.Value(i))
	}
	for k, c := range ck.chunks {
		if c.holds(v) {
			return k
		}
	}
	return len(ck.chunks) - 1 // not reached: the chunks cover every value
}

// lsnOf returns the LSN the chunk of row i of cols was copied at.
func (ck *chunking) lsnOf(cols []arrow.Array, i int) frontier.LSN {
	return ck.chunks[ck.chunkOf(cols, i)].LSN
}

// maxLSN is the latest LSN a chunk was copied at.
func (ck *chunking) maxLSN() frontier.LSN {
	var m frontier.LSN
	for _, c := range ck.chunks {
		m = max(m, c.LSN)
	}
	return m
}
