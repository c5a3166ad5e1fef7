package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/store"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// PostgreSQL defaults.
const (
	DefaultRowsPerTxn  = 10
	DefaultUpdateRatio = 0.5
	DefaultConnections = 4
)

// PGConfig configures RunPG.
type PGConfig struct {
	Common
	// Rate is transactions per second.
	Rate float64
	// RowsPerTxn: rows written by each transaction.
	RowsPerTxn int
	// UpdateRatio: the share of rows that update an earlier row (the
	// others insert a new one).
	UpdateRatio float64
	// DSN of the server; "" starts a throwaway server for the run.
	DSN string
	// Connections the writer uses (DefaultConnections).
	Connections int
}

// RunPG runs the PostgreSQL benchmark. It creates a table, publication
// and slot with a random suffix and drops them at the end.
func RunPG(ctx context.Context, cfg PGConfig) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("bench pg: %w", err)
	}
	if cfg.Rate <= 0 {
		return nil, errors.New("bench pg: the rate must be positive")
	}
	if cfg.RowsPerTxn <= 0 {
		cfg.RowsPerTxn = DefaultRowsPerTxn
	}
	if cfg.UpdateRatio < 0 || cfg.UpdateRatio > 1 {
		return nil, fmt.Errorf("bench pg: update ratio %g is not between 0 and 1", cfg.UpdateRatio)
	}
	if cfg.Connections <= 0 {
		cfg.Connections = DefaultConnections
	}
	if cfg.DSN == "" {
		dir, err := os.MkdirTemp("", "rtr-bench-pg-")
		if err != nil {
			return nil, fmt.Errorf("bench pg: %w", err)
		}
		defer os.RemoveAll(dir)
		pg, stop, err := servers.LaunchPostgres(ctx, dir, servers.PostgresOptions{})
		if err != nil {
			return nil, fmt.Errorf("bench pg: start a throwaway server (or pass --dsn): %w", err)
		}
		defer stop()
		cfg.DSN = pg.DSN()
	}
	// Parsed once for the load's own connections; the ingest under test
	// gets the string, as a user would give it.
	up, err := upstream.ParsePostgres(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("bench pg: %w", err)
	}
	suffix := strconv.FormatUint(rand.Uint64()%1e9, 36)
	w := &pgLoad{cfg: cfg, up: up, table: "rtr_bench_" + suffix}
	if err := w.setup(ctx); err != nil {
		return nil, err
	}
	defer w.teardown()
	res := &Result{Source: "pg", TargetRate: cfg.Rate}
	if err := execute(ctx, cfg.Common, w, res); err != nil {
		return nil, fmt.Errorf("bench pg: %w", err)
	}
	res.MaxLagWALBytes = res.MaxLagRecords
	res.MaxLagRecords = w.maxLagTxns.Load()
	if res.Ingested != res.Sent {
		return res, fmt.Errorf("bench pg: sent %d transactions but ingested %d", res.Sent, res.Ingested)
	}
	return res, nil
}

// txnPoint is one entry of the writer's timeline: by time at, txns
// transactions (rows rows) had committed, all below LSN lsn (the insert
// position read after each commit; the running maximum).
type txnPoint struct {
	at   time.Time
	txns int64
	rows int64
	lsn  frontier.LSN
}

type pgLoad struct {
	cfg   PGConfig
	up    *upstream.Postgres
	table string
	mon   *pgx.Conn // observe and nudge
	// base is the insert LSN after setup: the table was empty below it,
	// so lag in WAL bytes counts from there.
	base frontier.LSN

	mu         sync.Mutex
	timeline   []txnPoint
	txns, rows int64
	maxLSN     frontier.LSN
	maxLagTxns atomic.Int64
}

func (p *pgLoad) source() string { return "pg" }
func (p *pgLoad) units() string  { return "WAL bytes" }
func (p *pgLoad) what() string   { return "txns" }

func (p *pgLoad) resumeRecords(string) int64 { return 0 }

func (p *pgLoad) ingestArgs(dir string) ([]string, []string) {
	// The DSN goes in the environment: argv is visible to every user.
	return []string{"ingest", "--source", "pg", "--publication", p.table, "--slot", p.table,
		"--tables", "public." + p.table, "--store", dir, "--source-id", "pg"}, []string{"RTR_PG_DSN=" + p.cfg.DSN}
}

func (p *pgLoad) setup(ctx context.Context) error {
	conn, err := p.up.Connect(ctx)
	if err != nil {
		return fmt.Errorf("bench pg: %w", err)
	}
	p.mon = conn
	for _, q := range []string{
		fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint NOT NULL, v text NOT NULL)", p.table),
		fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", p.table),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", p.table, p.table),
		fmt.Sprintf("CREATE TABLE %s_nudge (x int)", p.table),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(context.Background())
			return fmt.Errorf("bench pg: setup: %w", err)
		}
	}
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("bench pg: setup: %w", err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("bench pg: setup: %w", err)
	}
	p.base = l
	return nil
}

// teardown drops the slot, publication and tables (best effort).
func (p *pgLoad) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer p.mon.Close(context.Background())
	for ctx.Err() == nil {
		// The slot stays active for a moment after ingest exits.
		_, err := p.mon.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", p.table)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, q := range []string{"DROP PUBLICATION IF EXISTS " + p.table, "DROP TABLE IF EXISTS " + p.table, "DROP TABLE IF EXISTS " + p.table + "_nudge"} {
		_, _ = p.mon.Exec(ctx, q)
	}
}

func (p *pgLoad) nudge(ctx context.Context) error {
	if _, err := p.mon.Exec(ctx, fmt.Sprintf("INSERT INTO %s_nudge VALUES (1)", p.table)); err != nil {
		return fmt.Errorf("nudge: %w", err)
	}
	return nil
}

// produce runs transactions on a wall-clock schedule: transaction j is
// due at start + j/rate; Connections workers take the next due one.
func (p *pgLoad) produce(ctx context.Context, d time.Duration) (time.Duration, error) {
	total := int64(p.cfg.Rate * d.Seconds())
	start := time.Now()
	var next atomic.Int64
	var behindNs atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for wi := 0; wi < p.cfg.Connections; wi++ {
		conn, err := p.up.Connect(ctx)
		if err != nil {
			fail(fmt.Errorf("writer: %w", err))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(wi)))
			var mine []int64 // ids this worker inserted (and saw committed)
			for {
				j := next.Add(1) - 1
				if j >= total {
					return
				}
				due := start.Add(time.Duration(float64(j) / p.cfg.Rate * float64(time.Second)))
				if wait := time.Until(due); wait > 0 {
					select {
					case <-ctx.Done():
						fail(ctx.Err())
						return
					case <-time.After(wait):
					}
				} else if late := -wait; late > time.Duration(behindNs.Load()) {
					behindNs.Store(int64(late))
				}
				var ins, upd []string
				var newIDs []int64
				for k := 0; k < p.cfg.RowsPerTxn; k++ {
					if len(mine) > 0 && rng.Float64() < p.cfg.UpdateRatio {
						upd = append(upd, strconv.FormatInt(mine[rng.IntN(len(mine))], 10))
						continue
					}
					id := j*int64(p.cfg.RowsPerTxn) + int64(k) + 1
					newIDs = append(newIDs, id)
					ins = append(ins, fmt.Sprintf("(%d, %d, 'value of row %d at txn %d')", id, j, id, j))
				}
				var q strings.Builder
				q.WriteString("BEGIN;")
				if len(ins) > 0 {
					fmt.Fprintf(&q, "INSERT INTO %s (id, n, v) VALUES %s;", p.table, strings.Join(ins, ","))
				}
				if len(upd) > 0 {
					fmt.Fprintf(&q, "UPDATE %s SET n = n + 1, v = 'updated at txn %d' WHERE id IN (%s);", p.table, j, strings.Join(upd, ","))
				}
				q.WriteString("COMMIT; SELECT pg_current_wal_insert_lsn()::text")
				rs, err := conn.PgConn().Exec(ctx, q.String()).ReadAll()
				if err != nil {
					fail(fmt.Errorf("writer: %w", err))
					return
				}
				last := rs[len(rs)-1]
				if len(last.Rows) != 1 {
					fail(errors.New("writer: no insert LSN returned"))
					return
				}
				lsn, err := frontier.ParseLSN(string(last.Rows[0][0]))
				if err != nil {
					fail(fmt.Errorf("writer: %w", err))
					return
				}
				mine = append(mine, newIDs...)
				p.committed(time.Now(), int64(p.cfg.RowsPerTxn), lsn)
			}
		}()
	}
	wg.Wait()
	return time.Duration(behindNs.Load()), firstErr
}

func (p *pgLoad) committed(now time.Time, rows int64, lsn frontier.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.txns++
	p.rows += rows
	p.maxLSN = max(p.maxLSN, lsn)
	pt := txnPoint{now, p.txns, p.rows, p.maxLSN}
	if n := len(p.timeline); n > 0 && now.Sub(p.timeline[n-1].at) < time.Millisecond {
		p.timeline[n-1] = txnPoint{p.timeline[n-1].at, p.txns, p.rows, p.maxLSN}
	} else {
		p.timeline = append(p.timeline, pt)
	}
}

func (p *pgLoad) observe(ctx context.Context, st *store.Store, now time.Time) (observation, error) {
	f, err := st.DurableFrontier(ctx, "pg")
	if err != nil {
		return observation{}, fmt.Errorf("read durable frontier: %w", err)
	}
	d := max(frontier.LSN(f.Pos()), p.base)
	var s string
	if err := p.mon.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return observation{}, fmt.Errorf("read insert LSN: %w", err)
	}
	ins, err := frontier.ParseLSN(s)
	if err != nil {
		return observation{}, fmt.Errorf("read insert LSN: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	o := observation{sent: p.txns, rows: p.rows, position: int64(d), caughtUp: d >= p.maxLSN}
	if ins > d {
		o.lagUnits = int64(ins - d)
	}
	// Entries below j are all durable (every LSN read after their commits
	// is at or below d); entry j holds the oldest transaction that may not be.
	j := sort.Search(len(p.timeline), func(j int) bool { return p.timeline[j].lsn > d })
	if j > 0 {
		o.ingested = p.timeline[j-1].txns
	}
	if o.caughtUp {
		o.ingested = p.txns
	} else if j < len(p.timeline) {
		o.lagSeconds = now.Sub(p.timeline[j].at).Seconds()
	}
	if lag := o.sent - o.ingested; lag > p.maxLagTxns.Load() {
		p.maxLagTxns.Store(lag)
	}
	return o, nil
}
