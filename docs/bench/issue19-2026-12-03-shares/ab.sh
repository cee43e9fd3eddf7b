#!/usr/bin/env bash
# One relay against two, before (OLD) and after (NEW) the relays split the keys: drains of
# N (default 10^5) with KEYS (default 1,000) keys to NATS on the shared PostgreSQL, `--scenario scale --relays 1,2`
# (the second relay with its own pool, as a second process would have), the two binaries
# alternating for ROUNDS rounds. OLD=<release outbox> NEW=<release outbox> OUT=<absolute dir>.
set -u
OLD=${OLD:?old outbox binary}; NEW=${NEW:?new outbox binary}; OUT=${OUT:?absolute output dir}
ROUNDS=${ROUNDS:-3}; N=${N:-100000}; KEYS=${KEYS:-1000}
PG=${PG:-'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'}
mkdir -p "$OUT"; cd "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for arm in old new; do
    bin=$OLD; [ "$arm" = new ] && bin=$NEW
    name="$arm-$r"
    echo "== $(date -u +%H:%M:%S) $name"; uptime
    "$bin" bench --store "$PG" --transport nats --scenario scale --relays 1,2 --n "$N" --keys "$KEYS" --sent-rows 10000 \
      --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
    grep -E "^\| [12] \| $N" "$OUT/$name.txt"
  done
done
