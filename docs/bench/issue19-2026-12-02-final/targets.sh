#!/usr/bin/env bash
# The issue-19 target table on the current code: release build, shared servers, one run each.
set -u
B=${B:-/tmp/m/outbox}
OUT=${OUT:-/tmp/m/out}
mkdir -p "$OUT"
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"; }
run pg-nats-1000      --store "$PG" --transport nats  --scenario raw,drain,latency,scale --relays 1,2
run pg-nats-10        --store "$PG" --transport nats  --scenario raw,drain --keys 10
run pg-nats-100000    --store "$PG" --transport nats  --scenario raw,drain --keys 100000
run pg-redis-1000     --store "$PG" --transport redis --scenario raw,drain,latency
run pg-redis-10       --store "$PG" --transport redis --scenario raw,drain --keys 10
run pg-redis-100000   --store "$PG" --transport redis --scenario raw,drain --keys 100000
run my-nats-1000      --store "$MY" --transport nats  --scenario raw,drain,latency,enqueue
run my-nats-10        --store "$MY" --transport nats  --scenario raw,drain --keys 10
run my-nats-100000    --store "$MY" --transport nats  --scenario raw,drain --keys 100000
