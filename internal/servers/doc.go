// Package servers launches the real servers that rtrctl runs against in
// tests and benchmarks: PostgreSQL 15, MariaDB 10.11 and an in-process
// Kafka cluster (franz-go's kfake). It does not import "testing": rtrctl
// bench starts a throwaway PostgreSQL with it, and the shipped binary must
// not link the test framework. Package testenv is the layer for tests on
// top of it (Start*, Shared*, Main).
//
// # Servers
//
// Every server listens on a free port of 127.0.0.1 and keeps its files in a
// directory given by the caller (testenv uses a temporary directory that is
// removed when the server stops).
//
//   - PostgreSQL (Debian postgresql-15, binaries in /usr/lib/postgresql/15/bin,
//     or the directory named by RTR_PG_BINDIR): initdb with superuser "rtr"
//     and a random password, scram-sha-256 on 127.0.0.1 (host and
//     replication), trust on the Unix socket, wal_level=logical,
//     max_replication_slots=20, max_wal_senders=20, fsync=off. A database
//     "rtr" is created. When the process runs as root the server runs as the
//     unprivileged user "postgres" (initdb and postgres refuse root).
//   - MariaDB (Debian mariadb-server: mariadbd, mariadb-install-db): a fresh
//     data directory, binary log on with binlog_format=ROW and
//     binlog_row_image=FULL, server_id=1, user "rtr"@"%" (and @127.0.0.1,
//     @localhost) with a random password and ALL PRIVILEGES (which include
//     REPLICATION SLAVE, REPLICATION CLIENT and BINLOG MONITOR). Root can only
//     log in through the Unix socket, with the same password.
//   - Kafka: a kfake cluster in the calling process, one broker by default.
//
// A missing binary is a *MissingBinaryError naming the Debian package and
// scripts/install-deps.sh.
//
// # API
//
//	type Postgres struct{ Host string; Port int; User, Password, Database, DataDir string }
//	func (p *Postgres) DSN() string                 // postgres://user:pass@127.0.0.1:port/db?sslmode=disable
//	func (p *Postgres) KeyValueDSN() string         // host=... port=... user=... password=... dbname=... sslmode=disable
//	func (p *Postgres) ReplicationDSN() string      // DSN() plus replication=database
//	func (p *Postgres) Connect(ctx) (*pgx.Conn, error)
//	func (p *Postgres) CreateDatabase(t TB) string  // a fresh database's URL DSN, dropped at cleanup
//	func (p *Postgres) Restart(ctx, RestartOptions) error
//	type MariaDB struct{ Host string; Port int; User, Password, DataDir string }
//	func (m *MariaDB) DSN() string                  // user:pass@tcp(127.0.0.1:port)/
//	func (m *MariaDB) URL() string                  // mysql://user:pass@127.0.0.1:port/
//	func (m *MariaDB) Addr() string                 // 127.0.0.1:port
//	func (m *MariaDB) Connect(ctx, db string) (*client.Conn, error)
//	func (m *MariaDB) CreateDatabase(t TB) string   // a fresh schema's name, dropped at cleanup
//	func (m *MariaDB) Restart(ctx, RestartOptions) error
//	type Kafka struct{ Brokers []string; Cluster *kfake.Cluster; Security upstream.KafkaSecurity }
//	func (k *Kafka) Upstream() upstream.Kafka      // the cluster as the stages take it (TLS, SASL)
//	type Certs struct{ Dir, CA, OtherCA, ServerCert, ServerKey, ClientCert, ClientKey string }
//	func GenerateCerts(dir string) (*Certs, error) // test CA, server cert (127.0.0.1, localhost), client cert (CN rtr), unrelated CA
//
//	func LaunchPostgres(ctx context.Context, dir string, opts PostgresOptions) (*Postgres, func() error, error)
//	func LaunchMariaDB(ctx context.Context, dir string, opts MariaDBOptions) (*MariaDB, func() error, error)
//	func LaunchKafka(opts ...kfake.Opt) (*Kafka, error)
//	func LaunchSecureKafka(c *Certs, mechanism, user, pass string, opts ...kfake.Opt) (*Kafka, error) // TLS, SASL when mechanism is set
//	func StopPostgresDir(ctx context.Context, dir string) error // stops a detached server launched in dir
//	func StopMariaDBDir(ctx context.Context, dir string) error
//	func NewProxy(target string) (*Proxy, error)                // TCP proxy for fault injection
//	func ParsePostgresDSN(dsn string) (*Postgres, error)
//	func ParseMySQLDSN(dsn string) (*MariaDB, error)
//	func SweepStale()                                          // remove dead servers' temporary directories
//
// TLS servers: PostgresOptions.TLS (ssl=on, pg_hba.conf hostssl with
// clientcert=verify-full; the Postgres DSNs then use sslmode=verify-full
// with the client certificate) and MariaDBOptions.TLS (ssl-ca, ssl-cert,
// ssl-key, require_secure_transport=ON; Connect then uses TLS) take the
// Certs of GenerateCerts. Only the tests that need them start such
// servers; the shared ones stay plaintext.
//
// String methods mask passwords. TB is the part of testing.TB that
// CreateDatabase needs.
//
// # Processes
//
// A server launched without Detached runs in its own process group and
// gets SIGKILL when the launching process dies (Pdeathsig), so a crashed or
// killed test binary leaves no server running, only its directory.
// SweepStale removes such directories under os.TempDir (named with
// PrefixPostgres, PrefixMariaDB or PrefixMariaDBShared), and a killed
// PostgreSQL's shared memory, once their pid file is four minutes old.
// Detached servers run in their own session and outlive the launcher;
// StopPostgresDir and StopMariaDBDir stop them from any process.
//
// # Restarts
//
// Restart takes a server launched by this process down (PostgreSQL: fast,
// immediate or smart; MariaDB: clean, or kill for a crash) and starts it
// again on the same data directory and port, so that clients reconnect with
// the same DSN; the stop function from Launch* then stops the new process.
// Restart refuses a shared server (PostgresOptions.Shared,
// MariaDBOptions.Shared) and one it did not launch (e.g. named by an
// environment variable). Committed data survives every mode: with fsync=off
// (PostgreSQL) and innodb_flush_log_at_trx_commit=2 (MariaDB) the log is
// written to the operating system at commit, and only a machine crash would
// lose it.
package servers
