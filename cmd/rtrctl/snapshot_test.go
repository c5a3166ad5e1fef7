package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/pipe"
)

// snapshotDB makes a database with public.items (REPLICA IDENTITY FULL, n
// rows) in publication pub and returns its DSN, a connection and a fresh
// slot name (dropped at cleanup).
func snapshotDB(t *testing.T, n int) (string, *pgx.Conn, string) {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	execAll(t, conn,
		"CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), at timestamptz)",
		"ALTER TABLE items REPLICA IDENTITY FULL",
		fmt.Sprintf("INSERT INTO items SELECT i, 'item ' || i, i * 1.5, '2024-01-01'::timestamptz + i * interval '1 hour' FROM generate_series(1, %d) i", n),
		"CREATE TABLE plain (id int PRIMARY KEY)",
		"CREATE TABLE outside (id int PRIMARY KEY)",
		"CREATE PUBLICATION pub FOR TABLE items",
		"CREATE PUBLICATION pub2 FOR TABLE items, plain",
	)
	var b [6]byte
	rand.Read(b[:])
	slot := "rtr_cli_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for range 50 {
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("drop slot %s failed", slot)
	})
	return dsn, conn, slot
}

func execAll(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, s := range sqls {
		if _, err := conn.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestSnapshotCLI snapshots a table whose slot was created before some
// changes: the pipe on stdout holds the table as of the slot, at time 0.
func TestSnapshotCLI(t *testing.T) {
	dsn, conn, slot := snapshotDB(t, 2000)
	execAll(t, conn, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
	execAll(t, conn,
		"UPDATE items SET name = 'changed' WHERE id <= 10",
		"DELETE FROM items WHERE id > 1990",
		"INSERT INTO items VALUES (5000, 'late', 1, now())",
	)

	stdout, stderr, code := runCLI(t, "", "snapshot", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--parallel", "2", "--progress-interval", "1ns")
	if code != exitOK {
		t.Fatalf("exit status %d\nstderr: %s", code, stderr)
	}
	r := pipe.NewReader(strings.NewReader(stdout), nil)
	rows := map[string]int64{} // "id|name" -> diff sum
	var progress []frontier.Frontier
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read pipe: %v", err)
		}
		h := s.Header
		if h.Collection != "public.items" || h.Source != "pg" || h.Domain != frontier.DomainLSN {
			t.Fatalf("stream %d header %+v, want public.items, source pg, domain lsn", s.Index, h)
		}
		switch h.Kind {
		case pipe.KindData:
			if got := fmt.Sprint(s.Schema.Field(0).Type, s.Schema.Field(1).Type); got != "int32 utf8" {
				t.Errorf("columns id, name typed %s, want int32 utf8", got)
			}
			for {
				rec, err := s.NextRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("read pipe: %v", err)
				}
				cols, times, diffs, _ := pipe.SplitData(rec)
				for i := 0; i < int(rec.NumRows()); i++ {
					if times.Value(i) != 0 {
						t.Fatalf("update at time %d, want 0", times.Value(i))
					}
					rows[cols[0].ValueStr(i)+"|"+cols[1].ValueStr(i)] += diffs.Value(i)
				}
				rec.Release()
			}
		case pipe.KindProgress:
			f, err := s.ReadProgress()
			if err != nil {
				t.Fatal(err)
			}
			progress = append(progress, f)
		default:
			t.Fatalf("unexpected %s stream", h.Kind)
		}
	}
	if len(progress) != 1 || !progress[0].Equal(frontier.Single(frontier.DomainLSN, 1)) {
		t.Errorf("progress %v, want one upper 1", progress)
	}
	live := 0
	for k, n := range rows {
		if n == 0 {
			continue
		}
		live++
		var id int
		fmt.Sscanf(k, "%d|", &id)
		if n != 1 || id < 1 || id > 2000 || strings.HasSuffix(k, "|changed") || k != fmt.Sprintf("%d|item %d", id, id) {
			t.Errorf("row %s with diff %d: not a row of the table as of the slot", k, n)
		}
	}
	if live != 2000 {
		t.Errorf("%d rows at time 0, want 2000", live)
	}
	for _, want := range []string{"snapshot progress", "phase=copy", "rows=1991", "phase=rewind", "rewound=31", "public.items: 1991 rows copied, 31 changes rewound", "1 tables, 1991 rows, 31 changes rewound", "snapshot at "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	cfg, _ := pgx.ParseConfig(dsn)
	if strings.Contains(stderr, cfg.Password) {
		t.Errorf("stderr shows the password:\n%s", stderr)
	}
}

func TestSnapshotCLIErrors(t *testing.T) {
	dsn, _, slot := snapshotDB(t, 3)
	replica := testenv.StartPostgres(t, testenv.PostgresOptions{WalLevel: "replica"})
	tests := []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"no publication flag", []string{"--dsn", dsn, "--slot", slot}, exitUsage, []string{"no --publication given", "hint: "}},
		{"no slot flag", []string{"--dsn", dsn, "--publication", "pub"}, exitUsage, []string{"no --slot given"}},
		{"bad parallel", []string{"--dsn", dsn, "--publication", "pub", "--slot", slot, "--parallel", "0"}, exitUsage, []string{"bad --parallel 0"}},
		{"stray argument", []string{"--dsn", dsn, "--publication", "pub", "--slot", slot, "extra"}, exitUsage, []string{`unexpected argument "extra"`}},
		{"publication missing", []string{"--dsn", dsn, "--publication", "nope", "--slot", slot}, exitError,
			[]string{"publication nope: publication does not exist", "hint: run: CREATE PUBLICATION nope FOR TABLE"}},
		{"table not in publication", []string{"--dsn", dsn, "--publication", "pub", "--slot", slot, "--tables", "items,outside"}, exitError,
			[]string{"public.outside: table is not in the publication pub", "hint: run: ALTER PUBLICATION pub ADD TABLE public.outside\n"}},
		{"replica identity", []string{"--dsn", dsn, "--publication", "pub2", "--slot", slot}, exitError,
			[]string{"replica identity is not FULL: public.plain is DEFAULT", "hint: run: ALTER TABLE public.plain REPLICA IDENTITY FULL; (or use 'rtrctl ingest'"}},
		{"wal_level replica", []string{"--dsn", replica.DSN(), "--publication", "pub", "--slot", slot}, exitError,
			[]string{`wal_level is "replica"`, "hint: run: ALTER SYSTEM SET wal_level = logical"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"snapshot", "--source", "pg"}, tc.args...)
			stdout, stderr, code := runCLI(t, "", args...)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d\nstderr: %s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout has %d bytes on failure", len(stdout))
			}
		})
	}
	stdout, stderr, code := runCLI(t, "", "snapshot", "--source", "mysql", "--dsn", "u:p@tcp(127.0.0.1:1)/", "--publication", "p", "--slot", "s")
	// --source mysql is supported (docs/mysql.md) but needs --tables.
	if code != exitUsage || !strings.Contains(stderr, "no --tables given") {
		t.Errorf("--source mysql without --tables: status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestSnapshotProgressBar: with stderr on a terminal, rtrctl snapshot
// draws a progress bar of the rows copied instead of logging progress
// lines (TestSnapshotCLI: lines, and no bar, when it is not one).
func TestSnapshotProgressBar(t *testing.T) {
	dsn, _, slot := snapshotDB(t, 100000)
	p := startOnTerminal(t, "snapshot", "--source", "pg", "--dsn", dsn, "--publication", "pub", "--slot", slot, "--progress-interval", "1ns")
	screen := p.wait(t)
	if !strings.Contains(screen, "snapshot") || !strings.Contains(screen, "rows") || !strings.Contains(screen, "\r") {
		t.Errorf("no progress bar on the terminal: %q", screen)
	}
	if strings.Contains(screen, `msg="snapshot progress"`) {
		t.Errorf("progress lines on a terminal: %q", screen)
	}
	if !strings.Contains(screen, "100000 rows") {
		t.Errorf("no summary on the terminal: %q", screen)
	}
}
