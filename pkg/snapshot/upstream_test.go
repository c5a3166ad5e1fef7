package snapshot

import "github.com/rtrctl/rtrctl/pkg/upstream"

// mustPG parses a test server's PostgreSQL DSN (always well formed).
func mustPG(dsn string) *upstream.Postgres {
	p, err := upstream.ParsePostgres(dsn)
	if err != nil {
		panic(err)
	}
	return p
}

// mustMy parses a test server's MySQL/MariaDB DSN (always well formed).
func mustMy(dsn string) *upstream.MySQL {
	m, err := upstream.ParseMySQL(dsn)
	if err != nil {
		panic(err)
	}
	return m
}
