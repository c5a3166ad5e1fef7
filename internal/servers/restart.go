package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// RestartOptions says how a server goes down and for how long.
type RestartOptions struct {
	// Mode is how the server goes down.
	//
	// PostgreSQL: "fast" (the default; SIGINT to the postmaster, as
	// pg_ctl stop -m fast: sessions are terminated, a shutdown checkpoint
	// is written), "immediate" (SIGQUIT, as pg_ctl stop -m immediate: no
	// checkpoint, crash recovery at the next start) or "smart" (SIGTERM:
	// waits until every client has disconnected, so it blocks, up to ctx,
	// while a connection is open).
	//
	// MariaDB: "clean" (the default; SIGTERM, a normal shutdown) or
	// "kill" (SIGKILL of mariadbd, a crash: InnoDB recovers at the next
	// start).
	Mode string
	// Down is how long the server stays down before it starts again (0: at
	// once).
	Down time.Duration
}

// errNotDedicated is wrapped by Restart on a server it cannot restart.
var errNotDedicated = errors.New("restart needs a dedicated server started in this process (testenv.StartPostgres/StartMariaDB or LaunchPostgres/LaunchMariaDB), not a shared or external one")

func lookupPG(p *Postgres) (*pgInstance, error) {
	registry.Lock()
	inst := registry.pg[p.DataDir]
	registry.Unlock()
	switch {
	case inst == nil && p.DataDir == "":
		return nil, fmt.Errorf("postgres %s:%d has no data directory here: %w", p.Host, p.Port, errNotDedicated)
	case inst == nil:
		return nil, fmt.Errorf("postgres in %s was not launched by this process or is stopped: %w", p.DataDir, errNotDedicated)
	case inst.shared:
		return nil, fmt.Errorf("postgres on port %d is shared: %w", p.Port, errNotDedicated)
	}
	return inst, nil
}

// Restart stops a dedicated server (launched by this process) as
// opts.Mode says, waits opts.Down, and starts it again with the same data
// directory and port, so clients reconnect with the same DSN. It returns
// once the server accepts connections again; open connections are lost.
// ctx bounds the whole restart. The stop function from LaunchPostgres (and
// StartPostgres's cleanup) stops the restarted server.
func (p *Postgres) Restart(ctx context.Context, opts RestartOptions) error {
	var sig syscall.Signal
	switch opts.Mode {
	case "", "fast":
		sig = syscall.SIGINT
	case "immediate":
		sig = syscall.SIGQUIT
	case "smart":
		sig = syscall.SIGTERM
	default:
		return fmt.Errorf("restart postgres: unknown mode %q; want fast, immediate or smart", opts.Mode)
	}
	inst, err := lookupPG(p)
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.stopped {
		return fmt.Errorf("restart postgres: server in %s is stopped: %w", inst.lay.data, errNotDedicated)
	}
	if err := inst.srv.shutdown(ctx, sig); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	// A postmaster that exits on its own removes its pid file and shared
	// memory; should one be left (the postmaster was killed), free the
	// segment so that the next start is not refused.
	pidFile := filepath.Join(inst.lay.data, "postmaster.pid")
	if _, err := os.Stat(pidFile); err == nil {
		shmCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := removeStaleShm(shmCtx, pidFile)
		cancel()
		if err != nil {
			return fmt.Errorf("restart postgres: %w", err)
		}
	}
	if err := sleepCtx(ctx, opts.Down); err != nil {
		return fmt.Errorf("restart postgres: stay down: %w", err)
	}
	ctx, cancel := withStartDeadline(ctx)
	defer cancel()
	srv, err := retryPortTaken(ctx, func() (*server, error) {
		return startPostgresOnce(ctx, inst.po, inst.postgres, inst.lay, &inst.pg)
	})
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	inst.srv = srv
	return nil
}

func lookupMy(m *MariaDB) (*myInstance, error) {
	registry.Lock()
	inst := registry.my[m.DataDir]
	registry.Unlock()
	switch {
	case inst == nil && m.DataDir == "":
		return nil, fmt.Errorf("mariadb %s has no data directory here: %w", m.Addr(), errNotDedicated)
	case inst == nil:
		return nil, fmt.Errorf("mariadb in %s was not launched by this process or is stopped: %w", m.DataDir, errNotDedicated)
	case inst.opts.Shared:
		return nil, fmt.Errorf("mariadb on port %d is shared: %w", m.Port, errNotDedicated)
	}
	return inst, nil
}

// Restart stops a dedicated server (launched by this process) as
// opts.Mode says, waits opts.Down, and starts it again with the same data
// directory and port, so clients reconnect with the same DSN. It returns
// once the server accepts connections again; open connections are lost.
// ctx bounds the whole restart. The stop function from LaunchMariaDB (and
// StartMariaDB's cleanup) stops the restarted server.
func (m *MariaDB) Restart(ctx context.Context, opts RestartOptions) error {
	var sig syscall.Signal
	switch opts.Mode {
	case "", "clean":
		sig = syscall.SIGTERM
	case "kill":
		sig = syscall.SIGKILL
	default:
		return fmt.Errorf("restart mariadb: unknown mode %q; want clean or kill", opts.Mode)
	}
	inst, err := lookupMy(m)
	if err != nil {
		return fmt.Errorf("restart mariadb: %w", err)
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.stopped {
		return fmt.Errorf("restart mariadb: server in %s is stopped: %w", inst.lay.data, errNotDedicated)
	}
	if err := inst.srv.shutdown(ctx, sig); err != nil {
		return fmt.Errorf("restart mariadb: %w", err)
	}
	if err := sleepCtx(ctx, opts.Down); err != nil {
		return fmt.Errorf("restart mariadb: stay down: %w", err)
	}
	ctx, cancel := withStartDeadline(ctx)
	defer cancel()
	srv, err := retryPortTaken(ctx, func() (*server, error) {
		// mariadbd replaces a killed server's pid file and socket itself.
		return startMariaDBOnce(ctx, inst.po, inst.mariadbd, inst.lay, inst.common, inst.m.Port, inst.m.Password, inst.opts)
	})
	if err != nil {
		return fmt.Errorf("restart mariadb: %w", err)
	}
	inst.srv = srv
	return nil
}

// shutdown sends sig and waits, up to ctx, until the process has exited.
// Unlike stop it never kills: a server still shutting down when ctx ends
// is left to finish (the instance's stop deals with it).
func (s *server) shutdown(ctx context.Context, sig syscall.Signal) error {
	if s.exited() {
		return nil
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal server pid %d: %w", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for server pid %d to shut down: %w", s.cmd.Process.Pid, ctx.Err())
	}
}

// retryPortTaken calls start until it does not fail for a taken port (the
// same port must be used again, so another process holding it for a
// moment is waited out), up to bindAttempts times.
func retryPortTaken(ctx context.Context, start func() (*server, error)) (*server, error) {
	for attempt := 1; ; attempt++ {
		srv, err := start()
		if err == nil || !errors.Is(err, errPortTaken) || attempt >= bindAttempts {
			return srv, err
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return nil, fmt.Errorf("wait for the port to be free: %w", err)
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
