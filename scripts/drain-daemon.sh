#!/usr/bin/env bash
# The drain as a user runs it: `outbox relay` alone in its own process, over a backlog of N
# messages written straight into outbox_message by SQL (no bench filler in the process), to a
# Redis stream. Reports the drain rate, the relay's peak RSS (VmHWM) and its CPU time. For the
# relay-alone RSS at 10^6 (issue 19) and the daemon's drain beside `outbox bench`'s.
#
#   bash scripts/drain-daemon.sh pg|my N [KEYS]      e.g. bash scripts/drain-daemon.sh pg 1000000 1000
#
# A scratch database on the shared server (created here, dropped at the end) and the stream
# `outbox-drain-daemon` on the shared Redis (deleted before and after). OUTBOX picks the binary
# (default: the release build under CARGO_TARGET_DIR, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/relay-config.sh
source scripts/relay-config.sh

usage() { echo "usage: $0 pg|my N [KEYS]" >&2; exit 2; }
[ $# -ge 2 ] && [ "$2" -gt 0 ] 2>/dev/null || usage
server=$1 n=$2 keys=${3:-1000}
db=outbox_drain_daemon
stream=outbox-drain-daemon
outbox=$(outbox_binary release)
work=$(mktemp -d)
relay_pid=""
cleanup() {
  [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null
  redis-cli -h 127.0.0.1 DEL "$stream" >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

payload='{"order_id":1234567,"user_id":42,"amount":"99.50","currency":"CNY","items":[{"sku":"A-1","qty":2}]}'
export PGOPTIONS="-c client_min_messages=warning"
case $server in
  pg)
    url="postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
    sql() { psql -h 127.0.0.1 -U postgres -qAt -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
    psql -h 127.0.0.1 -U postgres -qAt -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
    drop() { psql -h 127.0.0.1 -U postgres -qAt -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"; }
    fill="INSERT INTO outbox_message (topic, payload, msg_key) SELECT 'drain', '$payload', 'k' || (g % $keys) FROM generate_series(1, $n) g"
    ;;
  my)
    url="mysql://root@127.0.0.1:3306/$db"
    sql() { mariadb -h 127.0.0.1 -uroot -N "$db" -e "$1"; }
    mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
    drop() { mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $db"; }
    fill="INSERT INTO outbox_message (topic, payload, msg_key) SELECT 'drain', '$payload', CONCAT('k', seq % $keys) FROM seq_1_to_$n"
    ;;
  *) usage ;;
esac

"$outbox" migrate --database-url "$url" >/dev/null
t=$(date +%s.%N)
sql "$fill"
sql "ANALYZE TABLE outbox_message" >/dev/null 2>&1 || sql "ANALYZE outbox_message"
echo "== $server: $n messages, $keys keys, filled by SQL in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s; load $(cut -d' ' -f1-3 /proc/loadavg)"

relay_config drain "$url" "$stream" "max_connections = 8" >"$work/outbox.toml"
redis-cli -h 127.0.0.1 DEL "$stream" >/dev/null

t0=$(date +%s.%N)
"$outbox" relay --config "$work/outbox.toml" ${RELAY_ARGS:-} 2>"$work/relay.log" &
relay_pid=$!
# Waits for the last message to reach the stream (XLEN is O(1)): no load on the database.
while :; do
  len=$(redis-cli -h 127.0.0.1 XLEN "$stream")
  [ "$len" -ge "$n" ] && break
  if ! kill -0 "$relay_pid" 2>/dev/null; then
    echo "the relay exited before the drain ended ($len of $n); its log:" >&2
    tail -20 "$work/relay.log" >&2
    exit 1
  fi
  sleep 0.2
done
t1=$(date +%s.%N)
hwm=$(awk '/VmHWM/ { print $2 }' "/proc/$relay_pid/status")
ticks=$(awk '{ print $14 + $15 }' "/proc/$relay_pid/stat")
hz=$(getconf CLK_TCK)
kill "$relay_pid"
wait "$relay_pid" 2>/dev/null || true
relay_pid=""
left=$(sql "SELECT COUNT(*) FROM outbox_message WHERE status IN ('pending', 'sending')")
len=$(redis-cli -h 127.0.0.1 XLEN "$stream")
awk -v n="$n" -v a="$t0" -v b="$t1" -v hwm="$hwm" -v ticks="$ticks" -v hz="$hz" -v left="$left" -v len="$len" 'BEGIN {
  printf "drain %d in %.1f s: %d msg/s; relay peak RSS %.1f MiB; relay CPU %.1f s; %d left pending; %d in the stream\n",
    n, b - a, n / (b - a), hwm / 1024, ticks / hz, left, len
}'
[ -n "${KEEP_LOG:-}" ] && cp "$work/relay.log" "$KEEP_LOG"
drop
