#!/usr/bin/env bash
# after with NATS and with the null transport, beside sqlxmq, on a PostgreSQL in /dev/shm: shm-null.sh ROUNDS RATE OUT
set -u
rounds="$1"; rate="$2"; out="$3"; port=54333
mkdir -p "$out"
dir=/dev/shm/own-postgres-$port
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
rm -rf "$dir"; mkdir -p "$dir"; chown postgres: "$dir"
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >"$dir/initdb.log" 2>&1
runuser -u postgres -- "$bin/postgres" -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
  -c shared_buffers=128MB -c max_wal_size=1GB -c max_connections=200 >"$dir/log" 2>&1 &
for _ in $(seq 1 120); do "$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.5; done
"$bin/psql" -h 127.0.0.1 -p $port -U postgres -d postgres -qc 'CREATE DATABASE test'
PG="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
M=$(ls -d ~/.cargo/registry/src/*/sqlxmq-0.6.0)/migrations
peer=$HOME/.cache/outbox-target/release/peer-sqlxmq
for round in $(seq 1 "$rounds"); do
  for t in nats null; do
    /tmp/outbox-after bench --store "$PG" --transport $t --scenario latency --rate "$rate" --out "$out/$t-$round" >/dev/null 2>"$out/$t-$round.log"
  done
  $peer --url "$PG" --migrations "$M" --rate "$rate" > "$out/sqlxmq-$round.json" 2>"$out/sqlxmq-$round.log"
done
pid=$(head -1 "$dir/data/postmaster.pid"); kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done; rm -rf "$dir"
python3 - "$rounds" "$out" <<'PY'
import json,sys
n=int(sys.argv[1]); out=sys.argv[2]
for r in range(1,n+1):
  for t in ("nats","null"):
    o=json.load(open(f"{out}/{t}-{r}/results.json"))["latency"]; c=o["commit_to_consumer"]
    print(r,t,"p50 %.2f p90 %.2f p99 %.2f tx %.2f cpm %.2f xpm %.2f left %d dup %d" % (c["p50_ms"],c["p90_ms"],c["p99_ms"],o["transaction"]["p50_ms"],o["claims_per_msg"],o["db_xacts_per_msg"],o["left_behind"],o["duplicates"]))
  s=json.load(open(f"{out}/sqlxmq-{r}.json")); d=s["commit_to_job"]
  print(r,"sqlxmq p50 %.2f p90 %.2f p99 %.2f tx %.2f" % (d["p50_ms"],d["p90_ms"],d["p99_ms"],s["transaction"]["p50_ms"]))
PY
