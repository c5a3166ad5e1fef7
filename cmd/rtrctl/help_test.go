package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpCommand: 'rtrctl help CMD [SUB]' prints what 'CMD [SUB] --help'
// does; an unknown command is a usage error naming it.
func TestHelpCommand(t *testing.T) {
	for _, path := range [][]string{{"read"}, {"store", "inspect"}, {"wait-recent"}} {
		want := mustRun(t, "", append(path, "--help")...)
		if got := mustRun(t, "", append([]string{"help"}, path...)...); got != want || !strings.Contains(got, "rtrctl "+strings.Join(path, " ")) {
			t.Errorf("rtrctl help %v:\n%s\nwant:\n%s", path, got, want)
		}
	}
	if got := mustRun(t, "", "help"); !strings.Contains(got, "COMMANDS:") || !strings.Contains(got, "completion") {
		t.Errorf("rtrctl help:\n%s", got)
	}
	for _, bad := range [][]string{{"help", "stor"}, {"help", "store", "inspectt"}} {
		_, stderr, code := runCLI(t, "", bad...)
		if code != exitUsage || !strings.Contains(stderr, `unknown command "`+strings.Join(bad[1:], " ")+`"`) {
			t.Errorf("rtrctl %v: exit %d: %s", bad, code, stderr)
		}
	}
}

// TestCompletion: the bash script, sourced in a real bash, completes
// commands, subcommands and flags from rtrctl itself; zsh and fish scripts
// name rtrctl.
func TestCompletion(t *testing.T) {
	bin := rtrctlBin(t)
	script := mustRun(t, "", "completion", "bash")
	complete := func(words ...string) string {
		t.Helper()
		// COMP_WORDS as bash sets it for "rtrctl words...<TAB>".
		cmd := exec.Command("bash", "--norc", "-c", script+`
COMP_WORDS=(rtrctl "$@"); COMP_CWORD=$#; _rtrctl_complete; echo "${COMPREPLY[*]}"`, "bash")
		cmd.Args = append(cmd.Args, words...)
		cmd.Env = append(cmd.Environ(), "PATH="+filepath.Dir(bin)+":/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"wa"}, "wait-recent"},
		{[]string{"store", "i"}, "inspect"},
		{[]string{"read", "--as"}, "--as-of"},
		{[]string{"read", "./data", "public.t", "--fo"}, "--format"},
		{[]string{"ingest", "--sour"}, "--source --source-id"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		if got := mustRun(t, "", "completion", shell); !strings.Contains(got, "rtrctl") || len(got) < 200 {
			t.Errorf("completion %s:\n%s", shell, got)
		}
	}
	if _, stderr, code := runCLI(t, "", "completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, `no completion for shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d: %s", code, stderr)
	}
}
