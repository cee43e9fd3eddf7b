#!/bin/bash
# ab.sh ROUNDS OUT SCENARIO [extra bench args]: before/after alternating on the shared PostgreSQL,
# with the PostgreSQL server's CPU over each run (clock ticks of 10 ms).
rounds=$1; out=$2; scen=$3; shift 3
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in before after; do
    c0=$(python3 /tmp/pgcpu.py postgres)
    /tmp/outbox-$b bench --store "$PG" --transport nats --scenario $scen "$@" --out $out/$b-$r > $out/$b-$r.log 2>&1
    c1=$(python3 /tmp/pgcpu.py postgres)
    echo "$b-$r pg_cpu_s=$(( (c1-c0) )) load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a $out/cpu.txt
  done
done
