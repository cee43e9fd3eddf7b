set -u
B=/tmp/bins/outbox-new; OUT=/tmp/q/out/targets
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
MY='mysql://root@127.0.0.1:3306/test'
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*, load $(cut -d' ' -f1 /proc/loadavg)"
  "$B" bench "$@" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"; }
run pg-nats-10        --store "$PG" --transport nats  --scenario raw,drain --keys 10
run pg-nats-100000    --store "$PG" --transport nats  --scenario raw,drain --keys 100000
run pg-redis-1000     --store "$PG" --transport redis --scenario raw,drain,latency
run my-nats-1000      --store "$MY" --transport nats  --scenario raw,drain,latency,enqueue
run pg-redis-10       --store "$PG" --transport redis --scenario raw,drain --keys 10
run pg-redis-100000   --store "$PG" --transport redis --scenario raw,drain --keys 100000
run my-nats-10        --store "$MY" --transport nats  --scenario raw,drain --keys 10
run my-nats-100000    --store "$MY" --transport nats  --scenario raw,drain --keys 100000
for r in 1 2; do
  run "pg-20k-$r"  --store "$PG" --transport nats --scenario drain --n 20000
  run "pg-1m-$r"   --store "$PG" --transport nats --scenario drain --n 1000000
  run "my-20k-$r"  --store "$MY" --transport nats --scenario drain --n 20000
  run "my-1m-$r"   --store "$MY" --transport nats --scenario drain --n 1000000
done
echo "== $(date -u +%H:%M:%S) done"
