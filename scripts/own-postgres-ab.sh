#!/usr/bin/env bash
# Two PostgreSQL arms drained in turn: 2·10^4 and 10^6 messages, 1,000 keys, NATS, alternating,
# ROUNDS rounds. Each arm is a cluster of our own (scripts/own-postgres.sh) or a running server,
# and what differs between them is given as
#   A=name B=name                       the runs' file names (A-20k-1.txt, B-1m-2.txt, ...)
#   A_INITDB / B_INITDB                 initdb options (OWN_POSTGRES_INITDB_ARGS)
#   A_ARGS / B_ARGS                     server options (OWN_POSTGRES_ARGS)
#   A_URL / B_URL                       instead of a cluster of our own, this running server (the
#                                       shared one, say: it is only read and written, never
#                                       restarted or reconfigured); both may name the same one
#   A_SCENARIO / B_SCENARIO             the bench's --scenario (default `drain`; `raw,drain` runs
#                                       the raw limits first, as the targets and depth runs do)
# with the outbox binary as BIN and OUT=<absolute dir>. Own clusters: A on port 54331, B on 54332,
# each one's server log kept as OUT/<name>-server.log. Used by docs/bench/issue19-2026-12-02-*.
set -u
BIN=${BIN:?outbox binary}; OUT=${OUT:?absolute output dir}; ROUNDS=${ROUNDS:-2}
A=${A:?name of arm A}; B=${B:?name of arm B}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; cd "$OUT"  # the bench writes bench-results/ in its working directory
url() { echo "postgres://postgres@127.0.0.1:$1/test?sslmode=disable"; }
# The ports of the clusters of our own started here, stopped (and their logs kept) on exit,
# also when a start fails halfway.
own_ports=()
stop() {
  for p in "${own_ports[@]}"; do
    cp "/tmp/own-postgres-$p/log" "$OUT/$([ "$p" = 54331 ] && echo "$A" || echo "$B")-server.log"
    "$here/scripts/own-postgres.sh" stop "$p"
  done
}
trap stop EXIT
# own PORT INITDB ARGS: starts a cluster of our own there.
own() { own_ports+=("$1"); OWN_POSTGRES_INITDB_ARGS=$2 OWN_POSTGRES_ARGS=$3 "$here/scripts/own-postgres.sh" start "$1"; }
if [ -z "${A_URL:-}" ]; then own 54331 "${A_INITDB:-}" "${A_ARGS:-}" || exit 1; A_URL=$(url 54331); fi
if [ -z "${B_URL:-}" ]; then own 54332 "${B_INITDB:-}" "${B_ARGS:-}" || exit 1; B_URL=$(url 54332); fi
# The log line shows a URL's password as *** (a URL given by A_URL or B_URL may carry one).
run() { local name=$1; shift
  echo "== $(date -u +%H:%M:%S) $name: $(echo "$*" | sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#g')"; uptime
  "$BIN" bench "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $?"
  grep -E '^\| 1 \|' "$OUT/$name.txt"; }
for r in $(seq 1 "$ROUNDS"); do
  for n in 20000 1000000; do
    size=$([ "$n" = 20000 ] && echo 20k || echo 1m)
    run "$A-$size-$r" --store "$A_URL" --transport nats --scenario "${A_SCENARIO:-drain}" --n "$n"
    run "$B-$size-$r" --store "$B_URL" --transport nats --scenario "${B_SCENARIO:-drain}" --n "$n"
  done
done
