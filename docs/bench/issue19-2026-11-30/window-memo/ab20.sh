#!/usr/bin/env bash
set -u
OUT=/tmp/ab/out; mkdir -p $OUT; cd /tmp/ab
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: load $(cut -d' ' -f1 /proc/loadavg)"
  "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $? $(grep '^| 1 |' $OUT/$name.txt)"; }
for r in 4 5 6 7 8 9; do
  for b in before after; do
    run "$b-20k-$r" /tmp/m/outbox-$b bench --store "$PG" --transport nats --scenario drain --n 20000
  done
done
