#!/usr/bin/env bash
# 2·10^4 (three runs) against 10^6 (one run) per round, on the shared PostgreSQL + NATS, drain only.
set -u
B=${B:-/tmp/m/outbox-after}; OUT=${OUT:-/tmp/depth/out}; ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name load $(cut -d' ' -f1 /proc/loadavg)"
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $? $(grep '^| 1 |' "$OUT/$name.txt")"; }
for r in $(seq 1 "$ROUNDS"); do
  for k in a b c; do run "pg-20k-$r$k" --store "$PG" --transport nats --scenario drain --n 20000; done
  run "pg-1m-$r" --store "$PG" --transport nats --scenario drain --n 1000000
done
