#!/usr/bin/env bash
# ab.sh on a PostgreSQL of our own whose data lives in /dev/shm (tmpfs): its commits wait for no
# disk, so the shared disk's commit latency (3-7 ms at p50 on 2026-12-03's evening) leaves the
# figures and what the relay itself costs the database shows. The settings of
# scripts/own-postgres.sh otherwise. Stopped by its pid, its data removed.
# OLD=... NEW=... OUT=... [ROUNDS=3] [RATES=...] [N=...] shm.sh
set -u
port=54333; dir=/dev/shm/own-postgres-$port
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
rm -rf "$dir"; mkdir -p "$dir"; [ "$(id -u)" = 0 ] && chown postgres: "$dir"
as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >"$dir/initdb.log" 2>&1
as_pg "$bin/postgres" -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
  -c shared_buffers=128MB -c max_wal_size=1GB -c max_connections=200 >"$dir/log" 2>&1 &
for _ in $(seq 1 120); do
  "$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1 && break
  sleep 0.5
done
"$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -qc 'CREATE DATABASE test'
STORE="postgres://postgres@127.0.0.1:$port/test?sslmode=disable" bash "$(dirname "$0")/ab.sh"
pid=$(head -1 "$dir/data/postmaster.pid"); kill "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
rm -rf "$dir"
