#!/usr/bin/env bash
# after with NATS and with the null transport beside sqlxmq on the shared PostgreSQL: shared-null.sh ROUNDS RATE OUT
set -u
rounds="$1"; rate="$2"; out="$3"; mkdir -p "$out"
PG=postgres://postgres@127.0.0.1:5432/test
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=$HOME/.cache/outbox-target/release/peer-sqlxmq
for round in $(seq 1 "$rounds"); do
  for t in nats null; do
    /tmp/outbox-after bench --store "$PG" --transport $t --scenario latency --rate "$rate" --out "$out/$t-$round" >/dev/null 2>"$out/$t-$round.log"
  done
  $peer --url "$PG" --migrations "$M" --rate "$rate" > "$out/sqlxmq-$round.json" 2>"$out/sqlxmq-$round.log"
done
python3 - "$rounds" "$out" <<'PY'
import json,sys
n=int(sys.argv[1]); out=sys.argv[2]
for r in range(1,n+1):
  for t in ("nats","null"):
    o=json.load(open(f"{out}/{t}-{r}/results.json"))["latency"]; c=o["commit_to_consumer"]
    print(r,t,"p50 %.2f p90 %.2f p99 %.2f tx %.2f cpm %.2f xpm %.2f left %d dup %d" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claims_per_msg"],o["db_xacts_per_msg"],o["left_behind"],o["duplicates"]))
  s=json.load(open(f"{out}/sqlxmq-{r}.json")); d=s["commit_to_job"]
  print(r,"sqlxmq p50 %.2f p90 %.2f p99 %.2f tx %.2f" % (d["p50_ms"],d["p90_ms"],d["p99_ms"],s["transaction"]["p50_ms"]))
PY
