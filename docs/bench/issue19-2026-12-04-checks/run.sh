#!/usr/bin/env bash
# Schema 10 against schema 11 on a PostgreSQL of our own (never the shared server): the server's
# CPU per single-row statement and per row of 500-row statements, ROUNDS rounds, the two schemas
# alternating. docs/benchmarks.md, "One check instead of thirteen".
#
#   ROUNDS=4 PORT=54331 OUT=docs/bench/issue19-2026-12-04-checks bash docs/bench/issue19-2026-12-04-checks/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/docs/bench/issue19-2026-12-04-checks
port=${PORT:-54331}; rounds=${ROUNDS:-4}; out=${OUT:-/tmp/checks-$(date +%s)}
mkdir -p "$out"
bash "$root/scripts/own-postgres.sh" start "$port"
trap 'bash "$root/scripts/own-postgres.sh" stop "$port"' EXIT
psql=(psql -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -q)
migrations=$root/crates/outbox-store/migrations/postgres
for db in schema10 schema11; do
  "${psql[@]}" -d postgres -c "CREATE DATABASE $db"
  for f in "$migrations"/00*.sql; do
    v=$(basename "$f" | cut -c1-4)
    if [ "$db" = schema10 ] && [ "$v" -gt 0010 ]; then continue; fi
    "${psql[@]}" -d "$db" -1 -f "$f"
  done
done
{
  echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(psql --version)"
  for r in $(seq 1 "$rounds"); do
    for db in schema10 schema11; do
      python3 "$here/checks.py" "$port" "$db" single "${SINGLE:-8000}"
      python3 "$here/checks.py" "$port" "$db" batch "${BATCH:-50000}"
    done
  done
} | tee "$out/report.txt"
