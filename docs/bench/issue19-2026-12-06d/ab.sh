#!/usr/bin/env bash
# Latency of a steady load beside a hot backlog, before and after the change, alternating.
# BEFORE / AFTER: release builds of `outbox` with the bench feature (the before build is
# b98a898 with bench-backlog.patch applied: the bench's --latency-backlog option alone).
# Usage: BEFORE=... AFTER=... OUT=dir bash ab.sh [rounds]
set -euo pipefail
rounds="${1:-2}"
: "${BEFORE:?}" "${AFTER:?}" "${OUT:?}"
PG="${PG:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
MY="${MY:-mysql://root@127.0.0.1:3306/test}"
mkdir -p "$OUT"
run() { # label binary store transport tag
  local label=$1 bin=$2 store=$3 transport=$4 tag=$5
  echo "== $(date -u +%H:%M:%S) $tag $label (load $(cut -d' ' -f1 /proc/loadavg))"
  "$bin" bench --store "$store" --transport "$transport" --scenario latency --rate 500 --latency-secs 10 \
    --latency-backlog "${BACKLOG:-300000}" --latency-backlog-keys 10 --label "$label" \
    --out "$OUT/$tag-$label-$r" >"$OUT/$tag-$label-$r.txt" 2>&1 || echo "   FAILED (see $OUT/$tag-$label-$r.txt)"
  grep -E "commit returned → broker confirmed|Beside a backlog" "$OUT/$tag-$label-$r/report.md" | cut -c1-220 || true
}
for r in $(seq 1 "$rounds"); do
  run before "$BEFORE" "$PG" nats pg-nats
  run after "$AFTER" "$PG" nats pg-nats
  run before "$BEFORE" "$MY" nats mariadb-nats
  run after "$AFTER" "$MY" nats mariadb-nats
done
