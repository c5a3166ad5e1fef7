package servers

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestSweepStale(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	deadPid, livePid := dead.Process.Pid, os.Getpid()
	now := time.Now()
	old, fresh := now.Add(-2*staleAfter), now.Add(-time.Second)
	for _, tc := range []struct {
		name    string
		dir     string // under tmp
		pidFile string // under dir, "" for none
		pid     int
		mtime   time.Time
		swept   bool
	}{
		{"dead postgres", "rtr-pg-1", "data/postmaster.pid", deadPid, old, true},
		{"dead shared postgres", "rtr-pg-shared-1", "data/postmaster.pid", deadPid, old, true},
		{"dead mariadb", "rtr-mariadb-1", "mariadbd.pid", deadPid, old, true},
		{"dead shared mariadb", "rtr-my-shared-1", "mariadbd.pid", deadPid, old, true},
		{"recently dead postgres", "rtr-pg-2", "data/postmaster.pid", deadPid, fresh, false},
		{"live postgres", "rtr-pg-3", "data/postmaster.pid", livePid, old, false},
		{"live mariadb", "rtr-mariadb-3", "mariadbd.pid", livePid, old, false},
		{"no pid file", "rtr-pg-4", "", 0, old, false},
		{"garbage pid file", "rtr-pg-5", "data/postmaster.pid", 0, old, false},
		{"other prefix", "other-pg-1", "data/postmaster.pid", deadPid, old, false},
		{"mariadb pid file in postgres dir", "rtr-pg-6", "mariadbd.pid", deadPid, old, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			dir := filepath.Join(tmp, tc.dir)
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.pidFile != "" {
				p := filepath.Join(dir, tc.pidFile)
				content := strconv.Itoa(tc.pid) + "\n/some/dir\n"
				if tc.pid == 0 {
					content = "not a pid\n"
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, tc.mtime, tc.mtime); err != nil {
					t.Fatal(err)
				}
			}
			removed := sweepStaleIn(tmp, now)
			_, statErr := os.Stat(dir)
			if gone := os.IsNotExist(statErr); gone != tc.swept {
				t.Errorf("swept = %v, want %v (removed %v)", gone, tc.swept, removed)
			}
			if tc.swept && !slices.Equal(removed, []string{dir}) {
				t.Errorf("removed = %v, want [%s]", removed, dir)
			}
		})
	}
}
