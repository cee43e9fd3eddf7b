#!/usr/bin/env bash
# Latency of a 500 msg/s load beside a 300,000-message backlog on 10 hot keys, PostgreSQL (or the
# database of $PG) + NATS,
# for several release builds alternating, each given as label:binary. The builds older than the
# bench's --latency-backlog option have bench-backlog.patch applied (the option alone; the
# relay's counters they lack read 0).
# Usage: OUT=dir ROUNDS=2 bash beside.sh 83ceda4:/path/outbox b98a898:/path/outbox ...
set -euo pipefail
: "${OUT:?}"
rounds="${ROUNDS:-2}"
PG="${PG:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "$@"; do
    label=${pair%%:*} bin=${pair#*:}
    echo "== $(date -u +%H:%M:%S) $label round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$bin" bench --store "$PG" --transport nats --scenario latency --rate 500 --latency-secs 10 \
      --latency-backlog 300000 --latency-backlog-keys 10 --label "$label" \
      --out "$OUT/$label-$r" >"$OUT/$label-$r.txt" 2>&1 || echo "   FAILED"
    grep -E "commit returned → broker confirmed" "$OUT/$label-$r/report.md" || true
    grep -oE "[0-9]+ of them not yet sent|[0-9]+ claims beside" "$OUT/$label-$r/report.md" | tr '\n' ' ' || true
    echo
  done
done
