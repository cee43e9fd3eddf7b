#!/usr/bin/env bash
# A MariaDB of our own for a measurement, never the shared server (docs/benchmarks.md, "MariaDB at
# 10^6 on an Intel host"):
#
#   scripts/own-mariadb.sh start PORT POOL   # e.g. 33071 2G: a fresh data directory under /tmp
#                                            # (not 33061: CI's MySQL, scripts/mysql.sh, takes it)
#   scripts/own-mariadb.sh stop PORT         # stops it by its pid and removes its data
#
# OWN_MARIADB_ARGS adds server options, e.g. OWN_MARIADB_ARGS=--performance-schema=ON to read
# each statement's total time from performance_schema.events_statements_summary_by_digest.
#
# Only the buffer pool differs from the shared server's settings (and the redo log, sized as the
# shared server's 96 MiB); the URL is mysql://root@127.0.0.1:PORT/test. Not part of CI.
set -euo pipefail
cmd="${1:?start|stop}"; port="${2:?port}"
dir=/tmp/own-mariadb-$port
case "$cmd" in
start)
  pool="${3:?buffer pool size, e.g. 2G}"
  rm -rf "$dir"; mkdir -p "$dir/data"
  mariadb-install-db --no-defaults --user=root --auth-root-authentication-method=normal \
    --skip-test-db --datadir="$dir/data" >"$dir/install.log" 2>&1
  mariadbd --no-defaults --user=root --bind-address=127.0.0.1 --skip-name-resolve \
    --datadir="$dir/data" --port="$port" --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
    --log-error="$dir/error.log" --innodb-buffer-pool-size="$pool" --innodb-log-file-size=96M \
    --max-connections=200 ${OWN_MARIADB_ARGS:-} >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    if mariadb --no-defaults -uroot --socket="$dir/mysqld.sock" -e 'CREATE DATABASE IF NOT EXISTS test' 2>/dev/null; then
      echo "mysql://root@127.0.0.1:$port/test (buffer pool $pool, pid $(cat "$dir/mysqld.pid"))"
      exit 0
    fi
    sleep 0.5
  done
  echo "mariadbd did not start: $dir/error.log" >&2; exit 1 ;;
stop)
  if [ -f "$dir/mysqld.pid" ]; then
    pid=$(cat "$dir/mysqld.pid"); kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  fi
  rm -rf "$dir" ;;
*) echo "usage: $0 start PORT POOL | stop PORT" >&2; exit 2 ;;
esac
