#!/usr/bin/env bash
# Where a second relay's database time goes: drains of 10^5 (1,000 keys, NATS) with one relay and
# with two, alternating, on a PostgreSQL of our own (port 54331) with pg_stat_statements reset
# before each, so each drain's statements (calls, rows, time, buffers, WAL) are its own.
# OUT=<absolute dir> ROUNDS=<n> BIN=<release outbox>.
set -u
BIN=${BIN:?outbox binary}; OUT=${OUT:?absolute output dir}; ROUNDS=${ROUNDS:-2}
here=$(cd "$(dirname "$0")/../../../.." && pwd)
mkdir -p "$OUT"; cd "$OUT"
"$here/scripts/own-postgres.sh" start 54331
trap 'cp /tmp/own-postgres-54331/log "$OUT/server.log"; "$here/scripts/own-postgres.sh" stop 54331' EXIT
U='postgres://postgres@127.0.0.1:54331/test?sslmode=disable'
P="psql -h 127.0.0.1 -p 54331 -U postgres -d test -X"
for r in $(seq 1 "$ROUNDS"); do
  for n in 1 2; do
    name="relays$n-$r"
    $P -Atc "SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')" >/dev/null
    echo "== $(date -u +%H:%M:%S) $name"; uptime
    "$BIN" bench --store "$U" --transport nats --scenario scale --relays "$n" --sent-rows 10000 \
      > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
    grep -E "^\| $n \| 100000" "$OUT/$name.txt"
    $P -c "SELECT calls, round(total_exec_time::numeric) AS ms,
             round((total_exec_time / greatest(calls, 1))::numeric, 2) AS ms_per, rows,
             shared_blks_hit AS hit, shared_blks_dirtied AS dirtied, wal_records, wal_fpi,
             pg_size_pretty(wal_bytes) AS wal, left(regexp_replace(query, '\s+', ' ', 'g'), 80) AS query
           FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12" > "$OUT/$name.stmts"
  done
done
