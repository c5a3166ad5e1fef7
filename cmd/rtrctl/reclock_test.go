package main

import (
	"strings"
	"testing"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

func (p *pipeBuilder) sourceProgress(f frontier.Frontier) *pipeBuilder {
	if err := p.w.WriteProgress("", "pg", f); err != nil {
		p.t.Fatal(err)
	}
	return p
}

// TestReclockPipeline runs source-time updates through reclock and store
// append, then replays them: the store is unchanged by the replay.
func TestReclockPipeline(t *testing.T) {
	dir := t.TempDir() + "/data"
	src := newPipe(t).
		data("public.orders", frontier.DomainLSN, update{1, "apple", 1.5, 0, 1}, update{2, "pear", 2, 0, 1}).
		sourceProgress(lsnLike(1)).
		data("public.orders", frontier.DomainLSN, update{2, "pear", 2, 300, -1}, update{3, "plum", 3, 300, 1}).
		sourceProgress(lsnLike(301)).bytes()

	reclocked := mustRun(t, string(src), "reclock", "--store", dir)
	mustRun(t, reclocked, "store", "append", dir)
	got := mustRun(t, "", "read", dir, "public.orders", "-f", "csv")
	if want := "id,name,price\n1,apple,1.5\n3,plum,3\n"; got != want {
		t.Fatalf("read after the pipeline: %q, want %q", got, want)
	}
	changes := mustRun(t, "", "read", dir, "public.orders", "--changes", "-f", "csv")
	lines := strings.Split(strings.TrimSpace(changes), "\n")
	// Header, the snapshot's two rows at the first binding, the update's
	// two rows at the second, a later time.
	timeOf := func(line string) string { f := strings.Split(line, ","); return f[len(f)-2] }
	if len(lines) != 5 || timeOf(lines[1]) != timeOf(lines[2]) || timeOf(lines[3]) != timeOf(lines[4]) || timeOf(lines[1]) >= timeOf(lines[3]) {
		t.Fatalf("changes: %q", changes)
	}

	before := treeHash(t, dir)
	again := mustRun(t, string(src), "reclock", "--store", dir)
	mustRun(t, again, "store", "append", dir)
	if treeHash(t, dir) != before {
		t.Fatal("replaying the same source updates changed the store")
	}
	if strings.Contains(again, "bindings") && len(again) == len(reclocked) {
		t.Fatal("replay minted bindings again")
	}
}

func TestReclockUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no store", []string{"reclock"}, "no --store given"},
		{"bad interval", []string{"reclock", "--store", "x", "--interval", "0s"}, "bad --interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, "", tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d stderr %q", code, stderr)
			}
		})
	}
	t.Run("system-time input", func(t *testing.T) {
		in := newPipe(t).data("public.orders", frontier.DomainSystem, update{1, "a", 1, 5, 1}).bytes()
		_, stderr, code := runCLI(t, string(in), "reclock", "--store", t.TempDir()+"/s")
		if code != exitError || !strings.Contains(stderr, "already at system times") {
			t.Fatalf("exit %d stderr %q", code, stderr)
		}
	})
}
