#!/usr/bin/env bash
# MariaDB's bare batched claim-and-mark SQL loop (the bench's raw database limit) at 2·10^4 and
# 10^6 rows, 1,000 keys, ROUNDS rounds: does the database's own cost per row grow at depth, as
# the drain's does? BIN=<release outbox> OUT=<absolute dir> [ROUNDS=2].
set -u
BIN=${BIN:?outbox binary}; OUT=${OUT:?absolute output dir}; ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"; cd "$OUT"
MY='mysql://root@127.0.0.1:3306/test'
for r in $(seq 1 "$ROUNDS"); do
  for n in 20000 1000000; do
    name=raw-$n-$r
    echo "== $(date -u +%H:%M:%S) $name"
    "$BIN" bench --store "$MY" --transport nats --scenario raw --n "$n" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"
    echo "   exit $?"; grep -E "^\| database:" "$OUT/$name.txt"
  done
done
