package main

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestDevKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runDevKafka(ctx, pw, devKafkaOptions{port: 0, partitions: 2, topics: []string{"events"}})
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read broker address: %v", err)
	}
	addr := strings.TrimSpace(line)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("address %q is not on loopback", addr)
	}

	// An independent client (librdkafka's kcat) produces; the frontier follows.
	cmd := exec.CommandContext(ctx, "kcat", "-P", "-b", addr, "-t", "events", "-p", "1")
	cmd.Stdin = strings.NewReader("one\ntwo\nthree\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat (install the Debian package kcat): %v\n%s", err, out)
	}
	got := frontierJSONOf(t, "--source", "kafka", "--brokers", addr, "--topic", "events")
	if got.Native != "0:0,1:3" {
		t.Fatalf("frontier after 3 records to partition 1: %q, want 0:0,1:3", got.Native)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev kafka returned %v after cancel, want nil", err)
	}
}

func TestDevKafkaUsage(t *testing.T) {
	for _, tc := range []struct{ name, listen, want string }{
		{"not loopback", "0.0.0.0:9092", "listens on 127.0.0.1 only"},
		{"bad port", "127.0.0.1:x", "bad port"},
		{"no port", "127.0.0.1", "bad --listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "", "dev", "kafka", "--listen", tc.listen)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d stderr %q, want usage error containing %q", code, stderr, tc.want)
			}
		})
	}
}
