#!/usr/bin/env bash
# Starts the local servers the test suite talks to, if they are down, and waits until each
# answers. Idempotent. Usage: scripts/services.sh [postgres] [mysql] ... (default: all needed).
# The start commands are the machine's own (see docs/testing.md).
set -euo pipefail

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(postgres mysql)

log() { printf '[services] %s\n' "$*" >&2; }

wait_for() { # name, check command...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 1
  done
  log "$name did not come up within 60 s"; return 1
}

apt_install() {
  log "installing $* (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "$@" >/dev/null
}

for svc in "${want[@]}"; do
  case "$svc" in
    postgres)
      command -v pg_ctlcluster >/dev/null || apt_install postgresql
      if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
        log "starting PostgreSQL"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
      fi
      wait_for PostgreSQL pg_isready -h 127.0.0.1 -p 5432 -q
      ;;
    mysql)
      command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
      if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
        log "starting MariaDB"
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
      fi
      wait_for MariaDB mariadb-admin -h 127.0.0.1 -uroot ping
      ;;
    *) log "unknown service $svc"; exit 2 ;;
  esac
done
