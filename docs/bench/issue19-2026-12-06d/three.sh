#!/usr/bin/env bash
# Latency of a 500 msg/s load beside a 300,000-message backlog on 10 hot keys, PostgreSQL + NATS:
# the code before runs were continued across batches (83ceda4), with them (b98a898) and with
# this change (325b8af), alternating. Each binary is a release build with bench-backlog.patch
# applied to the older two (the bench option alone; the relay's counters they lack read 0).
# Usage: B83=... BEFORE=... AFTER=... OUT=dir bash three.sh [rounds]
set -euo pipefail
rounds="${1:-2}"
: "${B83:?}" "${BEFORE:?}" "${AFTER:?}" "${OUT:?}"
PG="${PG:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "83ceda4:$B83" "b98a898:$BEFORE" "325b8af:$AFTER"; do
    label=${pair%%:*} bin=${pair#*:}
    echo "== $(date -u +%H:%M:%S) $label round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$bin" bench --store "$PG" --transport nats --scenario latency --rate 500 --latency-secs 10 \
      --latency-backlog 300000 --latency-backlog-keys 10 --label "$label" \
      --out "$OUT/$label-$r" >"$OUT/$label-$r.txt" 2>&1 || echo "   FAILED"
    grep -E "commit returned → broker confirmed" "$OUT/$label-$r/report.md" || true
    grep -o "[0-9]* of them not yet sent" "$OUT/$label-$r/report.md" || true
  done
done
