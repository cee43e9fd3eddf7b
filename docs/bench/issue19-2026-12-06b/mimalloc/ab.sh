#!/usr/bin/env bash
# A/B of the allocator: release builds of main (glibc malloc) and of it with mimalloc, alternating.
set -u
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
OUT=${OUT:-/tmp/ab-mi}
for r in 1 2 3 4; do
  for t in nats redis; do
    for b in main mi; do
      /tmp/bins/outbox-$b bench --store "$PG" --transport $t --scenario drain --out "$OUT/$b-$t-$r" > "$OUT/$b-$t-$r.txt" 2>"$OUT/$b-$t-$r.err"
      echo "$r $t $b $(grep '^| 1 |' "$OUT/$b-$t-$r.txt")"
    done
  done
done
