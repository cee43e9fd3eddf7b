#!/usr/bin/env bash
# Latency of a 500 msg/s load written by "another process" (--latency-writer-apart) beside a
# 300,000-message backlog on 10 hot keys, on the database of $DB (PostgreSQL by default) + NATS,
# with the relay's pool shared with the bench (24 connections) or one of its own sized as the
# daemon's (--relay-pool; `stores[].max_connections` is 4 by default), for release builds given
# as label:binary, alternating. POOLS lists the pools ("shared" or a size).
# Usage: OUT=dir ROUNDS=2 POOLS="shared 4" bash pool.sh a1b2c3d:/path/outbox
set -euo pipefail
: "${OUT:?}"
rounds="${ROUNDS:-2}"
pools="${POOLS:-shared 4}"
DB="${DB:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p "$OUT"
for r in $(seq 1 "$rounds"); do
  for pair in "$@"; do
    for pool in $pools; do
      label=${pair%%:*} bin=${pair#*:}
      name="$label-pool-$pool-$r"
      extra=()
      [ "$pool" = shared ] || extra=(--relay-pool "$pool")
      echo "== $(date -u +%H:%M:%S) $name (load $(cut -d' ' -f1 /proc/loadavg))"
      "$bin" bench --store "$DB" --transport nats --scenario latency --rate 500 --latency-secs 10 \
        --latency-backlog 300000 --latency-backlog-keys 10 --latency-writer-apart "${extra[@]}" \
        --label "$name" --out "$OUT/$name" >"$OUT/$name.txt" 2>&1 || echo "   FAILED"
      grep -E "commit returned → broker confirmed" "$OUT/$name/report.md" || true
      grep -oE "[0-9]+ of them not yet sent|[0-9]+ claims by id|[0-9]+ looks" "$OUT/$name/report.md" | tr '\n' ' ' || true
      echo
    done
  done
done
