#!/usr/bin/env bash
# A/B of two release builds of `outbox` (/tmp/outbox-before, /tmp/outbox-after), beside sqlxmq:
#
#   scripts/ab-latency.sh [ROUNDS] [RATE]
#
# The latency scenario at RATE msg/s (500 unless given) on PostgreSQL + NATS and MariaDB + NATS, the order of the two
# builds alternating each round, sqlxmq's harness (bench/peers/sqlxmq, built by scripts/peers.sh)
# after each round; raw reports in /tmp/ab, one line per run printed at the end. Not part of CI:
# a measurement (docs/benchmarks.md, "A claim without the pool's ping", "Claims by id").
set -u
out=/tmp/ab; mkdir -p $out
rounds="${1:-3}"
rate="${2:-500}"
PG=postgres://postgres@127.0.0.1:5432/test; MY=mysql://root@127.0.0.1:3306/test
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=${PEER:-$HOME/.cache/outbox-target/release/peer-sqlxmq}
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    for st in pg my; do
      url=$PG; [ $st = my ] && url=$MY
      echo "== round $round $which $st load $(cut -d' ' -f1 /proc/loadavg)"
      /tmp/outbox-$which bench --store $url --transport nats --scenario latency --rate $rate --out $out/$which-$st-$round >/dev/null 2>$out/$which-$st-$round.log
    done
  done
  $peer --url $PG --migrations $M --rate $rate > $out/sqlxmq-$round.json 2>$out/sqlxmq-$round.log
done
python3 - "$rounds" <<'PY'
import json, sys
for r in range(1, int(sys.argv[1]) + 1):
  for w in ("before","after"):
    for st in ("pg","my"):
      o=json.load(open(f"/tmp/ab/{w}-{st}-{r}/results.json"))["latency"]; c=o["commit_to_consumer"]
      print(r,w,st,"p50 %.2f p90 %.2f p99 %.2f tx %.2f claim %.2f cpm %.2f xpm %s sent %d recv %d left %d dup %d" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claim_ms_mean"] or 0,o["claims_per_msg"],o.get("db_xacts_per_msg"),o["sent"],o["received"],o["left_behind"],o["duplicates"]))
      # The claims by why they ran, per message: kind=claims/empty (builds before the counters have none).
      k=" ".join("%s=%d/%d" % (x["kind"],x["claims"],x["empty"]) for x in o.get("claim_kinds",[]) if x["claims"])
      if k: print("   kinds", k, "ids left to the window", o.get("ids_left_to_the_window"), "wake-ups without a claim", o.get("wake_ups_held"))
  s=json.load(open(f"/tmp/ab/sqlxmq-{r}.json")); d=s["commit_to_job"]
  print(r,"sqlxmq p50 %.2f p90 %.2f p99 %.2f tx %.2f" % (d["p50_ms"],d["p90_ms"],d["p99_ms"],s["transaction"]["p50_ms"]))
PY
