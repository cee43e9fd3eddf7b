#!/usr/bin/env bash
# MariaDB's depth measured as the ratio compares it: drains alone (`--scenario drain`), 2·10^4
# and 10^6 messages, 1,000 keys, NATS, the shared MariaDB, ROUNDS rounds.
# OUT=<absolute dir> ROUNDS=<n> (FIRST=<n> to go on from round n) BIN=<release outbox>.
set -u
BIN=${BIN:?outbox binary}; OUT=${OUT:?absolute output dir}; ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"; cd "$OUT"
MY='mysql://root@127.0.0.1:3306/test'
for r in $(seq "${FIRST:-1}" "$ROUNDS"); do
  for n in 20000 1000000; do
    name="my-$([ "$n" = 20000 ] && echo 20k || echo 1m)-$r"
    echo "== $(date -u +%H:%M:%S) $name"; uptime
    "$BIN" bench --store "$MY" --transport nats --scenario drain --n "$n" > "$OUT/$name.txt" 2> "$OUT/$name.err"
    echo "   exit $?"; grep -E '^\| 1 \| ' "$OUT/$name.txt"
  done
done
