package testenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresRestart(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		var addr string
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			pg := StartPostgres(t, PostgresOptions{})
			addr = fmt.Sprintf("127.0.0.1:%d", pg.Port)
			dsn := pg.DSN()
			old, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer old.Close(context.Background())
			var started time.Time
			for _, q := range []string{
				"CREATE TABLE t (id int PRIMARY KEY, v text)",
				"INSERT INTO t VALUES (1, 'before " + mode + "')",
				"SELECT pg_create_logical_replication_slot('x', 'pgoutput')",
			} {
				if _, err := old.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := old.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
				t.Fatalf("start time: %v", err)
			}

			begin := time.Now()
			if err := pg.Restart(ctx, RestartOptions{Mode: mode, Down: 300 * time.Millisecond}); err != nil {
				t.Fatalf("restart: %v", err)
			}
			t.Logf("%s restart took %v", mode, time.Since(begin))
			if took := time.Since(begin); took < 300*time.Millisecond {
				t.Errorf("restart took %v, less than Down", took)
			}

			if _, err := old.Exec(ctx, "SELECT 1"); err == nil {
				t.Error("a connection from before the restart still works")
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect with the same DSN after restart: %v", err)
			}
			defer conn.Close(context.Background())
			var restarted time.Time
			if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&restarted); err != nil {
				t.Fatalf("start time: %v", err)
			}
			if !restarted.After(started) {
				t.Errorf("postmaster start time %v is not after %v: no restart", restarted, started)
			}
			var v string
			if err := conn.QueryRow(ctx, "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil {
				t.Fatalf("read committed row: %v", err)
			}
			if want := "before " + mode; v != want {
				t.Errorf("row = %q, want %q", v, want)
			}
			var plugin string
			if err := conn.QueryRow(ctx, "SELECT plugin FROM pg_replication_slots WHERE slot_name = 'x'").Scan(&plugin); err != nil {
				t.Fatalf("slot x after restart: %v", err)
			}
			if plugin != "pgoutput" {
				t.Errorf("slot x plugin = %q, want pgoutput", plugin)
			}
			// The restarted server takes writes.
			if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (2, 'after')"); err != nil {
				t.Errorf("write after restart: %v", err)
			}
		})
		// StartPostgres's cleanup stopped the restarted server.
		if addr != "" && dialable(addr) {
			t.Errorf("%s: %s still listening after the test's cleanup", mode, addr)
		}
	}
}

func TestMariaDBRestart(t *testing.T) {
	for _, mode := range []string{"kill", "clean"} {
		var addr string
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			m := StartMariaDB(t, MariaDBOptions{})
			addr = m.Addr()
			db := m.CreateDatabase(t)
			old, err := m.Connect(ctx, db)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer old.Close()
			for _, q := range []string{
				"CREATE TABLE t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB",
				"INSERT INTO t VALUES (1, 'before " + mode + "')",
			} {
				if _, err := old.Execute(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			before := myRow(t, m, "SELECT @@gtid_binlog_pos")[0]
			binlog := myRow(t, m, "SHOW BINLOG STATUS")[0]

			begin := time.Now()
			if err := m.Restart(ctx, RestartOptions{Mode: mode, Down: 300 * time.Millisecond}); err != nil {
				t.Fatalf("restart: %v", err)
			}
			t.Logf("%s restart took %v", mode, time.Since(begin))

			if _, err := old.Execute("SELECT 1"); err == nil {
				t.Error("a connection from before the restart still works")
			}
			// A new connection with the same DSN (m is unchanged).
			if got := myRow(t, m, "SHOW BINLOG STATUS")[0]; got == binlog {
				t.Errorf("binary log is still %s: no restart", got)
			}
			if got := myRow(t, m, "SELECT v FROM "+db+".t WHERE id = 1")[0]; got != "before "+mode {
				t.Errorf("row = %q, want %q", got, "before "+mode)
			}
			// The binary log kept the committed transactions (a CDC
			// reader resumes from its GTID position).
			if got := myRow(t, m, "SELECT @@gtid_binlog_pos")[0]; got != before {
				t.Errorf("gtid_binlog_pos = %q after restart, want %q", got, before)
			}
			conn, err := m.Connect(ctx, db)
			if err != nil {
				t.Fatalf("connect after restart: %v", err)
			}
			defer conn.Close()
			if _, err := conn.Execute("INSERT INTO t VALUES (2, 'after')"); err != nil {
				t.Errorf("write after restart: %v", err)
			}
		})
		// StartMariaDB's cleanup stopped the restarted server.
		if addr != "" && dialable(addr) {
			t.Errorf("%s: %s still listening after the test's cleanup", mode, addr)
		}
	}
}

func TestRestartNeedsDedicated(t *testing.T) {
	ctx := t.Context()
	check := func(t *testing.T, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "needs a dedicated server") {
			t.Errorf("error = %v, want one saying restart needs a dedicated server", err)
		}
	}
	t.Run("shared postgres", func(t *testing.T) {
		t.Setenv(EnvPostgresDSN, "")
		t.Cleanup(func() { _ = StopShared() })
		pg := SharedPostgres(t)
		check(t, pg.Restart(ctx, RestartOptions{Mode: "fast"}))
		conn, err := pg.Connect(ctx)
		if err != nil {
			t.Fatalf("shared server gone after a refused restart: %v", err)
		}
		conn.Close(ctx)
	})
	t.Run("shared mariadb", func(t *testing.T) {
		t.Setenv(EnvMySQLDSN, "")
		t.Cleanup(func() { _ = StopShared() })
		check(t, SharedMariaDB(t).Restart(ctx, RestartOptions{Mode: "kill"}))
	})
	t.Run("external", func(t *testing.T) {
		t.Setenv(EnvPostgresDSN, "postgres://u:p@127.0.0.1:1/db?sslmode=disable")
		t.Setenv(EnvMySQLDSN, "u:p@tcp(127.0.0.1:1)/")
		t.Cleanup(func() { _ = StopShared() })
		check(t, SharedPostgres(t).Restart(ctx, RestartOptions{}))
		check(t, SharedMariaDB(t).Restart(ctx, RestartOptions{}))
	})
	t.Run("unknown mode", func(t *testing.T) {
		for name, err := range map[string]error{
			"postgres": (&Postgres{}).Restart(ctx, RestartOptions{Mode: "kill"}),
			"mariadb":  (&MariaDB{}).Restart(ctx, RestartOptions{Mode: "immediate"}),
		} {
			if err == nil || !strings.Contains(err.Error(), "unknown mode") {
				t.Errorf("%s: error = %v, want unknown mode", name, err)
			}
		}
	})
}

var netDialer = net.Dialer{Timeout: 5 * time.Second}

func dialable(addr string) bool {
	c, err := (&netDialer).Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
