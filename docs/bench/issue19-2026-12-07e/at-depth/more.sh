set -u
B=$HOME/.cache/outbox-release/release/outbox; OUT=/tmp/b1m
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
while pgrep -f at-depth.sh >/dev/null; do sleep 2; done
for k in 10 1000000; do
  name=pg-nats-1m-$k
  echo "== $(date -u +%H:%M:%S) $name: --store $PG --transport nats --scenario raw,drain --n 1000000 --keys $k, load $(cut -d' ' -f1 /proc/loadavg)"
  "$B" bench --store "$PG" --transport nats --scenario raw,drain --n 1000000 --keys "$k" --out "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
done
echo "== $(date -u +%H:%M:%S) done"
