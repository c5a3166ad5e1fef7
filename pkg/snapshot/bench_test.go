package snapshot

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// benchRows is the size of the benchmark table.
const benchRows = 1_000_000

// BenchmarkSnapshot compares a snapshot of a 1M-row table, written as a
// pipe to io.Discard, with `psql -c "COPY t TO STDOUT (FORMAT binary)" >
// /dev/null` measured in the same run; x_copy is the ratio of the two
// (below 1: faster than COPY).
//
//	go test -run '^$' -bench Snapshot -benchtime 3x ./pkg/snapshot
func BenchmarkSnapshot(b *testing.B) {
	pg := testenv.SharedPostgres(b)
	dsn := pg.CreateDatabase(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range []string{
		`CREATE TABLE bench (id bigint PRIMARY KEY, n int NOT NULL, name text, price float8, at timestamptz, ok bool)`,
		`ALTER TABLE bench REPLICA IDENTITY FULL`,
		fmt.Sprintf(`INSERT INTO bench SELECT i, i %% 1000, 'name number ' || i, i * 0.25,
			'2024-01-01'::timestamptz + i * interval '1 second', i %% 2 = 0 FROM generate_series(1, %d) i`, benchRows),
		`VACUUM ANALYZE bench`,
		`CREATE PUBLICATION pub FOR TABLE bench`,
		`SELECT pg_create_logical_replication_slot('rtr_bench', 'pgoutput')`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			b.Fatalf("%s: %v", s, err)
		}
	}
	defer conn.Exec(context.Background(), "SELECT pg_drop_replication_slot('rtr_bench')")

	// The baseline: the best of three binary COPYs by psql.
	var copyTimes []time.Duration
	for range 3 {
		cmd := exec.Command("/usr/bin/psql", dsn, "-X", "-q", "-c", "COPY bench TO STDOUT (FORMAT binary)")
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = nil, &stderr // stdout to /dev/null
		began := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("psql: %v: %s", err, stderr.String())
		}
		copyTimes = append(copyTimes, time.Since(began))
	}
	sort.Slice(copyTimes, func(i, j int) bool { return copyTimes[i] < copyTimes[j] })
	base := copyTimes[0]
	b.Logf("psql COPY (FORMAT binary) > /dev/null: %s (best of %v)", base, copyTimes)
	if testing.Verbose() {
		// For comparison: the text format the snapshot reads.
		cmd := exec.Command("/usr/bin/psql", dsn, "-X", "-q", "-c", "COPY bench TO STDOUT")
		began := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		b.Logf("psql COPY (FORMAT text) > /dev/null: %s", time.Since(began))
	}

	for _, bc := range []struct {
		par    int
		format string
	}{{1, "auto"}, {2, "auto"}, {1, "text"}, {2, "text"}} {
		par := bc.par
		b.Run(fmt.Sprintf("parallel=%d/format=%s", par, bc.format), func(b *testing.B) {
			var best time.Duration
			for range b.N {
				began := time.Now()
				res, err := PG(ctx, Config{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: "rtr_bench", Parallel: par, Format: bc.format},
					&pipe.PipeSink{W: pipe.NewWriter(io.Discard, nil), Source: "pg"})
				if err != nil {
					b.Fatal(err)
				}
				if res.Rows() != benchRows {
					b.Fatalf("%d rows, want %d", res.Rows(), benchRows)
				}
				if d := time.Since(began); best == 0 || d < best {
					best = d
				}
			}
			b.ReportMetric(float64(best)/float64(base), "x_copy")
			b.ReportMetric(float64(benchRows)/best.Seconds(), "rows/s")
		})
	}
}
