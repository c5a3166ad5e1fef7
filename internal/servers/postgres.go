package servers

import (
	"context"
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
	"unsafe"

	"github.com/jackc/pgx/v5"
)

// PostgresPackage is the Debian package that ships the server binaries.
const PostgresPackage = "postgresql-15"

// DefaultPostgresBinDir is where Debian installs the PostgreSQL 15 server.
const DefaultPostgresBinDir = "/usr/lib/postgresql/15/bin"

// postgresUser is the unprivileged account the server runs as under root.
const postgresUser = "postgres"

// Postgres describes a reachable PostgreSQL server and a superuser on it.
type Postgres struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
	// DataDir is the server's data directory, "" for an external server.
	DataDir string
	// SSLRootCert, SSLCert and SSLKey, when SSLRootCert is set, make the
	// DSNs connect with sslmode=verify-full trusting that CA, with that
	// client certificate (a server launched with PostgresOptions.TLS).
	SSLRootCert, SSLCert, SSLKey string
}

// PostgresOptions configure a server started by StartPostgres or
// LaunchPostgres.
type PostgresOptions struct {
	// WalLevel is the wal_level setting; "" means "logical".
	WalLevel string
	// Settings are extra postgresql.conf settings, applied last (they win
	// over the defaults), e.g. {"synchronous_commit": "off"}.
	Settings map[string]string
	// Detached servers run in their own session without a parent-death
	// signal, so they outlive the launching process (rtr-services up).
	Detached bool
	// Shared marks a server that many tests use (testenv.SharedPostgres):
	// Restart refuses it.
	Shared bool
	// TLS, when set, turns ssl on with these certificates and makes
	// pg_hba.conf accept TCP connections only over TLS with a client
	// certificate for the user (clientcert=verify-full) and a password.
	TLS *Certs
}

// DSN returns the URL form:
// postgres://user:pass@127.0.0.1:port/db?sslmode=disable.
func (p *Postgres) DSN() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(p.User, p.Password),
		Host:     net.JoinHostPort(p.Host, strconv.Itoa(p.Port)),
		Path:     "/" + p.Database,
		RawQuery: "sslmode=disable",
	}
	if p.SSLRootCert != "" {
		q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {p.SSLRootCert}}
		if p.SSLCert != "" {
			q.Set("sslcert", p.SSLCert)
			q.Set("sslkey", p.SSLKey)
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// ReplicationDSN is DSN with replication=database, for a logical
// replication connection (pglogrepl).
func (p *Postgres) ReplicationDSN() string {
	return p.DSN() + "&replication=database"
}

// KeyValueDSN returns the libpq key=value form:
// host=127.0.0.1 port=... user=... password=... dbname=... sslmode=disable.
func (p *Postgres) KeyValueDSN() string {
	ssl := "sslmode=disable"
	if p.SSLRootCert != "" {
		ssl = "sslmode=verify-full sslrootcert=" + kvQuote(p.SSLRootCert)
		if p.SSLCert != "" {
			ssl += " sslcert=" + kvQuote(p.SSLCert) + " sslkey=" + kvQuote(p.SSLKey)
		}
	}
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s %s",
		kvQuote(p.Host), p.Port, kvQuote(p.User), kvQuote(p.Password), kvQuote(p.Database), ssl)
}

// String is the DSN with the password masked, safe for logs.
func (p *Postgres) String() string {
	q := *p
	q.Password = "xxxxx"
	return q.DSN()
}

// kvQuote quotes a libpq key=value value when it needs it.
func kvQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " '\\\t\n") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

// Connect opens a pgx connection to the server's database.
func (p *Postgres) Connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, p.KeyValueDSN())
	if err != nil {
		return nil, fmt.Errorf("connect to postgres %s:%d as %s: %w", p.Host, p.Port, p.User, err)
	}
	return conn, nil
}

// CreateDatabase creates a fresh database and returns its URL DSN. The
// database is dropped (best effort, WITH (FORCE)) at t.Cleanup.
func (p *Postgres) CreateDatabase(t TB) string {
	t.Helper()
	name := "rtr_" + randomPassword()[:12]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := p.Connect(ctx)
	if err != nil {
		t.Fatalf("servers: create database: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("servers: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := p.Connect(ctx)
		if err != nil {
			t.Logf("servers: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("servers: drop database %s: %v", name, err)
		}
	})
	q := *p
	q.Database = name
	return q.DSN()
}

// pgLayout names the files of a server launched in dir.
type pgLayout struct {
	dir, data, log, socketDir string
}

func newPGLayout(dir string) pgLayout {
	l := pgLayout{
		dir:  dir,
		data: filepath.Join(dir, "data"),
		log:  filepath.Join(dir, "postgres.log"),
	}
	// A Unix socket path is limited to 107 bytes; without a short enough
	// directory the server listens on TCP only.
	if len(filepath.Join(dir, ".s.PGSQL.65535.lock")) < 100 {
		l.socketDir = dir
	}
	return l
}

// LaunchPostgres initializes a data directory under dir (which must not
// hold one yet; it is created if missing) and starts PostgreSQL on a free
// loopback port. It returns once the server accepts connections and the
// database "rtr" exists. stop shuts the server down (fast mode) and leaves
// dir in place. ctx bounds the start only. Restart restarts the server in
// place until stop is called.
func LaunchPostgres(ctx context.Context, dir string, opts PostgresOptions) (pg *Postgres, stop func() error, err error) {
	initdb, err := findBinary("initdb", PostgresPackage, postgresBinDir())
	if err != nil {
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}
	postgres, err := findBinary("postgres", PostgresPackage, filepath.Dir(initdb))
	if err != nil {
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}
	ra, err := lookupRunAs(postgresUser, PostgresPackage)
	if err != nil {
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("launch postgres: resolve dir: %w", err)
	}
	lay := newPGLayout(dir)
	if _, err := os.Stat(lay.data); err == nil {
		return nil, nil, fmt.Errorf("launch postgres: %s already exists; stop that server and remove the directory first", lay.data)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("launch postgres: create dir: %w", err)
	}
	if err := checkTraversable(dir, ra); err != nil {
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}
	if err := chownTree(dir, ra); err != nil {
		return nil, nil, fmt.Errorf("launch postgres: chown %s: %w", dir, err)
	}

	ctx, cancel := withStartDeadline(ctx)
	defer cancel()

	pg = &Postgres{Host: "127.0.0.1", User: "rtr", Password: randomPassword(), Database: "rtr", DataDir: lay.data}
	if c := opts.TLS; c != nil {
		pg.SSLRootCert, pg.SSLCert, pg.SSLKey = c.CA, c.ClientCert, c.ClientKey
	}
	po := procOptions{detached: opts.Detached, runAs: ra, dir: dir, logPath: lay.log, env: []string{"LC_ALL=C", "TZ=UTC"}}
	if err := initPostgres(ctx, po, initdb, lay, pg.Password, opts); err != nil {
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}

	var srv *server
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, nil, fmt.Errorf("launch postgres: %w", err)
		}
		pg.Port = port
		srv, err = startPostgresOnce(ctx, po, postgres, lay, pg)
		if err == nil {
			break
		}
		if errors.Is(err, errPortTaken) && attempt < bindAttempts {
			continue
		}
		return nil, nil, fmt.Errorf("launch postgres: %w", err)
	}
	inst := &pgInstance{srv: srv, po: po, postgres: postgres, lay: lay, pg: *pg, shared: opts.Shared}
	if err := createPGDatabase(ctx, pg); err != nil {
		_ = inst.stop()
		return nil, nil, fmt.Errorf("launch postgres: %w\nserver log:\n%s", err, readTail(lay.log, 20))
	}
	registerPG(inst)
	return pg, inst.stop, nil
}

// postgresBinDir is RTR_PG_BINDIR or the Debian location.
func postgresBinDir() string {
	if d := os.Getenv("RTR_PG_BINDIR"); d != "" {
		return d
	}
	return DefaultPostgresBinDir
}

// initPostgres runs initdb and writes the configuration.
func initPostgres(ctx context.Context, po procOptions, initdb string, lay pgLayout, password string, opts PostgresOptions) error {
	pwfile := filepath.Join(lay.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return fmt.Errorf("write password file: %w", err)
	}
	defer os.Remove(pwfile)
	if err := chownTree(pwfile, po.runAs); err != nil {
		return fmt.Errorf("chown password file: %w", err)
	}
	err := runTool(ctx, po, initdb,
		"-D", lay.data, "-U", "rtr", "--pwfile="+pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	hba := "# written by rtrctl internal/servers\n" +
		"local all         all                trust\n" +
		"local replication all                trust\n" +
		"host  all         all  127.0.0.1/32  scram-sha-256\n" +
		"host  replication all  127.0.0.1/32  scram-sha-256\n"
	if opts.TLS != nil {
		hba = "# written by rtrctl internal/servers (TLS only, client certificates)\n" +
			"local   all         all                trust\n" +
			"local   replication all                trust\n" +
			"hostssl all         all  127.0.0.1/32  scram-sha-256 clientcert=verify-full\n" +
			"hostssl replication all  127.0.0.1/32  scram-sha-256 clientcert=verify-full\n"
		if err := installPGCerts(po, lay, opts.TLS); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(lay.data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return fmt.Errorf("write pg_hba.conf: %w", err)
	}
	settings := postgresSettings(lay, opts)
	var b strings.Builder
	b.WriteString("\n# written by rtrctl internal/servers\n")
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, confQuote(settings[k]))
	}
	b.WriteString("include_if_exists = 'rtr_port.conf'\n")
	f, err := os.OpenFile(filepath.Join(lay.data, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return nil
}

// installPGCerts copies the server certificate, its key and the CA into
// the data directory, owned by the server's user (PostgreSQL refuses a
// key others can read).
func installPGCerts(po procOptions, lay pgLayout, c *Certs) error {
	for _, f := range [][2]string{{c.ServerCert, "server.crt"}, {c.ServerKey, "server.key"}, {c.CA, "root.crt"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			return fmt.Errorf("install TLS certificates: %w", err)
		}
		dst := filepath.Join(lay.data, f[1])
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return fmt.Errorf("install TLS certificates: %w", err)
		}
		if err := chownTree(dst, po.runAs); err != nil {
			return fmt.Errorf("install TLS certificates: chown %s: %w", dst, err)
		}
	}
	return nil
}

// postgresSettings are the defaults for tests, overridden by opts.
func postgresSettings(lay pgLayout, opts PostgresOptions) map[string]string {
	s := map[string]string{
		"listen_addresses":           "127.0.0.1",
		"unix_socket_directories":    lay.socketDir,
		"wal_level":                  "logical",
		"max_replication_slots":      "20",
		"max_wal_senders":            "20",
		"max_connections":            "100",
		"fsync":                      "off",
		"full_page_writes":           "off",
		"shared_buffers":             "32MB",
		"dynamic_shared_memory_type": "posix",
		"log_min_messages":           "warning",
		"log_line_prefix":            "%m [%p] ",
		"timezone":                   "UTC",
	}
	if opts.WalLevel != "" {
		s["wal_level"] = opts.WalLevel
	}
	if opts.TLS != nil {
		s["ssl"] = "on"
		s["ssl_cert_file"] = filepath.Join(lay.data, "server.crt")
		s["ssl_key_file"] = filepath.Join(lay.data, "server.key")
		s["ssl_ca_file"] = filepath.Join(lay.data, "root.crt")
	}
	for k, v := range opts.Settings {
		s[k] = v
	}
	return s
}

// confQuote quotes a postgresql.conf value.
func confQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

var errPortTaken = errors.New("port already in use")

// startPostgresOnce starts the server on pg.Port and waits until it
// accepts connections.
func startPostgresOnce(ctx context.Context, po procOptions, postgres string, lay pgLayout, pg *Postgres) (*server, error) {
	portConf := fmt.Sprintf("port = %d\n", pg.Port)
	portFile := filepath.Join(lay.data, "rtr_port.conf")
	if err := os.WriteFile(portFile, []byte(portConf), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", portFile, err)
	}
	if err := chownTree(portFile, po.runAs); err != nil {
		return nil, fmt.Errorf("chown %s: %w", portFile, err)
	}
	logStart := fileSize(lay.log)
	srv, err := startServer(po, postgres, "-D", lay.data)
	if err != nil {
		return nil, err
	}
	probe := *pg
	probe.Database = "postgres"
	err = pollUntil(ctx, srv, func(ctx context.Context) error {
		conn, err := probe.Connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	})
	if err == nil {
		return srv, nil
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = srv.stop(stopCtx, syscall.SIGQUIT)
	log := readFrom(lay.log, logStart)
	if strings.Contains(log, "Address already in use") {
		return nil, fmt.Errorf("port %d: %w", pg.Port, errPortTaken)
	}
	return nil, fmt.Errorf("wait for postgres on port %d: %w\nserver log (%s):\n%s", pg.Port, err, lay.log, tail([]byte(log), 20))
}

func createPGDatabase(ctx context.Context, pg *Postgres) error {
	admin := *pg
	admin.Database = "postgres"
	conn, err := admin.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{pg.Database}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", pg.Database, err)
	}
	return nil
}

// StopPostgresDir stops a server launched by LaunchPostgres in dir, from any
// process (pg_ctl stop -m fast). A server that is not running is not an
// error. The directory is left in place.
func StopPostgresDir(ctx context.Context, dir string) error {
	lay := newPGLayout(dir)
	if _, err := os.Stat(filepath.Join(lay.data, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	pgctl, err := findBinary("pg_ctl", PostgresPackage, postgresBinDir())
	if err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	ra, err := lookupRunAs(postgresUser, PostgresPackage)
	if err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	pidFile := filepath.Join(lay.data, "postmaster.pid")
	if pid := readPid(pidFile); pid > 0 && !pidAlive(pid) {
		// The server died without a shutdown (SIGKILL, parent death):
		// pg_ctl would refuse the stale pid file. Free its shared memory,
		// waiting at most a few seconds for its children to detach.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return removeStaleShm(ctx, pidFile)
	}
	po := procOptions{runAs: ra, dir: lay.dir}
	if err := runTool(ctx, po, pgctl, "stop", "-D", lay.data, "-m", "fast", "-w", "-t", "60"); err != nil {
		if _, statErr := os.Stat(pidFile); errors.Is(statErr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// removeStaleShm removes the System V shared memory segment named in the
// postmaster.pid of a server that was killed (a clean shutdown removes it
// itself). Line 7 of the file is "key shmid". Only a segment created by the
// dead postmaster (its cpid) is touched: an id reused by someone else is
// left alone. The postmaster's children notice its death and detach on
// their own a moment later, so the segment is marked for removal at once
// (the kernel frees it when the last of them detaches) and, with a
// deadline in ctx, removeStaleShm waits until it is gone.
func removeStaleShm(ctx context.Context, pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return nil
	}
	fields := strings.Fields(lines[6])
	if len(fields) != 2 {
		return nil
	}
	shmid, err := strconv.Atoi(fields[1])
	if err != nil || shmid < 0 {
		return nil
	}
	var ds shmidDS
	if shmStat(shmid, &ds) != nil {
		return nil // already gone
	}
	if int(ds.cpid) != pid {
		return nil // the id now belongs to another segment
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(shmid), ipcRmid, 0); errno != 0 {
		return fmt.Errorf("remove shared memory segment %d of dead postgres: %w", shmid, errno)
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	for shmStat(shmid, &ds) == nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove shared memory segment %d of dead postgres: still attached by %d processes: %w", shmid, ds.nattch, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// shmStat is shmctl(IPC_STAT); an error means the segment does not exist
// (or is not ours to see).
func shmStat(shmid int, ds *shmidDS) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(shmid), ipcStat, uintptr(unsafe.Pointer(ds))); errno != 0 {
		return errno
	}
	return nil
}

const (
	ipcRmid = 0
	ipcStat = 2
)

// shmidDS is struct shmid_ds of Linux on 64-bit platforms.
type shmidDS struct {
	perm   [48]byte // struct ipc_perm
	segsz  uint64
	atime  int64
	dtime  int64
	ctime  int64
	cpid   int32
	lpid   int32
	nattch uint64
	unused [2]uint64
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the file's contents from offset on (at most 64 KiB).
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if size := fileSize(path); size-offset > 64<<10 {
		offset = size - 64<<10
	}
	b := make([]byte, 64<<10)
	n, _ := f.ReadAt(b, offset)
	return string(b[:n])
}

// readPid reads the first line of a pid file; 0 when unreadable.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}
