package main

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rtrctl/rtrctl/pkg/keystate"
	"github.com/urfave/cli/v2"
)

// The memory budget (--memory-limit, docs/operations.md "Memory"): one
// number that bounds the process. It is the Go runtime's soft memory limit
// (debug.SetMemoryLimit: the collector works harder as the heap nears it),
// and the budgets of the buffers that grow with the data are cut from it
// unless their own flags say otherwise: --txn-memory (updates not yet
// bound, beyond which they are staged in the store) and --state-cache
// (a Kafka upsert topic's state cache; the state is on disk). Everything else
// rtrctl holds is bounded by construction (row groups of at most 64k
// rows, files of at most 128 MiB written as they stream, snapshot chunks).

// memoryLimitFlag is the global --memory-limit.
var memoryLimitFlag = &cli.StringFlag{Name: "memory-limit", EnvVars: []string{"RTR_MEMORY_LIMIT"},
	Usage: "the memory the process may use, e.g. 512MiB, 4GiB (default: GOMEMLIMIT if set, else a quarter of the machine's memory or cgroup limit, at least 256MiB and at most 512MiB); the Go runtime's soft limit, and what --txn-memory defaults are cut from"}

// Budget shares of the limit.
const (
	minMemoryLimit = 256 << 20
	// maxDefaultMemoryLimit caps the default: every buffer that grows
	// with the data is bounded by its share or by construction, so what a
	// larger limit buys is mostly garbage the collector leaves (a Kafka
	// upsert ingest of 10M keys: 1.6-1.9 GiB RSS under a 5.9 GiB limit,
	// 747 MiB under 512 MiB, at the same CPU per record).
	maxDefaultMemoryLimit = 512 << 20
	// txnMemoryShare: --txn-memory defaults to limit/txnMemoryShare, at
	// most defaultTxnMemory.
	txnMemoryShare   = 16
	defaultTxnMemory = 32 << 20
	// stateCacheShare: --state-cache (Kafka upsert, per topic) defaults
	// to limit/stateCacheShare, at most keystate.DefaultCacheBytes.
	stateCacheShare = 8
)

// memoryBudget is the process's memory limit and where it came from.
type memoryBudget struct {
	limit int64
	from  string // "--memory-limit", "GOMEMLIMIT" or "machine"
}

// theMemory is set by setupMemory before any command runs.
var theMemory = memoryBudget{limit: minMemoryLimit, from: "machine"}

// setupMemory reads --memory-limit (or GOMEMLIMIT, or the machine) and
// sets the runtime's soft limit to it.
func setupMemory(c *cli.Context) error {
	switch s := c.String(memoryLimitFlag.Name); {
	case s != "":
		n, err := parseSize(s)
		if err != nil {
			return usagef("pass a size such as 512MiB or 4GiB", "--memory-limit: %v", err)
		}
		if n < 64<<20 {
			return usagef("pass at least 64MiB", "--memory-limit %s is too small to run in", s)
		}
		theMemory = memoryBudget{limit: n, from: "--memory-limit"}
		debug.SetMemoryLimit(n)
	case os.Getenv("GOMEMLIMIT") != "":
		// The runtime has read it already.
		theMemory = memoryBudget{limit: debug.SetMemoryLimit(-1), from: "GOMEMLIMIT"}
	default:
		theMemory = memoryBudget{limit: defaultMemoryLimit(machineMemory()), from: "machine"}
		debug.SetMemoryLimit(theMemory.limit)
	}
	return nil
}

// defaultMemoryLimit is the limit on a machine (or cgroup) of machine
// bytes: a quarter of it, within [minMemoryLimit, maxDefaultMemoryLimit].
func defaultMemoryLimit(machine int64) int64 {
	return min(max(machine/4, minMemoryLimit), maxDefaultMemoryLimit)
}

// txnMemory is the --txn-memory of an ingest: the flag, or the budget's
// share.
func (m memoryBudget) txnMemory(c *cli.Context) (int64, error) {
	return m.share(c, "txn-memory", txnMemoryShare, defaultTxnMemory)
}

// stateCache is the --state-cache of a Kafka upsert ingest: the flag, or
// the budget's share. A flag over half the limit is refused.
func (m memoryBudget) stateCache(c *cli.Context) (int64, error) {
	return m.share(c, "state-cache", stateCacheShare, keystate.DefaultCacheBytes)
}

// share is the value of the budget flag name: the flag, or the limit's
// 1/part, at most most. A flag over half the limit is refused.
func (m memoryBudget) share(c *cli.Context, name string, part, most int64) (int64, error) {
	if !c.IsSet(name) {
		return min(m.limit/part, most), nil
	}
	n := c.Int64(name)
	if n > m.limit/2 {
		return 0, usagef(fmt.Sprintf("lower --%s, or raise --memory-limit (now %s, from %s) to at least twice it", name, formatSize(m.limit), m.from),
			"--%s %d is over half the memory limit", name, n)
	}
	return n, nil
}

// attrs are the log attributes of the budget.
func (m memoryBudget) attrs() []any {
	return []any{slog.String("memory_limit", formatSize(m.limit)), slog.String("memory_limit_from", m.from)}
}

// parseSize parses a byte size: a number with an optional unit, binary
// (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB), B or none for bytes.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult := map[string]float64{"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12}[strings.ToLower(unit)]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 512MiB, 4GiB or a number of bytes)", s)
	}
	if v*mult >= 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v * mult), nil
}

// formatSize prints n bytes in the largest binary unit it reaches, to a
// tenth.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return strings.TrimSuffix(strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64), ".0") + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// machineMemory is the memory the process can have: the machine's
// (/proc/meminfo MemTotal), or its cgroup's limit (memory.max, cgroup v2)
// when lower. 0 when neither can be read.
func machineMemory() int64 {
	var total int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					total = kb << 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}
