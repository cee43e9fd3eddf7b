#!/usr/bin/env bash
# The drain with its consumer reading once the relays have stopped (the default since 2026-12-02)
# and during the drain (`--consume-during-drain`, the earlier way), alternating on each pair, on
# the shared servers; the first run of each pair also measures the latency (commit → broker
# confirmed and commit → consumer). B=<outbox binary> OUT=<absolute dir> ROUNDS=<n>.
set -u
B=${B:-/tmp/m/outbox}; OUT=${OUT:-/tmp/m/out}; ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"; cd "$OUT"  # the bench writes bench-results/ in its working directory
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  grep -E '^\| 1 \||^\| commit' "$OUT/$name.txt"; }
for r in $(seq 1 "$ROUNDS"); do
  for pair in "pg-nats $PG nats" "pg-redis $PG redis" "my-nats $MY nats"; do
    set -- $pair
    run "$1-after-$r"  --store "$2" --transport "$3" --scenario raw,drain,latency
    run "$1-during-$r" --store "$2" --transport "$3" --scenario raw,drain --consume-during-drain
  done
done
