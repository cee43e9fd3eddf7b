#!/usr/bin/env bash
# /tmp/outbox-after and sqlxmq's harness on the shared PostgreSQL, the order alternating each round:
#   vs-sqlxmq.sh ROUNDS RATE OUT
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
python3 "$(dirname "$0")/printed.py" "$out"
