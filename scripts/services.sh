#!/usr/bin/env bash
# services.sh: start or stop the shared test servers (PostgreSQL, MariaDB).
#
#   scripts/services.sh up [DIR]    # start them, print the env lines
#   eval "$(scripts/services.sh up)"  # ... and export RTR_TEST_PG_DSN, RTR_TEST_MYSQL_DSN
#   scripts/services.sh down [DIR]  # stop them, remove DIR
#
# DIR defaults to $RTR_SERVICES_DIR or /tmp/rtr-services. A thin wrapper
# over `go run ./internal/testenv/cmd/rtr-services`.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  up|down) ;;
  *) echo "usage: scripts/services.sh up|down [DIR]" >&2; exit 2 ;;
esac
exec go run ./internal/testenv/cmd/rtr-services "$1" "${2:-${RTR_SERVICES_DIR:-/tmp/rtr-services}}"
