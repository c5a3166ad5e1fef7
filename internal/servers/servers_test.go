package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelperProcess()
		return
	}
	os.Exit(m.Run())
}

func TestParseMySQLDSN(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		want      MariaDB
		err       string
	}{
		{"plain", "rtr:pw@tcp(127.0.0.1:3306)/", MariaDB{Host: "127.0.0.1", Port: 3306, User: "rtr", Password: "pw"}, ""},
		{"no slash", "rtr:pw@tcp(localhost:1)", MariaDB{Host: "localhost", Port: 1, User: "rtr", Password: "pw"}, ""},
		{"db and params", "a:b@tcp(h:9)/db?x=y", MariaDB{Host: "h", Port: 9, User: "a", Password: "b"}, ""},
		{"at in password", "a:p@ss@tcp(h:9)/", MariaDB{Host: "h", Port: 9, User: "a", Password: "p@ss"}, ""},
		{"no password", "a@tcp([::1]:9)/", MariaDB{Host: "::1", Port: 9, User: "a"}, ""},
		{"no at", "tcp(h:9)/", MariaDB{}, "no '@'"},
		{"unix socket", "a:b@unix(/tmp/s)/", MariaDB{}, "not tcp"},
		{"no port", "a:b@tcp(h)/", MariaDB{}, "address"},
		{"bad port", "a:b@tcp(h:0)/", MariaDB{}, "bad port"},
		{"url form", "mysql://a:b@h:1/", MariaDB{}, "not tcp"},
		{"junk after address", "a:b@tcp(h:1)x", MariaDB{}, "unexpected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMySQLDSN(tc.dsn)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if *got != tc.want {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}

func TestPostgresDSNForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		pg   Postgres
		url  string
		kv   string
	}{
		{"plain", Postgres{Host: "127.0.0.1", Port: 5, User: "rtr", Password: "pw", Database: "rtr"},
			"postgres://rtr:pw@127.0.0.1:5/rtr?sslmode=disable",
			"host=127.0.0.1 port=5 user=rtr password=pw dbname=rtr sslmode=disable"},
		{"quoting", Postgres{Host: "127.0.0.1", Port: 5, User: "a b", Password: `p'w\@/`, Database: "d"},
			"postgres://a%20b:p%27w%5C%40%2F@127.0.0.1:5/d?sslmode=disable",
			`host=127.0.0.1 port=5 user='a b' password='p\'w\\@/' dbname=d sslmode=disable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pg.DSN(); got != tc.url {
				t.Errorf("DSN() = %q, want %q", got, tc.url)
			}
			if got := tc.pg.KeyValueDSN(); got != tc.kv {
				t.Errorf("KeyValueDSN() = %q, want %q", got, tc.kv)
			}
			for name, dsn := range map[string]string{"url": tc.pg.DSN(), "key value": tc.pg.KeyValueDSN()} {
				back, err := ParsePostgresDSN(dsn)
				if err != nil {
					t.Fatalf("parse %s: %v", name, err)
				}
				if *back != tc.pg {
					t.Errorf("%s round trip = %+v, want %+v", name, *back, tc.pg)
				}
			}
		})
	}
	t.Run("parse error hides password", func(t *testing.T) {
		_, err := ParsePostgresDSN("postgres://u:secretpw@127.0.0.1:notaport/db")
		if err == nil || strings.Contains(err.Error(), "secretpw") {
			t.Errorf("error = %v, want one without the password", err)
		}
	})
}

func TestMissingBinary(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	t.Setenv("RTR_PG_BINDIR", empty)
	for _, tc := range []struct {
		name   string
		launch func() error
		want   string
	}{
		{"postgres", func() error {
			_, _, err := LaunchPostgres(t.Context(), filepath.Join(t.TempDir(), "pg"), PostgresOptions{})
			return err
		}, "postgresql-15"},
		{"mariadb", func() error {
			_, err := findBinary("mariadbd", MariaDBPackage, empty)
			return err
		}, "mariadb-server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.launch()
			var missing *MissingBinaryError
			if !errors.As(err, &missing) {
				t.Fatalf("error = %v, want a MissingBinaryError", err)
			}
			for _, s := range []string{tc.want, "scripts/install-deps.sh"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestDetachedStopByDir(t *testing.T) {
	for _, tc := range []struct {
		name   string
		launch func(dir string) (addr string, err error)
		stop   func(ctx context.Context, dir string) error
	}{
		{"postgres", func(dir string) (string, error) {
			pg, _, err := LaunchPostgres(t.Context(), dir, PostgresOptions{Detached: true})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("127.0.0.1:%d", pg.Port), nil
		}, StopPostgresDir},
		{"mariadb", func(dir string) (string, error) {
			m, _, err := LaunchMariaDB(t.Context(), dir, MariaDBOptions{Detached: true})
			if err != nil {
				return "", err
			}
			return m.Addr(), nil
		}, StopMariaDBDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "rtr-detached-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = tc.stop(context.Background(), dir)
				os.RemoveAll(dir)
			})
			addr, err := tc.launch(dir)
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if !dialable(addr) {
				t.Fatalf("%s not listening after launch", addr)
			}
			if err := tc.stop(t.Context(), dir); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if dialable(addr) {
				t.Errorf("%s still listening after stop", addr)
			}
			if err := tc.stop(t.Context(), dir); err != nil {
				t.Errorf("second stop: %v", err)
			}
		})
	}
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

// The helper process starts a server without Detached, prints its pid and
// waits to be killed; the test checks that the server dies with it.
const helperEnv = "RTR_SERVERS_HELPER"

func runHelperProcess() {
	dir := os.Getenv("RTR_SERVERS_HELPER_DIR")
	ctx := context.Background()
	var err error
	switch os.Getenv(helperEnv) {
	case "postgres":
		_, _, err = LaunchPostgres(ctx, dir, PostgresOptions{})
	case "mariadb":
		_, _, err = LaunchMariaDB(ctx, dir, MariaDBOptions{})
	default:
		err = fmt.Errorf("unknown helper %q", os.Getenv(helperEnv))
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {}
}

func TestServerDiesWithParent(t *testing.T) {
	for _, tc := range []struct{ name, pidFile string }{
		{"postgres", "data/postmaster.pid"},
		{"mariadb", "mariadbd.pid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "rtr-orphan-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+tc.name, "RTR_SERVERS_HELPER_DIR="+dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start helper: %v", err)
			}
			pidPath := filepath.Join(dir, tc.pidFile)
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if line != "ready\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("helper did not get ready: %q (%v)", line, err)
			}
			pid := readPid(pidPath)
			if pid <= 0 || !pidAlive(pid) {
				t.Fatalf("no live server pid in %s (%d)", pidPath, pid)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill helper: %v", err)
			}
			_ = cmd.Wait()
			if err := waitPidGone(ctx, pid); err != nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("server pid %d outlived its parent: %v", pid, err)
			}
			t.Logf("server pid %s gone after its parent was killed", strconv.Itoa(pid))
			if tc.name == "postgres" {
				assertStaleShmRemoved(t, dir)
			}
		})
	}
}

// assertStaleShmRemoved checks that StopPostgresDir frees the shared memory
// segment that a killed postmaster leaves behind.
func assertStaleShmRemoved(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("read pid file: %v", err)
	}
	fields := strings.Fields(strings.Split(string(b), "\n")[6])
	shmid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatalf("parse shmid from %q: %v", fields, err)
	}
	var ds shmidDS
	if _, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(shmid), ipcStat, uintptr(unsafe.Pointer(&ds))); errno != 0 {
		t.Fatalf("segment %d of the killed server is not there: %v", shmid, errno)
	}
	// The killed postmaster's children detach only when they notice its
	// death; on a busy machine that can be after StopPostgresDir starts.
	// Stand in for a slow child: stay attached for a moment.
	addr, _, errno := syscall.Syscall(syscall.SYS_SHMAT, uintptr(shmid), 0, 0)
	if errno != 0 {
		t.Fatalf("attach segment %d: %v", shmid, errno)
	}
	detached := make(chan struct{})
	go func() {
		defer close(detached)
		time.Sleep(300 * time.Millisecond)
		syscall.Syscall(syscall.SYS_SHMDT, addr, 0, 0)
	}()
	if err := StopPostgresDir(t.Context(), dir); err != nil {
		t.Fatalf("stop dead server: %v", err)
	}
	<-detached
	if _, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(shmid), ipcStat, uintptr(unsafe.Pointer(&ds))); errno == 0 {
		t.Errorf("segment %d still there after StopPostgresDir", shmid)
	}
}
