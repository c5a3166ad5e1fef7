package servers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// MariaDBPackage is the Debian package that ships the server binaries.
const MariaDBPackage = "mariadb-server"

// MariaDB describes a reachable MariaDB (or MySQL) server and a user with
// all privileges, replication included.
type MariaDB struct {
	Host     string
	Port     int
	User     string
	Password string
	// DataDir is the server's data directory, "" for an external server.
	DataDir string
	// SSLCA, when set, makes Connect use TLS, verifying the server against
	// this CA (a server launched with MariaDBOptions.TLS).
	SSLCA string
}

// MariaDBOptions configure a server started by StartMariaDB or
// LaunchMariaDB. The zero value gives binary logging in ROW format with
// FULL row images.
type MariaDBOptions struct {
	// NoLogBin turns the binary log off (@@log_bin = 0).
	NoLogBin bool
	// BinlogFormat is binlog_format; "" means "ROW".
	BinlogFormat string
	// BinlogRowImage is binlog_row_image; "" means "FULL".
	BinlogRowImage string
	// Settings are extra server options, passed as --key=value after the
	// defaults, e.g. {"gtid-domain-id": "3"}.
	Settings map[string]string
	// Detached servers run in their own session without a parent-death
	// signal, so they outlive the launching process (rtr-services up).
	Detached bool
	// Shared marks a server that many tests use (testenv.SharedMariaDB):
	// Restart refuses it.
	Shared bool
	// TLS, when set, gives the server these certificates (ssl-ca,
	// ssl-cert, ssl-key) and require_secure_transport=ON: TCP clients must
	// use TLS (the socket the setup uses is exempt).
	TLS *Certs
}

// Addr is host:port.
func (m *MariaDB) Addr() string {
	return net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

// DSN returns the go-sql-driver form: user:pass@tcp(127.0.0.1:port)/.
func (m *MariaDB) DSN() string {
	return fmt.Sprintf("%s:%s@tcp(%s)/", m.User, m.Password, m.Addr())
}

// URL returns mysql://user:pass@127.0.0.1:port/.
func (m *MariaDB) URL() string {
	u := url.URL{Scheme: "mysql", User: url.UserPassword(m.User, m.Password), Host: m.Addr(), Path: "/"}
	return u.String()
}

// String is the URL with the password masked, safe for logs.
func (m *MariaDB) String() string {
	q := *m
	q.Password = "xxxxx"
	return q.URL()
}

// Connect opens a go-mysql client connection, with no default database
// when db is "".
func (m *MariaDB) Connect(ctx context.Context, db string) (*client.Conn, error) {
	var opts []client.Option
	if m.SSLCA != "" {
		pem, err := os.ReadFile(m.SSLCA)
		if err != nil {
			return nil, fmt.Errorf("connect to mariadb %s: %w", m.Addr(), err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg := &tls.Config{RootCAs: pool, ServerName: m.Host}
		opts = append(opts, func(c *client.Conn) error { c.SetTLSConfig(cfg); return nil })
	}
	conn, err := client.ConnectWithContext(ctx, m.Addr(), m.User, m.Password, db, 10*time.Second, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to mariadb %s as %s: %w", m.Addr(), m.User, err)
	}
	return conn, nil
}

// CreateDatabase creates a fresh schema and returns its name. It is dropped
// (best effort) at t.Cleanup.
func (m *MariaDB) CreateDatabase(t TB) string {
	t.Helper()
	name := "rtr_" + randomPassword()[:12]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := m.Connect(ctx, "")
	if err != nil {
		t.Fatalf("servers: create database: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Execute("CREATE DATABASE " + name); err != nil {
		t.Fatalf("servers: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := m.Connect(ctx, "")
		if err != nil {
			t.Logf("servers: drop database %s: %v", name, err)
			return
		}
		defer conn.Close()
		if _, err := conn.Execute("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Logf("servers: drop database %s: %v", name, err)
		}
	})
	return name
}

// myLayout names the files of a server launched in dir.
type myLayout struct {
	dir, data, log, pid, socket string
}

func newMyLayout(dir string) myLayout {
	l := myLayout{
		dir:    dir,
		data:   filepath.Join(dir, "data"),
		log:    filepath.Join(dir, "mariadbd.log"),
		pid:    filepath.Join(dir, "mariadbd.pid"),
		socket: filepath.Join(dir, "mariadbd.sock"),
	}
	if len(l.socket) >= 100 {
		// Unix socket paths are limited to 107 bytes; the setup needs a
		// socket (root logs in only through it), so use a short one.
		l.socket = filepath.Join(os.TempDir(), "rtr-my-"+randomPassword()[:10]+".sock")
	}
	return l
}

// LaunchMariaDB creates a data directory under dir (which must not hold one
// yet; it is created if missing) and starts MariaDB on a free loopback
// port. It returns once the user "rtr" can log in. stop shuts the server
// down (SIGTERM, a clean shutdown) and leaves dir in place. ctx bounds the
// start only. Restart restarts the server in place until stop is called.
func LaunchMariaDB(ctx context.Context, dir string, opts MariaDBOptions) (m *MariaDB, stop func() error, err error) {
	mariadbd, err := findBinary("mariadbd", MariaDBPackage, "/usr/sbin", "/usr/bin")
	if err != nil {
		return nil, nil, fmt.Errorf("launch mariadb: %w", err)
	}
	installDB, err := findBinary("mariadb-install-db", MariaDBPackage, "/usr/bin", "/usr/sbin")
	if err != nil {
		return nil, nil, fmt.Errorf("launch mariadb: %w", err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("launch mariadb: resolve dir: %w", err)
	}
	lay := newMyLayout(dir)
	if _, err := os.Stat(lay.data); err == nil {
		return nil, nil, fmt.Errorf("launch mariadb: %s already exists; stop that server and remove the directory first", lay.data)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("launch mariadb: create dir: %w", err)
	}

	ctx, cancel := withStartDeadline(ctx)
	defer cancel()

	// mariadbd runs as the current user; as root that takes --user=root.
	var userArgs []string
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"}
	}
	common := append([]string{"--no-defaults", "--datadir=" + lay.data}, userArgs...)
	common = append(common,
		// The server's own temporary directory: a shared /tmp under load
		// once made the bootstrap fail on its temporary-table files.
		"--tmpdir="+lay.dir,
		"--innodb-log-file-size=16M",
		"--innodb-buffer-pool-size=32M",
	)
	po := procOptions{detached: opts.Detached, dir: dir, logPath: lay.log, env: []string{"TZ=UTC"}}
	installArgs := append(append([]string{}, common...),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	if err := runTool(ctx, po, installDB, installArgs...); err != nil {
		return nil, nil, fmt.Errorf("launch mariadb: %w", err)
	}

	m = &MariaDB{Host: "127.0.0.1", User: "rtr", Password: randomPassword(), DataDir: lay.data}
	if opts.TLS != nil {
		m.SSLCA = opts.TLS.CA
	}
	var srv *server
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, nil, fmt.Errorf("launch mariadb: %w", err)
		}
		m.Port = port
		srv, err = startMariaDBOnce(ctx, po, mariadbd, lay, common, port, "", opts)
		if err == nil {
			break
		}
		if errors.Is(err, errPortTaken) && attempt < bindAttempts {
			continue
		}
		return nil, nil, fmt.Errorf("launch mariadb: %w", err)
	}
	inst := &myInstance{srv: srv, po: po, mariadbd: mariadbd, lay: lay, common: common, opts: opts, m: *m}
	if err := setupMariaDB(ctx, lay, m); err != nil {
		_ = inst.stop()
		return nil, nil, fmt.Errorf("launch mariadb: %w\nserver log:\n%s", err, readTail(lay.log, 20))
	}
	registerMy(inst)
	return m, inst.stop, nil
}

// mariadbArgs are the server options for tests, overridden by opts.
func mariadbArgs(lay myLayout, port int, opts MariaDBOptions) []string {
	s := map[string]string{
		"port":                           strconv.Itoa(port),
		"bind-address":                   "127.0.0.1",
		"socket":                         lay.socket,
		"pid-file":                       lay.pid,
		"log-error":                      lay.log,
		"server-id":                      "1",
		"binlog-format":                  "ROW",
		"binlog-row-image":               "FULL",
		"log-bin":                        "mysql-bin",
		"innodb-flush-log-at-trx-commit": "2",
		"innodb-doublewrite":             "0",
		"sync-binlog":                    "0",
		"skip-name-resolve":              "1",
		"tmpdir":                         lay.dir,
		"character-set-server":           "utf8mb4",
		"collation-server":               "utf8mb4_general_ci",
		"default-time-zone":              "+00:00",
	}
	if opts.BinlogFormat != "" {
		s["binlog-format"] = opts.BinlogFormat
	}
	if opts.BinlogRowImage != "" {
		s["binlog-row-image"] = opts.BinlogRowImage
	}
	if c := opts.TLS; c != nil {
		s["ssl-ca"], s["ssl-cert"], s["ssl-key"] = c.CA, c.ServerCert, c.ServerKey
		s["require-secure-transport"] = "ON"
	}
	if opts.NoLogBin {
		delete(s, "log-bin")
		s["skip-log-bin"] = "1"
	}
	for k, v := range opts.Settings {
		s[strings.ReplaceAll(k, "_", "-")] = v
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "skip-log-bin" || k == "skip-name-resolve" {
			args = append(args, "--"+k)
			continue
		}
		args = append(args, "--"+k+"="+s[k])
	}
	return args
}

// startMariaDBOnce starts mariadbd on port and waits until root can log in
// through the socket with rootPassword ("" before setupMariaDB sets it).
func startMariaDBOnce(ctx context.Context, po procOptions, mariadbd string, lay myLayout, common []string, port int, rootPassword string, opts MariaDBOptions) (*server, error) {
	logStart := fileSize(lay.log)
	args := append(append([]string{}, common...), mariadbArgs(lay, port, opts)...)
	srv, err := startServer(po, mariadbd, args...)
	if err != nil {
		return nil, err
	}
	err = pollUntil(ctx, srv, func(ctx context.Context) error {
		conn, err := client.ConnectWithContext(ctx, lay.socket, "root", rootPassword, "", 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		return conn.Ping()
	})
	if err == nil {
		return srv, nil
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = srv.stop(stopCtx, syscall.SIGKILL)
	log := readFrom(lay.log, logStart)
	if strings.Contains(log, "Address already in use") || strings.Contains(log, "Can't start server: Bind on TCP/IP port") {
		return nil, fmt.Errorf("port %d: %w", port, errPortTaken)
	}
	return nil, fmt.Errorf("wait for mariadb on port %d: %w\nserver log (%s):\n%s", port, err, lay.log, tail([]byte(log), 20))
}

// setupMariaDB creates the user rtr and locks root to the socket with the
// same password.
func setupMariaDB(ctx context.Context, lay myLayout, m *MariaDB) error {
	conn, err := client.ConnectWithContext(ctx, lay.socket, "root", "", "", 10*time.Second)
	if err != nil {
		return fmt.Errorf("connect as root: %w", err)
	}
	defer conn.Close()
	res, err := conn.Execute("SELECT host FROM mysql.user WHERE user = 'root' AND host <> 'localhost'")
	if err != nil {
		return fmt.Errorf("list root accounts: %w", err)
	}
	var stmts []string
	for i := range res.RowNumber() {
		host, err := res.GetString(i, 0)
		if err != nil {
			return fmt.Errorf("list root accounts: %w", err)
		}
		stmts = append(stmts, fmt.Sprintf("DROP USER 'root'@'%s'", strings.ReplaceAll(host, "'", "''")))
	}
	for _, host := range []string{"%", "127.0.0.1", "localhost"} {
		stmts = append(stmts,
			fmt.Sprintf("CREATE USER 'rtr'@'%s' IDENTIFIED BY '%s'", host, m.Password),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO 'rtr'@'%s' WITH GRANT OPTION", host))
	}
	stmts = append(stmts, fmt.Sprintf("ALTER USER 'root'@'localhost' IDENTIFIED BY '%s'", m.Password))
	for _, s := range stmts {
		if _, err := conn.Execute(s); err != nil {
			// The statement may hold the password; name only its verb.
			verb, _, _ := strings.Cut(s, " '")
			return fmt.Errorf("set up users (%s): %w", verb, err)
		}
	}
	// Check the account over TCP, the way tests will use it.
	check, err := m.Connect(ctx, "")
	if err != nil {
		return err
	}
	return check.Close()
}

// StopMariaDBDir stops a server launched by LaunchMariaDB in dir, from any
// process: SIGTERM to the pid in its pid file, then waiting for the exit.
// A server that is not running is not an error. The directory is left in
// place.
func StopMariaDBDir(ctx context.Context, dir string) error {
	lay := newMyLayout(dir)
	pid := readPid(lay.pid)
	if pid <= 0 || !pidAlive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop mariadb: signal pid %d: %w", pid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if err := waitPidGone(ctx, pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return fmt.Errorf("stop mariadb: %w (sent SIGKILL)", err)
	}
	return nil
}
