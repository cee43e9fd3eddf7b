#!/usr/bin/env bash
# What an `outbox adopt` bridge adds to the legacy INSERT (issue 18; docs/benchmarks.md, "Adopted
# tables"). On seed 001's `message` table, in a scratch database of its own on the shared
# PostgreSQL and MariaDB (created here, dropped at the end), it measures committed inserts per
# second with 1 and 8 clients for:
#   plain    the legacy INSERT alone: the raw limit of this machine for this table
#   outbox   an INSERT into outbox_message alone (what `outbox` costs a service written for it)
#   both     the legacy INSERT and an outbox_message INSERT in one transaction (a rewrite that
#            keeps the legacy table)
#   bridge   the legacy INSERT with the bridge installed (the capture trigger writes the message
#            and the link in the same transaction)
# Each is run ROUNDS times for SECONDS (PostgreSQL: pgbench -T) or a fixed number of transactions
# (MariaDB: mariadb-slap); the median is reported. No relay runs: this is the INSERT's cost only.
#
#   bash scripts/adopt-cost.sh [pg|my|both]    (ROUNDS=3 SECONDS_PER_RUN=10 SLAP_TX=20000 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/relay-config.sh
source scripts/relay-config.sh

which="${1:-both}"
rounds="${ROUNDS:-3}"
secs="${SECONDS_PER_RUN:-10}"
slap_tx="${SLAP_TX:-20000}"
db=outbox_adopt_cost
# Only installs the tables and the bridge: the debug build the tests use is enough.
outbox=$(outbox_binary debug)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

payload='{"order_id":1234567,"user_id":42,"amount":"99.50","currency":"CNY","items":[{"sku":"A-1","qty":2}]}'

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

config() { # url
  relay_config shop "$1" outbox-adopt-cost >"$work/outbox.toml"
  grep -v '^#' examples/adopt/seed001_message.toml >>"$work/outbox.toml"
}

report() { # server variant clients rate
  printf '%-10s %-7s c=%-2s %8s inserts/s\n' "$1" "$2" "$3" "$4"
}

pg() {
  local url="postgres://postgres@127.0.0.1:5432/$db"
  local psql=(psql -h 127.0.0.1 -U postgres -qAt -v ON_ERROR_STOP=1)
  export PGOPTIONS="-c client_min_messages=warning"
  "${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
  "${psql[@]}" -d "$db" -f examples/adopt/seed001_message.postgres.sql
  "$outbox" migrate --database-url "$url" >/dev/null
  config "$url"
  local k='\set k random(1, 1000)'
  local legacy="INSERT INTO message (topic, tag, msg_key, data) VALUES ('order', 'created', 'k' || :k, '$payload');"
  local message="INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('order', '$payload', 'k' || :k);"
  printf '%s\n%s\n' "$k" "$legacy" >"$work/plain.sql"
  printf '%s\n%s\n' "$k" "$message" >"$work/outbox.sql"
  printf '%s\nBEGIN;\n%s\n%s\nCOMMIT;\n' "$k" "$legacy" "$message" >"$work/both.sql"
  cp "$work/plain.sql" "$work/bridge.sql"
  for variant in plain outbox both bridge; do
    if [ "$variant" = bridge ]; then
      "$outbox" adopt --config "$work/outbox.toml" >/dev/null
    fi
    for c in 1 8; do
      for _ in $(seq "$rounds"); do
        "${psql[@]}" -d "$db" -c "TRUNCATE message, outbox_message CASCADE" -c CHECKPOINT
        pgbench -h 127.0.0.1 -U postgres -n -c "$c" -j "$((c < 2 ? 1 : 2))" -T "$secs" -f "$work/$variant.sql" "$db" 2>/dev/null |
          awk '/^tps/ { printf "%d\n", $3 }'
      done | median | { read -r r; report postgres "$variant" "$c" "$r"; }
    done
  done
  if [ "$("${psql[@]}" -d "$db" -c "SELECT count(*) = (SELECT count(*) FROM message) FROM outbox_message")" != t ]; then
    echo "postgres: the bridge did not capture every legacy row" >&2
    exit 1
  fi
  "${psql[@]}" -d postgres -c "DROP DATABASE $db WITH (FORCE)"
}

my() {
  local url="mysql://root@127.0.0.1:3306/$db"
  local mdb=(mariadb -h 127.0.0.1 -uroot -N)
  "${mdb[@]}" -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
  "${mdb[@]}" "$db" <examples/adopt/seed001_message.mysql.sql
  "$outbox" migrate --database-url "$url" >/dev/null
  config "$url"
  local legacy="INSERT INTO message (topic, tag, msg_key, data) VALUES ('order', 'created', CONCAT('k', FLOOR(RAND() * 1000)), '$payload')"
  local message="INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('order', '$payload', CONCAT('k', FLOOR(RAND() * 1000)))"
  for variant in plain outbox both bridge; do
    local query="$legacy" per_tx=1 table=message
    case $variant in
      outbox) query="$message" table=outbox_message ;;
      both) query="BEGIN;$legacy;$message;COMMIT" per_tx=4 ;;
      bridge) "$outbox" adopt --config "$work/outbox.toml" >/dev/null ;;
    esac
    for c in 1 8; do
      for _ in $(seq "$rounds"); do
        local link=""
        [ "$variant" = bridge ] && link="TRUNCATE outbox_adopt_link;"
        "${mdb[@]}" "$db" -e "SET FOREIGN_KEY_CHECKS = 0; $link TRUNCATE outbox_message; TRUNCATE message"
        local t0 t1 n
        t0=$(date +%s.%N)
        mariadb-slap -h 127.0.0.1 -uroot --create-schema="$db" --delimiter=";" --query="$query" \
          --concurrency="$c" --iterations=1 --number-of-queries="$((slap_tx * per_tx))" >/dev/null
        t1=$(date +%s.%N)
        n=$("${mdb[@]}" "$db" -e "SELECT COUNT(*) FROM $table")
        awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%d\n", n / (b - a) }'
      done | median | { read -r r; report mariadb "$variant" "$c" "$r"; }
    done
  done
  if [ "$("${mdb[@]}" "$db" -e "SELECT (SELECT COUNT(*) FROM outbox_message) = (SELECT COUNT(*) FROM message)")" != 1 ]; then
    echo "mariadb: the bridge did not capture every legacy row" >&2
    exit 1
  fi
  "${mdb[@]}" -e "DROP DATABASE $db"
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
case $which in
  pg) pg ;;
  my) my ;;
  both) pg; my ;;
  *) echo "usage: $0 [pg|my|both]" >&2; exit 2 ;;
esac
