#!/usr/bin/env bash
# Runs `go test` with shared PostgreSQL and MariaDB servers started for this
# run only, and stops them afterwards whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

services=$(mktemp -d /tmp/rtr-services.XXXXXX)
cleanup() { go run ./internal/testenv/cmd/rtr-services down "$services" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM

go run ./internal/testenv/cmd/rtr-services up "$services" >/dev/null
# shellcheck disable=SC1091
source "$services/env"
export RTR_TEST_PG_DSN RTR_TEST_MYSQL_DSN

go test "$@"
