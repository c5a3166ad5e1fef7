#!/usr/bin/env bash
# make bench-scale: time and peak RSS of rtrctl's whole-collection commands
# at growing sizes, beside psql COPY in the same run, against a throwaway
# PostgreSQL 15 (the one `make test` uses). Not part of `make test`.
#
#   make bench-scale                       # 1M and 10M rows
#   make bench-scale BENCH_ROWS=3000000    # 1M and 3M rows
#   SIZES="100000" scripts/bench-scale.sh  # any list of sizes
#   ONLY=snapshot-kill SIZES=10000000 scripts/bench-scale.sh
#                                          # only the SIGKILL-at-50% resume
#   ONLY=mariadb-snapshot SIZES="1000000 3000000" scripts/bench-scale.sh
#                                          # only the MariaDB initial snapshot
#   ONLY=txn SIZES=3000000 scripts/bench-scale.sh
#                                          # only the ingest snapshot and the
#                                          # all-rows transaction
#   ONLY=resnapshot SIZES="1000000 3000000" scripts/bench-scale.sh
#                                          # only a mid-stream --resnapshot
#   ONLY=read KEEP_STORE=/tmp/keep SIZES=3000000 scripts/bench-scale.sh
#                                          # only the ingest steps and the
#                                          # reads; the store is kept in
#                                          # /tmp/keep/stN (any mode)
#
# Prints Markdown (docs/benchmarks.md, "Bounded memory at scale"); raw
# /usr/bin/time output goes to bench-results/scale-*.txt.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
RTRCTL=${RTRCTL:-bin/rtrctl}
ROWS=${BENCH_ROWS:-10000000}
SIZES=${SIZES:-"1000000 $ROWS"}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
for tool in "$PG_BIN/psql" /usr/bin/time "$RTRCTL"; do
	[ -x "$tool" ] || { echo "bench-scale.sh: $tool is missing (Debian packages postgresql-15 and time; make build)" >&2; exit 1; }
done
out=bench-results
mkdir -p "$out"
work=$(mktemp -d /tmp/rtr-bench-scale.XXXXXX)
services="$work/services"
ingest_pid=
cleanup() {
	# (a child too: an ingest under /usr/bin/time)
	[ -n "$ingest_pid" ] && kill -INT "$ingest_pid" $(pgrep -P "$ingest_pid") 2>/dev/null && wait "$ingest_pid" 2>/dev/null
	go run ./internal/testenv/cmd/rtr-services down "$services" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
log="$out/scale.log"
: > "$log"
go build -o "$work/benchscale" ./scripts/benchscale
go run ./internal/testenv/cmd/rtr-services up "$services" > /dev/null 2>> "$log"
# shellcheck disable=SC1091
source "$services/env"
psql() { "$PG_BIN/psql" "$@"; }
psql "$RTR_TEST_PG_DSN" -Xq -c "CREATE DATABASE bench_scale"
# The same server, database bench_scale (the DSN, password included, is never printed).
DSN=$(printf '%s' "$RTR_TEST_PG_DSN" | sed 's#/[^/?]*?#/bench_scale?#')
sql() { psql "$DSN" -Xq -v ON_ERROR_STOP=1 "$@" >> "$log"; }
lsn() { psql "$DSN" -XAtc "SELECT pg_current_wal_insert_lsn()"; }
lsn2int() { echo $(( (16#${1%/*} << 32) + 16#${1#*/} )); }
now() { date +%s.%N; }
cols="id bigint PRIMARY KEY, n int NOT NULL, name text, price float8, at timestamptz, ok bool"
rows() { echo "SELECT i, i % 1000, 'name number ' || i, i * 0.25, '2024-01-01'::timestamptz + i * interval '1 second', i % 2 = 0 FROM generate_series($1, $2) i"; }

# measure NAME CMD...: runs CMD (stdout to /dev/null) under /usr/bin/time
# and appends "NAME seconds peak-KiB" to $work/m.txt.
measure() {
	local name=$1
	shift
	/usr/bin/time -f '%e %M' -o "$work/time.txt" "$@" > /dev/null 2>> "$log"
	echo "$name $(cat "$work/time.txt")" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
}
# INGEST_ARGS: more rtrctl ingest arguments (e.g. --txn-memory 33554432);
# IDENTITY=FULL: the table's replica identity (default DEFAULT, which has
# the ingest keep every row's key state in memory).
ingest() { "$RTRCTL" --log-level warn ingest ${INGEST_ARGS:-} --source pg --dsn "$DSN" --publication "pub$N" --slot "slot$N" --store "$work/st$N" 2>> "$log" & ingest_pid=$!; }
# wait_ingested U: until the store holds public.t$N complete below LSN U.
wait_ingested() {
	local want got deadline=$(( $(date +%s) + 3600 ))
	want=$(lsn2int "$1")
	while :; do
		# (no store yet until the ingest made it)
		got=$({ "$RTRCTL" status "$work/st$N" 2>/dev/null || true; } | awk -v c="public.t$N" '$1 == c && $4 ~ /\// { print $4 }')
		[ -n "$got" ] && [ "$(lsn2int "$got")" -ge "$want" ] && return 0
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited; see $log" >&2; return 1; }
		[ "$(date +%s)" -lt "$deadline" ] || { echo "rtrctl ingest did not reach $1" >&2; return 1; }
		sleep 0.2
	done
}
stop_ingest() {
	kill -INT "$ingest_pid"
	wait "$ingest_pid" || { echo "rtrctl ingest exited with status $? after SIGINT; see $log" >&2; return 1; }
	ingest_pid=
}
upper_of() { "$RTRCTL" store inspect "$1" | awk -v c="$2" '$1 == c { print $4 }'; }
# snapshot_kill: an initial snapshot SIGKILLed once half
# its chunks are done (docs/snapshot.md, "Resuming"), then a new ingest:
# its time and peak RSS until the store holds the table, the share of the
# rows it copied again (its "snapshot staged" log line), and a check that
# the table is exact (count and sum of n against upstream).
snapshot_kill() {
	local rec="$work/sk$N/staged/pg/snapshot/snapshot.json" deadline=$(( $(date +%s) + 3600 )) line copied resumed
	"$RTRCTL" --log-level warn ingest --source pg --dsn "$DSN" --publication "pub$N" --slot "sk$N" --store "$work/sk$N" 2>> "$log" & ingest_pid=$!
	until [ -f "$rec" ] && python3 -c 'import json,sys; c=[c for t in json.load(open(sys.argv[1]))["tables"] for c in t["chunks"]]; sys.exit(0 if 2*sum(1 for x in c if x.get("snapshot_lsn")) >= len(c) else 1)' "$rec" 2>/dev/null; do
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited before half its snapshot; see $log" >&2; return 1; }
		[ "$(date +%s)" -lt "$deadline" ] || { echo "the snapshot did not get half through" >&2; return 1; }
		sleep 0.05
	done
	kill -KILL "$ingest_pid"; wait "$ingest_pid" 2>/dev/null || true
	local slog="$work/sk$N.log" s e rss
	s=$(now)
	"$RTRCTL" ingest --source pg --dsn "$DSN" --publication "pub$N" --slot "sk$N" --store "$work/sk$N" 2> "$slog" & ingest_pid=$!
	while ! grep -q 'msg="snapshot done"' "$slog"; do
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited; see $slog" >&2; return 1; }
		sleep 0.1
	done
	e=$(now)
	rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$ingest_pid/status")
	until grep -q 'msg=resume' "$slog"; do sleep 0.1; done # streaming: SIGINT stops it cleanly
	stop_ingest
	line=$(grep -m1 'msg="snapshot staged"' "$slog")
	copied=$(sed -E 's/.* rows_copied=([0-9]+).*/\1/' <<< "$line")
	resumed=$(sed -E 's/.* rows_resumed=([0-9]+).*/\1/' <<< "$line")
	local got want
	got=$("$RTRCTL" read "$work/sk$N" "public.t$N" --format csv | awk -F, 'NR > 1 { n++; s += $2 } END { printf "%d %d", n, s }')
	want=$(psql "$DSN" -XAtF' ' -c "SELECT count(*), sum(n) FROM t$N")
	[ "$got" = "$want" ] || { echo "after the resumed snapshot the store has (rows, sum n) = $got, upstream $want" >&2; return 1; }
	echo "ingest-snapshot-kill50-resume $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }') $rss" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
	echo "- SIGKILL at half of the snapshot, then a new ingest: it copied $copied rows again and resumed $resumed: $(awk -v c="$copied" -v r="$resumed" 'BEGIN { printf "%.1f%%", 100 * c / (c + r) }') of the table copied again; the table is exact (count, sum of n: $got)" >> "$work/notes.txt"
	sql -c "SELECT pg_drop_replication_slot('sk$N')"
	rm -rf "$work/sk$N"
}

# resnapshot: the table's initial snapshot by one ingest, then a new
# ingest with --resnapshot (the table is REPLICA IDENTITY FULL in this
# mode) under /usr/bin/time, from its start until it logs the re-snapshot
# done and the store holds the table past it; then SIGINT. Its peak RSS is
# what the re-snapshot's copy costs (docs/replicate.md, "Re-snapshots").
resnapshot() {
	local rlog="$work/rs$N.log" s e pid got want
	L=$(lsn); ingest; wait_ingested "$L"; stop_ingest
	s=$(now)
	: > "$rlog"
	/usr/bin/time -f '%e %M' -o "$work/time.txt" "$RTRCTL" ingest ${INGEST_ARGS:-} --source pg --dsn "$DSN" --publication "pub$N" --slot "slot$N" --store "$work/st$N" --resnapshot "public.t$N" 2> "$rlog" & ingest_pid=$!
	while ! grep -q 'msg="re-snapshot done"' "$rlog"; do
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited; see $rlog" >&2; return 1; }
		sleep 0.1
	done
	L=$(lsn); wait_ingested "$L"; e=$(now)
	pid=$(pgrep -P "$ingest_pid") # rtrctl, under /usr/bin/time
	kill -INT "$pid"
	wait "$ingest_pid" || { echo "rtrctl ingest exited with status $? after SIGINT; see $rlog" >&2; return 1; }
	ingest_pid=
	got=$("$RTRCTL" read "$work/st$N" "public.t$N" --format csv | awk -F, 'NR > 1 { n++; s += $2 } END { printf "%d %d", n, s }')
	want=$(psql "$DSN" -XAtF' ' -c "SELECT count(*), sum(n) FROM t$N")
	[ "$got" = "$want" ] || { echo "after the re-snapshot the store has (rows, sum n) = $got, upstream $want" >&2; return 1; }
	echo "ingest-resnapshot $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }') $(cut -d' ' -f2 "$work/time.txt")" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
	echo "- --resnapshot: the table is exact after it (count, sum of n: $got); $(grep -m1 'msg="re-snapshot done"' "$rlog" | grep -o 'rows=[0-9]*')" >> "$work/notes.txt"
	sql -c "SELECT pg_drop_replication_slot('slot$N')"
}

# mariadb_snapshot: the initial snapshot of a MariaDB table of the same
# shape (bigint, int, varchar, double, timestamp(6), tinyint), staged and
# resumable (docs/snapshot.md, "Resuming"): \`mariadb --quick -e "SELECT *"\`
# as the baseline, then \`rtrctl ingest --source mysql\` from its start
# until it logs the snapshot done (VmHWM then).
my_user=${RTR_TEST_MYSQL_DSN%%:*}; my_rest=${RTR_TEST_MYSQL_DSN#*:}; my_pass=${my_rest%%@tcp*}
my_hp=${my_rest#*tcp(}; my_hp=${my_hp%%)*}; my_host=${my_hp%:*}; my_port=${my_hp#*:}
mysql_() { MYSQL_PWD=$my_pass mariadb -u"$my_user" -h"$my_host" -P"$my_port" "$@"; }
mariadb_snapshot() {
	command -v mariadb > /dev/null || { echo "bench-scale.sh: mariadb (Debian package mariadb-client) is missing" >&2; return 1; }
	mysql_ -e "CREATE DATABASE IF NOT EXISTS bench_scale"
	mysql_ bench_scale -e "CREATE TABLE m$N (id bigint PRIMARY KEY, n int NOT NULL, name varchar(40), price double, at timestamp(6), ok tinyint) ENGINE=InnoDB; INSERT INTO m$N SELECT seq, seq % 1000, CONCAT('name number ', seq), seq * 0.25, TIMESTAMP('2024-01-01') + INTERVAL seq SECOND, seq % 2 FROM seq_1_to_$N; ANALYZE TABLE m$N" >> "$log"
	mysql_ --quick bench_scale -e "SELECT * FROM m$N" > /dev/null # warm up
	measure "mariadb-select" env MYSQL_PWD="$my_pass" mariadb -u"$my_user" -h"$my_host" -P"$my_port" --quick bench_scale -e "SELECT * FROM m$N"
	local mlog="$work/my$N.log" s e rss
	s=$(now)
	"$RTRCTL" ingest --source mysql --dsn "mysql://$my_user:$my_pass@$my_host:$my_port/bench_scale" --tables "bench_scale.m$N" --store "$work/my$N" --compact-every 0 2> "$mlog" & ingest_pid=$!
	while ! grep -q 'msg="snapshot done"' "$mlog"; do
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited; see $mlog" >&2; return 1; }
		sleep 0.05
	done
	e=$(now)
	rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$ingest_pid/status")
	stop_ingest
	echo "ingest-snapshot-mariadb $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }') $rss" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
	mysql_ bench_scale -e "DROP TABLE m$N"
	rm -rf "$work/my$N"
}

echo "## Bounded memory at scale: (bigint, int, text, float8, timestamptz, bool)"
echo
echo "- $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(free -g | awk '/Mem:/ {print $2}') GiB; $(go version | cut -d' ' -f3)"
echo "- $(date -u +%Y-%m-%dT%H:%MZ); load average at start: $(cut -d' ' -f1-3 /proc/loadavg); PostgreSQL 15 on the same machine"
echo
for N in $SIZES; do
	: > "$work/m.txt"
	: > "$work/notes.txt"
	: > "$out/scale-$N.txt"
	identity=${IDENTITY:-DEFAULT}
	[ "${ONLY:-}" = resnapshot ] && identity=FULL
	sql -c "CREATE TABLE t$N ($cols)" -c "ALTER TABLE t$N REPLICA IDENTITY $identity" -c "INSERT INTO t$N $(rows 1 "$N")" -c "VACUUM ANALYZE t$N" -c "CREATE PUBLICATION pub$N FOR TABLE t$N"
	psql "$DSN" -Xqc "COPY t$N TO STDOUT (FORMAT csv)" > /dev/null # warm up
	measure "psql-copy-csv" "$PG_BIN/psql" "$DSN" -Xqc "COPY t$N TO STDOUT (FORMAT csv)"
	measure "psql-copy-binary" "$PG_BIN/psql" "$DSN" -Xqc "COPY t$N TO STDOUT (FORMAT binary)"
	case ${ONLY:-} in "" | snapshot-kill) snapshot_kill ;; esac
	[ "${ONLY:-}" = resnapshot ] && resnapshot
	if [ -z "${ONLY:-}" ] || [ "$ONLY" = txn ] || [ "$ONLY" = read ]; then
	# Ingest: the initial snapshot, until the store holds it.
	L=$(lsn)
	s=$(now); ingest; wait_ingested "$L"; e=$(now)
	rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$ingest_pid/status")
	stop_ingest
	echo "ingest-snapshot $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }') $rss" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
	old=$(( $(upper_of "$work/st$N" "public.t$N") - 1 ))
	# One transaction updating every row (2N changes), ingested by a new
	# process (the snapshot is durable, so it only streams): its peak RSS
	# is what waiting for the commit record costs.
	sql -c "UPDATE t$N SET n = n + 1"
	L=$(lsn)
	s=$(now); ingest; wait_ingested "$L"; e=$(now)
	rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$ingest_pid/status")
	stop_ingest
	echo "ingest-txn-update-all $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }') $rss" | tee -a "$out/scale-$N.txt" >> "$work/m.txt"
	fi
	if [ -z "${ONLY:-}" ] || [ "$ONLY" = read ]; then
	# History: 1% of the rows updated, so that an old time differs.
	sql -c "UPDATE t$N SET n = n + 1 WHERE id % 100 = 0"
	L=$(lsn); ingest; wait_ingested "$L"; stop_ingest
	measure "read-csv" "$RTRCTL" read "$work/st$N" "public.t$N" --format csv
	measure "read-arrow" "$RTRCTL" read "$work/st$N" "public.t$N" --format arrow
	measure "read-as-of-old-csv" "$RTRCTL" read "$work/st$N" "public.t$N" --format csv --as-of "$old"
	fi
	if [ -z "${ONLY:-}" ]; then
	# Compaction of two runs of N rows each: the collection as of the old
	# time, then as of now, appended to a new store, merged with since
	# advanced to the upper (so every row's two copies consolidate).
	latest=$(( $(upper_of "$work/st$N" "public.t$N") - 1 ))
	"$RTRCTL" read "$work/st$N" "public.t$N" --format arrow --as-of "$old" | "$work/benchscale" close "public.t$N" $((old + 1)) > "$work/a.arrow"
	"$RTRCTL" read "$work/st$N" "public.t$N" --format arrow | "$work/benchscale" close "public.t$N" $((latest + 1)) > "$work/b.arrow"
	"$RTRCTL" --log-level warn store append "$work/cp$N" < "$work/a.arrow" 2>> "$log"
	"$RTRCTL" --log-level warn store append "$work/cp$N" < "$work/b.arrow" 2>> "$log"
	rm -f "$work/a.arrow" "$work/b.arrow"
	measure "store-compact-2x$N" "$RTRCTL" --log-level warn store compact "$work/cp$N" --retain 1ms
	"$RTRCTL" store inspect "$work/cp$N" >> "$out/scale-$N.txt"
	rm -rf "$work/cp$N"
	fi
	[ -z "${ONLY:-}" ] || [ "$ONLY" = txn ] || [ "$ONLY" = read ] && sql -c "SELECT pg_drop_replication_slot('slot$N')"
	case ${ONLY:-} in "" | mariadb-snapshot) mariadb_snapshot ;; esac
	sql -c "DROP PUBLICATION pub$N" -c "DROP TABLE t$N"
	if [ -n "${KEEP_STORE:-}" ] && [ -d "$work/st$N" ]; then
		mkdir -p "$KEEP_STORE" && rm -rf "${KEEP_STORE:?}/st$N" && mv "$work/st$N" "$KEEP_STORE/"
	fi
	rm -rf "$work/st$N"
	csv=$(awk '$1 == "psql-copy-csv" { print $2 }' "$work/m.txt")
	echo "### $N rows"
	echo
	echo "| command | seconds | rows/s | time vs psql COPY csv | peak RSS |"
	echo "| --- | --- | --- | --- | --- |"
	while read -r name secs kib; do
		n=$N
		[ "$name" = "store-compact-2x$N" ] && n=$((2 * N))
		awk -v name="$name" -v s="$secs" -v k="$kib" -v n="$n" -v c="$csv" 'BEGIN {
			printf "| %s | %.2f | %.0f | %.2fx | %.0f MiB |\n", name, s, n / s, s / c, k / 1024 }'
	done < "$work/m.txt"
	echo
	cat "$work/notes.txt"
	[ -s "$work/notes.txt" ] && echo
done
echo "(psql-copy-*: \`psql -c \"COPY t TO STDOUT (FORMAT csv|binary)\" > /dev/null\`; read-*: \`rtrctl read STORE public.t --format csv|arrow [--as-of OLD] > /dev/null\`, OLD the time of the initial snapshot, before 1% of the rows were updated; ingest-snapshot: \`rtrctl ingest\` from start until \`rtrctl status\` shows the snapshot complete (VmHWM); ingest-txn-update-all: a new \`rtrctl ingest\` from start until it has committed one \`UPDATE t SET n = n + 1\` of all N rows (2N changes) made while none ran (VmHWM); mariadb-select: \`mariadb --quick -e 'SELECT * FROM m'\` > /dev/null of the same rows in MariaDB 10.11; ingest-snapshot-mariadb: \`rtrctl ingest --source mysql\` from start until it logs the snapshot done (VmHWM); ingest-snapshot-kill50-resume: \`rtrctl ingest\` SIGKILLed once half the chunks of its initial snapshot are recorded, then a new one, from its start until it logs the snapshot done (VmHWM); ingest-resnapshot: a new \`rtrctl ingest --resnapshot\` of the table (REPLICA IDENTITY FULL), from its start until the store holds the re-snapshot; store-compact-2xN: \`rtrctl store compact --retain 1ms\` of two runs of N rows each (rows/s counts the 2N input rows). Peak RSS from \`/usr/bin/time -f %M\`. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).)"
