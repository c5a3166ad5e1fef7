// Command rtr-services starts and stops the PostgreSQL and MariaDB servers
// that rtrctl's integration tests share, so that many test binaries (and CI)
// use two servers instead of starting their own.
//
//	go run ./internal/testenv/cmd/rtr-services up DIR    # start, write DIR/env, print it
//	. DIR/env                                             # export RTR_TEST_PG_DSN, RTR_TEST_MYSQL_DSN
//	go run ./internal/testenv/cmd/rtr-services down DIR  # stop both, remove DIR
//
// The servers run detached (their own session, no parent-death signal) and
// keep their files in DIR/mariadb and, for PostgreSQL, in a directory under
// the system temporary directory that DIR/pg links to (the server runs as
// the user postgres, who may not be allowed to reach DIR). "up" when both already answer
// only prints DIR/env; a half-started or dead pair is stopped and started
// afresh. Kafka is not started here: tests use kfake in process.
//
// Exit status: 0 on success, 1 on failure, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rtrctl/rtrctl/internal/servers"
)

const usage = `usage: rtr-services up DIR | down DIR

  up DIR    start PostgreSQL and MariaDB under DIR (detached), write DIR/env
            with "export RTR_TEST_PG_DSN=..." and "export RTR_TEST_MYSQL_DSN=..."
            and print it; when they already run, only print DIR/env
  down DIR  stop both servers and remove DIR
`

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	var ue usageError
	switch {
	case err == nil:
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "rtr-services: %v\n\n%s", err, usage)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "rtr-services: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Print(usage)
		return nil
	}
	if len(args) != 2 || args[1] == "" {
		return usageError{"want a command and a directory"}
	}
	dir, err := filepath.Abs(args[1])
	if err != nil {
		return fmt.Errorf("resolve %s: %w", args[1], err)
	}
	switch args[0] {
	case "up":
		env, err := up(ctx, dir)
		if err != nil {
			return err
		}
		fmt.Print(env)
		return nil
	case "down":
		return down(ctx, dir)
	default:
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
}

// layout names what rtr-services keeps in DIR.
type layout struct{ dir, pg, mariadb, env string }

func newLayout(dir string) layout {
	return layout{
		dir:     dir,
		pg:      filepath.Join(dir, "pg"),
		mariadb: filepath.Join(dir, "mariadb"),
		env:     filepath.Join(dir, "env"),
	}
}

// ours are the only entries rtr-services creates in DIR.
var ours = map[string]bool{"pg": true, "mariadb": true, "env": true, "env.tmp": true}

func up(ctx context.Context, dir string) (string, error) {
	l := newLayout(dir)
	if env, ok := running(ctx, l); ok {
		return env, nil
	}
	// Nothing usable: clear what a previous, partial run left behind.
	if err := stopAndClear(ctx, l); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	fail := func(err error) (string, error) {
		// Stop what did start; remove DIR when nothing else is in it.
		_ = stopAndClear(context.Background(), l)
		_ = os.Remove(dir)
		return "", err
	}
	started := time.Now()
	// PostgreSQL runs as the user postgres (when we are root), who may not
	// be allowed to reach DIR (mktemp -d makes it 0700; a clone may live
	// under /root): its files live in a directory of their own under the
	// system temporary directory, and DIR/pg links to it.
	pgDir, err := os.MkdirTemp("", "rtr-services-pg-")
	if err != nil {
		return fail(fmt.Errorf("create postgres dir: %w", err))
	}
	if err := os.Chmod(pgDir, 0o755); err != nil {
		os.Remove(pgDir)
		return fail(fmt.Errorf("create postgres dir: %w", err))
	}
	if err := os.Symlink(pgDir, l.pg); err != nil {
		os.Remove(pgDir)
		return fail(fmt.Errorf("link %s: %w", l.pg, err))
	}
	pg, _, err := servers.LaunchPostgres(ctx, pgDir, servers.PostgresOptions{Detached: true})
	if err != nil {
		return fail(fmt.Errorf("start postgres: %w", err))
	}
	my, _, err := servers.LaunchMariaDB(ctx, l.mariadb, servers.MariaDBOptions{Detached: true})
	if err != nil {
		return fail(fmt.Errorf("start mariadb: %w", err))
	}
	env := fmt.Sprintf("export %s='%s'\nexport %s='%s'\n",
		servers.EnvPostgresDSN, pg.DSN(), servers.EnvMySQLDSN, my.DSN())
	if err := writeFileAtomic(l.env, []byte(env)); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "rtr-services: postgres on 127.0.0.1:%d, mariadb on 127.0.0.1:%d (started in %v); logs in %s\n",
		pg.Port, my.Port, time.Since(started).Round(time.Millisecond), dir)
	return env, nil
}

// running returns DIR/env when it exists and both servers it names answer.
func running(ctx context.Context, l layout) (string, bool) {
	b, err := os.ReadFile(l.env)
	if err != nil {
		return "", false
	}
	vals := parseEnv(string(b))
	pg, err := servers.ParsePostgresDSN(vals[servers.EnvPostgresDSN])
	if err != nil {
		return "", false
	}
	my, err := servers.ParseMySQLDSN(vals[servers.EnvMySQLDSN])
	if err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pgConn, err := pg.Connect(ctx)
	if err != nil {
		return "", false
	}
	pgConn.Close(ctx)
	myConn, err := my.Connect(ctx, "")
	if err != nil {
		return "", false
	}
	myConn.Close()
	return string(b), true
}

// parseEnv reads the lines export NAME='value' that up writes.
func parseEnv(s string) map[string]string {
	vals := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		name, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		vals[name] = strings.Trim(val, "'")
	}
	return vals
}

// stopAndClear stops both servers and removes rtr-services' entries in DIR.
func stopAndClear(ctx context.Context, l layout) error {
	var errs []error
	pgDir := l.pg
	if target, err := os.Readlink(l.pg); err == nil {
		pgDir = target
	}
	if _, err := os.Stat(pgDir); err == nil {
		if err := servers.StopPostgresDir(ctx, pgDir); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(l.mariadb); err == nil {
		if err := servers.StopMariaDBDir(ctx, l.mariadb); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stop services in %s: %w", l.dir, errors.Join(errs...))
	}
	if pgDir != l.pg {
		if err := os.RemoveAll(pgDir); err != nil {
			return fmt.Errorf("remove %s: %w", pgDir, err)
		}
	}
	for name := range ours {
		if err := os.RemoveAll(filepath.Join(l.dir, name)); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	return nil
}

// down stops both servers and removes DIR. A DIR that holds files
// rtr-services did not create is kept (only its own entries go).
func down(ctx context.Context, dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l := newLayout(dir)
	if err := stopAndClear(ctx, l); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		fmt.Fprintf(os.Stderr, "rtr-services: stopped; kept %s because it holds other files (e.g. %s)\n", dir, entries[0].Name())
		return nil
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic writes path through a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
