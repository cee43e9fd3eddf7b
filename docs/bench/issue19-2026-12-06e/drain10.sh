#!/usr/bin/env bash
# The 10-hot-key drain of 10^5 with nothing else running, before (89c8d80) and after (befa76b)
# the lane's looks, alternating: with nothing else committing, the looks find nothing and back
# off to one every 32 ms. Usage: BEFORE=... AFTER=... OUT=dir bash drain10.sh [rounds]
set -euo pipefail
rounds="${1:-2}"
: "${BEFORE:?}" "${AFTER:?}" "${OUT:?}"
PG="${PG:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "89c8d80:$BEFORE" "befa76b:$AFTER"; do
    label=${pair%%:*} bin=${pair#*:}
    echo "== $(date -u +%H:%M:%S) $label round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$bin" bench --store "$PG" --transport nats --scenario drain --keys 10 --label "$label" \
      --out "$OUT/$label-$r" >"$OUT/$label-$r.txt" 2>&1 || echo "   FAILED"
    grep -A3 "^## Drain" "$OUT/$label-$r/report.md" | tail -1 | cut -c1-200 || true
  done
done
