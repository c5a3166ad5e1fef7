package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestCode keeps the test framework out of the shipped
// binary: package testing registers its flags and pulls in code that has
// no business in rtrctl, and it arrives through internal/testenv (bench
// needs servers, not tests: it imports internal/servers).
func TestBinaryLinksNoTestCode(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		gotool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(t.Context(), gotool, "list", "-deps", ".")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || deps[len(deps)-1] != "github.com/rtrctl/rtrctl/cmd/rtrctl" {
		t.Fatalf("go list -deps . gave %d packages ending in %q, want the rtrctl command's dependencies", len(deps), deps[len(deps)-1])
	}
	for _, pkg := range deps {
		switch pkg {
		case "testing", "github.com/rtrctl/rtrctl/internal/testenv":
			t.Errorf("rtrctl links %s; import internal/servers, not internal/testenv, from non-test code", pkg)
		}
	}
}
