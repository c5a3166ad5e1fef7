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
	cmd := exec.CommandContext(t.Context(), gotool, "list", "-deps", "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", ".")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	var deps []string
	importers := map[string][]string{} // package -> the packages importing it
	for _, line := range strings.Fields(string(out)) {
		pkg, imports, _ := strings.Cut(line, ":")
		deps = append(deps, pkg)
		for _, imp := range strings.Split(imports, ",") {
			importers[imp] = append(importers[imp], pkg)
		}
	}
	if len(deps) < 10 || deps[len(deps)-1] != "github.com/rtrctl/rtrctl/cmd/rtrctl" {
		t.Fatalf("go list -deps . gave %d packages ending in %q, want the rtrctl command's dependencies", len(deps), deps[len(deps)-1])
	}
	for _, pkg := range deps {
		if pkg == "github.com/rtrctl/rtrctl/internal/testenv" {
			t.Errorf("rtrctl links %s; import internal/servers, not internal/testenv, from non-test code", pkg)
		}
	}
	// Apache Thrift (the Parquet footer's encoding, under pqarrow) imports
	// package testing for a logger type; nothing else may. Importing it
	// registers no flags (testing.Init does, which nothing calls).
	for _, by := range importers["testing"] {
		if by != "github.com/apache/thrift/lib/go/thrift" {
			t.Errorf("%s imports package testing into rtrctl; import internal/servers, not internal/testenv, from non-test code", by)
		}
	}
}
