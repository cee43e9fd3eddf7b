#!/usr/bin/env bash
# Autovacuum on (PostgreSQL's default) against off (the shared test server's setting), on two
# PostgreSQL clusters of our own that differ only in that: 2·10^4 and 10^6 drains, 1,000 keys,
# NATS, alternating. B=<outbox binary> OUT=<absolute dir> ROUNDS=<n>.
set -u
B=${B:-/tmp/m/outbox}; OUT=${OUT:-/tmp/m/av}; ROUNDS=${ROUNDS:-2}
here=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$OUT"; cd "$OUT"  # the bench writes bench-results/ in its working directory
"$here/scripts/own-postgres.sh" start 54331
OWN_POSTGRES_ARGS='-c autovacuum=off' "$here/scripts/own-postgres.sh" start 54332
trap 'cp /tmp/own-postgres-54331/log "$OUT/on-server.log"; "$here/scripts/own-postgres.sh" stop 54331; "$here/scripts/own-postgres.sh" stop 54332' EXIT
ON='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
OFF='postgres://postgres@127.0.0.1:54332/test?sslmode=disable'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  grep -E '^\| 1 \|' "$OUT/$name.txt"; }
for r in $(seq 1 "$ROUNDS"); do
  run "on-20k-$r"  --store "$ON"  --transport nats --scenario drain --n 20000
  run "off-20k-$r" --store "$OFF" --transport nats --scenario drain --n 20000
  run "on-1m-$r"   --store "$ON"  --transport nats --scenario drain --n 1000000
  run "off-1m-$r"  --store "$OFF" --transport nats --scenario drain --n 1000000
done
