package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// Defaults of Config.
const (
	DefaultBatchRows  = 64 << 10
	DefaultBatchBytes = 32 << 20
	// minRangePages is the smallest ctid range (8 MiB of heap) PG splits a
	// table into on its own when Parallel > 1.
	minRangePages = 1024
)

// Config says what PG snapshots and how.
type Config struct {
	// Upstream is the database (upstream.ParsePostgres), reached with
	// normal (not replication) connections.
	Upstream *upstream.Postgres
	// Publication is the pgoutput publication; the tables must be in it.
	Publication string
	// Slot is the permanent logical replication slot (created if missing).
	// Time 0 of the snapshot holds the tables as of its confirmed_flush_lsn.
	// It is read but never advanced; nothing else may consume it while PG
	// runs.
	Slot string
	// Tables to snapshot, as SQL names them and pgarrow.ParseTableName
	// reads them (orders, public.orders, public."RelMix", collection
	// names); empty means every table of the publication.
	Tables []string
	// Parallel is the number of connections that copy at once (default 1).
	Parallel int
	// BatchRows and BatchBytes bound a record: it ends at whichever comes
	// first (defaults DefaultBatchRows, DefaultBatchBytes of COPY text).
	BatchRows, BatchBytes int
	// RangePages splits tables of more heap pages than this into ctid
	// ranges of this many pages, copied independently. 0 means automatic
	// (with Parallel > 1 only: about four ranges per connection, at least
	// 1024 pages each); negative never splits.
	RangePages int64
	// Format is the COPY format: "auto" (the default: binary for tables
	// whose column types all have a binary decoder, text for the others)
	// or "text".
	Format string
	// KeyedIdentity accepts tables whose replica identity is DEFAULT (with
	// a primary key) or USING INDEX, for a caller that keeps their rows by
	// key (rtrctl ingest; pkg/replicate.KeyState). Their updates and
	// deletes carry no old row, so the changes between the slot's start
	// and the copy can be rewound only if each one's old row is a row the
	// rewind saw inserted: a slot PG creates for such tables is created
	// with the copy's own snapshot (nothing to rewind), and Recreate does
	// so for an existing slot; otherwise a change to a row older than the
	// slot fails the snapshot with ErrRewind. Without KeyedIdentity every
	// table must be FULL.
	KeyedIdentity bool
	// Recreate (with KeyedIdentity, when a table is not FULL) drops an
	// existing slot and creates it again with the copy's snapshot: for a
	// caller to whom the slot's start means nothing yet (an ingest with
	// nothing durable).
	Recreate bool
	// Conn, when set, is the ordinary connection PG reads the catalog and
	// the slot on, instead of one of its own; PG leaves it open.
	Conn *pgx.Conn
	// KeepReplication makes PG hand over, in Result.Replication, the
	// replication connection that created a missing slot (for the
	// caller's START_REPLICATION of it, without connecting again).
	KeepReplication bool
	// OnProgress, if set, is called after every record written, from the
	// goroutine that calls the Sink.
	OnProgress func(Progress)
	// Resume, when set, makes the snapshot resumable (resume.go): the
	// Sink must be a ChunkSink; tables are copied in chunks of their key
	// instead of ctid ranges.
	Resume *Resume
	// Logger receives debug and info lines; nil means slog.Default().
	Logger *slog.Logger
}

// Progress is a report on a running snapshot.
type Progress struct {
	// Phase is "copy" or "rewind".
	Phase string
	// Table is the collection of the latest record.
	Table string
	// Rows copied so far, over all tables.
	Rows int64
	// EstimatedRows is the sum of pg_class.reltuples of the tables, 0 when
	// unknown (never analyzed).
	EstimatedRows int64
	// Rewound is the number of changes rewound so far.
	Rewound int64
	// Elapsed since PG began.
	Elapsed time.Duration
}

// Result says what PG did.
type Result struct {
	// SlotLSN is the permanent slot's start (confirmed_flush_lsn): time 0
	// holds the tables exactly as of it.
	SlotLSN frontier.LSN
	// SlotCreated says whether PG created the slot.
	SlotCreated bool
	// SnapshotLSN is the consistent point of the temporary slot that
	// pinned the copy: the copy saw exactly the transactions whose commit
	// LSN is below it.
	SnapshotLSN frontier.LSN
	// Tables in the order given (or of the publication).
	Tables []TableResult
	// Replication is, with Config.KeepReplication, the replication
	// connection that created the slot (nil when the slot existed); the
	// caller closes it.
	Replication *pgconn.PgConn
}

// TableResult is one table of a snapshot.
type TableResult struct {
	// Name is the collection name (pgarrow.CollectionName: public.orders,
	// public."RelMix").
	Name string
	// Rows copied (emitted with diff +1).
	Rows int64
	// Rewound is the number of updates emitted to rewind the copy from
	// SnapshotLSN back to SlotLSN.
	Rewound int64
	// Ranges is the number of COPY statements the table was copied with
	// (1, or the number of ctid ranges).
	Ranges int
	// Format is the COPY format used: "binary" or "text".
	Format string
	// Error is the table's definite error (handed to the Sink at time 0)
	// when a row of it does not convert (docs/types-postgres.md); the
	// other tables are unaffected.
	Error string
}

// Rows is the number of rows copied over all tables.
func (r *Result) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// Rewound is the number of updates rewound over all tables.
func (r *Result) Rewound() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rewound
	}
	return n
}

// PG writes a definite snapshot of PostgreSQL tables to sink: every table
// exactly as of the start of the permanent slot cfg.Slot, at source time
// 0, however late the copy is taken (docs/snapshot.md):
//
//  1. read the slot; its confirmed_flush_lsn is slot_lsn;
//  2. create a temporary slot exporting its snapshot (or, when the slot
//     is missing, the slot itself: then slot_lsn is snapshot_lsn); its
//     consistent point is snapshot_lsn; cfg.Parallel connections import
//     the snapshot and COPY the tables (large ones in ctid ranges, small
//     ones several in one round trip), each row at time 0 with diff +1;
//  3. read the permanent slot from slot_lsn without confirming anything
//     and emit every change committed below snapshot_lsn negated, at time
//     0 (nothing to do for a slot made in step 2);
//  4. report each table complete at time 0 (upper 1).
func PG(ctx context.Context, cfg Config, sink pipe.Sink) (*Result, error) {
	began := time.Now()
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if cfg.Upstream == nil {
		return nil, errors.New("snapshot: no upstream given")
	}
	if cfg.Publication == "" {
		return nil, errors.New("snapshot: no publication given")
	}
	if cfg.Format != "auto" && cfg.Format != "text" {
		return nil, fmt.Errorf("snapshot: unknown COPY format %q (want auto or text)", cfg.Format)
	}
	if err := CheckSlotName(cfg.Slot); err != nil {
		return nil, err
	}
	dl := startDials(ctx, cfg)
	defer dl.close()
	conn := cfg.Conn
	if conn == nil {
		c, err := cfg.Upstream.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		defer c.Close(context.Background())
		conn = c
	}
	var slot *slotRow
	tables, err := loadTables(ctx, conn, cfg, func(b *pgx.Batch) { slot = queueSlot(b, cfg.Slot) })
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}

	// A slot made for this snapshot is made with the copy's snapshot, so
	// that there is nothing to rewind (and for a table that is not FULL,
	// whose changes to older rows could not be rewound, nothing that
	// cannot be).
	keyed := false
	for _, tb := range tables {
		keyed = keyed || tb.key != nil
	}
	slotLSN, found, err := slot.result()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	// A resumable snapshot whose earlier chunks hold keeps the slot they
	// are rewound to (a change in between to an older row of a table that
	// is not FULL then fails the rewind with ErrRewind, and the caller
	// starts anew).
	resumed := cfg.Resume != nil && found && keepPlan(cfg.Resume.Plan, cfg.Slot, slotLSN, tables)
	if keyed && found && cfg.Recreate && !resumed {
		log.Info("snapshot: dropping the slot to create it again with the copy's snapshot (nothing is bound to its start yet)", "slot", cfg.Slot, "slot_lsn", slotLSN)
		if err := dropSlot(ctx, conn, cfg.Slot); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		found = false
	}
	created, withCopy := false, !found
	permanent := ""
	if withCopy {
		permanent = cfg.Slot
	}
	snapLSN, repl, err := copyTables(ctx, cfg, dl, conn, slotLSN, tables, sink, began, permanent)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if withCopy {
		slotLSN, created = snapLSN, true
	}
	res := &Result{SlotLSN: slotLSN, SlotCreated: created}
	if repl != nil {
		defer func() {
			if res.Replication == nil {
				repl.Close(context.Background())
			}
		}()
	}
	log.Debug("snapshot: slot", "slot", cfg.Slot, "slot_lsn", slotLSN, "created", created, "with_copy", withCopy)
	res.SnapshotLSN = snapLSN
	if snapLSN < slotLSN {
		return nil, fmt.Errorf("snapshot: %w: snapshot at %s is older than slot %s at %s; is something else consuming the slot?",
			ErrSlot, snapLSN, cfg.Slot, slotLSN)
	}

	if err := rewind(ctx, cfg, tables, slotLSN, snapLSN, sink, began); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if withCopy {
		if _, err := finish(res, tables, sink); err != nil {
			return nil, err
		}
		res.Replication = repl
		return res, nil
	}
	// The rewind is right only if it began at slot_lsn: a slot that moved
	// meanwhile was streamed from its new start.
	now, found, err := readSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if !found || now != slotLSN {
		return nil, fmt.Errorf("snapshot: %w: slot %s moved from %s to %s while the snapshot was taken; nothing else may consume it meanwhile",
			ErrSlot, cfg.Slot, slotLSN, now)
	}

	return finish(res, tables, sink)
}

// finish reports every table complete at time 0 and fills res.Tables.
func finish(res *Result, tables []*table, sink pipe.Sink) (*Result, error) {
	done := frontier.Single(frontier.DomainLSN, 1)
	for _, tb := range tables {
		if err := sink.Progress(tb.name, done); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		format := "text"
		if tb.decs != nil {
			format = "binary"
		}
		res.Tables = append(res.Tables, TableResult{Name: tb.name, Rows: tb.rows, Rewound: tb.rewound, Ranges: tb.ranges, Format: format, Error: tb.errMsg})
	}
	return res, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Format == "" {
		cfg.Format = "auto"
	}
	return cfg
}

// loadTables resolves, describes and checks the tables to snapshot.
// extra, when set, queues more queries in the same round trip as the
// tables' identities.
func loadTables(ctx context.Context, conn *pgx.Conn, cfg Config, extra func(*pgx.Batch)) ([]*table, error) {
	rels, tabs, err := resolveTables(ctx, conn, cfg.Publication, cfg.Tables)
	if err != nil {
		return nil, err
	}
	var tables []*table
	var bad []relName
	var idents []string
	keys := map[string][]string{}
	b := &pgx.Batch{}
	var ids *[]replicate.Identity
	if cfg.KeyedIdentity {
		ids = replicate.QueueIdentities(b, cfg.Publication)
	}
	if extra != nil {
		extra(b)
	}
	if b.Len() > 0 {
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("read replica identities of publication %s: %w", cfg.Publication, err)
		}
	}
	if ids != nil {
		for _, id := range *ids {
			keys[id.QualifiedName()] = id.Key
		}
	}
	for i, r := range rels {
		t := tabs[i]
		key := keys[t.QualifiedName()]
		if t.ReplicaIdentity != "full" && len(key) == 0 {
			ident := t.ReplicaIdentity
			if ident == "default" && cfg.KeyedIdentity {
				ident = "default without a primary key"
			}
			bad, idents = append(bad, r), append(idents, ident)
			continue
		}
		tb := &table{t: t, rel: r, name: t.QualifiedName(), schema: dataSchema(t), colsSQL: columnList(t)}
		if t.ReplicaIdentity != "full" {
			tb.key = key
		}
		if decs, ok := binaryDecoders(t); ok && cfg.Format == "auto" {
			tb.decs = decs
		}
		tables = append(tables, tb)
	}
	if len(bad) == 0 {
		if err := readSizes(ctx, conn, tables); err != nil {
			return nil, err
		}
	}
	if len(bad) > 0 {
		return nil, replicaIdentityError(bad, idents, cfg.KeyedIdentity)
	}
	return tables, nil
}

// readSizes reads the tables' kinds, pages and estimated rows, in one
// round trip.
func readSizes(ctx context.Context, conn *pgx.Conn, tables []*table) error {
	oids := make([]uint32, len(tables))
	for i, tb := range tables {
		oids[i] = tb.t.OID
	}
	rows, err := conn.Query(ctx, `SELECT u.i, c.relkind::text, c.relpages::int8, c.reltuples::float8
		FROM unnest($1::oid[]) WITH ORDINALITY u(o, i) JOIN pg_catalog.pg_class c ON c.oid = u.o`, oids)
	if err != nil {
		return fmt.Errorf("describe tables: %w", err)
	}
	found := 0
	for rows.Next() {
		var i int
		var kind string
		var pages int64
		var tuples float64
		if err := rows.Scan(&i, &kind, &pages, &tuples); err != nil {
			return fmt.Errorf("describe tables: %w", err)
		}
		tb := tables[i-1]
		tb.relkind, tb.relpages = kind, pages
		if tuples > 0 {
			tb.tuples = int64(tuples)
		}
		found++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("describe tables: %w", err)
	}
	if found != len(tables) {
		return fmt.Errorf("describe tables: %d of %d tables were dropped meanwhile", len(tables)-found, len(tables))
	}
	return nil
}

// plan lists the COPY tasks: larger tables first, so that the last task
// to finish is a small one; each large table as ctid ranges.
func plan(tables []*table, parallel int, rangePages int64) []task {
	var total int64
	for _, tb := range tables {
		total += tb.relpages
	}
	if rangePages == 0 && parallel > 1 {
		rangePages = max(total/int64(4*parallel), minRangePages)
	}
	order := append([]*table(nil), tables...)
	// Stable, so equal sizes keep the given order.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && order[j].relpages > order[j-1].relpages; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	var tasks []task
	for _, tb := range order {
		var ranges [][2]int64
		if tb.relkind == "r" {
			ranges = splitPages(tb.relpages, rangePages)
		}
		if len(ranges) == 0 {
			tasks = append(tasks, task{tb: tb})
			tb.ranges = 1
			continue
		}
		for _, r := range ranges {
			tasks = append(tasks, task{tb: tb, lo: r[0], hi: r[1], ranged: true})
		}
		tb.ranges = len(ranges)
	}
	return tasks
}

// copyTables exports a snapshot pinned to an LSN, copies every table
// against it on cfg.Parallel connections and writes the rows to sink. It
// returns the snapshot's LSN.
// copyTables copies the tables in one snapshot and returns its LSN. With
// permanent, the snapshot is that of the permanent slot it names, created
// here; else of a temporary slot.
// With cfg.KeepReplication and permanent, it returns the replication
// connection that created the slot, for the caller to close.
func copyTables(ctx context.Context, cfg Config, dl *dials, conn *pgx.Conn, slotLSN frontier.LSN, tables []*table, sink pipe.Sink, began time.Time, permanent string) (frontier.LSN, *pgconn.PgConn, error) {
	lsn, repl, err := copyTables1(ctx, cfg, dl, conn, slotLSN, tables, sink, began, permanent)
	if repl == nil {
		return lsn, nil, err
	}
	return lsn, repl.PgConn(), err
}

// copyTables1 is copyTables; it returns the replication connection, if
// still open.
func copyTables1(ctx context.Context, cfg Config, dl *dials, conn *pgx.Conn, slotLSN frontier.LSN, tables []*table, sink pipe.Sink, began time.Time, permanent string) (frontier.LSN, *pgx.Conn, error) {
	defer dl.close()
	repl, err := dl.replication()
	if err != nil {
		return 0, nil, err
	}
	replOpen := true
	closeRepl := func() {
		if replOpen {
			repl.Close(context.Background()) // drops the temporary slot
			replOpen = false
		}
	}
	defer closeRepl()
	snap, err := exportSnapshot(ctx, repl.PgConn(), permanent)
	if err != nil {
		return 0, nil, err
	}
	cfg.Logger.Debug("snapshot: exported", "snapshot", snap.name, "snapshot_lsn", snap.lsn, "temporary_slot", snap.slot)

	// Every worker imports the snapshot before the exporting connection
	// moves on (which ends the export), in one round trip.
	workers := make([]*pgx.Conn, len(dl.workers))
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.Close(context.Background())
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for i := range workers {
		g.Go(func() error {
			w, err := dl.worker(i)
			if err != nil {
				return err
			}
			workers[i] = w
			_, err = w.PgConn().Exec(gctx, fmt.Sprintf("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '%s'", snap.name)).ReadAll()
			if err != nil {
				return fmt.Errorf("import snapshot %s: %w", snap.name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, err
	}
	keep := cfg.KeepReplication && permanent != ""
	if !keep {
		closeRepl()
	}

	var tasks []task
	var rp *Plan
	cs, _ := sink.(ChunkSink)
	if cfg.Resume != nil {
		if cs == nil {
			return 0, nil, fmt.Errorf("a resumable snapshot needs a ChunkSink, not %T", sink)
		}
		if permanent != "" {
			slotLSN = snap.lsn // the slot is the copy's
		}
		if rp, tasks, err = resumePlan(ctx, cfg, conn, slotLSN, tables); err != nil {
			return 0, nil, err
		}
	} else {
		tasks = plan(tables, cfg.Parallel, cfg.RangePages)
	}
	var estimate int64
	for _, tb := range tables {
		estimate += tb.tuples
	}
	queue := make(chan task, len(tasks))
	for _, k := range tasks {
		queue <- k
	}
	close(queue)
	out := make(chan batch, 2*cfg.Parallel)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx = errgroup.WithContext(wctx)
	for _, w := range workers {
		g.Go(func() error { return copyWorker(gctx, w, cfg, queue, out) })
	}
	var werr error
	go func() {
		werr = g.Wait()
		close(out)
	}()
	var rows int64
	var serr error
	for b := range out {
		if serr == nil && b.err != "" {
			if b.tb.errMsg == "" {
				b.tb.errMsg = b.err
				cfg.Logger.Error("snapshot: a row does not convert; its collection has a definite error, the others go on", "collection", b.tb.name, "error", b.err)
				serr = sink.Error(b.tb.name, frontier.Time{}, b.err)
			}
			continue
		}
		if b.done {
			if serr == nil && !b.tb.failed.Load() {
				rp.Tables[b.chunk.Table].Chunks[b.chunk.Chunk].LSN = snap.lsn
				serr = cs.ChunkDone(*b.chunk, b.tb.name)
			}
			continue
		}
		if serr == nil && !b.tb.failed.Load() {
			n := b.rec.NumRows()
			if b.chunk != nil {
				serr = cs.ChunkData(*b.chunk, b.tb.name, b.rec)
			} else {
				serr = sink.Data(b.tb.name, b.rec)
			}
			b.tb.rows += n
			rows += n
			if serr == nil && cfg.OnProgress != nil {
				cfg.OnProgress(Progress{Phase: "copy", Table: b.tb.name, Rows: rows, EstimatedRows: estimate, Elapsed: time.Since(began)})
			}
		}
		b.rec.Release()
		if serr != nil {
			stop() // the workers end; drain what they already sent
		}
	}
	if serr != nil {
		return 0, nil, serr
	}
	if werr != nil {
		return 0, nil, werr
	}
	if rp != nil {
		for _, tb := range tables {
			pt := rp.table(tb.name)
			tb.ck = &chunking{col: -1, chunks: pt.Chunks}
			if pt.Column != "" {
				tb.ck.col = tb.keyCol(pt.Column)
			}
		}
	}
	if keep {
		replOpen = false // the caller's now
		return snap.lsn, repl, nil
	}
	return snap.lsn, nil, nil
}

// resumePlan returns the plan of a resumable snapshot, after Begin took
// it (the earlier attempt's if it holds for the slot at slotLSN and the
// tables, else a new one), and the COPY tasks of its chunks not done,
// larger tables first.
func resumePlan(ctx context.Context, cfg Config, conn *pgx.Conn, slotLSN frontier.LSN, tables []*table) (*Plan, []task, error) {
	rp := cfg.Resume.Plan
	kept := keepPlan(rp, cfg.Slot, slotLSN, tables)
	if !kept {
		var err error
		if rp, err = newPlan(ctx, conn, cfg.Slot, slotLSN, tables, cfg.Resume.ChunkPages); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Resume.Begin != nil {
		if err := cfg.Resume.Begin(rp, kept); err != nil {
			return nil, nil, err
		}
	}
	order := append([]*table(nil), tables...)
	slices.SortStableFunc(order, func(a, b *table) int { return cmp.Compare(b.relpages, a.relpages) })
	var tasks []task
	for _, tb := range order {
		ti := slices.IndexFunc(rp.Tables, func(pt PlanTable) bool { return pt.Name == tb.name })
		pt := &rp.Tables[ti]
		tb.ranges = len(pt.Chunks)
		tb.ck = &chunking{col: -1, chunks: pt.Chunks} // for the pages of a task
		for ci, c := range pt.Chunks {
			if c.Done() {
				continue
			}
			tasks = append(tasks, task{tb: tb, chunk: &ChunkRef{Table: ti, Chunk: ci}, where: c.where(pt.Column, pgQuote)})
		}
	}
	return rp, tasks, nil
}

// copyWorker runs COPY tasks from queue on conn (inside the imported
// snapshot) until the queue is empty.
func copyWorker(ctx context.Context, conn *pgx.Conn, cfg Config, queue <-chan task, out chan<- batch) error {
	consts := newConstants(cfg.BatchRows)
	builders := map[*table]*pgarrow.RowBuilder{}
	bins := map[*table]*binCopier{}
	defer func() {
		for _, rb := range builders {
			rb.Release()
		}
		for _, bc := range bins {
			bc.release()
		}
	}()
	var next *task
	for {
		var k task
		if next != nil {
			k, next = *next, nil
		} else if m, ok := <-queue; ok {
			k = m
		} else {
			break
		}
		if k.tb.failed.Load() {
			continue
		}
		if k.tb.decs != nil {
			var tasks []task
			tasks, next = takeBatch(k, queue)
			if err := copyBinary(ctx, conn, cfg, consts, bins, tasks, out); err != nil {
				return err
			}
			continue
		}
		c := &copier{ctx: ctx, tb: k.tb, consts: consts, out: out, maxRows: cfg.BatchRows, maxBytes: cfg.BatchBytes, chunk: k.chunk}
		rb := builders[k.tb]
		if rb == nil {
			var err error
			if rb, err = pgarrow.NewRowBuilder(memory.DefaultAllocator, k.tb.t); err != nil {
				return fmt.Errorf("copy %s: %w", k.tb.name, err)
			}
			builders[k.tb] = rb
		}
		c.rb = rb
		if _, err := conn.PgConn().CopyTo(ctx, c, k.sql()); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("copy %s: %w", k.tb.name, err)
		}
		if c.stopped() {
			rb.Release()
			delete(builders, k.tb)
			if c.bad != nil {
				if err := failTable(ctx, c, badRowMessage(ctx, conn, k.tb, c.bad)); err != nil {
					return err
				}
			}
			continue
		}
		if err := c.flush(); err != nil {
			return err
		}
		if err := c.chunkDone(); err != nil {
			return err
		}
	}
	// No COMMIT: the transaction only read, and its connection is closed
	// next, which ends it without a round trip.
	return nil
}

// failTable hands the table's definite error msg to the sink goroutine.
func failTable(ctx context.Context, c *copier, msg string) error {
	select {
	case c.out <- batch{tb: c.tb, err: msg}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// badRowMessage is the definite error of a table whose row b failed to
// convert: it names the table, the column and value (in b.err), and the
// row by its key (the primary key, or the replica identity's) or, without
// one, by all its values.
func badRowMessage(ctx context.Context, conn *pgx.Conn, tb *table, b *badRow) string {
	return fmt.Sprintf("snapshot: cannot convert a row of %s: %v; %s; %s", tb.name, b.err,
		pgarrow.DescribeRow(tb.t, keyColumns(ctx, conn, tb), b.vals, b.nulls), badRowFix)
}

// badRowFix ends the error of a row that does not convert.
const badRowFix = "the collection has this definite error from the snapshot on: " +
	"change the value upstream or the column's type (docs/types-postgres.md says what each type holds), then re-snapshot it"

// keyColumns returns the indexes of tb's key columns: its replica identity
// key when it is not FULL, else its primary key; nil when it has neither
// (or the catalog cannot say).
func keyColumns(ctx context.Context, conn *pgx.Conn, tb *table) []int {
	names := tb.key
	if names == nil {
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(a.attname::text ORDER BY array_position(i.indkey, a.attnum)), '{}')
			FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1 AND i.indisprimary`, tb.t.OID).Scan(&names); err != nil {
			return nil
		}
	}
	var key []int
	for _, n := range names {
		for i, c := range tb.t.Columns {
			if c.Name == n {
				key = append(key, i)
			}
		}
	}
	if len(key) != len(names) {
		return nil
	}
	return key
}

// diagnoseBinary names the row a binary copy of task k failed on (bad):
// the same rows in COPY text, on the same snapshot, go through the text
// parser, which refuses the same values, until the first that fails.
func diagnoseBinary(ctx context.Context, conn *pgx.Conn, k task, bad error) string {
	fallback := fmt.Sprintf("snapshot: cannot convert a row of %s: %v; %s", k.tb.name, bad, badRowFix)
	rb, err := pgarrow.NewRowBuilder(memory.DefaultAllocator, k.tb.t)
	if err != nil {
		return fallback
	}
	defer rb.Release()
	tb := &table{t: k.tb.t, name: k.tb.name}
	tb.rel, tb.colsSQL, tb.relkind = k.tb.rel, k.tb.colsSQL, k.tb.relkind
	c := &copier{ctx: ctx, tb: tb, rb: rb, diagnose: true}
	text := k
	text.tb = tb // no binary decoders: COPY text
	if _, err := conn.PgConn().CopyTo(ctx, &diagWriter{c}, text.sql()); err != nil || c.bad == nil {
		return fallback
	}
	return badRowMessage(ctx, conn, k.tb, c.bad)
}

// diagWriter feeds a diagnosing copier, dropping the rows that convert.
type diagWriter struct{ c *copier }

func (w *diagWriter) Write(p []byte) (int, error) {
	n, err := w.c.Write(p)
	if w.c.rb.Len() > 0 {
		for _, a := range w.c.rb.NewArrays() {
			a.Release()
		}
	}
	return n, err
}
