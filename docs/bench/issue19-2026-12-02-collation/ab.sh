#!/usr/bin/env bash
# The open-key index and the claim's key comparisons in the C collation, against C.UTF-8 (the
# shared server's), on two PostgreSQL clusters of our own that differ only in initdb's locale:
# 2·10^4 and 10^6 drains, 1,000 keys, NATS, alternating. B=<outbox binary> OUT=<dir> ROUNDS=<n>.
set -u
B=${B:-/tmp/m/outbox}; OUT=${OUT:-/tmp/m/coll}; ROUNDS=${ROUNDS:-2}
here=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$OUT"; cd "$OUT"  # the bench writes bench-results/ in its working directory
"$here/scripts/own-postgres.sh" start 54331
OWN_POSTGRES_INITDB_ARGS=--locale=C "$here/scripts/own-postgres.sh" start 54332
trap '"$here/scripts/own-postgres.sh" stop 54331; "$here/scripts/own-postgres.sh" stop 54332' EXIT
UTF='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
C='postgres://postgres@127.0.0.1:54332/test?sslmode=disable'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$B" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  grep -E '^\| 1 \|' "$OUT/$name.txt"; }
for r in $(seq 1 "$ROUNDS"); do
  run "utf-20k-$r" --store "$UTF" --transport nats --scenario drain --n 20000
  run "c-20k-$r"   --store "$C"   --transport nats --scenario drain --n 20000
  run "utf-1m-$r"  --store "$UTF" --transport nats --scenario drain --n 1000000
  run "c-1m-$r"    --store "$C"   --transport nats --scenario drain --n 1000000
done
