#!/usr/bin/env bash
# The drain of 10^5 with 1,000 keys on PostgreSQL + Redis at other batch sizes and numbers of
# batches in flight (the default is 2 × 500), one drain each, to see whether the drain's ratio is
# the relay's pipeline or the database's CPU per message.   B=<release outbox> bash in-flight.sh
set -u
B=${B:?outbox binary}
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
echo "| in flight | batch | max run | seconds | msgs/s | claims | DB server µs/msg |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for a in "2 500 32" "2 250 32" "2 1000 32" "4 250 32" "4 500 32" "4 1000 32" "2 500 8" "2 500 32"; do
  set -- $a
  row=$("$B" bench --store "$PG" --transport redis --scenario drain --in-flight "$1" --batch-size "$2" \
        --max-run "$3" 2>/dev/null | grep -E '^\| 1 \| 100000 ')
  echo "$row" | awk -F'|' -v f="$1" -v b="$2" -v r="$3" \
    '{gsub(/ /,""); printf "| %s | %s | %s | %s | %s | %s | %s |\n", f, b, r, $4, $5, $8, $10}'
done
