#!/usr/bin/env bash
# after vs sqlxmq on the shared PostgreSQL, alternating order: run.sh ROUNDS RATE OUT
set -u
rounds=$1; rate=$2; out=$3; mkdir -p $out
PG=postgres://postgres@127.0.0.1:5432/test
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=$HOME/.cache/outbox-target/release/peer-sqlxmq
for r in $(seq 1 $rounds); do
  o() { /tmp/outbox-after bench --store $PG --transport nats --scenario latency --rate $rate --out $out/outbox-$r >/dev/null 2>$out/outbox-$r.log; }
  s() { $peer --url $PG --migrations $M --rate $rate > $out/sqlxmq-$r.json 2>$out/sqlxmq-$r.log; }
  if [ $((r % 2)) = 1 ]; then o; s; else s; o; fi
done
python3 - $rounds $out <<'PY'
import json,sys
n=int(sys.argv[1]); out=sys.argv[2]
for r in range(1,n+1):
  o=json.load(open(f"{out}/outbox-{r}/results.json"))["latency"]; c=o["commit_to_consumer"]
  s=json.load(open(f"{out}/sqlxmq-{r}.json")); d=s["commit_to_job"]
  print(r,"outbox p50 %.2f p90 %.2f p99 %.2f tx %.2f cpm %.2f sent %d recv %d left %d dup %d | sqlxmq p50 %.2f p90 %.2f p99 %.2f tx %.2f" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claims_per_msg"],o["sent"],o["received"],o["left_behind"],o["duplicates"],d["p50_ms"],d["p90_ms"],d["p99_ms"],s["transaction"]["p50_ms"]))
PY
