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
python3 "$(dirname "$0")/printed.py" "$out"
