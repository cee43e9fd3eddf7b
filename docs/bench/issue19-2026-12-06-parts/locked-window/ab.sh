#!/usr/bin/env bash
# A/B of the locked-window claim (L) against the code of record (A): the same bench, alternating.
#   A=<release outbox of main> L=<release outbox with the patch> OUT=<dir> bash ab.sh
set -u
A=${A:?}; L=${L:?}; OUT=${OUT:?}
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
mkdir -p "$OUT"
run() { local name=$1 bin=$2; shift 2; echo "== $(date -u +%H:%M:%S) $name: $*, load $(cut -d' ' -f1 /proc/loadavg)"
  "$bin" bench "$@" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  awk '/^## Drain/{f=1} f && /^\| 1 \|/{print "   drain:", $0; exit}' "$OUT/$name.txt"; }
for r in 1 2 3; do
  run "A-1e5-$r" "$A" --store "$PG" --transport nats --scenario raw,drain
  run "L-1e5-$r" "$L" --store "$PG" --transport nats --scenario raw,drain
done
run "L-kpm" "$L" --store "$PG" --transport nats --scenario raw,drain --keys 100000
run "A-kpm" "$A" --store "$PG" --transport nats --scenario raw,drain --keys 100000
run "A-10" "$A" --store "$PG" --transport nats --scenario raw,drain --keys 10
run "L-10" "$L" --store "$PG" --transport nats --scenario raw,drain --keys 10
run "L-1e6" "$L" --store "$PG" --transport nats --scenario drain --n 1000000
run "A-1e6" "$A" --store "$PG" --transport nats --scenario drain --n 1000000
echo "== $(date -u +%H:%M:%S) done"
