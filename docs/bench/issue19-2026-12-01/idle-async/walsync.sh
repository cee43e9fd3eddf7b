#!/usr/bin/env bash
# usage: walsync.sh RATE ROUNDS -- latency scenario on own PG 54331, WAL flushes per message, before/after alternating
set -u
RATE=$1; ROUNDS=$2; OUT=/tmp/walsync; mkdir -p $OUT
U='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
P="psql -h 127.0.0.1 -p 54331 -U postgres test -X -At"
for r in $(seq 1 $ROUNDS); do
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for w in $order; do
    $P -c "select pg_stat_reset_shared('wal')" >/dev/null
    /tmp/outbox-$w bench --store "$U" --transport nats --scenario latency --rate $RATE --out $OUT/$w-$RATE-$r >/dev/null 2>$OUT/$w-$RATE-$r.log
    syncs=$($P -c "select wal_sync from pg_stat_wal")
    python3 - $OUT/$w-$RATE-$r/results.json $syncs $w $r <<'PY'
import json,sys
o=json.load(open(sys.argv[1]))["latency"]; c=o["commit_to_consumer"]; s=int(sys.argv[2])
k=" ".join("%s=%d/%d" % (x["kind"],x["claims"],x["empty"]) for x in o.get("claim_kinds",[]) if x["claims"])
print(sys.argv[4], sys.argv[3], "p50 %.2f p90 %.2f p99 %.2f tx %.2f claim %.2f cpm %.2f wal_syncs %d per msg %.2f sent %d recv %d left %d dup %d" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claim_ms_mean"] or 0,o["claims_per_msg"],s,s/o["sent"],o["sent"],o["received"],o["left_behind"],o["duplicates"]))
print("   kinds", k)
PY
  done
done
