package testenv

import (
	"context"
	"os"
	"testing"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The server types are those of package servers.
type (
	Postgres           = servers.Postgres
	PostgresOptions    = servers.PostgresOptions
	MariaDB            = servers.MariaDB
	MariaDBOptions     = servers.MariaDBOptions
	Kafka              = servers.Kafka
	Proxy              = servers.Proxy
	S3Server           = servers.S3Server
	Direction          = servers.Direction
	RestartOptions     = servers.RestartOptions
	MissingBinaryError = servers.MissingBinaryError
)

// The two directions of a proxied connection.
const (
	ToTarget = servers.ToTarget
	ToClient = servers.ToClient
)

// Environment variables that name external servers for the Shared*
// functions.
const (
	EnvPostgresDSN  = servers.EnvPostgresDSN
	EnvMySQLDSN     = servers.EnvMySQLDSN
	EnvKafkaBrokers = servers.EnvKafkaBrokers
)

// Debian packages and locations of the server binaries.
const (
	PostgresPackage       = servers.PostgresPackage
	DefaultPostgresBinDir = servers.DefaultPostgresBinDir
	MariaDBPackage        = servers.MariaDBPackage
)

// LaunchPostgres is servers.LaunchPostgres.
func LaunchPostgres(ctx context.Context, dir string, opts PostgresOptions) (*Postgres, func() error, error) {
	return servers.LaunchPostgres(ctx, dir, opts)
}

// LaunchMariaDB is servers.LaunchMariaDB.
func LaunchMariaDB(ctx context.Context, dir string, opts MariaDBOptions) (*MariaDB, func() error, error) {
	return servers.LaunchMariaDB(ctx, dir, opts)
}

// LaunchKafka is servers.LaunchKafka.
func LaunchKafka(opts ...kfake.Opt) (*Kafka, error) { return servers.LaunchKafka(opts...) }

// StopPostgresDir is servers.StopPostgresDir.
func StopPostgresDir(ctx context.Context, dir string) error { return servers.StopPostgresDir(ctx, dir) }

// StopMariaDBDir is servers.StopMariaDBDir.
func StopMariaDBDir(ctx context.Context, dir string) error { return servers.StopMariaDBDir(ctx, dir) }

// NewProxy is servers.NewProxy: StartProxy without a test, the caller
// closes it.
func NewProxy(target string) (*Proxy, error) { return servers.NewProxy(target) }

// ParsePostgresDSN is servers.ParsePostgresDSN.
func ParsePostgresDSN(dsn string) (*Postgres, error) { return servers.ParsePostgresDSN(dsn) }

// ParseMySQLDSN is servers.ParseMySQLDSN.
func ParseMySQLDSN(dsn string) (*MariaDB, error) { return servers.ParseMySQLDSN(dsn) }

// StartPostgres starts a dedicated PostgreSQL server in a temporary
// directory; it is stopped and the directory removed at t.Cleanup. It can
// be restarted in place with Restart.
func StartPostgres(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	opts.Detached, opts.Shared = false, false
	servers.SweepStale()
	dir, err := os.MkdirTemp("", servers.PrefixPostgres)
	if err != nil {
		t.Fatalf("testenv: start postgres: %v", err)
	}
	pg, stop, err := servers.LaunchPostgres(t.Context(), dir, opts)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testenv: start postgres: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("testenv: stop postgres: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("testenv: remove postgres dir: %v", err)
		}
	})
	return pg
}

// StartMariaDB starts a dedicated MariaDB server in a temporary directory;
// it is stopped and the directory removed at t.Cleanup. It can be
// restarted in place with Restart.
func StartMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	opts.Detached, opts.Shared = false, false
	servers.SweepStale()
	dir, err := os.MkdirTemp("", servers.PrefixMariaDB)
	if err != nil {
		t.Fatalf("testenv: start mariadb: %v", err)
	}
	m, stop, err := servers.LaunchMariaDB(t.Context(), dir, opts)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testenv: start mariadb: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("testenv: stop mariadb: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("testenv: remove mariadb dir: %v", err)
		}
	})
	return m
}

// StartKafka starts a dedicated in-process kfake cluster with one broker
// (opts may override it, e.g. kfake.NumBrokers(3)); it is closed at
// t.Cleanup.
func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	k, err := servers.LaunchKafka(opts...)
	if err != nil {
		t.Fatalf("testenv: start kafka: %v", err)
	}
	t.Cleanup(k.Cluster.Close)
	return k
}

// StartVersityGW starts versitygw (a real S3 gateway over a POSIX
// directory of the test's) on a loopback port with the given buckets; it
// is stopped at t.Cleanup. A missing binary fails the test naming the go
// install command.
func StartVersityGW(t testing.TB, buckets ...string) *S3Server {
	t.Helper()
	s, stop, err := servers.LaunchVersityGW(t.Context(), t.TempDir(), buckets...)
	if err != nil {
		t.Fatalf("testenv: start versitygw: %v", err)
	}
	t.Cleanup(func() { stop() })
	return s
}

// StartProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target (host:port). It is closed at t.Cleanup.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := servers.NewProxy(target)
	if err != nil {
		t.Fatalf("testenv: start proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}
