#!/usr/bin/env bash
# The 1,000-key drains (no run is cut there) of both builds, alternating: that nothing changed.
#   A=... B=... OUT=... ROUNDS=3 bash ab1000.sh
set -u
A=${A:?}; B=${B:?}; OUT=${OUT:?}; ROUNDS=${ROUNDS:-3}
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for v in a b; do
    bin=$A; [ $v = b ] && bin=$B
    for s in pg my; do
      url=$PG; [ $s = my ] && url=$MY
      name="$s-nats-1000-drain-$v$r"
      echo "== $(date -u +%H:%M:%S) $name, load $(cut -d' ' -f1 /proc/loadavg)"
      "$bin" bench --store "$url" --transport nats --scenario drain --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"
      grep -E '^\| 1 \| ' "$OUT/$name.txt" | head -1
    done
  done
done
