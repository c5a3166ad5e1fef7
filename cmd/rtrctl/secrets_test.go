package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

// leakCase is a DSN holding a password that must never be shown.
type leakCase struct {
	name, kind, dsn string
	// secrets are the password as written and decoded.
	secrets []string
}

// leakCases are malformed and valid DSNs of every source kind with a
// (wrong) password in every place a DSN can hold one.
func leakCases(t *testing.T) []leakCase {
	pg := testenv.SharedPostgres(t)
	my := testenv.SharedMariaDB(t)
	pgAddr := fmt.Sprintf("127.0.0.1:%d", pg.Port)
	kv := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=rtr sslmode=disable ", pg.Port, pg.User)
	enc := url.QueryEscape("p@ss:w/rd 9") // p%40ss%3Aw%2Frd+9
	return []leakCase{
		{"pg url userinfo", "pg", "postgres://" + pg.User + ":Hunter2xUser@" + pgAddr + "/rtr?sslmode=disable", []string{"Hunter2xUser"}},
		{"pg url userinfo bad port", "pg", "postgres://" + pg.User + ":Hunter2xPort@127.0.0.1:notaport/rtr", []string{"Hunter2xPort"}},
		{"pg url query", "pg", "postgres://" + pg.User + "@" + pgAddr + "/rtr?sslmode=disable&password=Hunter2xQuery", []string{"Hunter2xQuery"}},
		{"pg url query bad port", "pg", "postgres://" + pg.User + "@127.0.0.1:notaport/rtr?password=Hunter2xQBad", []string{"Hunter2xQBad"}},
		{"pg url encoded", "pg", "postgres://" + pg.User + ":" + strings.ReplaceAll(enc, "+", "%20") + "@" + pgAddr + "/rtr?sslmode=disable", []string{strings.ReplaceAll(enc, "+", "%20"), "p@ss:w/rd 9"}},
		{"pg url unencoded at", "pg", "postgres://" + pg.User + ":Hun@ter2x@" + pgAddr + "/rtr?sslmode=disable", []string{"Hun@ter2x", "ter2x@"}},
		{"pg kv", "pg", kv + "password=Hunter2xKV", []string{"Hunter2xKV"}},
		{"pg kv quoted spaces", "pg", kv + "password='Hunter2 x Quoted'", []string{"Hunter2 x Quoted", "x Quoted"}},
		{"pg kv unterminated quote", "pg", kv + "password='Hunter2 x Unterm", []string{"Hunter2 x Unterm", "x Unterm"}},
		{"pg kv bad port", "pg", "host=127.0.0.1 port=notaport password=Hunter2xKVBad", []string{"Hunter2xKVBad"}},
		{"mysql driver at and colon", "mysql", my.User + ":Hu@nt:er2@tcp(" + my.Addr() + ")/", []string{"Hu@nt:er2", "nt:er2", "Hu@nt"}},
		{"mysql driver malformed", "mysql", my.User + ":Hu@nt:er3@tcp(" + my.Addr(), []string{"Hu@nt:er3", "nt:er3"}},
		{"mysql driver unknown database", "mysql", my.User + ":" + my.Password + "@tcp(" + my.Addr() + ")/nodb_here", []string{my.Password}},
		{"mysql url", "mysql", "mysql://" + my.User + ":Hunter2xMyURL@" + my.Addr() + "/", []string{"Hunter2xMyURL"}},
		{"mysql url encoded", "mysql", "mysql://" + my.User + ":" + url.PathEscape("p@ss:wd") + "@" + my.Addr() + "/", []string{url.PathEscape("p@ss:wd"), "p@ss:wd"}},
		{"mysql url bad port", "mysql", "mysql://" + my.User + ":Hunter2xMyPort@127.0.0.1:99999/", []string{"Hunter2xMyPort"}},
	}
}

// TestSecretsNeverLeak runs every command that parses a DSN or connects
// with it, with --dsn, --dsn-file and the environment, and the recorded
// upstream's password from PGPASSWORD / MYSQL_PWD: no password, as
// written or encoded, is in stdout, stderr or any file of the store.
func TestSecretsNeverLeak(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	my := testenv.SharedMariaDB(t)
	for _, c := range leakCases(t) {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			st := filepath.Join(dir, "store")
			dsnFile := filepath.Join(dir, "dsn")
			if err := os.WriteFile(dsnFile, []byte(c.dsn+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			kindArgs := []string{"--publication", "pub", "--slot", "leak_slot"}
			env := "RTR_PG_DSN"
			pwEnv := "PGPASSWORD"
			// A source of the kind, as an ingest records it (no password),
			// for status and wait-recent to probe.
			recorded, at := fmt.Sprintf("postgres://%s@127.0.0.1:%d/rtr", pg.User, pg.Port), lsnLike(1)
			if c.kind == "mysql" {
				kindArgs, env, pwEnv = []string{"--tables", "shop.t"}, "RTR_MYSQL_DSN", "MYSQL_PWD"
				recorded, at = "mysql://"+my.User+"@"+my.Addr()+"/", mariadbAt(t, 1)
			}
			fakeSource(t, st, c.kind, c.kind, map[string]string{"dsn": recorded}, at)
			src := []string{"--source", c.kind}
			runs := []struct {
				env  []string
				args []string
			}{
				{nil, append(append([]string{"ingest", "--store", st, "--dsn", c.dsn, "--retry-for", "1s"}, src...), kindArgs...)},
				{nil, append(append([]string{"snapshot", "--dsn", c.dsn}, src...), kindArgs...)},
				{nil, append(append([]string{"replicate", "--dsn", c.dsn}, src...), kindArgs...)},
				{nil, append([]string{"frontier", "--dsn", c.dsn}, src...)},
				{nil, append([]string{"frontier", "--dsn-file", dsnFile}, src...)},
				{[]string{env + "=" + c.dsn}, append([]string{"frontier"}, src...)},
				{nil, []string{"status", st, "--dsn", c.dsn}},
				{nil, []string{"status", st, "--dsn-file", dsnFile}},
				{nil, append([]string{"wait-recent", "--store", st, "--dsn", c.dsn, "--timeout", "1s"}, src...)},
				{[]string{pwEnv + "=" + c.secrets[0]}, []string{"wait-recent", "--store", st, "--timeout", "1s", "--wait-for-ingest"}},
				{[]string{pwEnv + "=" + c.secrets[0]}, []string{"read", st, "x.y", "--recent", "--timeout", "1s"}},
				{[]string{pwEnv + "=" + c.secrets[0]}, []string{"status", st, "--probe-recorded"}},
			}
			for _, r := range runs {
				stdout, stderr, code, el := runTimed(t, r.env, r.args...)
				if code == exitOK && !(r.env != nil && c.secrets[0] == my.Password) { // the right password, recorded upstream
					t.Errorf("%s: exit 0 with a wrong or malformed DSN", r.args[0])
				}
				t.Logf("%s: exit %d after %v: %s", r.args[0], code, el.Round(time.Millisecond), firstLine(stderr))
				for _, s := range c.secrets {
					if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
						t.Errorf("%s %v: the password %q is in the output:\n%s%s", r.args[0], r.env != nil, s, stdout, stderr)
					}
				}
			}
			filepath.Walk(st, func(path string, info os.FileInfo, err error) error {
				if err != nil || info.IsDir() || info.Mode()&os.ModeSocket != 0 {
					return nil
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("read %s: %v", path, err)
					return nil
				}
				for _, s := range c.secrets {
					if strings.Contains(string(b), s) {
						t.Errorf("the password %q is in the store file %s", s, path)
					}
				}
				return nil
			})
		})
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
