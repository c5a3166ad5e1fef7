package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// TestPrivilegeHints: an upstream user that lacks a privilege rtrctl
// needs, or a database that does not exist, fails at once with an error
// naming it and a hint that says what to run, for PostgreSQL and MariaDB.
func TestPrivilegeHints(t *testing.T) {
	u := rrNewUpstream(t, "priv_t")
	role := "rtr_norepl_" + rrRandom()
	execAll(t, u.conn,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw-norepl'", role),
		fmt.Sprintf("GRANT SELECT ON ALL TABLES IN SCHEMA public TO %s", role))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u.conn.Exec(ctx, "DROP OWNED BY "+role)
		u.conn.Exec(ctx, "DROP ROLE "+role)
	})
	noRepl := strings.Replace(u.dsn, u.pg.User+":"+u.pg.Password+"@", role+":pw-norepl@", 1)
	noDB := strings.Replace(u.dsn, "/"+strings.TrimPrefix(u.conn.Config().Database, "/")+"?", "/no_such_db?", 1)

	maria := newMyDB(t, testenv.SharedMariaDB(t))
	myUser := "rtr_norepl_" + rrRandom()
	maria.exec(t, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw-norepl'", myUser), fmt.Sprintf("GRANT SELECT ON %s.* TO '%s'@'%%'", maria.name, myUser))
	t.Cleanup(func() { maria.exec(t, fmt.Sprintf("DROP USER '%s'@'%%'", myUser)) })
	myNoRepl := fmt.Sprintf("%s:pw-norepl@tcp(%s)/%s", myUser, maria.m.Addr(), maria.name)
	myNoDB := fmt.Sprintf("%s:%s@tcp(%s)/no_such_db", maria.m.User, maria.m.Password, maria.m.Addr())
	maria.exec(t, "CREATE TABLE items (id int PRIMARY KEY)")

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"pg without REPLICATION", []string{"ingest", "--source", "pg", "--dsn", noRepl, "--publication", "pub", "--store", t.TempDir()},
			[]string{`ALTER ROLE "` + role + `" REPLICATION`}},
		{"pg database missing", []string{"snapshot", "--source", "pg", "--dsn", noDB, "--publication", "pub", "--slot", "rtr_x"},
			[]string{`database "no_such_db" does not exist`, "hint: check the database name"}},
		{"mariadb without REPLICATION SLAVE", []string{"ingest", "--source", "mysql", "--dsn", myNoRepl, "--tables", maria.name + ".items", "--store", t.TempDir()},
			[]string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '" + myUser + "'"}},
		{"mariadb database missing", []string{"frontier", "--source", "mysql", "--dsn", myNoDB},
			[]string{`database "no_such_db" does not exist`, "hint: check the database name"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code, el := runTimed(t, nil, c.args...)
			t.Logf("%s: exit %d after %v", c.name, code, el.Round(time.Millisecond))
			if code != exitError {
				t.Errorf("exit %d, want 1:\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if el > 10*time.Second {
				t.Errorf("took %v: a permanent error was retried", el)
			}
			if strings.Contains(stderr, "pw-norepl") {
				t.Errorf("stderr holds the password:\n%s", stderr)
			}
		})
	}
}
