package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rtrctl/rtrctl/internal/testenv"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// frontierJSONOf runs `rtrctl frontier ... --output json` and decodes it.
func frontierJSONOf(t *testing.T, args ...string) frontierJSON {
	t.Helper()
	stdout, stderr, code := runCLI(t, "", append([]string{"frontier", "--output", "json"}, args...)...)
	if code != exitOK {
		t.Fatalf("rtrctl frontier %v: exit %d\n%s", args, code, stderr)
	}
	var j frontierJSON
	if err := json.Unmarshal([]byte(stdout), &j); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	return j
}

func pgLSN(t *testing.T, ctx context.Context, conn *pgx.Conn, fn string) frontier.LSN {
	t.Helper()
	var s string
	if err := conn.QueryRow(ctx, "SELECT "+fn+"()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := frontier.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	if fn == "pg_current_wal_insert_lsn" {
		// The probe reports a position just past a page header as the page
		// boundary (no record ends inside a header); compare like with like.
		return probe.VisibleInsertLSN(l, 8192, 16<<20)
	}
	return l
}

func TestFrontierPostgres(t *testing.T) {
	ctx := ctxT(t)
	pg := testenv.SharedPostgres(t)
	dsn := pg.CreateDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int primary key, v text)"); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < 5; i++ {
		before := pgLSN(t, ctx, conn, "pg_current_wal_insert_lsn")
		got := frontierJSONOf(t, "--source", "pg", "--dsn", dsn)
		if got.Frontier.Domain() != frontier.DomainLSN || frontier.LSN(got.Frontier.Pos()) < before {
			t.Fatalf("round %d: frontier %s is below pg_current_wal_insert_lsn() %s read before it", i, got.Native, before)
		}
		if got.Native != frontier.LSN(got.Frontier.Pos()).String() || got.Flavor != "postgres" {
			t.Fatalf("round %d: native %q / flavor %q do not match frontier %s", i, got.Native, got.Flavor, got.Frontier)
		}

		// An asynchronous commit is visible before the WAL write position
		// passes it; the frontier must still be at or beyond its end.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1, repeat('x', 100))", i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		afterCommit := pgLSN(t, ctx, conn, "pg_current_wal_insert_lsn")
		got = frontierJSONOf(t, "--source", "pg", "--dsn", dsn)
		if frontier.LSN(got.Frontier.Pos()) < afterCommit {
			t.Fatalf("round %d: after an async commit, frontier %s is below the insert position %s", i, got.Native, afterCommit)
		}
		if frontier.LSN(got.Frontier.Pos()) <= before {
			t.Fatalf("round %d: frontier %s did not advance past %s after a commit", i, got.Native, before)
		}
	}

	t.Run("key=value dsn and text output", func(t *testing.T) {
		kv := pg.KeyValueDSN()
		stdout, stderr, code := runCLI(t, "", "frontier", "--source", "pg", "--dsn", kv)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if _, err := frontier.ParseLSN(strings.TrimSpace(stdout)); err != nil {
			t.Fatalf("text output %q is not an LSN: %v", stdout, err)
		}
	})
	t.Run("PG environment variables", func(t *testing.T) {
		t.Setenv("PGHOST", pg.Host)
		t.Setenv("PGPORT", strconv.Itoa(pg.Port))
		t.Setenv("PGUSER", pg.User)
		t.Setenv("PGPASSWORD", pg.Password)
		t.Setenv("PGDATABASE", pg.Database)
		t.Setenv("PGSSLMODE", "disable")
		t.Setenv("RTR_PG_DSN", "")
		got := frontierJSONOf(t, "--source", "pg")
		if got.Frontier.Pos() == 0 {
			t.Fatalf("frontier from PG* environment is empty: %+v", got)
		}
	})
}

func TestFrontierMariaDB(t *testing.T) {
	ctx := ctxT(t)
	m := testenv.SharedMariaDB(t)
	db := m.CreateDatabase(t)
	conn, err := m.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Execute("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	for _, form := range []struct{ name, dsn string }{{"driver form", m.DSN()}, {"url form", m.URL()}} {
		t.Run(form.name, func(t *testing.T) {
			before := frontierJSONOf(t, "--source", "mysql", "--dsn", form.dsn)
			if before.Flavor != "mariadb" || before.Frontier.Domain() != frontier.DomainMariaDB {
				t.Fatalf("want a mariadb frontier, got %+v", before)
			}
			if _, err := frontier.ParseMariaDBPos(before.Native); err != nil {
				t.Fatalf("native %q is not a MariaDB GTID position: %v", before.Native, err)
			}
			id := time.Now().UnixNano() % 1e9
			if _, err := conn.Execute(fmt.Sprintf("INSERT INTO t VALUES (%d)", id)); err != nil {
				t.Fatal(err)
			}
			after := frontierJSONOf(t, "--source", "mysql", "--dsn", form.dsn)
			// The insert is one transaction in domain 0: its sequence moves by one.
			if after.Frontier.Get("0") != before.Frontier.Get("0")+1 {
				t.Fatalf("domain 0 went from %d to %d after one insert, want +1 (native %s -> %s)",
					before.Frontier.Get("0"), after.Frontier.Get("0"), before.Native, after.Native)
			}
		})
	}
	t.Run("RTR_MYSQL_DSN", func(t *testing.T) {
		t.Setenv("RTR_MYSQL_DSN", m.DSN())
		got := frontierJSONOf(t, "--source", "mysql")
		if got.Flavor != "mariadb" {
			t.Fatalf("flavor %q", got.Flavor)
		}
	})
}

func TestFrontierKafka(t *testing.T) {
	ctx := ctxT(t)
	k := testenv.StartKafka(t)
	brokers := strings.Join(k.Brokers, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	before := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
	if before.Native != "0:0,1:0,2:0" || !before.Frontier.IsEmpty() {
		t.Fatalf("empty topic: native %q frontier %s", before.Native, before.Frontier)
	}
	for i := 0; i < 4; i++ {
		p := int32(i % 3)
		prev := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		next := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		want := prev.Frontier.With(strconv.Itoa(int(p)), prev.Frontier.Get(strconv.Itoa(int(p)))+1)
		if !next.Frontier.Equal(want) {
			t.Fatalf("after one record to partition %d: frontier %s, want %s", p, next.Frontier, want)
		}
	}

	t.Run("kcat produces, frontier follows", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatalf("kcat not found: install the Debian package kcat (scripts/install-deps.sh)")
		}
		prev := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		cmd := exec.CommandContext(ctx, kcat, "-P", "-b", brokers, "-t", "orders", "-p", "2")
		cmd.Stdin = strings.NewReader("a\nb\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		next := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		if next.Frontier.Get("2") != prev.Frontier.Get("2")+2 || next.Frontier.Get("0") != prev.Frontier.Get("0") {
			t.Fatalf("two kcat records to partition 2: %s -> %s", prev.Frontier, next.Frontier)
		}
	})

	t.Run("open transaction is not visible", func(t *testing.T) {
		txn, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic("orders"), kgo.TransactionalID("rtr-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Close()
		prev := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("t")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		mid := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		if mid.Frontier.Get("1") != prev.Frontier.Get("1") {
			t.Fatalf("an open transaction moved the last stable offset: %s -> %s", prev.Frontier, mid.Frontier)
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		after := frontierJSONOf(t, "--source", "kafka", "--brokers", brokers, "--topic", "orders")
		// The record and its commit marker: two offsets.
		if after.Frontier.Get("1") != prev.Frontier.Get("1")+2 {
			t.Fatalf("after commit: %s -> %s, want partition 1 +2 (record and commit marker)", prev.Frontier, after.Frontier)
		}
	})
}

func TestFrontierErrors(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	maria := testenv.SharedMariaDB(t)
	k := testenv.SharedKafka(t)
	replicaPG := testenv.StartPostgres(t, testenv.PostgresOptions{WalLevel: "replica"})
	noBinlog := testenv.StartMariaDB(t, testenv.MariaDBOptions{NoLogBin: true})

	wrongPG := *pg
	wrongPG.Password = "not-the-password-123"
	wrongMaria := *maria
	wrongMaria.Password = "not-the-password-456"

	tests := []struct {
		name    string
		args    []string
		code    int
		want    []string // substrings of stderr
		secrets []string // must not appear anywhere
	}{
		{"pg unreachable", []string{"--source", "pg", "--dsn", "postgres://rtr:hunter2@127.0.0.1:1/rtr?connect_timeout=5"}, exitError,
			[]string{"cannot connect", "127.0.0.1:1", "connection refused", "hint: is PostgreSQL running"}, []string{"hunter2"}},
		{"pg wrong password", []string{"--source", "pg", "--dsn", wrongPG.DSN()}, exitError,
			[]string{"authentication failed", `user "rtr"`, "hint: check the user and password"}, []string{wrongPG.Password, pg.Password}},
		{"pg wal_level not logical", []string{"--source", "pg", "--dsn", replicaPG.DSN()}, exitError,
			[]string{`wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical"}, []string{replicaPG.Password}},
		{"pg malformed dsn", []string{"--source", "pg", "--dsn", "host=127.0.0.1 port=notaport password=s3cr3t"}, exitError,
			[]string{"parse postgres dsn", "invalid port", "hint: use postgres://"}, []string{"s3cr3t"}},
		{"mysql unreachable", []string{"--source", "mysql", "--dsn", "rtr:hunter2@tcp(127.0.0.1:1)/"}, exitError,
			[]string{"cannot connect", "127.0.0.1:1", "hint: is the MySQL/MariaDB server running"}, []string{"hunter2"}},
		{"mysql wrong password", []string{"--source", "mysql", "--dsn", wrongMaria.DSN()}, exitError,
			[]string{"authentication failed", "access denied", "hint: check the user and password"}, []string{wrongMaria.Password, maria.Password}},
		{"mariadb binary log off", []string{"--source", "mysql", "--dsn", noBinlog.URL()}, exitError,
			[]string{"binary log is off", "log_bin=0", "--log-bin", "--binlog-format=ROW"}, []string{noBinlog.Password}},
		{"mysql malformed dsn", []string{"--source", "mysql", "--dsn", "rtr:s3cr3t@unix(/tmp/x)/db"}, exitError,
			[]string{"parse mysql dsn", "only tcp(host:port)", "hint: use user:pass@tcp"}, []string{"s3cr3t"}},
		{"mysql malformed url port", []string{"--source", "mysql", "--dsn", "mysql://rtr:s3cr3t@127.0.0.1:99999/db"}, exitError,
			[]string{"parse mysql dsn", "bad port"}, []string{"s3cr3t"}},
		{"kafka unknown topic", []string{"--source", "kafka", "--brokers", strings.Join(k.Brokers, ","), "--topic", "no-such-topic"}, exitError,
			[]string{`topic "no-such-topic" does not exist`, "hint: check the topic name"}, nil},
		{"kafka unreachable", []string{"--source", "kafka", "--brokers", "127.0.0.1:1", "--topic", "t", "--timeout", "5s"}, exitError,
			[]string{"probe kafka 127.0.0.1:1", "hint: is the broker running"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", append([]string{"frontier"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, tc.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout should be empty on error, got %q", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			for _, s := range tc.secrets {
				if s != "" && strings.Contains(stdout+stderr, s) {
					t.Errorf("output leaks a password %q:\n%s", s, stderr)
				}
			}
		})
	}
}
