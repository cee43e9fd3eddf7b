#!/usr/bin/env bash
# A/B of /tmp/outbox-$A and /tmp/outbox-$B: ab2.sh A B ROUNDS RATE OUT [STORES]
set -u
A=$1; B=$2; rounds=$3; rate=$4; out=$5; stores=${6:-"pg my"}; mkdir -p $out
PG=${PGURL:-postgres://postgres@127.0.0.1:5432/test}; MY=mysql://root@127.0.0.1:3306/test
for r in $(seq 1 $rounds); do
  if [ $((r%2)) = 1 ]; then ord="$A $B"; else ord="$B $A"; fi
  for w in $ord; do for st in $stores; do url=$PG; [ $st = my ] && url=$MY
    /tmp/outbox-$w bench --store $url --transport nats --scenario latency --rate $rate --out $out/$w-$st-$r >/dev/null 2>$out/$w-$st-$r.log
  done; done
done
python3 - $A $B $rounds $out "$stores" <<'PY'
import json,sys
A,B,n,out,stores=sys.argv[1],sys.argv[2],int(sys.argv[3]),sys.argv[4],sys.argv[5].split()
for st in stores:
  for r in range(1,n+1):
    for w in (A,B):
      o=json.load(open(f"{out}/{w}-{st}-{r}/results.json"))["latency"]; c=o["commit_to_consumer"]
      k=" ".join("%s=%d/%d"%(x["kind"],x["claims"],x["empty"]) for x in o.get("claim_kinds",[]) if x["claims"])
      print(st,r,w,"p50 %.2f p90 %.2f p99 %.2f tx %.2f claim %.2f cpm %.2f xpm %s left %d dup %d sent %d recv %d | %s" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claim_ms_mean"] or 0,o["claims_per_msg"],o.get("db_xacts_per_msg"),o["left_behind"],o["duplicates"],o["sent"],o["received"],k))
PY
