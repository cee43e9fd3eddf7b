#!/usr/bin/env bash
# Issue 19's drain target at 10^6 ("the same at 10^6"): each pair's raw limits and drain over
# 10^6 rows in one bench run (`--scenario raw,drain --n 1000000`), so the ratio is against the
# raw loops at the same depth. 1,000 keys on the three pairs first, then 10 hot keys and a key
# per message. One bench at a time on the shared servers, nothing else running.
#   B=<release outbox> OUT=<absolute dir> [SHAPES="1000 10 1000000"] bash at-depth.sh
set -u
B=${B:?outbox binary}; OUT=${OUT:?absolute output dir}; SHAPES=${SHAPES:-"1000 10 1000000"}
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
mkdir -p "$OUT"
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*, load $(cut -d' ' -f1 /proc/loadavg)"
  "$B" bench "$@" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"; }
for k in $SHAPES; do
  run "pg-nats-1m-$k"  --store "$PG" --transport nats  --scenario raw,drain --n 1000000 --keys "$k"
  run "pg-redis-1m-$k" --store "$PG" --transport redis --scenario raw,drain --n 1000000 --keys "$k"
  run "my-nats-1m-$k"  --store "$MY" --transport nats  --scenario raw,drain --n 1000000 --keys "$k"
done
echo "== $(date -u +%H:%M:%S) done"
