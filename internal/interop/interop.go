// Package interop runs the Node.js programs in the repository's interop/
// directory, which read and write rtrctl's formats with Apache Arrow JS (an
// independent Arrow implementation). Tests use it to prove that what rtrctl
// writes other Arrow implementations read, and the other way round.
//
// The helpers install interop/node_modules with npm when it is missing
// (from package-lock.json, with "npm ci"), safely when several test
// binaries do so at once. Missing node or npm is an error, never a skip.
package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Dir returns the absolute path of the interop/ directory: it walks up from
// the working directory to the module root (the directory holding go.mod
// and interop/package.json).
func Dir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find interop dir: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) && fileExists(filepath.Join(d, "interop", "package.json")) {
			return filepath.Join(d, "interop"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find interop dir: no go.mod with interop/package.json above %s: run from inside the rtrctl repository", wd)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Ensure checks that node and npm are installed and that the interop
// project's dependencies are, installing them with npm if needed. It
// returns the interop directory.
func Ensure(ctx context.Context) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("ensure node: %s is not on PATH: install Node.js 18 or later (e.g. apt-get install nodejs npm) to run the interop tests: %w", tool, err)
		}
	}
	if installed(dir) {
		return dir, nil
	}
	if err := install(ctx, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// installed reports whether every dependency package.json names is in
// node_modules (a node_modules installed before a dependency was added
// lacks it).
func installed(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return false
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if json.Unmarshal(b, &pkg) != nil || len(pkg.Dependencies) == 0 {
		return false
	}
	for name := range pkg.Dependencies {
		if !fileExists(filepath.Join(dir, "node_modules", filepath.FromSlash(name), "package.json")) {
			return false
		}
	}
	return true
}

// install runs npm in a private copy of the project and moves the result
// into place with one rename, so concurrent installs cannot see or leave a
// half-written node_modules.
func install(ctx context.Context, dir string) error {
	tmp, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		return fmt.Errorf("install node modules: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"install", "--no-audit", "--no-fund", "--ignore-scripts"}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) && f == "package-lock.json" {
			continue
		}
		if err != nil {
			return fmt.Errorf("install node modules: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return fmt.Errorf("install node modules: %w", err)
		}
		if f == "package-lock.json" {
			args = []string{"ci", "--no-audit", "--no-fund", "--ignore-scripts"}
		}
	}
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install node modules: npm %s in %s failed (is the npm registry reachable? run it by hand to see): %w\n%s", strings.Join(args, " "), dir, err, out.Bytes())
	}
	if installed(dir) {
		return nil // another installer won the race
	}
	// A stale node_modules (missing a dependency) moves aside first.
	if fileExists(filepath.Join(dir, "node_modules")) {
		if err := os.Rename(filepath.Join(dir, "node_modules"), filepath.Join(tmp, "node_modules.old")); err != nil && !installed(dir) {
			return fmt.Errorf("install node modules: move the stale node_modules aside: %w", err)
		}
	}
	if err := os.Rename(filepath.Join(tmp, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		if installed(dir) {
			return nil // another installer won the race
		}
		return fmt.Errorf("install node modules: %w", err)
	}
	return nil
}

// Run runs node on script (a file name in interop/) with args and returns
// its standard output. A non-zero exit is an error that carries stderr.
func Run(ctx context.Context, script string, args ...string) ([]byte, error) {
	dir, err := Ensure(ctx)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run node %s: %w\n%s", script, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// RunJSON runs script like Run and decodes its standard output, a JSON
// document, into v.
func RunJSON(ctx context.Context, v any, script string, args ...string) error {
	out, err := Run(ctx, script, args...)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode output of node %s: %w\n%s", script, err, out)
	}
	return nil
}

// MustRun is Run for tests: it fails t on error.
func MustRun(t testing.TB, script string, args ...string) []byte {
	t.Helper()
	out, err := Run(t.Context(), script, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// MustRunJSON is RunJSON for tests: it fails t on error.
func MustRunJSON(t testing.TB, v any, script string, args ...string) {
	t.Helper()
	if err := RunJSON(t.Context(), v, script, args...); err != nil {
		t.Fatal(err)
	}
}

// Field is a field of a schema as the interop scripts print it.
type Field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// Table is what read-file.mjs prints for a file and read-pipe.mjs for each
// stream: the schema metadata, the fields, and the values column by column.
// Values are JSON: int64 and uint64 as decimal strings (they are BigInt in
// JavaScript), binary as hex strings, null as nil, nested values as arrays
// and objects.
type Table struct {
	Metadata map[string]string `json:"metadata"`
	Fields   []Field           `json:"fields"`
	Batches  int               `json:"batches"`
	Rows     int               `json:"rows"`
	Columns  map[string][]any  `json:"columns"`
}

// ReadFile runs read-file.mjs on an Arrow IPC file-format file.
func ReadFile(t testing.TB, path string) Table {
	t.Helper()
	var tab Table
	MustRunJSON(t, &tab, "read-file.mjs", path)
	return tab
}

// ReadPipe runs read-pipe.mjs on a pipe and returns its streams in order.
func ReadPipe(t testing.TB, path string) []Table {
	t.Helper()
	var out struct {
		Streams []Table `json:"streams"`
	}
	MustRunJSON(t, &out, "read-pipe.mjs", path)
	return out.Streams
}
