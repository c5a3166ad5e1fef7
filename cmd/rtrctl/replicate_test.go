package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pgarrow"
	"github.com/rtrctl/rtrctl/pkg/pipe"
	"github.com/rtrctl/rtrctl/pkg/replicate"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// replDB makes a database with tables t (REPLICA IDENTITY FULL), a
// publication "pub" and a slot, dropped at cleanup.
func replDB(t *testing.T) (dsn, slot string, conn *pgx.Conn) {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dsn = pg.CreateDatabase(t)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	slot = fmt.Sprintf("rtr_cli_%d", time.Now().UnixNano()%1e12)
	for _, q := range []string{
		"CREATE TABLE t (id int PRIMARY KEY, v text, at timestamptz); ALTER TABLE t REPLICA IDENTITY FULL",
		"CREATE PUBLICATION pub FOR TABLE t",
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dsn, slot, conn
}

func TestReplicateCLI(t *testing.T) {
	dsn, slot, conn := replDB(t)
	ctx := ctxT(t)
	for _, q := range []string{
		"INSERT INTO t VALUES (1, 'one', '2024-01-02 03:04:05+00'), (2, NULL, NULL)",
		"UPDATE t SET v = 'uno' WHERE id = 1",
		"DELETE FROM t WHERE id = 2",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	stop := pgLSN(t, ctx, conn, "pg_current_wal_insert_lsn")
	stdout, stderr, code := runCLI(t, "", "replicate", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--stop-at", stop.String())
	if code != exitOK {
		t.Fatalf("exit status %d\nstderr: %s", code, stderr)
	}
	r := pipe.NewReader(strings.NewReader(stdout), nil)
	var rows []string
	var last frontier.LSN
	kinds := map[pipe.Kind]int{}
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h := s.Header
		kinds[h.Kind]++
		switch h.Kind {
		case pipe.KindData:
			if h.Collection != "public.t" || h.Source != "pg" || h.Domain != frontier.DomainLSN {
				t.Errorf("data header %+v", h)
			}
			for {
				rec, err := s.NextRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := rec.Schema().Field(2).Type.String(); got != "timestamp[us, tz=UTC]" {
					t.Errorf("column at: %s", got)
				}
				for i := 0; i < int(rec.NumRows()); i++ {
					var parts []string
					for c := 0; c < int(rec.NumCols()); c++ {
						v := pgarrow.GoValue(rec.Column(c), i)
						if c == 3 {
							if frontier.LSN(v.(uint64)) >= stop {
								t.Errorf("update at %v, beyond --stop-at %s", v, stop)
							}
							continue
						}
						parts = append(parts, fmt.Sprint(v))
					}
					rows = append(rows, strings.Join(parts, " "))
				}
			}
		case pipe.KindProgress:
			f, err := s.ReadProgress()
			if err != nil {
				t.Fatal(err)
			}
			if h.Source != "pg" || frontier.LSN(f.Pos()) <= last {
				t.Errorf("progress %s (source %q) after %s", f, h.Source, last)
			}
			last = frontier.LSN(f.Pos())
		default:
			t.Errorf("unexpected %s stream", h.Kind)
		}
	}
	want := "1 one 1704164645000000 1|2 <nil> <nil> 1|1 one 1704164645000000 -1|1 uno 1704164645000000 1|2 <nil> <nil> -1"
	if got := strings.Join(rows, "|"); got != want {
		t.Errorf("rows\n got %s\nwant %s", got, want)
	}
	if last < stop {
		t.Errorf("last progress %s, want at or beyond --stop-at %s", last, stop)
	}
	if kinds[pipe.KindData] < 3 || kinds[pipe.KindProgress] < 4 {
		t.Errorf("streams %v: want a data and a progress stream per transaction", kinds)
	}
	// The slot did not move: replicate confirms nothing.
	var confirmed string
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if l, _ := frontier.ParseLSN(confirmed); l >= stop {
		t.Errorf("slot confirmed to %s", confirmed)
	}
}

// pipeRows counts the data rows of a pipe and reports whether all of it
// read cleanly (complete streams only).
func pipeRows(b []byte) (int, error) {
	r := pipe.NewReader(bytes.NewReader(b), nil)
	n := 0
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		for {
			rec, err := s.NextRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return n, err
			}
			if s.Header.Kind == pipe.KindData {
				n += int(rec.NumRows())
			}
		}
	}
}

// TestReplicateCLIInterrupt cancels a running replicate: the output ends at
// a stream boundary and reads as a whole pipe.
func TestReplicateCLIInterrupt(t *testing.T) {
	dsn, slot, conn := replDB(t)
	if _, err := conn.Exec(ctxT(t), "INSERT INTO t SELECT g, 'x' FROM generate_series(1, 10) g"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- runReplicate(ctx, &out, replicateOptions{source: "pg", cfg: replicateCfg(dsn, slot)})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for n, _ := pipeRows(out.Bytes()); n < 10; n, _ = pipeRows(out.Bytes()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows after 15 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("runReplicate = %v, want context.Canceled", err)
	}
	n, err := pipeRows(out.Bytes())
	if err != nil {
		t.Fatalf("pipe after interrupt: %v", err)
	}
	if n != 10 {
		t.Errorf("%d rows before the interrupt, want 10", n)
	}
}

func TestReplicateCLIErrors(t *testing.T) {
	dsn, _, _ := replDB(t)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		inStderr []string
	}{
		{"help", []string{"replicate", "--help"}, exitOK, nil},
		{"no publication", []string{"replicate", "--source", "pg", "--slot", "s"}, exitUsage, []string{"no --publication given", "hint: pass --publication"}},
		{"no slot", []string{"replicate", "--source", "pg", "--publication", "p"}, exitUsage, []string{"no --slot given"}},
		{"kafka without brokers", []string{"replicate", "--source", "kafka", "--topic", "t"}, exitUsage, []string{"no Kafka brokers given"}},
		{"bad lsn", []string{"replicate", "--source", "pg", "--publication", "p", "--slot", "s", "--stop-at", "16B3748"}, exitUsage, []string{`bad --stop-at "16B3748"`}},
		{"slot missing", []string{"replicate", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", "rtr_missing"}, exitError,
			[]string{`replication slot does not exist: "rtr_missing"`, "hint: run 'rtrctl snapshot' (it creates the slot)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			for _, s := range tc.inStderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q does not contain %q", stderr, s)
				}
			}
			if tc.name == "help" && (!strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "--stop-at")) {
				t.Errorf("help: %s", stdout)
			}
			if strings.Contains(stderr, "password=") || (strings.Contains(dsn, ":") && strings.Contains(stderr, strings.Split(strings.Split(dsn, "@")[0], ":")[2])) {
				t.Errorf("stderr leaks the password: %s", stderr)
			}
		})
	}
}

func replicateCfg(dsn, slot string) replicate.PGConfig {
	return replicate.PGConfig{Upstream: upstream.MustParsePostgres(dsn), Publication: "pub", Slot: slot, StatusInterval: 100 * time.Millisecond}
}
