#!/usr/bin/env bash
# Runs continued across batches (c16e211) against the code before (83ceda4): release builds of
# each, alternating, on the shared servers, one bench at a time.
#   A=<release outbox of 83ceda4> B=<release outbox of c16e211> OUT=<absolute dir> ROUNDS=2 bash ab.sh
set -u
A=${A:?}; B=${B:?}; OUT=${OUT:?}; ROUNDS=${ROUNDS:-2}
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
mkdir -p "$OUT"
run() { local name=$1 bin=$2; shift 2; echo "== $(date -u +%H:%M:%S) $name: $*, load $(cut -d' ' -f1 /proc/loadavg)"
  "$bin" bench "$@" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?";
  grep -E '^\| 1 \| ' "$OUT/$name.txt" | head -3; }
for r in $(seq 1 "$ROUNDS"); do
  for v in a b; do
    bin=$A; [ $v = b ] && bin=$B
    run "pg-nats-10-$v$r"   "$bin" --store "$PG" --transport nats  --scenario raw,drain --keys 10
    run "pg-redis-10-$v$r"  "$bin" --store "$PG" --transport redis --scenario raw,drain --keys 10
    run "my-nats-10-$v$r"   "$bin" --store "$MY" --transport nats  --scenario raw,drain --keys 10
    run "pg-nats-1000-$v$r" "$bin" --store "$PG" --transport nats  --scenario drain,latency
  done
done
echo "== $(date -u +%H:%M:%S) done"
