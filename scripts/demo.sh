#!/usr/bin/env bash
# The end-to-end demo on throwaway local servers: PostgreSQL 15, MariaDB
# 10.11 and an in-memory Kafka broker. It writes to each upstream and shows
# each one's visible frontier (rtrctl frontier) before and after the write.
set -euo pipefail
cd "$(dirname "$0")/.."
RTRCTL=${RTRCTL:-bin/rtrctl}

work=$(mktemp -d /tmp/rtr-demo.XXXXXX)
kafka_pid=
ingest_pid=
cleanup() {
	[ -n "$kafka_pid" ] && kill "$kafka_pid" 2>/dev/null || true
	[ -n "$ingest_pid" ] && kill "$ingest_pid" 2>/dev/null && wait "$ingest_pid" 2>/dev/null || true
	go run ./internal/testenv/cmd/rtr-services down "$work/services" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

step() { printf '\n== %s\n' "$*"; }

step "starting throwaway PostgreSQL and MariaDB under $work"
go run ./internal/testenv/cmd/rtr-services up "$work/services" >/dev/null
# shellcheck disable=SC1091
source "$work/services/env"
PG=$RTR_TEST_PG_DSN
MY=$RTR_TEST_MYSQL_DSN
[[ $MY =~ ^([^:]*):([^@]*)@tcp\(([^:]*):([0-9]+)\)/ ]] || { echo "unexpected MySQL DSN form" >&2; exit 1; }
my_user=${BASH_REMATCH[1]} my_pass=${BASH_REMATCH[2]} my_host=${BASH_REMATCH[3]} my_port=${BASH_REMATCH[4]}
mariadb_sql() { MYSQL_PWD=$my_pass mariadb --protocol=tcp -h "$my_host" -P "$my_port" -u "$my_user" -e "$1"; }

step "starting an in-memory Kafka broker (rtrctl dev kafka)"
"$RTRCTL" --log-level warn dev kafka --listen 127.0.0.1:0 --partitions 3 --topic orders >"$work/kafka.addr" &
kafka_pid=$!
for _ in $(seq 50); do [ -s "$work/kafka.addr" ] && break; sleep 0.1; done
BROKERS=$(head -1 "$work/kafka.addr")
echo "broker at $BROKERS"

show() { # label, frontier args...
	local label=$1; shift
	printf '  %-8s %s\n' "$label" "$("$RTRCTL" frontier "$@")"
}

step "PostgreSQL: pg_current_wal_insert_lsn()"
psql -q "$PG" -c "CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, body text)"
show before --source pg --dsn "$PG"
psql -q "$PG" -c "INSERT INTO notes (body) VALUES ('hello')"
show after --source pg --dsn "$PG"
psql -q "$PG" -c "SET synchronous_commit = off; INSERT INTO notes (body) VALUES ('async hello')"
show "async" --source pg --dsn "$PG"

step "MariaDB: @@global.gtid_binlog_pos (domain-server-seq)"
mariadb_sql "CREATE DATABASE IF NOT EXISTS shop; CREATE TABLE IF NOT EXISTS shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, item TEXT)"
show before --source mysql --dsn "$MY"
mariadb_sql "INSERT INTO shop.orders (item) VALUES ('apples')"
show after --source mysql --dsn "$MY"
mariadb_sql "INSERT INTO shop.orders (item) VALUES ('pears')"
show after --source mysql --dsn "$MY"

step "Kafka: last stable offset per partition (partition:next_offset), written with kcat"
show before --source kafka --brokers "$BROKERS" --topic orders
printf 'apples\npears\n' | kcat -P -b "$BROKERS" -t orders -p 1
show after --source kafka --brokers "$BROKERS" --topic orders
printf 'plums\n' | kcat -P -b "$BROKERS" -t orders -p 2
show after --source kafka --brokers "$BROKERS" --topic orders
"$RTRCTL" frontier --source kafka --brokers "$BROKERS" --topic orders --output json

step "The main job: rtrctl ingest keeps a store in step with PostgreSQL"
psql -q -v ON_ERROR_STOP=1 "$PG" <<'SQL'
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint NOT NULL);
CREATE TABLE orders (id int PRIMARY KEY, account int, lines int, placed timestamptz DEFAULT now());
CREATE TABLE order_lines (order_id int, line int, item text, qty int, PRIMARY KEY (order_id, line));
ALTER TABLE accounts REPLICA IDENTITY FULL;
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
INSERT INTO accounts SELECT g, 'owner-' || g, 1000 FROM generate_series(1, 5) g;
CREATE PUBLICATION demo FOR TABLE accounts, orders, order_lines;
SQL
STORE=$work/store
"$RTRCTL" --log-level warn ingest --source pg --dsn "$PG" --publication demo --store "$STORE" --interval 100ms &
ingest_pid=$!
echo "ingest running (pid $ingest_pid) into $STORE"
# Real-time recency: wait-recent prints a system time at which everything
# committed upstream before the call is readable.
# (it waits for the ingest that is starting to create the store and serve)
t=$("$RTRCTL" wait-recent --store "$STORE" --timeout 30s)
echo "wait-recent: everything visible upstream is readable as of $t"
"$RTRCTL" read "$STORE" public.accounts --as-of "$t"

step "a writer: transfers between accounts and an order with its lines, in transactions"
psql -q -v ON_ERROR_STOP=1 "$PG" <<'SQL'
BEGIN; UPDATE accounts SET balance = balance - 250 WHERE id = 1; UPDATE accounts SET balance = balance + 250 WHERE id = 2; COMMIT;
BEGIN; INSERT INTO orders (id, account, lines) VALUES (1, 3, 2);
       INSERT INTO order_lines VALUES (1, 1, 'apples', 3), (1, 2, 'pears', 5); COMMIT;
BEGIN; UPDATE accounts SET balance = balance - 100 WHERE id = 3; UPDATE accounts SET balance = balance + 100 WHERE id = 5; COMMIT;
SQL
t=$("$RTRCTL" wait-recent --store "$STORE" --timeout 30s)
echo "wait-recent: the writer's commits are readable as of $t"
"$RTRCTL" status "$STORE" --dsn "$PG"
echo
"$RTRCTL" read "$STORE" public.accounts --as-of "$t"
echo
"$RTRCTL" read "$STORE" public.order_lines --recent
echo
echo "every change as (row, time, diff) on the system timeline:"
"$RTRCTL" read "$STORE" public.accounts --changes --format csv
echo
echo "the sum of balances is the same at every time the store holds:"
for t in $("$RTRCTL" read "$STORE" public.accounts --changes --format csv | awk -F, 'NR > 1 { print $4 }' | sort -u); do
	printf '  as of %s: sum = %s\n' "$t" "$("$RTRCTL" read "$STORE" public.accounts --as-of "$t" --format csv | awk -F, 'NR > 1 { s += $3 } END { print s }')"
done

step "stopping ingest with SIGTERM (it commits what is complete and exits 0)"
kill -TERM "$ingest_pid"; wait "$ingest_pid"; ingest_pid=
echo "exit status 0"

step "done; the servers are stopped and removed"
