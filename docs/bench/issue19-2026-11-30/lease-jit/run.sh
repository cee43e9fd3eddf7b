#!/bin/bash
# The lease claim's JIT exposure with a deep backlog, on our own PostgreSQL (5433).
set -e
P="psql -h 127.0.0.1 -p 5433 -U postgres -v ON_ERROR_STOP=1"
$P -d postgres -qc "drop database if exists leasejit" -c "create database leasejit"
outbox migrate --database-url postgres://postgres@127.0.0.1:5433/leasejit >/dev/null
sed 's/1000000::int8/2000000::int8/' docs/bench/issue19-2026-11-29/jit/fill.sql > /tmp/fill2e6.sql
$P -d leasejit -q -f /tmp/fill2e6.sql
# 300,000 sent rows whose index entries vacuum has not removed.
$P -d leasejit -qc "UPDATE outbox_message SET status = 'sent' WHERE id <= 300000"
for mode in auto force_custom_plan force_generic_plan; do
  echo "== plan_cache_mode = $mode"
  { cat docs/bench/issue19-2026-11-30/lease-jit/lease_claim.sql; echo "SET plan_cache_mode = $mode;"; for i in 1 2 3 4 5 6 7; do echo "BEGIN; EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lc(500, 1000, 0, '{}', 'r', 30000); ROLLBACK;"; done; } > /tmp/lease_run.sql
  $P -d leasejit -At -f /tmp/lease_run.sql | python3 -c "
import sys, json
txt=sys.stdin.read()
dec=json.JSONDecoder(); i=0; n=0
while True:
    j=txt.find('[', i)
    if j<0: break
    try:
        obj,end=dec.raw_decode(txt[j:])
    except Exception:
        i=j+1; continue
    n+=1; p=obj[0]; jit=p.get('JIT')
    print(n, 'cost %.0f' % p['Plan']['Total Cost'], 'exec %.1f ms' % p['Execution Time'], 'JIT functions %s, %.1f ms' % (jit['Functions'], jit['Timing']['Total']) if jit else 'no JIT')
    i=j+end
"
done
