#!/usr/bin/env bash
# outbox's commit → consumer latency beside sqlxmq's commit → job latency, on the same PostgreSQL,
# in alternating rounds (docs/benchmarks.md, "Beside sqlxmq"). Not part of CI: a measurement.
#
#   scripts/peers.sh [OUT_DIR] [ROUNDS] [RATES]      e.g. scripts/peers.sh /tmp/peers 3 "500 1000"
#
# Builds the release `outbox` and bench/peers/sqlxmq (its own cargo project, sqlxmq 0.6.0), applies
# sqlxmq's shipped migrations to a fresh database of the peer's own, and writes each run's JSON
# under OUT_DIR, then prints one line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/outbox-target}"
out="${1:-/tmp/outbox-peers}"
rounds="${2:-3}"
rates="${3:-500 1000}"
pg="${OUTBOX_BENCH_PG:-postgres://postgres@127.0.0.1:5432/test}"
mkdir -p "$out"

cargo build --release --quiet -p outbox-cli
(cd bench/peers/sqlxmq && cargo build --release --quiet)
outbox="$CARGO_TARGET_DIR/release/outbox"
peer="$CARGO_TARGET_DIR/release/peer-sqlxmq"
# sqlxmq ships its migrations in the crate ("copy them into your project's migrations").
migrations="$(cd bench/peers/sqlxmq && cargo metadata --format-version 1 --quiet |
  python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(os.path.dirname(next(p["manifest_path"] for p in m["packages"] if p["name"]=="sqlxmq")))')/migrations"
[ -d "$migrations" ] || { echo "sqlxmq's migrations not found at $migrations" >&2; exit 1; }

for rate in $rates; do
  for round in $(seq 1 "$rounds"); do
    echo "== rate $rate, round $round, load $(cut -d' ' -f1 /proc/loadavg)"
    "$outbox" bench --store "$pg" --transport nats --scenario latency --rate "$rate" \
      --out "$out/outbox-$rate-$round" >/dev/null 2>"$out/outbox-$rate-$round.log"
    python3 - "$out/outbox-$rate-$round/results.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["latency"]
c = r["commit_to_consumer"]
print(f"   outbox (NATS):  p50 {c['p50_ms']:.2f}  p90 {c['p90_ms']:.2f}  p99 {c['p99_ms']:.2f} ms  "
      f"sent {r['sent']} received {r['received']} left {r['left_behind']}  tx p50 {r['transaction']['p50_ms']:.2f} ms")
EOF
    "$peer" --url "$pg" --migrations "$migrations" --rate "$rate" >"$out/sqlxmq-$rate-$round.json" 2>"$out/sqlxmq-$rate-$round.log"
    python3 - "$out/sqlxmq-$rate-$round.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["commit_to_job"]
print(f"   sqlxmq:         p50 {c['p50_ms']:.2f}  p90 {c['p90_ms']:.2f}  p99 {c['p99_ms']:.2f} ms  "
      f"sent {r['sent']} received {r['received']} left {r['left_behind']}  tx p50 {r['transaction']['p50_ms']:.2f} ms")
EOF
  done
done
