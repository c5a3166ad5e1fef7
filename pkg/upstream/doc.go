// Package upstream is the connection layer of the source kinds: one file
// per kind (pg.go, mysql.go, kafka.go) owns how its connection string is
// parsed (once, at the edge: the command line), the typed configuration
// every stage takes instead of a string, its masked form (String never
// shows a password, whatever form the DSN took) and how to connect, with
// hints for the usual failures and the driver's error kept in the chain so
// internal/retry classifies it.
//
// Nothing here checks a server's settings (wal_level, the binlog): that
// belongs to the stage that needs them.
package upstream

// MustParsePostgres is ParsePostgres for DSNs known to be well formed (a
// test server's); it panics on an error, like regexp.MustCompile.
func MustParsePostgres(dsn string) *Postgres {
	p, err := ParsePostgres(dsn)
	if err != nil {
		panic(err)
	}
	return p
}

// MustParseMySQL is ParseMySQL for DSNs known to be well formed; it panics
// on an error.
func MustParseMySQL(dsn string) *MySQL {
	m, err := ParseMySQL(dsn)
	if err != nil {
		panic(err)
	}
	return m
}
