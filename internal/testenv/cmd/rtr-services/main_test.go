package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

func TestUpDown(t *testing.T) {
	base, err := os.MkdirTemp("", "rtr-services-test-")
	if err != nil {
		t.Fatal(err)
	}
	// base stays 0700, as `mktemp -d` makes it: the postgres user cannot
	// reach it, which up must cope with.
	dir := filepath.Join(base, "svc")
	t.Cleanup(func() {
		_ = down(context.Background(), dir)
		os.RemoveAll(base)
	})

	env, err := up(t.Context(), dir)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	vals := parseEnv(env)
	pg, err := testenv.ParsePostgresDSN(vals[testenv.EnvPostgresDSN])
	if err != nil {
		t.Fatalf("env has no usable %s: %v\n%s", testenv.EnvPostgresDSN, err, env)
	}
	my, err := testenv.ParseMySQLDSN(vals[testenv.EnvMySQLDSN])
	if err != nil {
		t.Fatalf("env has no usable %s: %v", testenv.EnvMySQLDSN, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		if !strings.HasPrefix(line, "export RTR_TEST_") {
			t.Errorf("env line %q is not an export", line)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "env")); err != nil || string(b) != env {
		t.Errorf("DIR/env = %q (%v), want what up printed", b, err)
	}

	pgTarget, err := os.Readlink(filepath.Join(dir, "pg"))
	if err != nil || !strings.HasPrefix(pgTarget, os.TempDir()) {
		t.Errorf("DIR/pg = %q (%v), want a link into %s", pgTarget, err, os.TempDir())
	}

	t.Run("servers answer", func(t *testing.T) {
		conn, err := pg.Connect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var wal string
		if err := conn.QueryRow(t.Context(), "SHOW wal_level").Scan(&wal); err != nil || wal != "logical" {
			t.Errorf("wal_level = %q (%v)", wal, err)
		}
		conn.Close(context.Background())
		myConn, err := my.Connect(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		res, err := myConn.Execute("SELECT @@log_bin")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := res.GetInt(0, 0); v != 1 {
			t.Errorf("@@log_bin = %d", v)
		}
		myConn.Close()
	})
	t.Run("up again is a no-op", func(t *testing.T) {
		again, err := up(t.Context(), dir)
		if err != nil || again != env {
			t.Errorf("second up = %q, %v; want the same env", again, err)
		}
	})
	t.Run("down", func(t *testing.T) {
		if err := down(t.Context(), dir); err != nil {
			t.Fatalf("down: %v", err)
		}
		for _, p := range []string{dir, pgTarget} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after down (%v)", p, err)
			}
		}
		if conn, err := pg.Connect(t.Context()); err == nil {
			conn.Close(context.Background())
			t.Error("postgres still answers after down")
		}
		if err := down(t.Context(), dir); err != nil {
			t.Errorf("second down: %v", err)
		}
	})
}

func TestDownKeepsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"env", "mine.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := down(t.Context(), dir); err != nil {
		t.Fatalf("down: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "env")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env not removed (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mine.txt")); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no args", nil},
		{"no dir", []string{"up"}},
		{"empty dir", []string{"up", ""}},
		{"unknown command", []string{"start", "/tmp/x"}},
		{"extra arg", []string{"up", "/tmp/x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ue usageError
			if err := run(t.Context(), tc.args); !errors.As(err, &ue) {
				t.Errorf("run(%q) = %v, want a usage error", tc.args, err)
			}
		})
	}
}
