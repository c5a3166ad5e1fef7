package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "4GiB": 4 << 30, "1.5GiB": 3 << 29, "100": 100, "2 MB": 2e6, "1g": 1e9, "64kib": 64 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "1x", "-1MiB", "MiB", "1e30GiB"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
	for n, want := range map[int64]string{512 << 20: "512MiB", 3 << 29: "1.5GiB", 100: "100B", 6 << 30: "6GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestDefaultMemoryLimit: a quarter of the machine, at least 256 MiB, at
// most 512 MiB.
func TestDefaultMemoryLimit(t *testing.T) {
	for machine, want := range map[int64]int64{24 << 30: 512 << 20, 1 << 30: 256 << 20, 512 << 20: 256 << 20, 1600 << 20: 400 << 20, 64 << 30: 512 << 20} {
		if got := defaultMemoryLimit(machine); got != want {
			t.Errorf("defaultMemoryLimit(%s) = %s, want %s", formatSize(machine), formatSize(got), formatSize(want))
		}
	}
}

// TestMemoryLimit: --memory-limit sets the runtime's soft limit, a bad or
// tiny one is a usage error naming it, and a --txn-memory over half of it
// is refused with a hint naming both.
func TestMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	var out, errb bytes.Buffer
	if code := run([]string{"rtrctl", "--memory-limit", "300MiB", "version"}, nil, &out, &errb); code != 0 || debug.SetMemoryLimit(-1) != 300<<20 || theMemory.from != "--memory-limit" {
		t.Fatalf("exit %d, soft limit %d (%s), want 0 and 300MiB from the flag\n%s", code, debug.SetMemoryLimit(-1), theMemory.from, errb.String())
	}
	for _, c := range []struct{ args, want string }{
		{"--memory-limit lots version", `bad size "lots"`},
		{"--memory-limit 1MiB version", "too small"},
		{"--memory-limit 100MiB ingest --source kafka --brokers 127.0.0.1:1 --topics t --store x --txn-memory 60000000", "raise --memory-limit (now 100MiB, from --memory-limit)"},
	} {
		errb.Reset()
		if code := run(append([]string{"rtrctl"}, strings.Fields(c.args)...), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("rtrctl %s: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
