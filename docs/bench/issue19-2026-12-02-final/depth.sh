#!/usr/bin/env bash
# 2·10^4 against 10^6, alternating, on the shared PostgreSQL and MariaDB.
set -u
B=${B:-/tmp/m/outbox}
OUT=${OUT:-/tmp/m/out}
ROUNDS=${ROUNDS:-2}
FIRST=${FIRST:-1}
mkdir -p "$OUT"
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"; }
for r in $(seq "$FIRST" "$ROUNDS"); do
  run "my-20k-$r"  --store "$MY" --transport nats --scenario raw,drain --n 20000
  run "my-1m-$r"   --store "$MY" --transport nats --scenario raw,drain --n 1000000
  run "pg-20k-$r"  --store "$PG" --transport nats --scenario raw,drain --n 20000
  run "pg-1m-$r"   --store "$PG" --transport nats --scenario raw,drain --n 1000000
done
