#!/usr/bin/env bash
# /tmp/outbox-after (62769b3) in the latency scenario with NATS and with the null transport (commit →
# published: the relay's own part), sqlxmq's harness beside it, ROUNDS rounds at RATE msg/s:
#
#   null-vs-sqlxmq.sh ROUNDS RATE OUT [shared]
#
# On a PostgreSQL of our own whose data lives in /dev/shm (port 54333, as ab-shm.sh starts one), or
# with `shared` on the machine's shared PostgreSQL. Prints one line per run (printed.py).
set -u
rounds="$1"; rate="$2"; out="$3"; where="${4:-shm}"
mkdir -p "$out"
if [ "$where" = shared ]; then
  PG=postgres://postgres@127.0.0.1:5432/test
else
  port=54333; dir=/dev/shm/own-postgres-$port
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  rm -rf "$dir"; mkdir -p "$dir"; chown postgres: "$dir"
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >"$dir/initdb.log" 2>&1
  runuser -u postgres -- "$bin/postgres" -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
    -c shared_buffers=128MB -c max_wal_size=1GB -c max_connections=200 >"$dir/log" 2>&1 &
  for _ in $(seq 1 120); do "$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.5; done
  "$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -qc 'CREATE DATABASE test'
  PG="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
fi
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=$HOME/.cache/outbox-target/release/peer-sqlxmq
for round in $(seq 1 "$rounds"); do
  for t in nats null; do
    /tmp/outbox-after bench --store "$PG" --transport $t --scenario latency --rate "$rate" --out "$out/$t-$round" >/dev/null 2>"$out/$t-$round.log"
  done
  $peer --url "$PG" --migrations "$M" --rate "$rate" > "$out/sqlxmq-$round.json" 2>"$out/sqlxmq-$round.log"
done
if [ "$where" != shared ]; then
  pid=$(head -1 "$dir/data/postmaster.pid"); kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done; rm -rf "$dir"
fi
python3 "$(dirname "$0")/printed.py" "$out"
