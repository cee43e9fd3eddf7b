#!/usr/bin/env bash
# A PostgreSQL of our own for a measurement, never the shared server (docs/benchmarks.md, "Where a
# PostgreSQL drain at 10^6 spends its time"):
#
#   scripts/own-postgres.sh start PORT   # e.g. 54331: a fresh cluster under /tmp/own-postgres-PORT
#   scripts/own-postgres.sh stop PORT    # stops it by its pid and removes its data
#
# The settings are the shared server's (128 MB of shared buffers, 1 GB max_wal_size, the
# defaults otherwise), plus what a profile needs: pg_stat_statements (each statement's total
# time, buffers and WAL), track_io_timing, and autovacuum and checkpoints logged to
# /tmp/own-postgres-PORT/log. OWN_POSTGRES_ARGS adds server options (`-c name=value ...`),
# OWN_POSTGRES_INITDB_ARGS options of initdb (`--locale=C` for a cluster whose databases compare
# text in the C collation; the default is the environment's locale, C.UTF-8 like the shared server).
# The URL is postgres://postgres@127.0.0.1:PORT/test?sslmode=disable. Not part of CI.
set -euo pipefail
cmd="${1:?start|stop}"; port="${2:?port}"
dir=/tmp/own-postgres-$port
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
# initdb and postgres refuse to run as root: run them as the `postgres` user when we are root.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
start)
  rm -rf "$dir"; mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust ${OWN_POSTGRES_INITDB_ARGS:-} >"$dir/initdb.log" 2>&1
  as_pg "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
    -c shared_buffers=128MB -c max_wal_size=1GB -c max_connections=200 \
    -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=1000 \
    -c track_io_timing=on -c log_autovacuum_min_duration=0 -c log_checkpoints=on \
    ${OWN_POSTGRES_ARGS:-} >"$dir/log" 2>&1 &
  for _ in $(seq 1 120); do
    if "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; then
      "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc 'CREATE DATABASE test' >/dev/null
      "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d test -qc 'CREATE EXTENSION pg_stat_statements' >/dev/null
      echo "postgres://postgres@127.0.0.1:$port/test?sslmode=disable (pid $(head -1 "$dir/data/postmaster.pid"))"
      exit 0
    fi
    sleep 0.5
  done
  echo "postgres did not start: $dir/log" >&2; exit 1 ;;
stop)
  if [ -f "$dir/data/postmaster.pid" ]; then
    pid=$(head -1 "$dir/data/postmaster.pid"); kill -INT "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  fi
  rm -rf "$dir" ;;
*) echo "usage: $0 start PORT | stop PORT" >&2; exit 2 ;;
esac
