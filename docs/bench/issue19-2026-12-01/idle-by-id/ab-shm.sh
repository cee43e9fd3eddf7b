#!/usr/bin/env bash
# The A/B of scripts/ab-latency.sh on a PostgreSQL of our own whose data lives in /dev/shm (tmpfs):
# its commits wait for no disk, so the shared disk's latency, which swung the shared server's
# commits from 1 to 7 ms within an hour that evening, leaves the figures. The same server's
# settings as scripts/own-postgres.sh otherwise. PostgreSQL + NATS only (the change touches no
# other store), sqlxmq beside it on the same server.
#
#   ab-shm.sh ROUNDS RATE OUT      (/tmp/outbox-before, /tmp/outbox-after; the peer as in ab-latency.sh)
set -u
rounds="$1"; rate="$2"; out="$3"; port=54332
mkdir -p "$out"
dir=/dev/shm/own-postgres-$port
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
PG="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=${PEER:-$HOME/.cache/outbox-target/release/peer-sqlxmq}
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    /tmp/outbox-$which bench --store "$PG" --transport nats --scenario latency --rate "$rate" --out "$out/$which-pg-$round" >/dev/null 2>"$out/$which-pg-$round.log"
  done
  $peer --url "$PG" --migrations "$M" --rate "$rate" > "$out/sqlxmq-$round.json" 2>"$out/sqlxmq-$round.log"
done
pid=$(head -1 "$dir/data/postmaster.pid"); kill "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
rm -rf "$dir"
python3 "$(dirname "$0")/printed.py" "$out"
