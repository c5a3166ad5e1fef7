package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// runCLI runs rtrctl in-process and returns stdout, stderr and the exit status.
func runCLI(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"rtrctl"}, args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestCLIUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
		inStdout string
	}{
		{"help", []string{"--help"}, exitOK, "", "timed out waiting for recency"},
		{"version", []string{"version"}, exitOK, "", "rtrctl "},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`, ""},
		{"unknown flag", []string{"--frob"}, exitUsage, "flag provided but not defined", ""},
		{"bad log level", []string{"--log-level", "loud", "version"}, exitUsage, `bad --log-level "loud"`, ""},
		{"bad log format", []string{"--log-format", "xml", "version"}, exitUsage, `bad --log-format "xml"`, ""},
		{"frontier without source", []string{"frontier"}, exitUsage, "no --source given", ""},
		{"frontier unknown source", []string{"frontier", "--source", "oracle"}, exitUsage, `unknown source "oracle"`, ""},
		{"frontier bad output", []string{"frontier", "--source", "pg", "--output", "xml"}, exitUsage, `bad --output "xml"`, ""},
		{"frontier stray argument", []string{"frontier", "--source", "pg", "extra"}, exitUsage, `unexpected argument "extra"`, ""},
		{"frontier kafka without brokers", []string{"frontier", "--source", "kafka", "--topic", "t"}, exitUsage, "no Kafka brokers given", ""},
		{"frontier kafka without topic", []string{"frontier", "--source", "kafka", "--brokers", "127.0.0.1:1"}, exitUsage, "no Kafka topic given", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("RTR_KAFKA_BROKERS", "")
			stdout, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.inStderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.inStderr)
			}
			if !strings.Contains(stdout, tc.inStdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tc.inStdout)
			}
			if code == exitUsage && !strings.Contains(stderr, "hint: ") {
				t.Errorf("usage error without a hint: %q", stderr)
			}
		})
	}
}
