package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rtrctl/rtrctl/internal/servers"
)

// shared holds one lazily started server and how to stop it.
type shared[T any] struct {
	mu   sync.Mutex
	done bool
	val  T
	err  error
	stop func() error
}

// get starts the server on first use; a failed start is remembered, so
// every later test fails at once with the same error.
func (s *shared[T]) get(start func() (T, func() error, error)) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.val, s.stop, s.err = start()
		s.done = true
	}
	return s.val, s.err
}

// close stops a started server; the next get starts a new one.
func (s *shared[T]) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.stop != nil {
		err = s.stop()
	}
	var zero T
	s.val, s.stop, s.err, s.done = zero, nil, nil, false
	return err
}

var (
	sharedPG    shared[*Postgres]
	sharedMy    shared[*MariaDB]
	sharedKafka shared[*Kafka]
)

// SharedPostgres returns the server named by RTR_TEST_PG_DSN, or else one
// PostgreSQL server (default options) started for the whole test binary
// and stopped by Main.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	pg, err := sharedPG.get(func() (*Postgres, func() error, error) {
		if dsn := os.Getenv(EnvPostgresDSN); dsn != "" {
			pg, err := servers.ParsePostgresDSN(dsn)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", EnvPostgresDSN, err)
			}
			return pg, nil, nil
		}
		servers.SweepStale()
		dir, err := os.MkdirTemp("", servers.PrefixPostgres+"shared-")
		if err != nil {
			return nil, nil, fmt.Errorf("start shared postgres: %w", err)
		}
		pg, stop, err := servers.LaunchPostgres(context.Background(), dir, PostgresOptions{Shared: true})
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, fmt.Errorf("start shared postgres: %w", err)
		}
		return pg, stopAndRemove(stop, dir), nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return pg
}

// SharedMariaDB returns the server named by RTR_TEST_MYSQL_DSN, or else one
// MariaDB server (default options) started for the whole test binary and
// stopped by Main.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	m, err := sharedMy.get(func() (*MariaDB, func() error, error) {
		if dsn := os.Getenv(EnvMySQLDSN); dsn != "" {
			m, err := servers.ParseMySQLDSN(dsn)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", EnvMySQLDSN, err)
			}
			return m, nil, nil
		}
		servers.SweepStale()
		dir, err := os.MkdirTemp("", servers.PrefixMariaDBShared)
		if err != nil {
			return nil, nil, fmt.Errorf("start shared mariadb: %w", err)
		}
		m, stop, err := servers.LaunchMariaDB(context.Background(), dir, MariaDBOptions{Shared: true})
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, fmt.Errorf("start shared mariadb: %w", err)
		}
		return m, stopAndRemove(stop, dir), nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return m
}

// SharedKafka returns the brokers named by RTR_TEST_KAFKA_BROKERS, or else
// one in-process kfake cluster for the whole test binary, closed by Main.
func SharedKafka(t testing.TB) *Kafka {
	t.Helper()
	k, err := sharedKafka.get(func() (*Kafka, func() error, error) {
		if list := os.Getenv(EnvKafkaBrokers); list != "" {
			var brokers []string
			for _, b := range strings.Split(list, ",") {
				if b = strings.TrimSpace(b); b != "" {
					brokers = append(brokers, b)
				}
			}
			if len(brokers) == 0 {
				return nil, nil, fmt.Errorf("%s=%q names no broker; want host:port[,host:port...]", EnvKafkaBrokers, list)
			}
			return &Kafka{Brokers: brokers}, nil, nil
		}
		k, err := servers.LaunchKafka()
		if err != nil {
			return nil, nil, fmt.Errorf("start shared kafka: %w", err)
		}
		return k, func() error { k.Cluster.Close(); return nil }, nil
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return k
}

func stopAndRemove(stop func() error, dir string) func() error {
	return func() error {
		err := stop()
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", dir, rmErr))
		}
		return err
	}
}

// StopShared stops the shared servers this process started (external ones
// are left alone). Main calls it; call it yourself from a TestMain that does
// not use Main.
func StopShared() error {
	return errors.Join(sharedPG.close(), sharedMy.close(), sharedKafka.close())
}

// Main runs the tests, stops the shared servers and exits with the tests'
// status. Use it as a package's TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop shared servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
