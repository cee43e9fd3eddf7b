#!/usr/bin/env bash
# Why the locked-window patch lost: the statements each build runs in a drain of 10^5 on 1,000
# keys, counted by pg_stat_statements on a PostgreSQL of our own (scripts/own-postgres.sh start 54331).
set -u
PSQL="psql -h 127.0.0.1 -p 54331 -U postgres -d test -AtX"
for v in A L; do
  bin=/tmp/bins/outbox; [ $v = L ] && bin=/tmp/bins/outbox-L
  $PSQL -c "SELECT pg_stat_statements_reset()" >/dev/null
  $bin bench --store 'postgres://postgres@127.0.0.1:54331/test?sslmode=disable' --transport nats --scenario drain --out /tmp/abL/why-$v > /tmp/abL/why-$v.txt 2>/dev/null
  echo "== $v: $(awk '/^## Drain/{f=1} f && /^\| 1 \|/{print; exit}' /tmp/abL/why-$v.txt)"
  $PSQL -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 0) AS ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 70) FROM pg_stat_statements WHERE query ~* 'outbox_message' AND calls > 0 ORDER BY total_exec_time DESC LIMIT 8"
done
