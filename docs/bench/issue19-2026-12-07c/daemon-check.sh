#!/usr/bin/env bash
# `outbox relay` itself (not the bench's relay): a MariaDB store with 300,000 messages on 10 hot
# keys, the daemon's defaults (pool 4, budget 16, batches of 500, 2 in flight, runs of 32) and
# Redis Streams (the streams lanecheck:hot and lanecheck:cold, deleted at the end); once it runs, another process (the mysql client) commits 100 messages on keys of their
# own, one every 20 ms. Prints, for each binary given, when those were all sent, how much of the
# backlog was still unsent then, and the lane's counters from /metrics.
# Usage: bash daemon-check.sh label:/path/to/outbox ...
set -euo pipefail
DB=lanecheck
PORT=18098
my() { mysql -h127.0.0.1 -uroot -N -B "$@"; }
for pair in "$@"; do
  label=${pair%%:*} bin=${pair#*:}
  my -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
  redis-cli DEL lanecheck:hot lanecheck:cold >/dev/null
  "$bin" migrate --database-url "mysql://root@127.0.0.1:3306/$DB" >/dev/null
  my $DB -e "INSERT INTO outbox_message (topic, payload, msg_key)
             SELECT 'hot', 'x', CONCAT('hot-', seq % 10) FROM seq_1_to_300000"
  cfg=$(mktemp --suffix .toml)
  cat >"$cfg" <<TOML
[relay]
owner = "check"
[[stores]]
name = "s"
url = "mysql://root@127.0.0.1:3306/$DB"
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
  "$bin" relay --config "$cfg" >"/tmp/daemon-check-$label.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; do sleep 0.2; done
  sleep 1
  t0=$(date +%s.%N)
  for i in $(seq 1 100); do
    my $DB -e "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('cold', 'y', 'cold-$i')"
    sleep 0.02
  done
  t1=$(date +%s.%N)
  until [ "$(my $DB -e "SELECT count(*) FROM outbox_message WHERE topic = 'cold' AND status = 'sent'")" = 100 ]; do
    sleep 0.05
  done
  t2=$(date +%s.%N)
  unsent=$(my $DB -e "SELECT count(*) FROM outbox_message WHERE topic = 'hot' AND status <> 'sent'")
  lat=$(my $DB -e "SELECT ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, created_at, updated_at))/1000, 1),
                          ROUND(MAX(TIMESTAMPDIFF(MICROSECOND, created_at, updated_at))/1000, 1)
                   FROM outbox_message WHERE topic = 'cold'")
  m=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -E '^outbox_(claims_beside|lane_looks)_total' | tr '\n' ' ')
  kill -TERM $pid; wait $pid || true
  printf '%s: 100 foreign messages written in %.1f s, all sent %.2f s after the last; hot backlog unsent then: %s; created -> sent mark (ms) mean / max: %s; %s\n' \
    "$label" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$unsent" "$lat" "$m"
  rm -f "$cfg"
done
my -e "DROP DATABASE IF EXISTS $DB"
redis-cli DEL lanecheck:hot lanecheck:cold >/dev/null
