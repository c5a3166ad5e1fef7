#!/usr/bin/env bash
# The end-to-end demo on throwaway local servers: PostgreSQL 15, MariaDB
# 10.11 and an in-memory Kafka broker. It writes to each upstream and shows
# each one's visible frontier (rtrctl frontier) before and after the write.
set -euo pipefail
cd "$(dirname "$0")/.."
RTRCTL=${RTRCTL:-bin/rtrctl}

work=$(mktemp -d /tmp/rtr-demo.XXXXXX)
kafka_pid=
cleanup() {
	[ -n "$kafka_pid" ] && kill "$kafka_pid" 2>/dev/null || true
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
psql -q "$PG" -c "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, item text)"
show before --source pg --dsn "$PG"
psql -q "$PG" -c "INSERT INTO orders (item) VALUES ('apples')"
show after --source pg --dsn "$PG"
psql -q "$PG" -c "SET synchronous_commit = off; INSERT INTO orders (item) VALUES ('pears')"
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

step "done; the servers are stopped and removed"
