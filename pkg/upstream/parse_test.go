package upstream_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rtrctl/rtrctl/internal/dsn"
	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// TestParsePostgres: every DSN form parses once into the same masked
// form, which never shows the password; malformed ones fail with a hint
// and without it.
func TestParsePostgres(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, c := range []struct{ name, dsn, want string }{
		{"url", "postgres://app:" + secret + "@db.example:5433/shop?sslmode=disable", "postgres://app:xxxxx@db.example:5433/shop"},
		{"key=value", "host=db.example port=5433 user=app password=" + secret + " dbname=shop sslmode=disable", "postgres://app:xxxxx@db.example:5433/shop"},
		{"key=value quoted", "host=db.example port=5433 user=app password='" + secret + " x' dbname=shop", "postgres://app:xxxxx@db.example:5433/shop"},
		{"no password", "postgres://app@db.example/shop", "postgres://app@db.example:5432/shop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := upstream.ParsePostgres(c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.String(); got != c.want {
				t.Errorf("String() = %q, want %q", got, c.want)
			}
			if p.Database() != "shop" || p.User() != "app" || p.Addr() == "" {
				t.Errorf("parsed %q as user %q database %q at %q", c.dsn, p.User(), p.Database(), p.Addr())
			}
		})
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("PGHOST", "env.example")
		t.Setenv("PGPORT", "6543")
		t.Setenv("PGUSER", "envuser")
		t.Setenv("PGPASSWORD", secret)
		t.Setenv("PGDATABASE", "envdb")
		p, err := upstream.ParsePostgres("")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := p.String(), "postgres://envuser:xxxxx@env.example:6543/envdb"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		if p.Password() != secret {
			t.Errorf("PGPASSWORD not picked up")
		}
	})
	t.Run("copies", func(t *testing.T) {
		p, err := upstream.ParsePostgres("postgres://app:" + secret + "@h/db")
		if err != nil {
			t.Fatal(err)
		}
		cc := p.ConnConfig()
		cc.Database = "other"
		q := p.With(func(c *pgx.ConnConfig) { c.RuntimeParams["replication"] = "database" })
		if p.Database() != "db" || p.ConnConfig().RuntimeParams["replication"] != "" || q.ConnConfig().RuntimeParams["replication"] != "database" {
			t.Errorf("ConnConfig or With changed the original")
		}
	})
	for _, bad := range []string{"host=127.0.0.1 port=notaport password=" + secret, "postgres://app:" + secret + "@h:notaport/db"} {
		_, err := upstream.ParsePostgres(bad)
		if err == nil || !errors.Is(err, dsn.ErrMalformed) || !strings.Contains(err.Error(), "parse postgres dsn") || !strings.Contains(hint.Of(err), "postgres://") {
			t.Errorf("ParsePostgres(%q) = %v (hint %q), want a malformed DSN with a hint", dsn.MaskPG(bad), err, hint.Of(err))
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("password in %q", err)
		}
	}
}

// TestParseMySQL: both forms, masked alike; malformed ones with a hint.
func TestParseMySQL(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, s := range []string{"app:" + secret + "@tcp(db.example:3307)/shop", "mysql://app:" + secret + "@db.example:3307/shop"} {
		m, err := upstream.ParseMySQL(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.String(), "mysql://app:xxxxx@db.example:3307/shop"; got != want {
			t.Errorf("String() of %s = %q, want %q", dsn.MaskMySQLDriver(s), got, want)
		}
		if m.Addr() != "db.example:3307" || m.User() != "app" || m.Password() != secret || m.Database() != "shop" {
			t.Errorf("parsed %s as %s", dsn.MaskMySQLDriver(s), m)
		}
	}
	for _, bad := range []string{"", "app:" + secret + "@unix(/tmp/x)/db", "mysql://app:" + secret + "@h:99999/db"} {
		_, err := upstream.ParseMySQL(bad)
		if err == nil || !errors.Is(err, dsn.ErrMalformed) || !strings.Contains(hint.Of(err), "user:pass@tcp") {
			t.Errorf("ParseMySQL(%q) = %v (hint %q), want a malformed DSN with a hint", dsn.MaskMySQLDriver(bad), err, hint.Of(err))
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("password in %q", err)
		}
	}
}

func TestParseKafka(t *testing.T) {
	k := upstream.ParseKafka(" a:9092, ,b:9093,")
	if k.String() != "a:9092,b:9093" || len(k.Opts()) != 1 {
		t.Errorf("ParseKafka = %v", k.Brokers)
	}
	if k := upstream.ParseKafka(""); len(k.Brokers) != 0 {
		t.Errorf("ParseKafka(\"\") = %v, want none", k.Brokers)
	}
}
