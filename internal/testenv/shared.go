package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Environment variables that name external servers for the Shared*
// functions.
const (
	EnvPostgresDSN  = "RTR_TEST_PG_DSN"
	EnvMySQLDSN     = "RTR_TEST_MYSQL_DSN"
	EnvKafkaBrokers = "RTR_TEST_KAFKA_BROKERS"
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
			pg, err := ParsePostgresDSN(dsn)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", EnvPostgresDSN, err)
			}
			return pg, nil, nil
		}
		sweepStale()
		dir, err := os.MkdirTemp("", prefixPG+"shared-")
		if err != nil {
			return nil, nil, fmt.Errorf("start shared postgres: %w", err)
		}
		pg, stop, err := LaunchPostgres(context.Background(), dir, PostgresOptions{})
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
			m, err := ParseMySQLDSN(dsn)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", EnvMySQLDSN, err)
			}
			return m, nil, nil
		}
		sweepStale()
		dir, err := os.MkdirTemp("", prefixMySQLShd)
		if err != nil {
			return nil, nil, fmt.Errorf("start shared mariadb: %w", err)
		}
		m, stop, err := LaunchMariaDB(context.Background(), dir, MariaDBOptions{})
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
		k, err := LaunchKafka()
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

// ParsePostgresDSN reads a URL or key=value DSN (as RTR_TEST_PG_DSN holds).
func ParsePostgresDSN(dsn string) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's error text may quote the DSN, password included.
		return nil, errors.New("parse postgres DSN: not a valid URL or key=value connection string, e.g. postgres://user:pass@127.0.0.1:5432/db?sslmode=disable")
	}
	return &Postgres{
		Host:     cfg.Host,
		Port:     int(cfg.Port),
		User:     cfg.User,
		Password: cfg.Password,
		Database: cfg.Database,
	}, nil
}

// ParseMySQLDSN reads the go-sql-driver form user:pass@tcp(host:port)/[db]
// (as RTR_TEST_MYSQL_DSN holds). A database name and parameters are
// accepted and ignored.
func ParseMySQLDSN(dsn string) (*MariaDB, error) {
	const want = "want user:pass@tcp(host:port)/"
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return nil, fmt.Errorf("parse mysql DSN: no '@'; %s", want)
	}
	cred, rest := dsn[:at], dsn[at+1:]
	user, pass, _ := strings.Cut(cred, ":")
	if user == "" {
		return nil, fmt.Errorf("parse mysql DSN: no user; %s", want)
	}
	if !strings.HasPrefix(rest, "tcp(") {
		return nil, fmt.Errorf("parse mysql DSN: address is not tcp(host:port); %s", want)
	}
	end := strings.Index(rest, ")")
	if end < 0 {
		return nil, fmt.Errorf("parse mysql DSN: unclosed tcp(; %s", want)
	}
	host, portStr, err := net.SplitHostPort(rest[len("tcp("):end])
	if err != nil {
		return nil, fmt.Errorf("parse mysql DSN address: %w; %s", err, want)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("parse mysql DSN: bad port %q; %s", portStr, want)
	}
	if tail := rest[end+1:]; tail != "" && !strings.HasPrefix(tail, "/") {
		return nil, fmt.Errorf("parse mysql DSN: unexpected %q after address; %s", tail, want)
	}
	return &MariaDB{Host: host, Port: port, User: user, Password: pass}, nil
}
