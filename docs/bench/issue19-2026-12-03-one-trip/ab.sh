#!/usr/bin/env bash
# The locked claim with its window's first pass in the round trip of its BEGIN and a small settlement
# in fewer round trips (NEW) against the code before (OLD): release builds alternating by round,
# on STORE (the shared PostgreSQL unless given) + NATS: the latency scenario at each RATE, then
# the drain of N with 1,000 keys (N=0: no drain).
# OLD=<release outbox> NEW=<release outbox> OUT=<absolute dir> [STORE=url] [ROUNDS=3] [RATES="500 1000"] [N=100000]
set -u
OLD=${OLD:?}; NEW=${NEW:?}; OUT=${OUT:?absolute output dir}
ROUNDS=${ROUNDS:-3}; RATES=${RATES:-500 1000}; N=${N:-100000}
STORE=${STORE:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
mkdir -p "$OUT"; cd "$OUT"
show() { python3 - "$OUT/$1/results.json" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); n = sys.argv[2]
l = d.get("latency")
if l:
    b, t = l["commit_to_confirmed"], l["transaction"]
    cpu = l.get("db_server_cpu_us_per_msg")
    print(f"{n:>18}: confirmed p50 {b['p50_ms']:.2f} p90 {b['p90_ms']:.2f} p99 {b['p99_ms']:.2f} ms | claim {l['claim_ms_mean']:.2f} settle {l['settle_ms_mean']:.2f} ms | "
          f"DB {cpu if cpu is None else round(cpu)} us/msg, xacts {l.get('db_xacts_per_msg')} | left {l['left_behind']} dup {l['duplicates']} | tx p50 {t['p50_ms']:.2f} p99 {t['p99_ms']:.2f} ms")
r = d.get("drain")
if r:
    print(f"{n:>18}: drain {r['n']} keys {d['config'].get('keys')} {r['msgs_per_s']:,.0f} msgs/s, DB {r.get('db_server_cpu_us_per_msg'):.1f} us/msg, "
          f"received {r.get('consumer_received')} dup {r.get('duplicates')}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for arm in $order; do
    bin=$OLD; [ "$arm" = new ] && bin=$NEW
    echo "== $(date -u +%H:%M:%S) round $r $arm, load $(cut -d' ' -f1 /proc/loadavg)"
    for rate in $RATES; do
      "$bin" bench --store "$STORE" --transport nats --scenario latency --rate "$rate" --out "$OUT/$arm-lat$rate-$r" \
        > "$OUT/$arm-lat$rate-$r.txt" 2> "$OUT/$arm-lat$rate-$r.err"; show "$arm-lat$rate-$r"
    done
    if [ "$N" != 0 ]; then
      "$bin" bench --store "$STORE" --transport nats --scenario drain --n "$N" --out "$OUT/$arm-drain-$r" \
        > "$OUT/$arm-drain-$r.txt" 2> "$OUT/$arm-drain-$r.err"; show "$arm-drain-$r"
    fi
  done
done
