#!/usr/bin/env bash
# The server's cost of outbox_message's CHECK constraints, schema 9 against schema 10, inside the
# server (PL/pgSQL loops: no network, no commit), on the shared PostgreSQL:
#
#   checks-cost.sh ROUNDS /tmp/outbox-before /tmp/outbox-after > checks-cost.txt
#
# Each round creates two databases, migrates one with each binary, and times in each:
# 10,000 single-row INSERTs without headers, 10,000 with one header, 2,000 single-row UPDATEs to
# `sent`, one INSERT of 20,000 rows and one UPDATE of those 20,000 rows to `sent`. The relay's
# idle table is empty (as while a relay is busy), so the statement trigger sends no NOTIFY.
# Not part of CI: a measurement.
set -euo pipefail
rounds="${1:?rounds}"; before="${2:?before binary}"; after="${3:?after binary}"
host="${PGHOST:-127.0.0.1}"; port="${PGPORT:-5432}"
psql_() { psql -h "$host" -p "$port" -U postgres -X -q "$@"; }
sql=$(mktemp); trap 'rm -f "$sql"' EXIT
cat > "$sql" <<'SQL'
\timing on
DO $$ BEGIN FOR i IN 1..10000 LOOP INSERT INTO outbox_message (topic, msg_key, payload) VALUES ('bench.topic', 'key-' || (i % 1000), '{"n":12345}'); END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..10000 LOOP INSERT INTO outbox_message (topic, msg_key, headers, payload) VALUES ('bench.topic', 'key-' || (i % 1000), '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', '{"n":12345}'); END LOOP; END $$;
DO $$ DECLARE first bigint; BEGIN SELECT min(id) INTO first FROM outbox_message; FOR i IN 0..1999 LOOP UPDATE outbox_message SET status = 'sent', updated_at = now() WHERE id = first + i; END LOOP; END $$;
INSERT INTO outbox_message (topic, msg_key, payload) SELECT 'bench.topic', 'key-' || (g % 1000), '{"n":12345}' FROM generate_series(1, 20000) g;
UPDATE outbox_message SET status = 'sent', updated_at = now() WHERE status = 'pending';
SQL
echo "round schema single_insert_us single_insert_header_us single_update_us bulk_insert_us_per_row bulk_update_us_per_row"
for r in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    db="checks_cost_${which}_$$"
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    "$bin" migrate --database-url "postgres://postgres@$host:$port/$db?sslmode=disable" >/dev/null
    v=$(psql_ -d "$db" -Atc "SELECT max(version) FROM outbox_schema_migrations")
    # Times in ms -> µs per statement or per row.
    psql_ -d "$db" -f "$sql" | awk -v r="$r" -v v="$v" '/^Time:/ {t[++n]=$2}
      END {printf "%s %s %.1f %.1f %.1f %.2f %.2f\n", r, v, t[1]*1000/10000, t[2]*1000/10000, t[3]*1000/2000, t[4]*1000/20000, t[5]*1000/20000}'
    psql_ -d postgres -c "DROP DATABASE $db"
  done
done
