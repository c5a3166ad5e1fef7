package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/sync/errgroup"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/myarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// DefaultRangeRows is the estimated row count above which MySQL splits a
// table with an integer primary key into key ranges (Parallel > 1).
const DefaultRangeRows = 100_000

// MySQLConfig says what MySQL snapshots and how.
type MySQLConfig struct {
	// Upstream is the server (upstream.ParseMySQL).
	Upstream *upstream.MySQL
	// Tables to snapshot, db.table (required).
	Tables []string
	// Start is the upper at which time 0 is defined (e.g. the frontier of
	// the store's first binding). Unset (zero Frontier) means the
	// snapshot's own position: no rewind.
	Start frontier.Frontier
	// Parallel is the number of copying connections (default 1). With
	// more than one they share one snapshot through a brief FLUSH TABLES
	// WITH READ LOCK (RELOAD privilege) while all of them start.
	Parallel int
	// RangeRows: with Parallel > 1, tables with a single-column integer
	// primary key and more estimated rows than this are copied in key
	// ranges. 0 means DefaultRangeRows; negative never splits.
	RangeRows int64
	// BatchRows bounds a record (default DefaultBatchRows).
	BatchRows int
	// Source is rtr.source on the records (default "mysql").
	Source string
	// OnProgress, if set, is called after every record written.
	OnProgress func(Progress)
	// Resume, when set, makes the snapshot resumable (myresume.go): the
	// sink must be a ChunkSink; tables are copied in chunks of their key
	// (Resume.ChunkRows) instead of the ranges of RangeRows, and a plan
	// that still holds sets the start position (when Start is unset).
	Resume *Resume
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// MySQLResult says what MySQL did.
type MySQLResult struct {
	// MariaDB is true for a MariaDB server.
	MariaDB bool
	// Start is the upper time 0 holds the tables at; StartPos the same in
	// the server's notation.
	Start    frontier.Frontier
	StartPos string
	// Snapshot is the upper of the copy's consistent snapshot.
	Snapshot    frontier.Frontier
	SnapshotPos string
	// Partition is the _partition of the time-0 rows.
	Partition string
	// Locked says whether FLUSH TABLES WITH READ LOCK was used.
	Locked bool
	// Tables in the order given; Schemas by collection.
	Tables  []TableResult
	Schemas map[string]*myarrow.Table
}

// Rows is the number of rows copied over all tables.
func (r *MySQLResult) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// Rewound is the number of updates rewound over all tables.
func (r *MySQLResult) Rewound() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rewound
	}
	return n
}

// ErrMySQLSnapshot wraps errors of the snapshot's consistency.
var ErrMySQLSnapshot = errors.New("mysql snapshot")

type myTask struct {
	tb     *myTab
	where  string
	ranged bool
	// chunk is the task's chunk of a resumable snapshot's plan (nil:
	// not resumable).
	chunk *ChunkRef
}

type myTab struct {
	t       *myarrow.Table
	rows    int64
	rewound int64
	ranges  int
	// failed: a value did not convert; the table got a definite error.
	failed bool
	// chunks: the table's chunks in a resumable snapshot (nil: copied
	// whole in the snapshot of MySQLResult.Snapshot).
	chunks *myChunks
}

// snapshotOf returns the snapshot row i of cols was copied in (snap, the
// attempt's, unless the table was copied in chunks).
func (tb *myTab) snapshotOf(cols []arrow.Array, i int, snap frontier.Frontier) frontier.Frontier {
	if tb.chunks == nil {
		return snap
	}
	return tb.chunks.snapOf(cols, i)
}

// until is the newest snapshot any row of tb was copied in.
func (tb *myTab) until(snap frontier.Frontier) frontier.Frontier {
	if tb.chunks == nil {
		return snap
	}
	return tb.chunks.latest()
}

// myBatch is a record of a table or, with fail set, the definite error
// of the table (a value that does not convert), or with done set the end
// of chunk.
type myBatch struct {
	tb    *myTab
	rec   arrow.Record
	fail  string
	chunk *ChunkRef
	done  bool
}

// myChunkSink is where a resumable snapshot's chunks go: rows and ends of
// chunks to cs, each chunk's position pos recorded in plan.
type myChunkSink struct {
	cs   ChunkSink
	plan *Plan
	pos  string
}

// MySQL writes a definite snapshot of MySQL/MariaDB tables to sink: every
// row at source time 0 (partition Result.Partition), holding each table
// exactly as of cfg.Start (docs/mysql.md):
//
//  1. open cfg.Parallel transactions WITH CONSISTENT SNAPSHOT at one GTID
//     position (MariaDB with one connection: binlog_snapshot_file/position
//     without any lock; otherwise under a brief FLUSH TABLES WITH READ
//     LOCK);
//  2. copy the tables (large ones in primary-key ranges), each row at time
//     0 with diff +1;
//  3. if the snapshot is beyond cfg.Start, read the binlog from Start to
//     the snapshot and emit those changes negated at time 0;
//  4. report each table complete: progress Start (joined with
//     {partition: 1}, so time 0 is complete).
func MySQL(ctx context.Context, cfg MySQLConfig, sink pipe.Sink) (*MySQLResult, error) {
	began := time.Now()
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.RangeRows == 0 {
		cfg.RangeRows = DefaultRangeRows
	}
	if cfg.Source == "" {
		cfg.Source = "mysql"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Tables) == 0 {
		return nil, hint.Wrap(errors.New("snapshot mysql: no tables given"), "name them with --tables db.t1,db.t2")
	}
	srv, err := replicate.OpenServer(ctx, cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	defer srv.Conn.Close()
	res := &MySQLResult{MariaDB: srv.MariaDB, Schemas: map[string]*myarrow.Table{}}
	if ps, ok := sink.(*pipe.PipeSink); ok && ps.Domain == "" {
		// A table's definite error may come before any record names the
		// domain.
		ps.Domain = srv.Domain()
	}
	var tabs []*myTab
	for _, name := range cfg.Tables {
		db, tn, err := myarrow.ParseName(name)
		if err != nil {
			return nil, fmt.Errorf("snapshot mysql: %w", err)
		}
		t, err := myarrow.LoadTable(ctx, srv.Conn, db, tn)
		if err != nil {
			return nil, fmt.Errorf("snapshot mysql: %w", err)
		}
		if !strings.EqualFold(t.Engine, "InnoDB") {
			return nil, hint.Wrap(fmt.Errorf("snapshot mysql: %s uses engine %s, which has no consistent snapshots", t.QualifiedName(), t.Engine),
				fmt.Sprintf("run: ALTER TABLE %s ENGINE = InnoDB;", t.SQL()))
		}
		if res.Schemas[t.QualifiedName()] != nil {
			continue
		}
		res.Schemas[t.QualifiedName()] = t
		tabs = append(tabs, &myTab{t: t})
	}

	workers := make([]*client.Conn, cfg.Parallel)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.Close()
			}
		}
	}()
	for i := range workers {
		w, err := cfg.Upstream.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot mysql: open copy connection: %w", err)
		}
		workers[i] = w
		// utf8mb4: the server converts every column's text to UTF-8 (the
		// binlog path decodes the same bytes with myarrow.Charset).
		for _, q := range []string{"SET NAMES utf8mb4", "SET time_zone = '+00:00'", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"} {
			if _, err := upstream.Execute(ctx, w, q); err != nil {
				return nil, fmt.Errorf("snapshot mysql: %s: %w", q, err)
			}
		}
	}
	snapPos, err := beginSnapshot(ctx, srv, workers, res)
	if err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	res.SnapshotPos, res.Snapshot, err = replicate.ParsePosition(srv.MariaDB, snapPos)
	if err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	// A resumable snapshot whose earlier chunks hold keeps their start.
	var rp *Plan
	kept := false
	if cfg.Resume != nil {
		if _, ok := sink.(ChunkSink); !ok {
			return nil, fmt.Errorf("snapshot mysql: a resumable snapshot needs a ChunkSink, not %T", sink)
		}
		var ps frontier.Frontier
		if ps, kept = keepPlanMySQL(cfg.Resume.Plan, srv.MariaDB, cfg.Start, res.Snapshot, tabs); kept {
			rp = cfg.Resume.Plan
			if cfg.Start.Domain() == "" {
				cfg.Start = ps
			}
		}
	}
	if cfg.Start.Domain() == "" {
		res.Start, res.StartPos = res.Snapshot, res.SnapshotPos
	} else {
		if cfg.Start.Domain() != srv.Domain() {
			return nil, fmt.Errorf("snapshot mysql: start frontier is in domain %s, the server's GTIDs in %s", cfg.Start.Domain(), srv.Domain())
		}
		res.Start = cfg.Start
		if !res.Snapshot.Covers(res.Start) {
			return nil, hint.Wrap(fmt.Errorf("snapshot mysql: %w: the snapshot at %s is behind the start position %s (was the server's binlog reset, or is this another server?)", ErrMySQLSnapshot, res.Snapshot, res.Start),
				"ingest into a new store")
		}
		if res.StartPos, err = srv.PositionOf(ctx, res.Start); err != nil {
			return nil, fmt.Errorf("snapshot mysql: %w", err)
		}
	}
	res.Partition = timeZeroPartition(res.Start, srv)
	cfg.Logger.Debug("snapshot mysql: positions", "start", res.StartPos, "snapshot", res.SnapshotPos, "locked", res.Locked)

	var tasks []myTask
	var chunks *myChunkSink
	if cfg.Resume != nil {
		if !kept {
			if rp, err = newPlanMySQL(ctx, workers[0], tabs, res.StartPos, res.Partition, cfg.Resume.ChunkRows); err != nil {
				return nil, fmt.Errorf("snapshot mysql: %w", err)
			}
		}
		if cfg.Resume.Begin != nil {
			if err := cfg.Resume.Begin(rp, kept); err != nil {
				return nil, fmt.Errorf("snapshot mysql: %w", err)
			}
		}
		tasks = resumeTasksMySQL(rp, tabs)
		chunks = &myChunkSink{cs: sink.(ChunkSink), plan: rp, pos: res.SnapshotPos}
	} else if tasks, err = planMySQL(ctx, workers[0], tabs, cfg); err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	if err := copyMySQL(ctx, cfg, srv.Domain(), res.Partition, workers, tasks, tabs, sink, chunks, began); err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	for i, w := range workers {
		w.Close()
		workers[i] = nil
	}

	// The rewind reads the binlog up to the newest snapshot a row was
	// copied in (with chunks: each row from its chunk's).
	until := res.Start
	for _, tb := range tabs {
		if tb.chunks != nil {
			if err := tb.chunkSnapshots(srv.MariaDB, res.Snapshot); err != nil {
				return nil, fmt.Errorf("snapshot mysql: %w", err)
			}
		}
		if !tb.failed {
			if until, err = frontier.Join(until, tb.until(res.Snapshot)); err != nil {
				return nil, fmt.Errorf("snapshot mysql: %w", err)
			}
		}
	}
	if !res.Start.Covers(until) {
		if err := rewindMySQL(ctx, cfg, res, until, tabs, sink, began); err != nil {
			return nil, fmt.Errorf("snapshot mysql: %w", err)
		}
	}
	done, err := frontier.Join(res.Start, frontier.Empty(srv.Domain()).With(res.Partition, 1))
	if err != nil {
		return nil, fmt.Errorf("snapshot mysql: %w", err)
	}
	for _, tb := range tabs {
		if tb.failed {
			res.Tables = append(res.Tables, TableResult{Name: tb.t.QualifiedName(), Rows: tb.rows, Ranges: tb.ranges, Format: "text"})
			continue
		}
		if err := sink.Progress(tb.t.QualifiedName(), done); err != nil {
			return nil, fmt.Errorf("snapshot mysql: %w", err)
		}
		res.Tables = append(res.Tables, TableResult{Name: tb.t.QualifiedName(), Rows: tb.rows, Rewound: tb.rewound, Ranges: tb.ranges, Format: "text"})
	}
	return res, nil
}

// timeZeroPartition is the partition of time-0 rows: the first partition
// of the start frontier, or when it is empty MariaDB domain 0 / the MySQL
// server's UUID.
func timeZeroPartition(start frontier.Frontier, srv *replicate.Server) string {
	if ps := start.Partitions(); len(ps) > 0 {
		return ps[0]
	}
	if srv.MariaDB {
		return "0"
	}
	return srv.UUID
}

// beginSnapshot starts a consistent-snapshot transaction on every worker,
// all at one binlog position, and returns that position in the server's
// notation.
func beginSnapshot(ctx context.Context, srv *replicate.Server, workers []*client.Conn, res *MySQLResult) (string, error) {
	const begin = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"
	if srv.MariaDB && len(workers) == 1 {
		// MariaDB pins the snapshot to the binlog without a lock: the
		// binlog_snapshot_* status values are the binlog position of
		// exactly the transactions the snapshot sees.
		w := workers[0]
		if _, err := upstream.Execute(ctx, w, begin); err != nil {
			return "", fmt.Errorf("begin snapshot: %w", err)
		}
		file, pos, err := snapshotCoords(ctx, w)
		if err != nil {
			return "", err
		}
		r, err := upstream.Execute(ctx, w, fmt.Sprintf("SELECT BINLOG_GTID_POS('%s', %d)", strings.ReplaceAll(file, "'", "''"), pos))
		if err != nil {
			return "", fmt.Errorf("read snapshot gtid position: %w", err)
		}
		v, _ := r.GetString(0, 0)
		return v, nil
	}
	// Several connections (or MySQL, which has no binlog_snapshot_*):
	// block commits while every worker starts its snapshot and the GTID
	// position is read.
	res.Locked = true
	if _, err := upstream.Execute(ctx, srv.Conn, "FLUSH TABLES WITH READ LOCK"); err != nil {
		var my *mysql.MyError
		if errors.As(err, &my) && (my.Code == mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR || my.Code == mysql.ER_DBACCESS_DENIED_ERROR) {
			return "", hint.Wrap(fmt.Errorf("flush tables with read lock: %w", err), "grant the RELOAD privilege (GRANT RELOAD ON *.* TO user), or snapshot with --parallel 1 (MariaDB)")
		}
		return "", fmt.Errorf("flush tables with read lock: %w", err)
	}
	unlocked := false
	defer func() {
		if !unlocked {
			_, _ = upstream.Execute(context.Background(), srv.Conn, "UNLOCK TABLES")
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range workers {
		g.Go(func() error {
			if _, err := upstream.Execute(gctx, w, begin); err != nil {
				return fmt.Errorf("begin snapshot: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	pos, _, err := srv.Position(ctx)
	if err != nil {
		return "", err
	}
	if srv.MariaDB {
		// Every worker's snapshot must sit at the same binlog position.
		var first string
		for i, w := range workers {
			file, p, err := snapshotCoords(ctx, w)
			if err != nil {
				return "", err
			}
			c := fmt.Sprintf("%s:%d", file, p)
			if i == 0 {
				first = c
			} else if c != first {
				return "", fmt.Errorf("%w: snapshot connections are at %s and %s despite the read lock", ErrMySQLSnapshot, first, c)
			}
		}
	}
	if _, err := upstream.Execute(ctx, srv.Conn, "UNLOCK TABLES"); err != nil {
		return "", fmt.Errorf("unlock tables: %w", err)
	}
	unlocked = true
	return pos, nil
}

func snapshotCoords(ctx context.Context, w *client.Conn) (string, uint64, error) {
	r, err := upstream.Execute(ctx, w, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return "", 0, fmt.Errorf("read snapshot position: %w", err)
	}
	var file string
	var pos uint64
	for i := range r.RowNumber() {
		k, _ := r.GetString(i, 0)
		v, _ := r.GetString(i, 1)
		switch strings.ToLower(k) {
		case "binlog_snapshot_file":
			file = v
		case "binlog_snapshot_position":
			pos, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	if file == "" {
		return "", 0, fmt.Errorf("read snapshot position: %w: binlog_snapshot_file is empty (is the binary log on?)", ErrMySQLSnapshot)
	}
	return file, pos, nil
}

// planMySQL lists the copy tasks, largest tables first; with Parallel > 1
// a large table with a single-column integer key is cut into key ranges
// (bounds read inside the snapshot, so the ranges cover it exactly).
func planMySQL(ctx context.Context, w *client.Conn, tabs []*myTab, cfg MySQLConfig) ([]myTask, error) {
	order := append([]*myTab(nil), tabs...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].t.Rows > order[j].t.Rows })
	var tasks []myTask
	for _, tb := range order {
		t := tb.t
		k := 1
		if cfg.Parallel > 1 && cfg.RangeRows > 0 && t.Rows > cfg.RangeRows && len(t.PrimaryKey) == 1 {
			kind := t.Columns[t.PrimaryKey[0]].Kind
			if kind == myarrow.KindInt || kind == myarrow.KindUint {
				k = int(min(int64(4*cfg.Parallel), t.Rows/cfg.RangeRows+1))
			}
		}
		if k <= 1 {
			tasks = append(tasks, myTask{tb: tb})
			tb.ranges = 1
			continue
		}
		pk := myarrow.QuoteIdent(t.Columns[t.PrimaryKey[0]].Name)
		r, err := upstream.Execute(ctx, w, fmt.Sprintf("SELECT CAST(MIN(%s) AS DECIMAL(65,0)), CAST(MAX(%s) AS DECIMAL(65,0)) FROM %s", pk, pk, t.SQL()))
		if err != nil {
			return nil, fmt.Errorf("key range of %s: %w", t.QualifiedName(), err)
		}
		lo, _ := r.GetString(0, 0)
		hi, _ := r.GetString(0, 1)
		bounds := splitRange(lo, hi, k)
		if len(bounds) == 0 {
			tasks = append(tasks, myTask{tb: tb})
			tb.ranges = 1
			continue
		}
		for i := 0; i <= len(bounds); i++ {
			var where string
			switch {
			case i == 0:
				where = fmt.Sprintf("%s < %s", pk, bounds[0])
			case i == len(bounds):
				where = fmt.Sprintf("%s >= %s", pk, bounds[i-1])
			default:
				where = fmt.Sprintf("%s >= %s AND %s < %s", pk, bounds[i-1], pk, bounds[i])
			}
			tasks = append(tasks, myTask{tb: tb, where: where, ranged: true})
		}
		tb.ranges = len(bounds) + 1
	}
	return tasks, nil
}

// splitRange returns k-1 inner bounds cutting [lo, hi] into k ranges (nil
// when the range is too small or not numeric).
func splitRange(lo, hi string, k int) []string {
	a, err1 := strconv.ParseFloat(lo, 64)
	b, err2 := strconv.ParseFloat(hi, 64)
	if err1 != nil || err2 != nil || b-a < float64(k) {
		return nil
	}
	var out []string
	prev := ""
	for i := 1; i < k; i++ {
		v := strconv.FormatFloat(a+(b-a)*float64(i)/float64(k), 'f', 0, 64)
		if v != prev {
			out = append(out, v)
			prev = v
		}
	}
	return out
}

// copyMySQL runs the tasks on the workers and writes the records to sink
// from this goroutine.
// With chunks set, the rows of a task of a chunk go to its ChunkSink,
// followed by the end of the chunk.
func copyMySQL(ctx context.Context, cfg MySQLConfig, d frontier.Domain, part string, workers []*client.Conn, tasks []myTask, tabs []*myTab, sink pipe.Sink, chunks *myChunkSink, began time.Time) error {
	var estimate int64
	for _, tb := range tabs {
		estimate += tb.t.Rows
	}
	queue := make(chan myTask, len(tasks))
	for _, k := range tasks {
		queue <- k
	}
	close(queue)
	out := make(chan myBatch, 2*len(workers))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(wctx)
	for _, w := range workers {
		g.Go(func() error { return copyWorkerMySQL(gctx, w, cfg, d, part, queue, out) })
	}
	var werr error
	go func() {
		werr = g.Wait()
		close(out)
	}()
	var rows int64
	var serr error
	for b := range out {
		if b.done {
			if serr == nil && !b.tb.failed {
				chunks.plan.Tables[b.chunk.Table].Chunks[b.chunk.Chunk].Pos = chunks.pos
				if serr = chunks.cs.ChunkDone(*b.chunk, b.tb.t.QualifiedName()); serr != nil {
					stop()
				}
			}
			continue
		}
		if b.fail != "" || b.tb.failed {
			if serr == nil && !b.tb.failed {
				b.tb.failed = true
				cfg.Logger.Warn("snapshot mysql: a table has a value that does not convert; its collection stops", "table", b.tb.t.QualifiedName(), "error", b.fail)
				serr = sink.Error(b.tb.t.QualifiedName(), frontier.Time{Partition: part}, b.fail)
			}
			if b.rec != nil {
				b.rec.Release()
			}
			if serr != nil {
				stop()
			}
			continue
		}
		if serr == nil {
			n := b.rec.NumRows()
			if b.chunk != nil {
				serr = chunks.cs.ChunkData(*b.chunk, b.tb.t.QualifiedName(), b.rec)
			} else {
				serr = sink.Data(b.tb.t.QualifiedName(), b.rec)
			}
			b.tb.rows += n
			rows += n
			if serr == nil && cfg.OnProgress != nil {
				cfg.OnProgress(Progress{Phase: "copy", Table: b.tb.t.QualifiedName(), Rows: rows, EstimatedRows: estimate, Elapsed: time.Since(began)})
			}
		}
		b.rec.Release()
		if serr != nil {
			stop()
		}
	}
	if serr != nil {
		return serr
	}
	return werr
}

func copyWorkerMySQL(ctx context.Context, conn *client.Conn, cfg MySQLConfig, d frontier.Domain, part string, queue <-chan myTask, out chan<- myBatch) error {
	// The client library has no context support: close the connection
	// when ctx ends, which fails the running query.
	stopWatch := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopWatch()
	for k := range queue {
		t := k.tb.t
		rb := myarrow.NewRowBuilder(memory.DefaultAllocator, t, d, cfg.Source)
		q := fmt.Sprintf("SELECT %s FROM %s", t.SelectList(), t.SQL())
		if k.where != "" {
			q += " WHERE " + k.where
		}
		vals := make([]any, len(t.Columns))
		send := func() error {
			rec := rb.NewRecord()
			select {
			case out <- myBatch{tb: k.tb, rec: rec, chunk: k.chunk}:
				return nil
			case <-ctx.Done():
				rec.Release()
				return ctx.Err()
			}
		}
		var result mysql.Result
		var bad *myarrow.ConvertError
		err := conn.ExecuteSelectStreaming(q, &result, func(row []mysql.FieldValue) error {
			if bad != nil {
				return nil // read the rest of the result, keep nothing
			}
			for i := range row {
				vals[i] = myarrow.TextValue(row[i])
			}
			if err := rb.Append(vals, 0, 1, part); err != nil {
				if errors.As(err, &bad) {
					return nil
				}
				return fmt.Errorf("copy %s: %w", t.QualifiedName(), err)
			}
			if rb.Rows() >= cfg.BatchRows || rb.Bytes() >= DefaultBatchBytes {
				return send()
			}
			return nil
		}, nil)
		if err == nil && bad != nil {
			msg := fmt.Sprintf("snapshot of %s: value %s cannot be converted: %v; the collection stops here: fix or delete the row and re-snapshot the table", t.QualifiedName(), mysqlQuote(bad.Value), bad)
			select {
			case out <- myBatch{tb: k.tb, fail: msg}:
			case <-ctx.Done():
				err = ctx.Err()
			}
		} else if err == nil && rb.Rows() > 0 {
			err = send()
		}
		if err == nil && bad == nil && k.chunk != nil {
			select {
			case out <- myBatch{tb: k.tb, chunk: k.chunk, done: true}:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		rb.Release()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("copy %s: %w", t.QualifiedName(), err)
		}
	}
	if _, err := conn.Execute("COMMIT"); err != nil {
		return fmt.Errorf("end copy transaction: %w", err)
	}
	return nil
}

// rewindMySQL reads the binlog from res.Start to until and writes every
// change to a snapshotted table that the copy of its row includes (the
// snapshot of the row's chunk is beyond it), negated, at time 0.
func rewindMySQL(ctx context.Context, cfg MySQLConfig, res *MySQLResult, until frontier.Frontier, tabs []*myTab, sink pipe.Sink, began time.Time) error {
	r := &myRewinder{cfg: cfg, res: res, sink: sink, began: began, tabs: map[string]*myTab{}}
	var names []string
	for _, tb := range tabs {
		if tb.failed {
			continue
		}
		r.tabs[tb.t.QualifiedName()] = tb
		names = append(names, tb.t.QualifiedName())
		r.rows += tb.rows
	}
	cfg.Logger.Debug("snapshot mysql: rewinding", "from", res.StartPos, "to", res.SnapshotPos)
	err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{
		Upstream: cfg.Upstream, Tables: names, Known: res.Schemas, Start: res.StartPos, StopAt: until,
		Source: cfg.Source, Logger: cfg.Logger,
	}, r)
	if err != nil {
		return fmt.Errorf("rewind from %s to %s: %w", res.StartPos, res.SnapshotPos, err)
	}
	return nil
}

type myRewinder struct {
	cfg     MySQLConfig
	res     *MySQLResult
	sink    pipe.Sink
	began   time.Time
	tabs    map[string]*myTab
	rows    int64
	rewound int64
}

// inWindow: a change at t is in a copy taken at snap (below it) and after
// time 0's position (not below the start).
func (r *myRewinder) inWindow(t frontier.Time, snap frontier.Frontier) bool {
	return snap.Beyond(t) && !r.res.Start.Beyond(t)
}

func (r *myRewinder) Progress(string, frontier.Frontier) error { return nil }

func (r *myRewinder) Error(collection string, at frontier.Time, msg string) error {
	tb := r.tabs[collection]
	if tb == nil || !r.inWindow(at, tb.until(r.res.Snapshot)) {
		return nil
	}
	return fmt.Errorf("rewind %s: %w: %s", collection, ErrRewind, msg)
}

// Reset fails the rewind like an error: what the copy held before a
// TRUNCATE in its window is unknown.
func (r *myRewinder) Reset(collection string, at frontier.Time, _ *arrow.Schema) error {
	return r.Error(collection, at, collection+" was reset (truncated) while it was copied")
}

func (r *myRewinder) Data(collection string, rec arrow.Record) error {
	tb := r.tabs[collection]
	if tb == nil || rec.NumRows() == 0 {
		return nil
	}
	cols, times, diffs, parts := pipe.SplitData(rec)
	if parts == nil {
		return fmt.Errorf("rewind %s: %w: a change without _partition", collection, ErrRewind)
	}
	var keep []int
	for i := 0; i < int(rec.NumRows()); i++ {
		if r.inWindow(frontier.Time{Partition: parts.Value(i), Pos: times.Value(i)}, tb.snapshotOf(cols, i, r.res.Snapshot)) {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	mem := memory.DefaultAllocator
	out := make([]arrow.Array, 0, len(cols)+3)
	defer func() {
		for _, a := range out {
			a.Release()
		}
	}()
	for _, c := range cols {
		b := array.NewBuilder(mem, c.DataType())
		for _, i := range keep {
			if err := appendFrom(b, c, i); err != nil {
				b.Release()
				return fmt.Errorf("rewind %s: %w", collection, err)
			}
		}
		out = append(out, b.NewArray())
		b.Release()
	}
	tbu := array.NewUint64Builder(mem)
	db := array.NewInt64Builder(mem)
	pb := array.NewStringBuilder(mem)
	for _, i := range keep {
		tbu.Append(0)
		db.Append(-diffs.Value(i))
		pb.Append(r.res.Partition)
	}
	out = append(out, tbu.NewArray(), db.NewArray(), pb.NewArray())
	tbu.Release()
	db.Release()
	pb.Release()
	nrec := array.NewRecord(rec.Schema(), out, int64(len(keep)))
	defer nrec.Release()
	if err := r.sink.Data(collection, nrec); err != nil {
		return err
	}
	tb.rewound += int64(len(keep))
	r.rewound += int64(len(keep))
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(Progress{Phase: "rewind", Table: collection, Rows: r.rows, Rewound: r.rewound, Elapsed: time.Since(r.began)})
	}
	return nil
}

// appendFrom copies value i of arr to b (same type).
func appendFrom(b array.Builder, arr arrow.Array, i int) error {
	if arr.IsNull(i) {
		b.AppendNull()
		return nil
	}
	switch bb := b.(type) {
	case *array.Int8Builder:
		bb.Append(arr.(*array.Int8).Value(i))
	case *array.Int16Builder:
		bb.Append(arr.(*array.Int16).Value(i))
	case *array.Int32Builder:
		bb.Append(arr.(*array.Int32).Value(i))
	case *array.Int64Builder:
		bb.Append(arr.(*array.Int64).Value(i))
	case *array.Uint8Builder:
		bb.Append(arr.(*array.Uint8).Value(i))
	case *array.Uint16Builder:
		bb.Append(arr.(*array.Uint16).Value(i))
	case *array.Uint32Builder:
		bb.Append(arr.(*array.Uint32).Value(i))
	case *array.Uint64Builder:
		bb.Append(arr.(*array.Uint64).Value(i))
	case *array.Float32Builder:
		bb.Append(arr.(*array.Float32).Value(i))
	case *array.Float64Builder:
		bb.Append(arr.(*array.Float64).Value(i))
	case *array.Decimal128Builder:
		bb.Append(arr.(*array.Decimal128).Value(i))
	case *array.Date32Builder:
		bb.Append(arr.(*array.Date32).Value(i))
	case *array.TimestampBuilder:
		bb.Append(arr.(*array.Timestamp).Value(i))
	case *array.DurationBuilder:
		bb.Append(arr.(*array.Duration).Value(i))
	case *array.StringBuilder:
		bb.Append(arr.(*array.String).Value(i))
	case *array.BinaryBuilder:
		bb.Append(arr.(*array.Binary).Value(i))
	default:
		return fmt.Errorf("rewind: unexpected column type %s", arr.DataType())
	}
	return nil
}

// mysqlQuote prints a value of the server as SQL would: 'text' or a
// number.
func mysqlQuote(v any) string {
	switch x := v.(type) {
	case []byte:
		return "'" + strings.ReplaceAll(string(x), "'", "''") + "'"
	case string:
		return "'" + strings.ReplaceAll(x, "'", "''") + "'"
	}
	return fmt.Sprint(v)
}

// MySQLCopy copies cfg.Tables in one transaction WITH CONSISTENT SNAPSHOT,
// without a rewind and without progress: the rows go to sink at time 0
// (partition timeZeroPartition of the snapshot) with diff +1, and
// MySQLCopy returns the snapshot's upper S (the copy holds exactly the
// transactions S is beyond: per GTID domain, or MySQL server, those
// below S's position there) and the tables as described just before the
// snapshot began. An ingest re-snapshots a collection in the middle of
// its binlog stream with it (pkg/ingest): the changes the stream brings
// between the collection's reset and S are taken back from the copy
// there. cfg.Start and cfg.Parallel are not used (one connection: on
// MariaDB no lock at all; on MySQL a brief FLUSH TABLES WITH READ LOCK).
// A value that does not convert fails the copy.
func MySQLCopy(ctx context.Context, cfg MySQLConfig, sink pipe.Sink) (frontier.Frontier, []*myarrow.Table, error) {
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.Source == "" {
		cfg.Source = "mysql"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fail := func(err error) (frontier.Frontier, []*myarrow.Table, error) {
		return frontier.Frontier{}, nil, fmt.Errorf("snapshot copy: %w", err)
	}
	srv, err := replicate.OpenServer(ctx, cfg.Upstream)
	if err != nil {
		return fail(err)
	}
	defer srv.Conn.Close()
	var tabs []*myTab
	var out []*myarrow.Table
	for _, name := range cfg.Tables {
		db, tn, err := myarrow.ParseName(name)
		if err != nil {
			return fail(err)
		}
		t, err := myarrow.LoadTable(ctx, srv.Conn, db, tn)
		if err != nil {
			return fail(err)
		}
		tabs = append(tabs, &myTab{t: t})
		out = append(out, t)
	}
	w, err := cfg.Upstream.Connect(ctx)
	if err != nil {
		return fail(fmt.Errorf("open copy connection: %w", err))
	}
	defer w.Close()
	for _, q := range []string{"SET NAMES utf8mb4", "SET time_zone = '+00:00'", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"} {
		if _, err := upstream.Execute(ctx, w, q); err != nil {
			return fail(fmt.Errorf("%s: %w", q, err))
		}
	}
	workers := []*client.Conn{w}
	pos, err := beginSnapshot(ctx, srv, workers, &MySQLResult{})
	if err != nil {
		return fail(err)
	}
	_, snap, err := replicate.ParsePosition(srv.MariaDB, pos)
	if err != nil {
		return fail(err)
	}
	part := timeZeroPartition(snap, srv)
	tasks := make([]myTask, len(tabs))
	for i, tb := range tabs {
		tasks[i] = myTask{tb: tb}
	}
	if err := copyMySQL(ctx, cfg, srv.Domain(), part, workers, tasks, tabs, sink, nil, time.Now()); err != nil {
		return fail(err)
	}
	for _, tb := range tabs {
		if tb.failed {
			return fail(fmt.Errorf("%s has a value that does not convert", tb.t.QualifiedName()))
		}
	}
	return snap, out, nil
}
