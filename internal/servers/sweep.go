package servers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Temporary directory prefixes of servers started for tests (under
// os.TempDir). SweepStale removes such directories once their server died.
const (
	PrefixPostgres      = "rtr-pg-"        // dedicated and shared PostgreSQL
	PrefixMariaDB       = "rtr-mariadb-"   // dedicated MariaDB
	PrefixMariaDBShared = "rtr-my-shared-" // shared MariaDB
)

// staleAfter is how old a dead server's pid file must be before its
// directory is swept: a start (bounded by defaultStartTimeout) may briefly
// leave a dead pid behind while it retries another port.
const staleAfter = 2 * defaultStartTimeout

var sweepOnce sync.Once

// SweepStale removes, once per process, the temporary directories of test
// servers whose process died without cleanup (a test binary killed by a
// timeout or a signal: Pdeathsig kills its servers but nothing removes
// their files). Only directories with a pid file naming a dead process,
// untouched for staleAfter, are removed.
func SweepStale() {
	sweepOnce.Do(func() { sweepStaleIn(os.TempDir(), time.Now()) })
}

// sweepStaleIn sweeps tmp as of now and returns the directories removed.
func sweepStaleIn(tmp string, now time.Time) []string {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(tmp, name)
		var pidFile string
		switch {
		case strings.HasPrefix(name, PrefixPostgres):
			pidFile = filepath.Join(dir, "data", "postmaster.pid")
		case strings.HasPrefix(name, PrefixMariaDB), strings.HasPrefix(name, PrefixMariaDBShared):
			pidFile = filepath.Join(dir, "mariadbd.pid")
		default:
			continue
		}
		fi, err := os.Stat(pidFile)
		if err != nil || now.Sub(fi.ModTime()) < staleAfter {
			continue
		}
		pid := readPid(pidFile)
		if pid <= 0 || pidAlive(pid) {
			continue
		}
		if strings.HasPrefix(name, PrefixPostgres) {
			_ = removeStaleShm(context.Background(), pidFile)
		}
		if os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}
