#!/usr/bin/env bash
# The drain of 10^5 on PostgreSQL + Redis with 2, 3 and 4 batches of 500 in flight, 1,000 keys and
# a key per message, two builds alternating (before: a window of twice the batch; after: grown by
# the rows this process holds), ROUNDS rounds. One line per drain:
#   build keys in_flight seconds msgs/s claims DB-server-µs/msg
#   BEFORE=<release outbox> AFTER=<release outbox> ROUNDS=3 STORE=<url> TRANSPORT=redis bash ab.sh
set -u
BEFORE=${BEFORE:?release outbox before}; AFTER=${AFTER:?release outbox after}
ROUNDS=${ROUNDS:-3}; TRANSPORT=${TRANSPORT:-redis}
STORE=${STORE:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
KEYS=${KEYS:-1000 100000}; FLIGHTS=${FLIGHTS:-2 3 4}
echo "| round | build | keys | in flight | seconds | msgs/s | claims | DB server µs/msg | load |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for r in $(seq 1 "$ROUNDS"); do
  for k in $KEYS; do
    for f in $FLIGHTS; do
      for b in before after; do
        if [ $b = before ]; then B=$BEFORE; else B=$AFTER; fi
        load=$(cut -d' ' -f1 /proc/loadavg)
        row=$("$B" bench --store "$STORE" --transport "$TRANSPORT" --scenario drain --keys "$k" \
              --in-flight "$f" 2>/dev/null | grep -E '^\| 1 \| 100000 ')
        echo "$row" | awk -F'|' -v r="$r" -v b="$b" -v k="$k" -v f="$f" -v l="$load" \
          '{gsub(/ /,""); printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, b, k, f, $4, $5, $8, $10, l}'
      done
    done
  done
done
