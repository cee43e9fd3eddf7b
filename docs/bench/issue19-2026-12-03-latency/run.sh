#!/usr/bin/env bash
# Issue 19's latency targets on the code of record, one release build: outbox's commit → broker
# confirmed and commit → consumer beside sqlxmq's commit → job on the same shared PostgreSQL
# (the order of the two alternating by round), at each RATE, ROUNDS rounds; then the latency
# scenario at 1,000 msg/s on PostgreSQL + Redis and MariaDB + NATS.
# BIN=<release outbox> PEER=<release peer-sqlxmq, built from bench/peers/sqlxmq> OUT=<absolute dir>;
# PG=<url> for another PostgreSQL URL (the default negotiates TLS with a server that has `ssl = on`,
# as the shared one does: append `?sslmode=disable` for plain TCP, for both programs alike).
# Not scripts/peers.sh: that one builds the full release `outbox` itself, always runs outbox first,
# and prints commit → consumer only; this one takes built binaries, alternates which goes first,
# and prints commit → broker confirmed (the SPEC's measure) beside it.
set -u
BIN=${BIN:?outbox binary}; PEER=${PEER:?peer-sqlxmq binary}; OUT=${OUT:?absolute output dir}
ROUNDS=${ROUNDS:-3}; RATES=${RATES:-500 1000}
PG=${PG:-postgres://postgres@127.0.0.1:5432/test}; MY='mysql://root@127.0.0.1:3306/test'
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0 | head -1)/migrations
mkdir -p "$OUT"; cd "$OUT"
outbox() { # name, store, transport, rate
  "$BIN" bench --store "$2" --transport "$3" --scenario latency --rate "$4" --out "$OUT/$1" > "$OUT/$1.txt" 2> "$OUT/$1.err"
  python3 - "$OUT/$1/results.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["latency"]
c, b, t = r["commit_to_consumer"], r.get("commit_to_confirmed") or {}, r["transaction"]
print(f"{sys.argv[2]:>22}: confirmed p50 {b.get('p50_ms', float('nan')):.2f} p99 {b.get('p99_ms', float('nan')):.2f} | "
      f"consumer p50 {c['p50_ms']:.2f} p90 {c['p90_ms']:.2f} p99 {c['p99_ms']:.2f} ms | sent {r['sent']} received {r['received']} "
      f"left {r['left_behind']} | tx p50 {t['p50_ms']:.2f} p99 {t['p99_ms']:.2f} ms")
PY
}
sqlxmq() { # name, rate
  "$PEER" --url "$PG" --migrations "$M" --rate "$2" > "$OUT/$1.json" 2> "$OUT/$1.log"
  python3 - "$OUT/$1.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c, t = r["commit_to_job"], r["transaction"]
print(f"{sys.argv[2]:>22}: job p50 {c['p50_ms']:.2f} p90 {c['p90_ms']:.2f} p99 {c['p99_ms']:.2f} ms | sent {r['sent']} "
      f"received {r['received']} left {r['left_behind']} | tx p50 {t['p50_ms']:.2f} p99 {t['p99_ms']:.2f} ms")
PY
}
for rate in $RATES; do
  for r in $(seq 1 "$ROUNDS"); do
    echo "== $(date -u +%H:%M:%S) rate $rate round $r, load $(cut -d' ' -f1 /proc/loadavg)"
    if [ $((r % 2)) = 1 ]; then
      outbox "pg-nats-$rate-$r" "$PG" nats "$rate"; sqlxmq "sqlxmq-$rate-$r" "$rate"
    else
      sqlxmq "sqlxmq-$rate-$r" "$rate"; outbox "pg-nats-$rate-$r" "$PG" nats "$rate"
    fi
  done
done
echo "== $(date -u +%H:%M:%S) the other pairs at 1,000 msg/s"
outbox pg-redis-1000 "$PG" redis 1000
outbox my-nats-1000 "$MY" nats 1000
