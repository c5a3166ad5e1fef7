package servers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// registry holds the servers this process launched and has not stopped,
// by data directory. Postgres and MariaDB stay plain comparable values
// (tests compare them), so the process behind one is found here.
var registry = struct {
	sync.Mutex
	pg map[string]*pgInstance
	my map[string]*myInstance
}{pg: map[string]*pgInstance{}, my: map[string]*myInstance{}}

// pgInstance is a PostgreSQL server launched by this process: what it takes
// to stop it and to start it again on the same port.
type pgInstance struct {
	mu       sync.Mutex // held across stop and Restart
	srv      *server    // the current postmaster
	po       procOptions
	postgres string // the server binary
	lay      pgLayout
	pg       Postgres
	shared   bool
	stopped  bool
}

func registerPG(inst *pgInstance) {
	registry.Lock()
	defer registry.Unlock()
	registry.pg[inst.lay.data] = inst
}

// stop shuts the server down (fast mode) for good.
func (inst *pgInstance) stop() error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	registry.Lock()
	if registry.pg[inst.lay.data] == inst {
		delete(registry.pg, inst.lay.data)
	}
	registry.Unlock()
	inst.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := inst.srv.stop(ctx, syscall.SIGINT); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// myInstance is a MariaDB server launched by this process: what it takes
// to stop it and to start it again on the same port.
type myInstance struct {
	mu       sync.Mutex // held across stop and Restart
	srv      *server    // the current mariadbd
	po       procOptions
	mariadbd string // the server binary
	lay      myLayout
	common   []string
	opts     MariaDBOptions
	m        MariaDB
	stopped  bool
}

func registerMy(inst *myInstance) {
	registry.Lock()
	defer registry.Unlock()
	registry.my[inst.lay.data] = inst
}

// stop shuts the server down (SIGTERM, a clean shutdown) for good.
func (inst *myInstance) stop() error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	registry.Lock()
	if registry.my[inst.lay.data] == inst {
		delete(registry.my, inst.lay.data)
	}
	registry.Unlock()
	inst.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := inst.srv.stop(ctx, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop mariadb: %w", err)
	}
	if filepath.Dir(inst.lay.socket) != inst.lay.dir {
		_ = os.Remove(inst.lay.socket)
	}
	return nil
}
