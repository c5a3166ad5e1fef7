package main

import (
	"testing"

	"github.com/rtrctl/rtrctl/pkg/store"
)

func TestRecordedDSN(t *testing.T) {
	for _, tc := range []struct{ recorded, password, want string }{
		{"postgres://app:xxxxx@127.0.0.1:5432/db", "", "postgres://app@127.0.0.1:5432/db"},
		{"postgres://app:xxxxx@127.0.0.1:5432/db", "s3cr:t", "postgres://app:s3cr%3At@127.0.0.1:5432/db"},
		{"mysql://rtr:xxxxx@127.0.0.1:3306/", "pw@x", "mysql://rtr:pw%40x@127.0.0.1:3306/"},
	} {
		info := store.SourceInfo{Source: "s", Kind: "pg", Upstream: map[string]string{"dsn": tc.recorded}}
		got, err := recordedDSN(info, tc.password)
		if err != nil || got != tc.want {
			t.Errorf("%s with password %q: %q %v, want %s", tc.recorded, tc.password, got, err, tc.want)
		}
	}
	if _, err := recordedDSN(store.SourceInfo{Upstream: map[string]string{"dsn": "host=x"}}, ""); err == nil {
		t.Error("a key=value DSN was accepted as recorded")
	}
}

// TestEverySourceRegistered: the registry has each kind once, under its
// aliases too, and each kind has what the commands ask of it.
func TestEverySourceRegistered(t *testing.T) {
	for _, name := range []string{"pg", "postgres", "postgresql", "mysql", "mariadb", "kafka"} {
		k := kindNamed(name)
		if k == nil {
			t.Fatalf("no source kind %q", name)
		}
		if k.upstream == nil || k.ingest == nil || k.recorded == nil || k.replicate == nil {
			t.Errorf("kind %s lacks a stage", k.name)
		}
	}
	if kindNamed("oracle") != nil {
		t.Error("an unknown kind was found")
	}
	seen := map[string]bool{}
	for _, k := range sourceKinds {
		if seen[k.name] {
			t.Errorf("kind %s registered twice", k.name)
		}
		seen[k.name] = true
	}
}
