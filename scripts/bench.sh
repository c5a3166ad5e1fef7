#!/usr/bin/env bash
# make bench: the benchmark suite. Every rtrctl figure is printed beside a
# baseline measured in the same run, as a ratio. Results go to stdout as
# Markdown (paste into docs/benchmarks.md) and to bench-results/ as raw
# output.
set -euo pipefail
shopt -s inherit_errexit
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
echo "- $(date -u +%Y-%m-%dT%H:%MZ); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

echo "## Store micro-benchmarks (GOMAXPROCS=1)"
echo
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkAppend|BenchmarkReadAsOf' -benchtime 3x ./pkg/store/ | tee "$out/store.txt" >/dev/null
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkWriteRead' -benchtime 3x ./pkg/pipe/ | tee "$out/pipe.txt" >/dev/null
echo '| benchmark | rows/s |'
echo '| --- | --- |'
grep -h '^Benchmark' "$out/store.txt" "$out/pipe.txt" | awk '{ for (i = 1; i <= NF; i++) if ($(i+1) == "rows/s") printf "| %s | %.2fM |\n", $1, $i / 1e6 }'
echo

echo "## Store backends: 1Mi rows in 8 commits, then read as of the last time (GOMAXPROCS=1)"
echo
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkBackends' -benchtime 3x ./pkg/store/ | tee "$out/backends.txt" >/dev/null
echo '| backend | append (rows/s) | ratio to local | read (rows/s) | ratio to local |'
echo '| --- | --- | --- | --- | --- |'
awk '/^BenchmarkBackends\// {
	split($1, p, "/"); for (i = 1; i <= NF; i++) if ($(i+1) == "rows/s") r[p[2] "/" p[3]] = $i
	if (!(p[2] in seen)) { seen[p[2]] = 1; order[++n] = p[2] }
} END {
	for (k = 1; k <= n; k++) { b = order[k]
		printf "| %s | %.2fM | %.2f | %.2fM | %.2f |\n", b, r[b "/append"] / 1e6, r[b "/append"] / r["local/append"], r[b "/read"] / 1e6, r[b "/read"] / r["local/read"]
	}
}' "$out/backends.txt"
echo
echo "(gofakes3 in-process, versitygw on a loopback port over a local directory: the cost of the S3 protocol, not of a network.)"
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

echo

# ---------------------------------------------------------------------------
# PostgreSQL: rtrctl beside PostgreSQL's own clients, against a throwaway
# server started for this run (the same one `make test` uses).
# ---------------------------------------------------------------------------
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
for tool in "$PG_BIN/pg_recvlogical" /usr/bin/time; do
	[ -x "$tool" ] || { echo "bench.sh: $tool is missing (Debian packages postgresql-15 and time)" >&2; exit 1; }
done
services="$work/services"
cleanup() {
	[ -n "${ingest_pid:-}" ] && kill -INT "$ingest_pid" 2>/dev/null && wait "$ingest_pid" 2>/dev/null
	go run ./internal/testenv/cmd/rtr-services down "$services" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
log="$out/pg.log"
: > "$log"
go run ./internal/testenv/cmd/rtr-services up "$services" > /dev/null 2>> "$log"
# shellcheck disable=SC1091
source "$services/env"
psql "$RTR_TEST_PG_DSN" -Xq -c "CREATE DATABASE bench"
# The same server, database bench (the DSN, password included, is never printed).
DSN=$(printf '%s' "$RTR_TEST_PG_DSN" | sed 's#/[^/?]*?#/bench?#')
sql() { psql "$DSN" -Xq -v ON_ERROR_STOP=1 "$@" >> "$log"; }
lsn() { psql "$DSN" -XAtc "SELECT pg_current_wal_insert_lsn()"; }
lsn2int() { echo $(( (16#${1%/*} << 32) + 16#${1#*/} )); }
secs() { local s e; s=$(now); "$@"; e=$(now); awk -v s="$s" -v e="$e" 'BEGIN { printf "%.2f", e - s }'; }
# median3 runs a command three times and prints the median time in seconds.
median3() { local a b c; a=$(secs "$@"); b=$(secs "$@"); c=$(secs "$@"); printf '%s\n%s\n%s\n' "$a" "$b" "$c" | sort -n | sed -n 2p; }
xratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
cols="id bigint PRIMARY KEY, n int NOT NULL, name text, price float8, at timestamptz, ok bool"
rows() { echo "SELECT i, i % 1000, 'name number ' || i, i * 0.25, '2024-01-01'::timestamptz + i * interval '1 second', i % 2 = 0 FROM generate_series($1, $2) i"; }

echo "## PostgreSQL snapshot: 1M rows of (bigint, int, text, float8, timestamptz, bool)"
echo
echo "(PostgreSQL 15 on the same machine, started for this run; load average now: $(cut -d' ' -f1-3 /proc/loadavg).)"
echo
sql -c "CREATE TABLE snap ($cols)" -c "ALTER TABLE snap REPLICA IDENTITY FULL" \
	-c "INSERT INTO snap $(rows 1 1000000)" -c "VACUUM ANALYZE snap" -c "CREATE PUBLICATION pub_snap FOR TABLE snap"
copy_binary() { psql "$DSN" -Xqc "COPY snap TO STDOUT (FORMAT binary)" > /dev/null; }
snapshot() { "$RTRCTL" --log-level warn snapshot --source pg --dsn "$DSN" --publication pub_snap --slot rtr_snap --parallel "$1" > /dev/null 2>> "$log"; }
copy_binary; snapshot 1 # warm up; creates the slot
base=$(median3 copy_binary)
p1=$(median3 snapshot 1)
p2=$(median3 snapshot 2)
sql -c "SELECT pg_drop_replication_slot('rtr_snap')"
echo '| command (median of 3) | seconds | rows/s | time vs baseline |'
echo '| --- | --- | --- | --- |'
echo "| baseline: \`psql -c \"COPY snap TO STDOUT (FORMAT binary)\" > /dev/null\` | $base | $(awk -v t="$base" 'BEGIN { printf "%.0f", 1e6 / t }') | 1.00x |"
echo "| \`rtrctl snapshot --parallel 1 > /dev/null\` | $p1 | $(awk -v t="$p1" 'BEGIN { printf "%.0f", 1e6 / t }') | $(xratio "$p1" "$base") |"
echo "| \`rtrctl snapshot --parallel 2 > /dev/null\` | $p2 | $(awk -v t="$p2" 'BEGIN { printf "%.0f", 1e6 / t }') | $(xratio "$p2" "$base") |"
echo

echo "## PostgreSQL replication: 1M inserted rows in 10 transactions"
echo
# autovacuum off on the table, so that it does not run during one reader
# and not another.
sql -c "CREATE TABLE chg ($cols) WITH (autovacuum_enabled = off)" -c "ALTER TABLE chg REPLICA IDENTITY FULL" -c "CREATE PUBLICATION pub_chg FOR TABLE chg"
reps="1 2 3"
# Every reader's slot exists before the changes are made: rtrctl replicate
# never advances its slot, so one serves every run; pg_recvlogical and
# ingest confirm theirs, so each run has its own (and ingest its own store).
sql -c "SELECT pg_create_logical_replication_slot('rtr_rep', 'pgoutput')"
for r in $reps; do sql -c "SELECT pg_create_logical_replication_slot('recv$r', 'pgoutput')"; done
ingest() { "$RTRCTL" --log-level warn ingest --source pg --dsn "$DSN" --publication pub_chg --slot "rtr_ing$1" --store "$work/store$1" 2>> "$log" & ingest_pid=$!; }
# wait_ingested R U: wait until store R holds public.chg complete below LSN
# upper U (the collection's frontier in 'rtrctl status').
wait_ingested() {
	local want got deadline=$(( $(date +%s) + 600 ))
	want=$(lsn2int "$2")
	while :; do
		got=$("$RTRCTL" status "$work/store$1" 2>/dev/null | awk '$1 == "public.chg" && $4 ~ /\// { print $4 }')
		[ -n "$got" ] && [ "$(lsn2int "$got")" -ge "$want" ] && return 0
		kill -0 "$ingest_pid" 2>/dev/null || { echo "rtrctl ingest exited; see $log" >&2; return 1; }
		[ "$(date +%s)" -lt "$deadline" ] || { echo "rtrctl ingest did not reach $2 in 600 s" >&2; return 1; }
		sleep 0.2
	done
}
stop_ingest() {
	kill -INT "$ingest_pid"
	wait "$ingest_pid" || { echo "rtrctl ingest exited with status $? after SIGINT; see $log" >&2; return 1; }
	ingest_pid=
}
# Each ingest's definite snapshot of the (still empty) table; then stop it.
for r in $reps; do ingest "$r"; wait_ingested "$r" "$(lsn)"; stop_ingest; done
for k in $(seq 0 9); do sql -c "INSERT INTO chg $(rows $((k * 100000 + 1)) $(((k + 1) * 100000)))"; done
sql -c "CHECKPOINT"
L=$(lsn)
recv() { "$PG_BIN/pg_recvlogical" -d "$DSN" --slot "recv$1" --start --no-loop -o proto_version=1 -o publication_names=pub_chg --plugin=pgoutput --endpos="$2" -f /dev/null 2>> "$log"; }
# replicate FROM TO: time and peak RSS (KiB) of rtrctl replicate.
replicate() {
	/usr/bin/time -f '%e %M' -o "$work/time.txt" "$RTRCTL" --log-level warn replicate --source pg --dsn "$DSN" --publication pub_chg --slot rtr_rep --start-lsn "$1" --stop-at "$2" > /dev/null 2>> "$log"
	cat "$work/time.txt"
}
# ingest_until R U: seconds and peak RSS (KiB) of resuming ingest R until U.
ingest_until() {
	local s e rss
	s=$(now); ingest "$1"; wait_ingested "$1" "$2"; e=$(now)
	rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$ingest_pid/status")
	stop_ingest
	awk -v s="$s" -v e="$e" -v m="$rss" 'BEGIN { printf "%.2f %d\n", e - s, m }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
maxof() { sort -n | tail -1; }
# run_all FROM TO WHAT: the three readers, interleaved, three times each.
run_all() {
	: > "$work/recv.txt"; : > "$work/rep.txt"; : > "$work/ing.txt"
	for r in $reps; do
		secs recv "$r" "$2" >> "$work/recv.txt"; echo >> "$work/recv.txt"
		replicate "$1" "$2" >> "$work/rep.txt"
		ingest_until "$r" "$2" >> "$work/ing.txt"
	done
	for f in recv rep ing; do { echo "# $3: stop at $2"; cat "$work/$f.txt"; } >> "$out/pg-$f.txt"; done
	t_recv=$(median < "$work/recv.txt")
	t_rep=$(cut -d' ' -f1 "$work/rep.txt" | median); rss_rep=$(cut -d' ' -f2 "$work/rep.txt" | maxof)
	t_ing=$(cut -d' ' -f1 "$work/ing.txt" | median); rss_ing=$(cut -d' ' -f2 "$work/ing.txt" | maxof)
}
per_s() { awk -v t="$1" 'BEGIN { printf "%.0f", 1e6 / t }'; }
S=$(psql "$DSN" -XAtc "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'rtr_rep'")
rm -f "$out"/pg-{recv,rep,ing}.txt
run_all "$S" "$L" "10 transactions"
echo '| command (median of 3, interleaved) | seconds | changes/s | time vs baseline | peak RSS (max of 3) |'
echo '| --- | --- | --- | --- | --- |'
echo "| baseline: \`pg_recvlogical --plugin=pgoutput -o proto_version=1 -o publication_names=P --endpos=L -f /dev/null\` | $t_recv | $(per_s "$t_recv") | 1.00x | |"
echo "| \`rtrctl replicate --stop-at L > /dev/null\` | $t_rep | $(per_s "$t_rep") | $(xratio "$t_rep" "$t_recv") | $((rss_rep / 1024)) MiB |"
echo "| \`rtrctl ingest\` (resumed after its empty snapshot) until the store holds everything below L | $t_ing | $(per_s "$t_ing") | $(xratio "$t_ing" "$t_recv") | $((rss_ing / 1024)) MiB |"
echo

echo "## PostgreSQL: one transaction of 1,000,000 inserted rows"
echo
sql -c "INSERT INTO chg $(rows 1000001 2000000)"
sql -c "CHECKPOINT"
L2=$(lsn)
run_all "$L" "$L2" "one transaction"
echo '| command (median of 3, interleaved) | seconds | changes/s | time vs baseline | peak RSS (max of 3) |'
echo '| --- | --- | --- | --- | --- |'
echo "| baseline: \`pg_recvlogical ... --endpos=L2 -f /dev/null\` | $t_recv | $(per_s "$t_recv") | 1.00x | |"
echo "| \`rtrctl replicate --start-lsn L --stop-at L2 > /dev/null\` | $t_rep | $(per_s "$t_rep") | $(xratio "$t_rep" "$t_recv") | $((rss_rep / 1024)) MiB |"
echo "| \`rtrctl ingest\` until the store holds everything below L2 | $t_ing | $(per_s "$t_ing") | $(xratio "$t_ing" "$t_recv") | $((rss_ing / 1024)) MiB |"
echo
echo "(Peak RSS: \`/usr/bin/time -f %M\` for replicate, VmHWM of the running process for ingest. Ingest times run from the process start to the first \`rtrctl status\` poll (every 0.2 s) that shows the collection complete below the stop LSN. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).)"

# ---------------------------------------------------------------------------
# Open-loop load tests (`rtrctl bench`): a producer at a fixed rate, ingest
# as its own process, lag sampled every 100 ms (docs/benchmarks.md, "Load
# tests"). Kafka runs against an in-process broker in the bench process;
# PostgreSQL against the throwaway server started above. About 6 minutes.
# ---------------------------------------------------------------------------
jfield() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
# bench_row NAME JSON: a table row of a bench summary.
bench_row() {
	local j="$2"
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s MiB | %s |\n' "$1" \
		"$(jfield sent <<< "$j")" "$(jfield ingested <<< "$j")" "$(jfield rate <<< "$j" | awk '{ printf "%.0f", $1 }')" \
		"$(jfield lag_p50_seconds <<< "$j" | awk '{ printf "%.3f", $1 }')" "$(jfield lag_p99_seconds <<< "$j" | awk '{ printf "%.3f", $1 }')" \
		"$(jfield max_lag_records <<< "$j")" "$(jfield drain_seconds <<< "$j" | awk '{ printf "%.2f", $1 }')" \
		"$(jfield peak_rss_bytes <<< "$j" | awk '{ printf "%.0f", $1 / 1048576 }')" "$(jfield cpu_seconds <<< "$j" | awk '{ printf "%.1f", $1 }')"
}
bench_head() {
	echo '| run | sent | ingested | rate/s | lag p50 (s) | lag p99 (s) | max lag (records) | drain (s) | ingest peak RSS | ingest CPU (s) |'
	echo '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |'
}
blog="$out/bench.log"
: > "$blog"
echo "## Load test: Kafka, 100,000 records/s for 30 s (100k keys, 100-byte values, 4 partitions)"
echo
echo "(load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
bench_head
for env in none upsert; do
	j=$("$RTRCTL" bench kafka --records-per-second 100000 --num-seconds 30 --envelope "$env" --output json \
		--plot "$out/kafka-$env-100k.png" 2>> "$blog")
	echo "$j" > "$out/kafka-$env-100k.json"
	bench_row "envelope $env" "$j"
done
echo
echo "## Highest Kafka rate with lag p99 < 1 s (15 s per rate; stops at the first rate that misses; a rate also misses when the producer itself fell 0.5 s behind)"
echo
echo '| envelope | rate tried | lag p99 (s) | producer behind (s) | verdict |'
echo '| --- | --- | --- | --- | --- |'
for env in none upsert; do
	best=0
	for r in 100000 200000 300000 400000 500000 600000 700000 800000; do
		if j=$("$RTRCTL" bench kafka --records-per-second "$r" --num-seconds 15 --envelope "$env" --output json 2>> "$blog"); then
			p99=$(jfield lag_p99_seconds <<< "$j"); behind=$(jfield producer_max_behind_seconds <<< "$j" | awk '{ printf "%.2f", $1 }')
		else
			p99=fail; behind=-
		fi
		echo "$j" > "$out/kafka-$env-search-$r.json"
		if [ "$p99" != fail ] && awk -v p="$p99" -v b="$behind" 'BEGIN { exit !(p < 1 && b < 0.5) }'; then
			verdict=ok; best=$r
		else
			verdict=missed
		fi
		printf '| %s | %s | %s | %s | %s |\n' "$env" "$r" "$(awk -v p="$p99" 'BEGIN { if (p == "fail") print p; else printf "%.3f", p }')" "$behind" "$verdict"
		[ "$verdict" = ok ] || break
	done
	echo "| **$env** | **highest with p99 < 1 s: $best/s** | | | |"
done
echo
echo "## Kafka restarts: SIGKILL every 10 s, 100,000 records/s upsert for 30 s"
echo
j=$("$RTRCTL" bench kafka --records-per-second 100000 --num-seconds 30 --envelope upsert --restart-every 10s --output json \
	--plot "$out/kafka-restarts.png" 2>> "$blog")
echo "$j" > "$out/kafka-restarts.json"
bench_head
bench_row "upsert, restart every 10 s" "$j"
echo
echo '| restart at (s) | durable at kill | resumed from (records) | first progress (s) | caught up (s) |'
echo '| --- | --- | --- | --- | --- |'
sed 's/.*"restarts":\[//; s/\].*//; s/},{/}\n{/g' <<< "$j" | while read -r r; do
	printf '| %s | %s | %s | %s | %s |\n' "$(jfield at_seconds <<< "$r" | awk '{ printf "%.1f", $1 }')" "$(jfield durable_at_kill <<< "$r")" \
		"$(jfield resume_records <<< "$r")" "$(jfield first_progress_seconds <<< "$r" | awk '{ printf "%.3f", $1 }')" \
		"$(jfield catch_up_seconds <<< "$r" | awk '{ printf "%.3f", $1 }')"
done
echo
echo "## Load test: PostgreSQL, 500 transactions/s for 20 s (10 rows each, half updates)"
echo
psql "$RTR_TEST_PG_DSN" -Xq -c "CREATE DATABASE bench_load"
j=$("$RTRCTL" bench pg --rate 500 --num-seconds 20 --dsn "$(printf '%s' "$RTR_TEST_PG_DSN" | sed 's#/[^/?]*?#/bench_load?#')" --output json 2>> "$blog")
echo "$j" > "$out/pg-load.json"
echo '| run | sent (txns) | ingested | rate/s | lag p50 (s) | lag p99 (s) | max lag (txns) | drain (s) | ingest peak RSS | ingest CPU (s) |'
echo '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |'
bench_row "500 txn/s" "$j"
echo
echo "(max lag in WAL bytes: $(jfield max_lag_wal_bytes <<< "$j"); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).)"
echo
echo "## MySQL/MariaDB: snapshot vs mariadb-dump, replication vs mariadb-binlog (200k rows, dedicated MariaDB)"
echo
go test ./pkg/snapshot -run '^$' -bench 'BenchmarkMySQL' -benchtime 3x > "$out/mysql.txt" 2>&1 || { cat "$out/mysql.txt" >&2; exit 1; }
echo '| benchmark | ratio metrics (rtrctl time / baseline time) |'
echo '| --- | --- |'
grep '^BenchmarkMySQL' "$out/mysql.txt" | awk '{ line = "| " $1 " |"; for (i = 3; i < NF; i++) if ($(i+1) ~ /^x-/) line = line " " $i " " $(i+1); print line " |" }'
echo
echo "## Kafka ingest vs a raw franz-go consumer (1M and 4M 100-byte records; 100k Debezium JSON events vs a consumer that JSON-decodes them; in-process kfake)"
echo
go test ./pkg/ingest -run '^$' -bench 'BenchmarkKafkaIngest$|BenchmarkKafkaIngestDebezium$' -benchtime 4x > "$out/kafka-ingest.txt" 2>&1 || { cat "$out/kafka-ingest.txt" >&2; exit 1; }
echo '| benchmark | records/s | vs raw |'
echo '| --- | --- | --- |'
grep '^BenchmarkKafkaIngest' "$out/kafka-ingest.txt" | awk '{ r = "-"; n = "-"; for (i = 3; i < NF; i++) { if ($(i+1) == "records/s") n = $i; if ($(i+1) == "x-raw") r = $i } print "| " $1 " | " n " | " r " |" }'
echo
echo "## Kafka ingest into a store on S3 (gofakes3 in process, loopback HTTP) vs a local directory (1M 100-byte records, 100k keys)"
echo
go test ./pkg/ingest -run '^$' -bench 'BenchmarkKafkaIngestS3' -benchtime 3x > "$out/kafka-s3.txt" 2>&1 || { cat "$out/kafka-s3.txt" >&2; exit 1; }
echo '| benchmark | records/s | S3 / local |'
echo '| --- | --- | --- |'
grep '^BenchmarkKafkaIngestS3' "$out/kafka-s3.txt" | awk '{ r = "-"; n = "-"; for (i = 3; i < NF; i++) { if ($(i+1) == "records/s") n = $i; if ($(i+1) == "x-local") r = $i } print "| " $1 " | " n " | " r " |" }'
echo
echo "## Kafka Avro ingest vs a raw franz-go consumer decoding the same Avro with hamba/avro (upsert: 1M records, 100k keys; Debezium: 100k change events)"
echo
go test ./pkg/ingest -run '^$' -bench 'BenchmarkKafkaIngestAvro|BenchmarkKafkaIngestDebeziumAvro' -benchtime 2x > "$out/kafka-avro.txt" 2>&1 || { cat "$out/kafka-avro.txt" >&2; exit 1; }
echo '| benchmark | records/s | vs raw+hamba |'
echo '| --- | --- | --- |'
grep -E '^BenchmarkKafkaIngest(Avro|DebeziumAvro)' "$out/kafka-avro.txt" | awk '{ r = "-"; n = "-"; for (i = 3; i < NF; i++) { if ($(i+1) == "records/s") n = $i; if ($(i+1) == "x-raw") r = $i } print "| " $1 " | " n " | " r " |" }'
