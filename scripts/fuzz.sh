#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 10s):
# go test -fuzz takes one target of one package at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
grep -rl --include='*_test.go' '^func Fuzz' pkg internal cmd | xargs -n1 dirname | sort -u | while read -r dir; do
	grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u | while read -r target; do
		echo "== $dir $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir"
	done
done
