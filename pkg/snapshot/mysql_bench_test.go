package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

const benchMyRows = 200_000

// BenchmarkMySQL compares, on a dedicated MariaDB with a 200k-row table
// (bigint, int, varchar, double, timestamp(6), tinyint):
//
//   - snapshot: MySQL (parallel 1 and 2) into a pipe to io.Discard, versus
//     mariadb-dump of the same table to /dev/null;
//   - replicate: StreamMySQL of the binlog that inserted the rows into a
//     pipe to io.Discard, versus mariadb-binlog --read-from-remote-server
//     --verbose (rows decoded) of the same binlog to /dev/null.
//
// Run: go test ./pkg/snapshot -run '^$' -bench MySQL -benchtime 3x
func BenchmarkMySQL(b *testing.B) {
	m := testenv.StartMariaDB(b, testenv.MariaDBOptions{})
	ctx := context.Background()
	c, err := m.Connect(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	myExec(b, c, "CREATE DATABASE bench", "SET time_zone = '+00:00'")
	startPos, _ := myPosition(b, m)
	myExec(b, c, "CREATE TABLE bench.t (id bigint PRIMARY KEY, a int, s varchar(40), f double, ts timestamp(6) NULL, k tinyint)")
	for lo := 1; lo <= benchMyRows; lo += 50_000 {
		myExec(b, c, fmt.Sprintf(`INSERT INTO bench.t SELECT seq, seq %% 1000, concat('row-', md5(seq)), seq / 7, '2024-01-01 00:00:00' + INTERVAL seq SECOND, seq %% 100 FROM bench.seq_%d_to_%d`, lo, lo+49_999))
	}
	myExec(b, c, "ANALYZE TABLE bench.t")
	_, end := myPosition(b, m)
	r, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		b.Fatal(err)
	}
	firstLog, _ := r.GetString(0, 0)
	env := append(os.Environ(), "MYSQL_PWD="+m.Password)
	tool := func(name string, args ...string) time.Duration {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		var errOut strings.Builder
		cmd.Stdout, cmd.Stderr = io.Discard, &errOut
		began := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, errOut.String())
		}
		return time.Since(began)
	}
	conn := []string{"--host=127.0.0.1", fmt.Sprintf("--port=%d", m.Port), "--user=" + m.User}

	b.Run("snapshot", func(b *testing.B) {
		var dump, p1, p2 time.Duration
		for range b.N {
			dump += tool("mariadb-dump", append(conn, "--single-transaction", "--skip-lock-tables", "bench", "t")...)
			for _, par := range []int{1, 2} {
				w := pipe.NewWriter(io.Discard, nil)
				began := time.Now()
				res, err := MySQL(ctx, MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Tables: []string{"bench.t"}, Parallel: par, RangeRows: 20_000}, &pipe.PipeSink{W: w, Source: "mysql"})
				if err != nil {
					b.Fatal(err)
				}
				if res.Rows() != benchMyRows {
					b.Fatalf("%d rows", res.Rows())
				}
				if par == 1 {
					p1 += time.Since(began)
				} else {
					p2 += time.Since(began)
				}
			}
		}
		n := float64(b.N)
		b.ReportMetric(dump.Seconds()/n, "dump-s/op")
		b.ReportMetric(p1.Seconds()/dump.Seconds(), "x-dump-parallel1")
		b.ReportMetric(p2.Seconds()/dump.Seconds(), "x-dump-parallel2")
	})

	b.Run("replicate", func(b *testing.B) {
		var tl, st time.Duration
		for range b.N {
			tl += tool("mariadb-binlog", append(conn, "--read-from-remote-server", "--to-last-log", "--verbose", firstLog)...)
			w := pipe.NewWriter(io.Discard, nil)
			sink := &benchSink{w: w}
			began := time.Now()
			if err := replicate.StreamMySQL(ctx, replicate.MySQLConfig{Upstream: upstream.MustParseMySQL(m.URL()), Start: startPos, StopAt: end}, sink); err != nil {
				b.Fatal(err)
			}
			st += time.Since(began)
			if sink.rows != benchMyRows {
				b.Fatalf("%d rows", sink.rows)
			}
		}
		n := float64(b.N)
		b.ReportMetric(tl.Seconds()/n, "binlog-s/op")
		b.ReportMetric(st.Seconds()/tl.Seconds(), "x-mariadb-binlog")
	})
}

type benchSink struct {
	w    *pipe.Writer
	rows int64
}

func (s *benchSink) Data(coll string, rec arrow.Record) error {
	s.rows += rec.NumRows()
	return s.w.WriteRecord(pipe.Header{Kind: pipe.KindData, Collection: coll, Source: "mysql", Domain: frontier.DomainMariaDB}, rec)
}
func (s *benchSink) Progress(string, frontier.Frontier) error  { return nil }
func (s *benchSink) Error(string, frontier.Time, string) error { return nil }

func (s *benchSink) Reset(string, frontier.Time, *arrow.Schema) error { return nil }
