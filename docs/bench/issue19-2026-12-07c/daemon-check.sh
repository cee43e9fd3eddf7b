#!/usr/bin/env bash
# `outbox relay` itself (not the bench's relay): a store with 300,000 messages on 10 hot keys
# (MariaDB, or PostgreSQL with STORE=postgres), the daemon's defaults (pool 4, budget 16, batches
# of 500, 2 in flight, runs of 32) and Redis Streams (the streams lanecheck:hot and
# lanecheck:cold, deleted at the end); once it runs, another process (the mysql or psql client)
# commits 100 messages on keys of their own, one every 20-30 ms. Prints, for each binary given,
# when those were all sent, how much of the backlog was still unsent then, commit -> sent mark of
# those 100 (created_at -> updated_at), and the lane's counters from /metrics.
# With IDLE_STORES=n the daemon also serves n idle stores of their own (databases lanecheck_1 ..
# lanecheck_n, migrated, empty): with n >= 16 the daemon has more stores than its budget's 16
# shares (a crowded budget, where the stores' pools keep no connection between turns).
# With HOT=n the backlog holds n messages instead of 300,000 (HOT=0: none, the foreign messages
# alone: a busy store among idle ones).
# With STRACE=1 the daemon runs under `strace -f -e trace=connect`, and the connections counted
# are the daemon's own connect() calls to the database server (not every client's on the server:
# a CI beside it, or the other databases' clients, do not count).
# The daemon's own count of the connections its stores' pools opened meanwhile
# (outbox_pool_connections_opened_total, from /metrics: the busy store "s" and the idle ones
# apart) is printed too, by builds that export it (0 0 for older ones).
# Usage: [STORE=postgres] [IDLE_STORES=n] [RATE=r COLD=n] [HOT=n] [STRACE=1] bash daemon-check.sh label:/path/to/outbox ...
set -euo pipefail
DB=lanecheck
PORT=18098
STORE=${STORE:-mariadb}
IDLE_STORES=${IDLE_STORES:-0}
# With RATE=r the foreign messages are written by foreign-writer.py (Python: psycopg or PyMySQL),
# COLD of them at r per second on one connection, instead of one client run per message.
RATE=${RATE:-}
COLD=${COLD:-100}
HOT=${HOT:-300000}
url_of() {
  if [ "$STORE" = postgres ]; then echo "postgres://postgres@127.0.0.1:5432/$1?sslmode=disable"
  else echo "mysql://root@127.0.0.1:3306/$1"; fi
}
if [ "$STORE" = postgres ]; then
  URL="postgres://postgres@127.0.0.1:5432/$DB?sslmode=disable"
  admin() { psql -h 127.0.0.1 -U postgres -d test -qAtc "$1"; }
  sql() { psql -h 127.0.0.1 -U postgres -d $DB -qAtc "$1"; }
  fill="INSERT INTO outbox_message (topic, payload, msg_key)
        SELECT 'hot', 'x', 'hot-' || (g % 10) FROM generate_series(1, $HOT) g"
  ms="(EXTRACT(EPOCH FROM (updated_at - created_at)) * 1000)"
else
  URL="mysql://root@127.0.0.1:3306/$DB"
  admin() { mysql -h127.0.0.1 -uroot -N -B -e "$1"; }
  sql() { mysql -h127.0.0.1 -uroot -N -B $DB -e "$1"; }
  fill="INSERT INTO outbox_message (topic, payload, msg_key)
        SELECT 'hot', 'x', CONCAT('hot-', seq % 10) FROM seq_1_to_$HOT"
  ms="(TIMESTAMPDIFF(MICROSECOND, created_at, updated_at) / 1000)"
fi
# Connections the server accepted so far (every client's: the mysql/psql client here opens one
# per statement, the same number for every binary).
conns() {
  if [ -n "${STRACE:-}" ]; then
    local port=3306
    if [ "$STORE" = postgres ]; then port=5432; fi
    grep -c "sin_port=htons($port)" "/tmp/daemon-check-$label.strace" || true
  elif [ "$STORE" = postgres ]; then admin "SELECT sum(sessions) FROM pg_stat_database"
  else admin "SHOW GLOBAL STATUS LIKE 'Connections'" | awk '{print $2}'; fi
}
# The daemon's outbox_pool_connections_opened_total: store "s", then the other stores together.
opened() {
  curl -sf "http://127.0.0.1:$PORT/metrics" |
    awk '/^outbox_pool_connections_opened_total/ { if ($1 ~ /store="s"/) s += $2; else o += $2 } END { printf "%d %d", s, o }'
}
fresh() {
  admin "DROP DATABASE IF EXISTS $DB"
  admin "CREATE DATABASE $DB"
  for i in $(seq 1 "$IDLE_STORES"); do
    admin "DROP DATABASE IF EXISTS ${DB}_$i"
    admin "CREATE DATABASE ${DB}_$i"
  done
  redis-cli DEL lanecheck:hot lanecheck:cold >/dev/null
}
for pair in "$@"; do
  label=${pair%%:*} bin=${pair#*:}
  fresh
  "$bin" migrate --database-url "$URL" >/dev/null
  for i in $(seq 1 "$IDLE_STORES"); do "$bin" migrate --database-url "$(url_of "${DB}_$i")" >/dev/null; done
  if [ "$HOT" -gt 0 ]; then sql "$fill"; fi
  cfg=$(mktemp --suffix .toml)
  cat >"$cfg" <<TOML
[relay]
owner = "check"
[[stores]]
name = "s"
url = "$URL"
$(for i in $(seq 1 "$IDLE_STORES"); do printf '[[stores]]\nname = "idle%s"\nurl = "%s"\n' "$i" "$(url_of "${DB}_$i")"; done)
[destinations.n.transport]
type = "redis"
url = "redis://127.0.0.1:6379"
stream = "lanecheck:{topic}"
maxlen = 400000
[[routes]]
topic = "#"
destinations = ["n"]
[admin]
listen = "127.0.0.1:$PORT"
TOML
  if [ -n "${STRACE:-}" ]; then
    strace -f -qq -e trace=connect -o "/tmp/daemon-check-$label.strace" \
      "$bin" relay --config "$cfg" >"/tmp/daemon-check-$label.log" 2>&1 &
    tracer=$!
    until pid=$(pgrep -P $tracer); do sleep 0.05; done
  else
    "$bin" relay --config "$cfg" >"/tmp/daemon-check-$label.log" 2>&1 &
    pid=$!
  fi
  until curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; do sleep 0.2; done
  sleep 1
  c0=$(conns)
  o0=$(opened)
  t0=$(date +%s.%N)
  if [ -n "$RATE" ]; then
    python3 "$(dirname "$0")/foreign-writer.py" "$STORE" $DB "$RATE" "$COLD"
  else
    for i in $(seq 1 "$COLD"); do
      sql "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('cold', 'y', 'cold-$i')"
      sleep 0.02
    done
  fi
  t1=$(date +%s.%N)
  until [ "$(sql "SELECT count(*) FROM outbox_message WHERE topic = 'cold' AND status = 'sent'")" = "$COLD" ]; do
    sleep 0.05
  done
  t2=$(date +%s.%N)
  c2=$(conns)
  o2=$(opened)
  unsent=$(sql "SELECT count(*) FROM outbox_message WHERE topic = 'hot' AND status <> 'sent'")
  lat=$(sql "SELECT ROUND(AVG($ms), 1), ROUND(MAX($ms), 1) FROM outbox_message WHERE topic = 'cold'" | tr '|\t' '  ')
  # The 99th percentile of the same (nearest rank).
  p99=$(sql "SELECT ROUND($ms, 1) FROM outbox_message WHERE topic = 'cold' ORDER BY $ms DESC LIMIT 1 OFFSET $((COLD / 100))")
  m=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -E '^outbox_((claims_beside|lane_looks)_total|budget_(turns|parked_reused|parked_given_back)_total)' | grep -v 'idle' | tr '\n' ' ')
  kill -TERM $pid
  if [ -n "${STRACE:-}" ]; then wait $tracer || true; else wait $pid || true; fi
  printf '%s (%s idle stores) %s: %s foreign messages written in %.1f s, all sent %.2f s after the last; hot backlog unsent then: %s; created -> sent mark (ms) mean / max: %s, p99 %s; connections opened meanwhile (%s): %s; by the pools (store s / the others): %s / %s; %s\n' \
    "$STORE" "$IDLE_STORES" "$label" "$COLD" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$unsent" "$lat" "$p99" "$(if [ -n "${STRACE:-}" ]; then echo "the daemon's"; else echo "every client"; fi)" "$((c2 - c0))" "$(( ${o2% *} - ${o0% *} ))" "$(( ${o2#* } - ${o0#* } ))" "$m"
  rm -f "$cfg"
done
admin "DROP DATABASE IF EXISTS $DB"
for i in $(seq 1 "$IDLE_STORES"); do admin "DROP DATABASE IF EXISTS ${DB}_$i"; done
redis-cli DEL lanecheck:hot lanecheck:cold >/dev/null
