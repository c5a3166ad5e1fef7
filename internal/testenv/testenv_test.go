package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { Main(m) }

// pgQuery returns the single text value of query on dsn.
func pgQuery(t *testing.T, dsn, query string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(t.Context(), query).Scan(&v); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

// myRow returns the first row of query as strings.
func myRow(t *testing.T, m *MariaDB, query string) []string {
	t.Helper()
	conn, err := m.Connect(t.Context(), "")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close()
	res, err := conn.Execute(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if res.RowNumber() == 0 {
		t.Fatalf("%s: no rows", query)
	}
	var row []string
	for i := range res.ColumnNumber() {
		s, err := res.GetString(0, i)
		if err != nil {
			t.Fatalf("%s: column %d: %v", query, i, err)
		}
		row = append(row, s)
	}
	return row
}

func TestPostgres(t *testing.T) {
	start := time.Now()
	pg := StartPostgres(t, PostgresOptions{})
	t.Logf("postgres started in %v", time.Since(start))

	t.Run("settings", func(t *testing.T) {
		for _, tc := range []struct{ setting, want string }{
			{"wal_level", "logical"},
			{"max_replication_slots", "20"},
			{"max_wal_senders", "20"},
			{"listen_addresses", "127.0.0.1"},
			{"fsync", "off"},
			{"password_encryption", "scram-sha-256"},
		} {
			t.Run(tc.setting, func(t *testing.T) {
				if got := pgQuery(t, pg.DSN(), "SHOW "+tc.setting); got != tc.want {
					t.Errorf("%s = %q, want %q", tc.setting, got, tc.want)
				}
			})
		}
	})
	t.Run("dsn forms", func(t *testing.T) {
		for name, dsn := range map[string]string{"url": pg.DSN(), "key value": pg.KeyValueDSN()} {
			t.Run(name, func(t *testing.T) {
				got := pgQuery(t, dsn, "SELECT current_user || '@' || current_database() || ':' || inet_server_port()")
				if want := fmt.Sprintf("rtr@rtr:%d", pg.Port); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			})
		}
	})
	t.Run("replication connection", func(t *testing.T) {
		conn, err := pgconn.Connect(t.Context(), pg.ReplicationDSN())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(context.Background())
		res, err := conn.Exec(t.Context(), "IDENTIFY_SYSTEM").ReadAll()
		if err != nil {
			t.Fatalf("IDENTIFY_SYSTEM: %v", err)
		}
		if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 4 {
			t.Fatalf("IDENTIFY_SYSTEM: unexpected result %v", res)
		}
		if db := string(res[0].Rows[0][3]); db != "rtr" {
			t.Errorf("IDENTIFY_SYSTEM dbname = %q, want rtr", db)
		}
	})
	t.Run("wrong password rejected", func(t *testing.T) {
		bad := *pg
		bad.Password = "not-" + pg.Password
		for name, dsn := range map[string]string{
			"url":         bad.DSN(),
			"key value":   bad.KeyValueDSN(),
			"replication": bad.ReplicationDSN(),
		} {
			t.Run(name, func(t *testing.T) {
				conn, err := pgconn.Connect(t.Context(), dsn)
				if err == nil {
					conn.Close(context.Background())
					t.Fatal("connected with a wrong password")
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
					t.Errorf("error = %v, want SQLSTATE 28P01 (invalid_password)", err)
				}
				if strings.Contains(err.Error(), bad.Password) {
					t.Errorf("error contains the password: %v", err)
				}
			})
		}
	})
	t.Run("create database", func(t *testing.T) {
		var name string
		t.Run("inner", func(t *testing.T) {
			dsn := pg.CreateDatabase(t)
			name = pgQuery(t, dsn, "SELECT current_database()")
			if !strings.HasPrefix(name, "rtr_") || strings.HasSuffix(dsn, "/rtr?sslmode=disable") {
				t.Errorf("database %q from DSN %s is not a fresh one", name, pg)
			}
			if other := pg.CreateDatabase(t); other == dsn {
				t.Errorf("two CreateDatabase calls gave the same DSN")
			}
		})
		n := pgQuery(t, pg.DSN(), fmt.Sprintf("SELECT count(*)::text FROM pg_database WHERE datname = '%s'", name))
		if n != "0" {
			t.Errorf("database %s still exists after cleanup", name)
		}
	})
	t.Run("string masks password", func(t *testing.T) {
		if s := pg.String(); strings.Contains(s, pg.Password) || !strings.Contains(s, "xxxxx") {
			t.Errorf("String() = %q does not mask the password", s)
		}
	})
}

func TestPostgresOptions(t *testing.T) {
	start := time.Now()
	pg := StartPostgres(t, PostgresOptions{
		WalLevel: "replica",
		Settings: map[string]string{"synchronous_commit": "off", "max_replication_slots": "7"},
	})
	t.Logf("postgres started in %v", time.Since(start))
	for _, tc := range []struct{ setting, want string }{
		{"wal_level", "replica"},
		{"synchronous_commit", "off"},
		{"max_replication_slots", "7"},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			if got := pgQuery(t, pg.DSN(), "SHOW "+tc.setting); got != tc.want {
				t.Errorf("%s = %q, want %q", tc.setting, got, tc.want)
			}
		})
	}
}

func TestMariaDB(t *testing.T) {
	start := time.Now()
	m := StartMariaDB(t, MariaDBOptions{})
	t.Logf("mariadb started in %v", time.Since(start))

	t.Run("binlog settings", func(t *testing.T) {
		got := strings.Join(myRow(t, m, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, @@bind_address"), " ")
		if want := "1 ROW FULL 1 127.0.0.1"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("replication privileges", func(t *testing.T) {
		// SHOW BINLOG STATUS needs BINLOG MONITOR; the GTID position
		// needs nothing but proves the server answers as 10.11.
		row := myRow(t, m, "SHOW BINLOG STATUS")
		if !strings.HasPrefix(row[0], "mysql-bin.") {
			t.Errorf("binlog file = %q, want mysql-bin.*", row[0])
		}
		grants := strings.Join(myRow(t, m, "SHOW GRANTS FOR CURRENT_USER()"), " ")
		if !strings.Contains(grants, "ALL PRIVILEGES ON *.*") {
			t.Errorf("grants = %q, want ALL PRIVILEGES ON *.*", grants)
		}
	})
	t.Run("wrong password rejected", func(t *testing.T) {
		for _, tc := range []struct{ name, user, pass string }{
			{"rtr wrong password", "rtr", "not-" + m.Password},
			{"rtr empty password", "rtr", ""},
			{"root over tcp", "root", ""},
			{"root over tcp with the password", "root", m.Password},
		} {
			t.Run(tc.name, func(t *testing.T) {
				bad := *m
				bad.User, bad.Password = tc.user, tc.pass
				conn, err := bad.Connect(t.Context(), "")
				if err == nil {
					conn.Close()
					t.Fatal("connected")
				}
				var myErr *mysql.MyError
				if !errors.As(err, &myErr) || myErr.Code != mysql.ER_ACCESS_DENIED_ERROR {
					t.Errorf("error = %v, want access denied (1045)", err)
				}
			})
		}
	})
	t.Run("create database", func(t *testing.T) {
		var name string
		t.Run("inner", func(t *testing.T) {
			name = m.CreateDatabase(t)
			conn, err := m.Connect(t.Context(), name)
			if err != nil {
				t.Fatalf("connect to %s: %v", name, err)
			}
			defer conn.Close()
			if _, err := conn.Execute("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
		})
		row := myRow(t, m, fmt.Sprintf("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = '%s'", name))
		if row[0] != "0" {
			t.Errorf("schema %s still exists after cleanup", name)
		}
	})
	t.Run("dsn forms", func(t *testing.T) {
		parsed, err := ParseMySQLDSN(m.DSN())
		if err != nil {
			t.Fatalf("parse own DSN: %v", err)
		}
		parsed.DataDir = m.DataDir
		if *parsed != *m {
			t.Errorf("DSN round trip: got %+v", parsed.String())
		}
		if want := fmt.Sprintf("mysql://rtr:%s@127.0.0.1:%d/", m.Password, m.Port); m.URL() != want {
			t.Errorf("URL() = %q, want %q", m.URL(), want)
		}
		if strings.Contains(m.String(), m.Password) {
			t.Errorf("String() = %q does not mask the password", m.String())
		}
	})
}

func TestMariaDBOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts MariaDBOptions
		want string
	}{
		{"no log bin", MariaDBOptions{NoLogBin: true}, "0 ROW FULL"},
		{"minimal row image", MariaDBOptions{BinlogRowImage: "MINIMAL", Settings: map[string]string{"gtid_domain_id": "3"}}, "1 ROW MINIMAL 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			m := StartMariaDB(t, tc.opts)
			t.Logf("mariadb started in %v", time.Since(start))
			q := "SELECT @@log_bin, @@binlog_format, @@binlog_row_image"
			if strings.Count(tc.want, " ") == 3 {
				q += ", @@gtid_domain_id"
			}
			if got := strings.Join(myRow(t, m, q), " "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKafka(t *testing.T) {
	k := StartKafka(t)
	if len(k.Brokers) != 1 || !strings.HasPrefix(k.Brokers[0], "127.0.0.1:") {
		t.Fatalf("brokers = %v, want one on 127.0.0.1", k.Brokers)
	}
	ctx := t.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, 2, 1, nil, "orders")
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v / %v", err, resp.Err)
	}

	t.Run("kgo round trip", func(t *testing.T) {
		rec := &kgo.Record{Topic: "orders", Partition: 1, Key: []byte("k"), Value: []byte("hello")}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		got := consumeOne(t, k.Brokers, "orders")
		if string(got.Value) != "hello" || got.Partition != rec.Partition || got.Offset != 0 {
			t.Errorf("consumed %q at %d/%d, want hello at 1/0", got.Value, got.Partition, got.Offset)
		}
	})
	t.Run("kcat produces", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Fatalf("kcat not found (install the Debian package kcat: run scripts/install-deps.sh as root): %v", err)
		}
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, "from-kcat"); err != nil {
			t.Fatalf("create topic: %v", err)
		}
		cmd := exec.CommandContext(ctx, kcat, "-b", k.Brokers[0], "-t", "from-kcat", "-P")
		cmd.Stdin = strings.NewReader("from kcat\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
		if got := consumeOne(t, k.Brokers, "from-kcat"); string(got.Value) != "from kcat" {
			t.Errorf("consumed %q, want %q", got.Value, "from kcat")
		}
	})
}

func consumeOne(t *testing.T, brokers []string, topic string) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("consume %s: %v", topic, errs[0].Err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

func TestShared(t *testing.T) {
	t.Run("postgres started once and stopped", func(t *testing.T) {
		t.Setenv(EnvPostgresDSN, "")
		a, b := SharedPostgres(t), SharedPostgres(t)
		if a != b {
			t.Fatal("two calls started two servers")
		}
		if got := pgQuery(t, a.DSN(), "SHOW wal_level"); got != "logical" {
			t.Errorf("wal_level = %q", got)
		}
		if err := StopShared(); err != nil {
			t.Fatalf("stop shared: %v", err)
		}
		if _, err := os.Stat(a.DataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data dir %s still there after StopShared (stat: %v)", a.DataDir, err)
		}
		if conn, err := pgconn.Connect(t.Context(), a.DSN()); err == nil {
			conn.Close(context.Background())
			t.Error("server still answers after StopShared")
		}
	})
	t.Run("postgres from env", func(t *testing.T) {
		pg := StartPostgres(t, PostgresOptions{})
		for name, dsn := range map[string]string{"url": pg.DSN(), "key value": pg.KeyValueDSN()} {
			t.Run(name, func(t *testing.T) {
				t.Setenv(EnvPostgresDSN, dsn)
				t.Cleanup(func() { _ = StopShared() })
				got := SharedPostgres(t)
				want := *pg
				want.DataDir = ""
				if *got != want {
					t.Errorf("got %s, want %s", got, &want)
				}
				if n := pgQuery(t, got.DSN(), "SELECT 1::text"); n != "1" {
					t.Errorf("query = %q", n)
				}
			})
		}
	})
	t.Run("mariadb from env", func(t *testing.T) {
		t.Setenv(EnvMySQLDSN, "u:p@tcp(127.0.0.1:3307)/db?parseTime=true")
		t.Cleanup(func() { _ = StopShared() })
		got := SharedMariaDB(t)
		if want := (MariaDB{Host: "127.0.0.1", Port: 3307, User: "u", Password: "p"}); *got != want {
			t.Errorf("got %+v, want %+v", *got, want)
		}
	})
	t.Run("kafka from env", func(t *testing.T) {
		t.Setenv(EnvKafkaBrokers, " 127.0.0.1:1, 127.0.0.1:2 ")
		t.Cleanup(func() { _ = StopShared() })
		got := SharedKafka(t)
		if strings.Join(got.Brokers, ",") != "127.0.0.1:1,127.0.0.1:2" || got.Cluster != nil {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("kafka in process", func(t *testing.T) {
		t.Setenv(EnvKafkaBrokers, "")
		t.Cleanup(func() { _ = StopShared() })
		a, b := SharedKafka(t), SharedKafka(t)
		if a != b || a.Cluster == nil {
			t.Fatalf("got %p and %p (cluster %v)", a, b, a.Cluster)
		}
		adm := kadm.NewClient(mustClient(t, a.Brokers))
		if _, err := adm.ListBrokers(t.Context()); err != nil {
			t.Errorf("list brokers: %v", err)
		}
	})
}

func mustClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}
