#!/usr/bin/env bash
# Several release builds ("arms") of outbox on STORE + NATS, the latency scenario at each RATE,
# ROUNDS rounds, the arms' order rotated each round so that drift hits every arm alike.
# ARMS="name=/path/to/outbox name2=/path/to/outbox2 ..." OUT=<absolute dir>
#   [STORE=url] [ROUNDS=6] [RATES="500"]
set -u
ARMS=${ARMS:?name=binary ...}; OUT=${OUT:?absolute output dir}
ROUNDS=${ROUNDS:-6}; RATES=${RATES:-500}
STORE=${STORE:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
mkdir -p "$OUT"; cd "$OUT"
read -r -a arms <<< "$ARMS"
for r in $(seq 1 "$ROUNDS"); do
  n=${#arms[@]}
  for i in $(seq 0 $((n - 1))); do
    arm=${arms[$(((i + r - 1) % n))]}; name=${arm%%=*}; bin=${arm#*=}
    for rate in $RATES; do
      run="$name-lat$rate-$r"
      "$bin" bench --store "$STORE" --transport nats --scenario latency --rate "$rate" --out "$OUT/$run" \
        > "$OUT/$run.txt" 2> "$OUT/$run.err"
      python3 - "$OUT/$run/results.json" "$run" "$(date -u +%H:%M:%S)" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["latency"]
b, t = l["commit_to_confirmed"], l["transaction"]
cpu = l.get("db_server_cpu_us_per_msg")
print(f"{sys.argv[3]} {sys.argv[2]:>20}: confirmed p50 {b['p50_ms']:.2f} p90 {b['p90_ms']:.2f} p99 {b['p99_ms']:.2f} ms | "
      f"claim {l['claim_ms_mean']:.2f} settle {l['settle_ms_mean']:.2f} ms, {l['claims_per_msg']:.2f} claims/msg | "
      f"DB {'-' if cpu is None else round(cpu)} us/msg | left {l['left_behind']} dup {l['duplicates']} | "
      f"tx p50 {t['p50_ms']:.2f} p99 {t['p99_ms']:.2f} ms")
PY
    done
  done
done
