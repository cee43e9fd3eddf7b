#!/usr/bin/env bash
# Latency of a 500 msg/s load written by "another process" (--latency-writer-apart: a pool of its
# own, the relay not told of its commits) beside a 300,000-message backlog on 10 hot keys, on the
# database of $DB (PostgreSQL by default) + NATS, for several release builds alternating, each
# given as label:binary. With WRITER=same the load goes through the relay's own outbox instead.
# Usage: OUT=dir ROUNDS=3 bash apart.sh 89c8d80:/path/outbox 69ca5a8:/path/outbox
set -euo pipefail
: "${OUT:?}"
rounds="${ROUNDS:-3}"
DB="${DB:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
apart=--latency-writer-apart
[ "${WRITER:-apart}" = same ] && apart=
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "$@"; do
    label=${pair%%:*} bin=${pair#*:}
    echo "== $(date -u +%H:%M:%S) $label round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$bin" bench --store "$DB" --transport nats --scenario latency --rate 500 --latency-secs 10 \
      --latency-backlog 300000 --latency-backlog-keys 10 $apart --label "$label" \
      --out "$OUT/$label-$r" >"$OUT/$label-$r.txt" 2>&1 || echo "   FAILED"
    grep -E "commit returned → broker confirmed" "$OUT/$label-$r/report.md" || true
    grep -oE "[0-9]+ of them not yet sent|[0-9]+ claims by id" "$OUT/$label-$r/report.md" | tr '\n' ' ' || true
    echo
  done
done
