// Package testenv starts the real servers that rtrctl's integration tests
// run against: PostgreSQL 15, MariaDB 10.11 and an in-process Kafka cluster
// (franz-go's kfake). Tests never talk to mocks of these three.
//
// # Servers
//
// Every server listens on a free port of 127.0.0.1 and keeps its files in a
// temporary directory that is removed when it stops.
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
//   - Kafka: a kfake cluster in the test process, one broker by default.
//
// A missing binary fails the test (never skips it) with an error naming the
// Debian package and scripts/install-deps.sh.
//
// # API
//
//	type Postgres struct{ Host string; Port int; User, Password, Database, DataDir string }
//	func (p *Postgres) DSN() string                        // postgres://user:pass@127.0.0.1:port/db?sslmode=disable
//	func (p *Postgres) KeyValueDSN() string                // host=... port=... user=... password=... dbname=... sslmode=disable
//	func (p *Postgres) ReplicationDSN() string             // DSN() plus replication=database
//	func (p *Postgres) CreateDatabase(t testing.TB) string // a fresh database's URL DSN, dropped at cleanup
//	type MariaDB struct{ Host string; Port int; User, Password, DataDir string }
//	func (m *MariaDB) DSN() string                         // user:pass@tcp(127.0.0.1:port)/
//	func (m *MariaDB) URL() string                         // mysql://user:pass@127.0.0.1:port/
//	func (m *MariaDB) Addr() string                        // 127.0.0.1:port
//	func (m *MariaDB) CreateDatabase(t testing.TB) string  // a fresh schema's name, dropped at cleanup
//	type Kafka struct{ Brokers []string; Cluster *kfake.Cluster }
//
//	func SharedPostgres(t testing.TB) *Postgres // one per test binary, or RTR_TEST_PG_DSN
//	func SharedMariaDB(t testing.TB) *MariaDB   // one per test binary, or RTR_TEST_MYSQL_DSN
//	func SharedKafka(t testing.TB) *Kafka       // one per test binary, or RTR_TEST_KAFKA_BROKERS
//	func StartPostgres(t testing.TB, opts PostgresOptions) *Postgres // dedicated, stopped at t.Cleanup
//	func StartMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB
//	func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka
//	func LaunchPostgres(ctx context.Context, dir string, opts PostgresOptions) (*Postgres, func() error, error)
//	func LaunchMariaDB(ctx context.Context, dir string, opts MariaDBOptions) (*MariaDB, func() error, error)
//	func StopPostgresDir(ctx context.Context, dir string) error // stops a detached server launched in dir
//	func StopMariaDBDir(ctx context.Context, dir string) error
//	func LaunchKafka(opts ...kfake.Opt) (*Kafka, error)
//	func Main(m *testing.M)                     // TestMain: run tests, then stop shared servers
//	func StopShared() error                     // what Main does after m.Run
//
// Helpers: (*Postgres).Connect (pgx), (*MariaDB).Connect (go-mysql client),
// ParsePostgresDSN, ParseMySQLDSN, and String methods that mask passwords.
// A missing binary is a *MissingBinaryError.
//
// # Shared servers and the environment
//
// SharedPostgres, SharedMariaDB and SharedKafka start one server per test
// binary the first time they are called, unless an environment variable
// names an existing one:
//
//	RTR_TEST_PG_DSN         postgres://user:pass@host:port/db?sslmode=disable (or key=value form)
//	RTR_TEST_MYSQL_DSN      user:pass@tcp(host:port)/  (go-sql-driver form)
//	RTR_TEST_KAFKA_BROKERS  host:port[,host:port...]
//
// `go run ./internal/testenv/cmd/rtr-services up DIR` starts a detached
// PostgreSQL and MariaDB and writes DIR/env with the first two variables, so
// that many test binaries share two servers; `... down DIR` stops them.
//
// Shared servers are stopped by Main, which a package's TestMain calls:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Server processes started for tests get SIGKILL when the test process dies
// (Pdeathsig), so a crashed or killed test binary leaves no server running,
// only its temporary directory; the next test binary that starts a server
// removes such directories (and a killed PostgreSQL's shared memory) once
// their pid file is four minutes old.
//
// Tests should treat shared servers as shared: use CreateDatabase for a
// private database, and a dedicated server (Start*) for anything that
// changes server settings.
package testenv
