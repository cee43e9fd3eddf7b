#!/usr/bin/env bash
# usage: pgprof.sh N LABEL  -- a drain on our own PostgreSQL (54331) with pg_stat_statements
set -u
N=$1; L=$2; B=${B:-/tmp/m/outbox}; OUT=/tmp/pgprof; mkdir -p $OUT
U='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
P="psql -h 127.0.0.1 -p 54331 -U postgres test -X"
$P -Atc "select pg_stat_statements_reset(), pg_stat_reset_shared('wal'), pg_stat_reset_shared('bgwriter')" >/dev/null
: > /tmp/own-postgres-54331/log.mark; LOGSTART=$(wc -l < /tmp/own-postgres-54331/log)
(cd $OUT && $B bench --store "$U" --transport nats --scenario drain --n $N > $OUT/$L.txt 2> $OUT/$L.err)
echo "exit $?"
$P -c "select calls, round(total_exec_time::numeric,0) ms, round((total_exec_time/greatest(calls,1))::numeric,2) ms_per, rows, shared_blks_hit hit, shared_blks_read rd, shared_blks_dirtied dirt, wal_records walrec, wal_fpi fpi, pg_size_pretty(wal_bytes) wal, left(regexp_replace(query,'\s+',' ','g'),90) q from pg_stat_statements order by total_exec_time desc limit 14" > $OUT/$L.stmts
$P -c "select * from pg_stat_wal" -c "select checkpoints_timed, checkpoints_req, buffers_checkpoint, buffers_clean, buffers_backend from pg_stat_bgwriter" >> $OUT/$L.stmts
tail -n +$((LOGSTART+1)) /tmp/own-postgres-54331/log | grep -E "automatic|checkpoint|CPU|index scans|pages:" > $OUT/$L.log
grep "^| 1 |" $OUT/$L.txt
