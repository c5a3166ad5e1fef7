package servers

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Environment variables that name external servers instead of ones started
// for tests. testenv's Shared* functions read them; rtr-services up writes
// them to DIR/env.
const (
	EnvPostgresDSN  = "RTR_TEST_PG_DSN"        // URL or key=value form
	EnvMySQLDSN     = "RTR_TEST_MYSQL_DSN"     // user:pass@tcp(host:port)/
	EnvKafkaBrokers = "RTR_TEST_KAFKA_BROKERS" // host:port[,host:port...]
)

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
