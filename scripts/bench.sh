#!/usr/bin/env bash
# make bench: the benchmark suite. Every rtrctl figure is printed beside a
# baseline measured in the same run, as a ratio. Results go to stdout as
# Markdown (paste into docs/benchmarks.md) and to bench-results/ as raw
# output.
set -euo pipefail
cd "$(dirname "$0")/.."
RTRCTL=${RTRCTL:-bin/rtrctl}
out=bench-results
mkdir -p "$out"
work=$(mktemp -d /tmp/rtr-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
rate() { awk -v n="$1" -v s="$2" -v e="$3" 'BEGIN { printf "%.0f", n / (e - s) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "## Machine"
echo
echo "- $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "- $(free -g | awk '/Mem:/ {print $2}') GiB memory; $(go version)"
echo "- $(date -u +%Y-%m-%dT%H:%MZ)"
echo

echo "## Store micro-benchmarks (GOMAXPROCS=1)"
echo
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkAppend|BenchmarkReadAsOf' -benchtime 3x ./pkg/store/ | tee "$out/store.txt" >/dev/null
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkWriteRead' -benchtime 3x ./pkg/pipe/ | tee "$out/pipe.txt" >/dev/null
echo '| benchmark | rows/s |'
echo '| --- | --- |'
grep -h '^Benchmark' "$out/store.txt" "$out/pipe.txt" | awk '{ for (i = 1; i <= NF; i++) if ($(i+1) == "rows/s") printf "| %s | %.2fM |\n", $1, $i / 1e6 }'
echo

echo "## Whole commands: 1M rows of (int64, ~20-byte string, float64)"
echo
echo '| input | baseline: decode the pipe (rows/s) | store append (rows/s) | ratio | read --format arrow (rows/s) | ratio |'
echo '| --- | --- | --- | --- | --- | --- |'
go build -o "$work/benchtool" ./internal/benchtool
for pct in 0 10; do
	"$work/benchtool" gen-pipe 1000000 "$pct" > "$work/in.arrow"
	s=$(now); GOMAXPROCS=1 "$work/benchtool" decode < "$work/in.arrow" >/dev/null; e=$(now)
	base=$(rate 1000000 "$s" "$e")
	rm -rf "$work/store"
	s=$(now); GOMAXPROCS=1 "$RTRCTL" --log-level warn store append "$work/store" < "$work/in.arrow"; e=$(now)
	app=$(rate 1000000 "$s" "$e")
	s=$(now); GOMAXPROCS=1 "$RTRCTL" read "$work/store" bench.rows --format arrow > "$work/out.arrow"; e=$(now)
	rd=$(rate 1000000 "$s" "$e")
	echo "| ${pct}% retracted | $base | $app | $(ratio "$app" "$base") | $rd | $(ratio "$rd" "$base") |"
done
echo
echo "(All three run as built binaries with GOMAXPROCS=1; store append includes sorting, consolidation and fsync; read includes consolidation.)"
