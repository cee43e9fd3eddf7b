#!/usr/bin/env bash
# The 10-hot-key drain of 10^5 with nothing else running, for release builds given as
# label:binary, alternating. Usage: OUT=dir ROUNDS=2 bash drain10.sh 3267f92:/path/outbox new:/path/outbox
set -euo pipefail
: "${OUT:?}"
rounds="${ROUNDS:-2}"
DB="${DB:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "$@"; do
    label=${pair%%:*} bin=${pair#*:}
    echo "== $(date -u +%H:%M:%S) $label round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$bin" bench --store "$DB" --transport nats --scenario drain --keys 10 --label "$label" \
      --out "$OUT/$label-$r" >"$OUT/$label-$r.txt" 2>&1 || echo "   FAILED"
    grep -A3 "^## Drain" "$OUT/$label-$r/report.md" | tail -1 | cut -c1-200 || true
  done
done
