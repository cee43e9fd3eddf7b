#!/usr/bin/env bash
# Two PostgreSQL clusters of our own that differ in one setting, drained in turn: 2·10^4 and
# 10^6 messages, 1,000 keys, NATS, alternating, ROUNDS rounds. What differs is given as
#   A=name B=name                       the runs' file names (A-20k-1.txt, B-1m-2.txt, ...)
#   A_INITDB / B_INITDB                 initdb options (OWN_POSTGRES_INITDB_ARGS)
#   A_ARGS / B_ARGS                     server options (OWN_POSTGRES_ARGS)
#   A_URL                               instead of a cluster of our own, A is this running server
#                                       (the shared one, say: it is only read and written, never
#                                       restarted or reconfigured)
# with B=<outbox binary> as BIN and OUT=<absolute dir>. A on port 54331, B on 54332; each
# cluster's server log is kept as OUT/<name>-server.log. Used by docs/bench/issue19-2026-12-02-*.
set -u
BIN=${BIN:?outbox binary}; OUT=${OUT:?absolute output dir}; ROUNDS=${ROUNDS:-2}
A=${A:?name of cluster A}; B=${B:?name of cluster B}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; cd "$OUT"  # the bench writes bench-results/ in its working directory
A_URL=${A_URL:-}
url() { echo "postgres://postgres@127.0.0.1:$1/test?sslmode=disable"; }
if [ -z "$A_URL" ]; then
  OWN_POSTGRES_INITDB_ARGS=${A_INITDB:-} OWN_POSTGRES_ARGS=${A_ARGS:-} "$here/scripts/own-postgres.sh" start 54331
  A_URL=$(url 54331)
  own_a=1
else
  own_a=0
fi
OWN_POSTGRES_INITDB_ARGS=${B_INITDB:-} OWN_POSTGRES_ARGS=${B_ARGS:-} "$here/scripts/own-postgres.sh" start 54332
stop() {
  if [ "$own_a" = 1 ]; then
    cp /tmp/own-postgres-54331/log "$OUT/$A-server.log"; "$here/scripts/own-postgres.sh" stop 54331
  fi
  cp /tmp/own-postgres-54332/log "$OUT/$B-server.log"; "$here/scripts/own-postgres.sh" stop 54332
}
trap stop EXIT
run() { local name=$1; shift; echo "== $(date -u +%H:%M:%S) $name: $*"; uptime
  "$BIN" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  grep -E '^\| 1 \|' "$OUT/$name.txt"; }
for r in $(seq 1 "$ROUNDS"); do
  run "$A-20k-$r" --store "$A_URL" --transport nats --scenario drain --n 20000
  run "$B-20k-$r" --store "$(url 54332)" --transport nats --scenario drain --n 20000
  run "$A-1m-$r"  --store "$A_URL" --transport nats --scenario drain --n 1000000
  run "$B-1m-$r"  --store "$(url 54332)" --transport nats --scenario drain --n 1000000
done
