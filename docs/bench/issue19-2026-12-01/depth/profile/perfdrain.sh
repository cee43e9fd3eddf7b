#!/usr/bin/env bash
# usage: perfdrain.sh N LABEL [SECS] -- drain on own PG 54331, perf of the whole machine once the claims run
set -u
N=$1; L=$2; SECS=${3:-}; B=${B:-/tmp/m/outbox}; OUT=/tmp/prof; mkdir -p $OUT
U='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
P="psql -h 127.0.0.1 -p 54331 -U postgres test -X -At"
$P -c "select pg_stat_statements_reset(), pg_stat_reset_shared('wal'), pg_stat_reset_shared('bgwriter')" >/dev/null
(cd $OUT && $B bench --store "$U" --transport nats --scenario drain --n $N > $OUT/$L.txt 2> $OUT/$L.err) &
bp=$!
until [ "$($P -c "select count(*) from pg_stat_activity where query like '%firsts AS%' and pid<>pg_backend_pid()")" != 0 ]; do
  kill -0 $bp 2>/dev/null || break; sleep 0.05; done
if [ -n "$SECS" ]; then perf record -a -F 1999 -o $OUT/$L.perf -- sleep $SECS 2>/dev/null >/dev/null
else perf record -a -F 1999 -o $OUT/$L.perf -- bash -c "while kill -0 $bp 2>/dev/null; do sleep 0.05; done" 2>/dev/null >/dev/null; fi
wait $bp; echo "exit $?"
$P -c "select calls, round(total_exec_time::numeric,0) ms, round((total_exec_time/greatest(calls,1))::numeric,2) ms_per, rows, shared_blks_hit hit, shared_blks_read rd, shared_blks_dirtied dirt, wal_fpi fpi, pg_size_pretty(wal_bytes) wal, left(regexp_replace(query,'\s+',' ','g'),60) q from pg_stat_statements order by total_exec_time desc limit 8" > $OUT/$L.stmts
$P -c "select checkpoints_timed, checkpoints_req, buffers_checkpoint, buffers_clean, buffers_backend from pg_stat_bgwriter" >> $OUT/$L.stmts
grep "^| 1 |" $OUT/$L.txt
