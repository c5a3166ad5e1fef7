#!/usr/bin/env bash
# install-deps.sh: install the Debian packages that rtrctl's integration
# tests need: PostgreSQL 15 (server and client), MariaDB 10.11 (server and
# client), kcat, Node.js and npm, and the Go-built test server versitygw
# (an S3 gateway over a directory, for the S3 store tests; go install
# through the module proxy, version from internal/servers/versitygw.go).
# Idempotent: installs only what is missing and prints one line on success.
#
#   scripts/install-deps.sh          # check, install what is missing (as root)
#   scripts/install-deps.sh --check  # check only; exit 1 naming what is missing
#
# It never leaves a system database running: during the install a
# policy-rc.d forbids service starts (Debian's postinst scripts would start
# the packaged PostgreSQL and MariaDB); the tests start their own servers
# (internal/testenv). Not root: prints the apt-get command to run, exits 1.
set -euo pipefail

PG_BIN=${RTR_PG_BINDIR:-/usr/lib/postgresql/15/bin}
check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps.sh: unknown argument '$1' (use --check or nothing)" >&2; exit 2 ;;
esac

have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_file() { [ -x "$1" ]; }

# missing_packages prints the Debian packages whose programs are absent.
missing_packages() {
  local -a pkgs=()
  { have_file "$PG_BIN/initdb" && have_file "$PG_BIN/postgres" && have_file "$PG_BIN/pg_ctl"; } \
    || pkgs+=(postgresql-15)
  { have_file "$PG_BIN/psql" || have_cmd psql; } || pkgs+=(postgresql-client-15)
  { { have_file /usr/sbin/mariadbd || have_cmd mariadbd; } && have_cmd mariadb-install-db; } \
    || pkgs+=(mariadb-server)
  { have_cmd mariadb && have_cmd mariadb-admin; } || pkgs+=(mariadb-client)
  have_cmd kcat || pkgs+=(kcat)
  have_cmd node || pkgs+=(nodejs)
  # Some nodejs builds ship npm themselves; install Debian's only if absent.
  have_cmd npm || pkgs+=(npm)
  echo "${pkgs[@]}"
}

# ensure_versitygw installs versitygw into $(go env GOPATH)/bin unless the
# pinned version is there (tests find it there, or via $RTR_VERSITYGW).
ensure_versitygw() {
  local root ver bin
  root=$(cd "$(dirname "$0")/.." && pwd)
  ver=$(sed -n 's/^const VersityVersion = "\(.*\)"$/\1/p' "$root/internal/servers/versitygw.go")
  bin="$(go env GOPATH | cut -d: -f1)/bin/versitygw"
  if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*github.com/versity/versitygw[[:space:]]*$ver"; then
    return 0
  fi
  if [ "$check_only" -eq 1 ]; then
    echo "install-deps: missing versitygw $ver; run: go install github.com/versity/versitygw/cmd/versitygw@$ver" >&2
    return 1
  fi
  if ! out=$(GOBIN="$(dirname "$bin")" go install "github.com/versity/versitygw/cmd/versitygw@$ver" 2>&1); then
    echo "install-deps: go install github.com/versity/versitygw/cmd/versitygw@$ver failed:" >&2
    echo "$out" | tail -n 20 >&2
    return 1
  fi
  echo "install-deps: installed versitygw $ver"
}
ensure_versitygw

read -r -a missing <<<"$(missing_packages)"
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all present (postgresql-15, mariadb-server, kcat, nodejs, npm, versitygw)"
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$check_only" -eq 1 ]; then
  echo "install-deps: missing ${missing[*]}; run as root: $cmd" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root: sudo sh -c '$cmd'" >&2
  echo "  (or run scripts/install-deps.sh as root)" >&2
  exit 1
fi

log=$(mktemp /tmp/rtr-install-deps.XXXXXX.log)
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, from rtrctl scripts/install-deps.sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  created_policy=1
fi
cleanup() {
  if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi
}
trap cleanup EXIT

if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "install-deps: apt-get install ${missing[*]} failed; last lines of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi

# Stop anything a postinst managed to start anyway (no policy-rc.d honored,
# e.g. a systemd unit); tests never use the system servers.
# Only services of packages installed now are stopped.
for pkg in "${missing[@]}"; do
  case "$pkg" in
    mariadb-server) svc=mariadb ;;
    postgresql-15) svc=postgresql ;;
    *) continue ;;
  esac
  if have_cmd systemctl && [ -d /run/systemd/system ]; then
    systemctl stop "$svc.service" >>"$log" 2>&1 || true
  elif [ -x "/etc/init.d/$svc" ]; then
    "/etc/init.d/$svc" stop >>"$log" 2>&1 || true
  fi
done

read -r -a still <<<"$(missing_packages)"
if [ "${#still[@]}" -ne 0 ]; then
  echo "install-deps: installed ${missing[*]} but still missing programs of ${still[*]}; see $log" >&2
  exit 1
fi
rm -f "$log"
echo "install-deps: installed ${missing[*]}"
