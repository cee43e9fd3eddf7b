#!/usr/bin/env bash
# Issue 19's table on the code of record (PostgreSQL schema 11), one bench at a time on the shared
# servers, nothing else running: the targets (as ../issue19-2026-11-30/final-ebb6e3c/targets.sh,
# with --out), the depth drains alone (2·10^4 against 10^6, two rounds), the relay's RSS at 10^6
# (scripts/drain-daemon.sh), then latency beside sqlxmq without TLS (3 rounds at 500 and 1,000).
#   B=<release outbox> PEER=<release peer-sqlxmq> OUT=<absolute dir> bash chain.sh
set -u
B=${B:?outbox binary}; PEER=${PEER:?peer-sqlxmq binary}; OUT=${OUT:?absolute output dir}
HERE=$(cd "$(dirname "$0")" && pwd)
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
mkdir -p "$OUT/targets"
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*, load $(cut -d' ' -f1 /proc/loadavg)"
  "$B" bench "$@" --out "$OUT/targets/$name" > "$OUT/targets/$name.txt" 2> "$OUT/targets/$name.err"; echo "   exit $?"; }
run pg-nats-1000      --store "$PG" --transport nats  --scenario raw,drain,latency,scale --relays 1,2
run pg-nats-10        --store "$PG" --transport nats  --scenario raw,drain --keys 10
run pg-nats-100000    --store "$PG" --transport nats  --scenario raw,drain --keys 100000
run pg-redis-1000     --store "$PG" --transport redis --scenario raw,drain,latency
run pg-redis-10       --store "$PG" --transport redis --scenario raw,drain --keys 10
run pg-redis-100000   --store "$PG" --transport redis --scenario raw,drain --keys 100000
run my-nats-1000      --store "$MY" --transport nats  --scenario raw,drain,latency,enqueue
run my-nats-10        --store "$MY" --transport nats  --scenario raw,drain --keys 10
run my-nats-100000    --store "$MY" --transport nats  --scenario raw,drain --keys 100000
for r in 1 2; do
  run "pg-20k-$r"  --store "$PG" --transport nats --scenario drain --n 20000
  run "pg-1m-$r"   --store "$PG" --transport nats --scenario drain --n 1000000
  run "my-20k-$r"  --store "$MY" --transport nats --scenario drain --n 20000
  run "my-1m-$r"   --store "$MY" --transport nats --scenario drain --n 1000000
done
echo "== $(date -u +%H:%M:%S) relay RSS at 10^6"
OUTBOX="$B" bash "$HERE/../../../scripts/drain-daemon.sh" pg 1000000 1000 > "$OUT/drain-daemon.txt" 2>&1; echo "   exit $?"
echo "== $(date -u +%H:%M:%S) latency beside sqlxmq, no TLS"
BIN="$B" PEER="$PEER" OUT="$OUT/vs-sqlxmq" ROUNDS=3 RATES="500 1000" PG="${PG}" \
  bash "$HERE/../issue19-2026-12-03-latency/run.sh"
echo "== $(date -u +%H:%M:%S) done"
