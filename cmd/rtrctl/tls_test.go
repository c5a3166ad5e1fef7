package main

import (
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/servers"
	"github.com/rtrctl/rtrctl/internal/testenv"
)

// tlsRefusal is a command that must fail fast with a message and hint.
type tlsRefusal struct {
	name, want string
	args       []string
}

// checkRefusals runs each command in-process and checks that it fails
// within 5s (no retrying until a timeout) with want in its stderr and
// without secret.
func checkRefusals(t *testing.T, secret string, cases []tlsRefusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			_, errOut, code := runCLI(t, "", c.args...)
			el := time.Since(t0)
			t.Logf("exit %d after %v: %s", code, el.Round(time.Millisecond), errOut)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stderr %s; want a failure with %q", code, errOut, c.want)
			}
			if el > 5*time.Second {
				t.Errorf("took %v to fail", el)
			}
			if strings.Contains(errOut, secret) {
				t.Errorf("the password in %s", errOut)
			}
		})
	}
}

// readRows waits until 'rtrctl read' of table in dir has n rows.
func waitRows(t *testing.T, p *proc, dir, table string, n int) {
	t.Helper()
	waitFor(t, func() bool {
		out, _, code := runCLI(t, "", "read", dir, table, "--format", "csv")
		return code == 0 && strings.Count(out, "\n") == n+1
	}, p)
}

// TestPGTLS: a PostgreSQL with ssl=on whose pg_hba.conf takes TCP clients
// only over TLS with a client certificate (clientcert=verify-full).
// 'rtrctl ingest' with sslmode=verify-full, the test CA and the client
// certificate snapshots and replicates a table; wait-recent probes the
// upstream the ingest recorded (its TLS parameters with it). A wrong CA,
// no client certificate and no TLS are refused at once with a hint.
func TestPGTLS(t *testing.T) {
	certs := servers.TestCerts(t)
	pg := testenv.StartPostgres(t, testenv.PostgresOptions{TLS: certs})
	db := openIngestDB(t, pg.DSN(), "CREATE TABLE items (id int PRIMARY KEY, v text)", "INSERT INTO items VALUES (1, 'a'), (2, 'b')",
		"CREATE PUBLICATION rtr FOR TABLE items")
	dir := t.TempDir()
	p := startProc(t, nil, "ingest", "--source", "pg", "--dsn", pg.DSN(), "--publication", "rtr", "--store", dir,
		"--interval", "20ms", "--compact-every", "0")
	waitRows(t, p, dir, "public.items", 2)
	if _, err := db.conn.Exec(ctxT(t), "INSERT INTO items VALUES (3, 'c')"); err != nil {
		t.Fatal(err)
	}
	waitRows(t, p, dir, "public.items", 3)
	t.Setenv("PGPASSWORD", pg.Password)
	if out, errOut, code := runCLI(t, "", "wait-recent", "--store", dir, "--no-daemon", "--timeout", "20s"); code != 0 {
		t.Errorf("wait-recent through the recorded upstream: exit %d, out %q: %s", code, out, errOut)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest exited %d:\n%s", code, p.stderr.Bytes())
	}

	with := func(edit func(q url.Values)) string {
		u, err := url.Parse(pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		edit(q)
		u.RawQuery = q.Encode()
		return u.String()
	}
	frontier := func(dsn string) []string { return []string{"frontier", "--source", "pg", "--dsn", dsn} }
	checkRefusals(t, pg.Password, []tlsRefusal{
		{"wrong CA", "not signed by a trusted CA", frontier(with(func(q url.Values) { q.Set("sslrootcert", certs.OtherCA) }))},
		{"no client certificate", "sslcert=", frontier(with(func(q url.Values) { q.Del("sslcert"); q.Del("sslkey") }))},
		{"no TLS", "sslmode=verify-full", frontier(with(func(q url.Values) {
			q.Set("sslmode", "disable")
			q.Del("sslrootcert")
		}))},
	})
}

// TestMySQLTLS: a MariaDB with require_secure_transport=ON. 'rtrctl
// ingest' with tls=true and ssl-ca (go-sql-driver form, the CA path in
// the parameters) snapshots a table and streams its binlog over TLS
// (the server refuses anything else). The mysql client's ssl-mode names
// work too: VERIFY_IDENTITY checks the host name, VERIFY_CA does not.
// No TLS and a wrong CA are refused at once, naming TLS.
func TestMySQLTLS(t *testing.T) {
	certs := servers.TestCerts(t)
	m := testenv.StartMariaDB(t, testenv.MariaDBOptions{TLS: certs})
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v varchar(20))", "INSERT INTO items VALUES (1, 'a'), (2, 'b')")
	base := fmt.Sprintf("%s:%s@tcp(%s)/%s", m.User, m.Password, m.Addr(), d.name)
	dsn := base + "?tls=true&ssl-ca=" + certs.CA
	dir := t.TempDir()
	p := startProc(t, []string{"RTR_MYSQL_DSN=" + dsn}, "ingest", "--source", "mysql", "--tables", d.name+".items", "--store", dir,
		"--interval", "20ms", "--compact-every", "0")
	waitRows(t, p, dir, d.name+".items", 2)
	r, err := d.conn.Execute("SELECT @@global.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := r.GetString(0, 0)
	d.exec(t, "INSERT INTO items VALUES (3, 'c')", "UPDATE items SET v = 'z' WHERE id = 1")
	waitFor(t, func() bool {
		out, _, code := runCLI(t, "", "read", dir, d.name+".items", "--format", "csv")
		return code == 0 && strings.Count(out, "\n") == 4 && strings.Contains(out, "1,z")
	}, p)
	p.signal(syscall.SIGINT)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ingest exited %d:\n%s", code, p.stderr.Bytes())
	}

	// tls=preferred: the binlog connection follows the first one, over
	// TLS here (the server takes nothing else).
	out, errOut, code := runCLI(t, "", "replicate", "--source", "mysql", "--dsn", base+"?tls=preferred", "--tables", d.name+".items",
		"--start-gtid", start, "--stop-at", d.upstream(t).String())
	if kinds := readKinds(t, out); code != 0 || kinds["data "+d.name+".items"] != 3 {
		t.Errorf("replicate with tls=preferred: exit %d, %v: %s", code, kinds, errOut)
	}

	frontier := func(dsn string) []string { return []string{"frontier", "--source", "mysql", "--dsn", dsn} }
	for _, ok := range []string{
		"?ssl-mode=VERIFY_IDENTITY&ssl-ca=" + certs.CA,
		"?ssl-mode=VERIFY_CA&tls-server-name=wrong.example&ssl-ca=" + certs.CA,
		"?tls=skip-verify",
		"?tls=preferred",
	} {
		if _, errOut, code := runCLI(t, "", frontier(base+ok)...); code != 0 {
			t.Errorf("frontier with %s: exit %d: %s", ok, code, errOut)
		}
	}
	checkRefusals(t, m.Password, []tlsRefusal{
		{"no TLS", "requires TLS", frontier(base)},
		{"wrong CA", "not signed by a trusted CA", frontier(base + "?tls=true&ssl-ca=" + certs.OtherCA)},
		{"wrong name", "another name", frontier(base + "?ssl-mode=VERIFY_IDENTITY&tls-server-name=wrong.example&ssl-ca=" + certs.CA)},
		{"bad mode", "ssl-mode", frontier(base + "?ssl-mode=SOMETIMES")},
	})
}

// TestMySQLTLSPlainServer: against a server without TLS (the shared
// MariaDB), tls=preferred falls back to plaintext for the catalog and the
// binlog connections, and tls=true is refused, saying the server offers
// no TLS.
func TestMySQLTLSPlainServer(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	d := newMyDB(t, m)
	d.exec(t, "CREATE TABLE t (id int PRIMARY KEY)")
	r, err := d.conn.Execute("SELECT @@global.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := r.GetString(0, 0)
	d.exec(t, "INSERT INTO t VALUES (1), (2)")
	out, errOut, code := runCLI(t, "", "replicate", "--source", "mysql", "--dsn", m.URL()+"?tls=preferred", "--tables", d.name+".t",
		"--start-gtid", start, "--stop-at", d.upstream(t).String())
	if kinds := readKinds(t, out); code != 0 || kinds["data "+d.name+".t"] != 2 {
		t.Errorf("replicate with tls=preferred: exit %d, %v: %s", code, kinds, errOut)
	}
	checkRefusals(t, m.Password, []tlsRefusal{
		{"tls=true", "offers no TLS", []string{"frontier", "--source", "mysql", "--dsn", m.URL() + "?tls=true"}},
	})
}
