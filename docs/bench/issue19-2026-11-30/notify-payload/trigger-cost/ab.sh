#!/usr/bin/env bash
# Alternating pgbench runs: single-row INSERT into a table whose statement trigger is schema 7's (no
# transition table) or schema 8's (transition table), with no relay idle (the busy case: no NOTIFY).
set -u
cd /tmp/trig
P="pgbench -h 127.0.0.1 -U postgres -n -T ${T:-10} -c ${C:-1} -j 1 trig_probe"
for r in $(seq 1 ${R:-4}); do
  for v in plain tt; do
    psql -h 127.0.0.1 -U postgres -d trig_probe -q -c "TRUNCATE m_plain, m_tt" 
    tps=$($P -f $v.sql 2>/dev/null | grep -oP 'tps = \K[0-9.]+' | head -1)
    echo "round $r $v c=${C:-1} tps $tps"
  done
done
