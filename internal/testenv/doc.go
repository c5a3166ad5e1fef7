// Package testenv gives rtrctl's integration tests the real servers they
// run against: PostgreSQL 15, MariaDB 10.11 and an in-process Kafka cluster
// (franz-go's kfake). Tests never talk to mocks of these three.
//
// The servers themselves (how they are configured, launched, restarted and
// stopped) live in package servers, which does not import "testing"; this
// package is the layer for tests on top of it. Its types are aliases of the
// servers ones (testenv.Postgres is servers.Postgres), so either name works.
//
// A missing binary fails the test (never skips it) with an error naming the
// Debian package and scripts/install-deps.sh.
//
// # API
//
//	type Postgres = servers.Postgres // DSN, KeyValueDSN, ReplicationDSN, Connect, CreateDatabase(t), Restart
//	type MariaDB = servers.MariaDB   // DSN, URL, Addr, Connect, CreateDatabase(t), Restart
//	type Kafka = servers.Kafka
//	type Proxy = servers.Proxy
//	type S3Server = servers.S3Server // Endpoint, AccessKey, SecretKey, Env()
//
//	func SharedPostgres(t testing.TB) *Postgres // one per test binary, or RTR_TEST_PG_DSN
//	func SharedMariaDB(t testing.TB) *MariaDB   // one per test binary, or RTR_TEST_MYSQL_DSN
//	func SharedKafka(t testing.TB) *Kafka       // one per test binary, or RTR_TEST_KAFKA_BROKERS
//	func StartPostgres(t testing.TB, opts PostgresOptions) *Postgres // dedicated, stopped at t.Cleanup
//	func StartMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB
//	func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka
//	func StartProxy(t testing.TB, target string) *Proxy
//	func StartRegistry(t testing.TB, opts RegistryOptions) *Registry // Confluent-compatible schema registry (Avro), registry.go
//	func (r *Registry) Serde(t, subject, schema string) *AvroSerde  // register + sr.Serde/hamba producer
//	func StartVersityGW(t testing.TB, buckets ...string) *S3Server // versitygw (S3 over a directory), stopped at t.Cleanup
//	func Main(m *testing.M)                     // TestMain: run tests, then stop shared servers
//	func StopShared() error                     // what Main does after m.Run
//	type LogBuffer                             // a log sink safe for goroutines, polled with String
//
// LaunchPostgres, LaunchMariaDB, LaunchKafka, StopPostgresDir,
// StopMariaDBDir, NewProxy, ParsePostgresDSN and ParseMySQLDSN are the
// servers functions, re-exported.
//
// A dedicated server (StartPostgres, StartMariaDB) can be restarted in
// place for restart-survival tests:
//
//	pg := testenv.StartPostgres(t, testenv.PostgresOptions{})
//	err := pg.Restart(ctx, testenv.RestartOptions{Mode: "immediate", Down: time.Second})
//
// Restart on a shared server returns an error.
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
// changes server settings or restarts the server.
package testenv
