"""Where a locked claim's PostgreSQL CPU goes, part by part (docs/benchmarks.md, "Where the
locked claim's CPU goes, part by part").

One connection drains a backlog the way the relay's locked claim does, one batch at a time:
`BEGIN`, the claim (`CLAIM_LOCKED`, read from the Rust source by statements.py, limit 500,
window 1,000), the settlement (`MARK_SENT_LOCKED` of the ids taken), `COMMIT`, until a claim
takes nothing. Each variant changes one thing, and the backend's own CPU (/proc/PID/schedstat,
read before and after each statement) is divided by the rows drained:

  A    the code of record: claim, then settlement by id
  N    the claim without its head probe (NOT a valid claim: it measures the probe's cost)
  W    the window of 500 rows instead of 1,000
  S    the claim returning id, key and payload instead of the 20 message columns
  R    the claim returning the columns a publish reads, the bookkeeping ones NULL
  H    R without the headers' jsonb
  P    the claim marking its rows sent in the same statement (no settlement statement)
  L    the window of 500 locked by its own scan, then only each key's first row probed
  L2   the same with a window of 1,000
  T    each key's first row locked by one set-based statement, a window of 500 (as W)
  C    rows found by ctid: the window carries ctids, the lock and the settlement use them
  raw  the bench's raw claim-and-mark loop (`raw_claim_loop` of crates/outbox-bench/src/db.rs)

Every variant starts from the same fresh backlog (N rows, K keys, a 200-byte payload, VACUUM
ANALYZE and CHECKPOINT after the fill) in a database of its own, on a PostgreSQL of our own
(scripts/own-postgres.sh start 54331), and must leave no row unsent.

With IN_FLIGHT=2 every claim is made while another connection's batch is still locked, as the
relay's second batch in flight is (its ids left out of the claim), then that batch settles.

  pip install 'psycopg[binary]'
  scripts/own-postgres.sh start 54331
  N=100000 K=1000 python3 docs/bench/issue19-2026-12-06-parts/parts.py A N W S P C raw A N W S P C raw
"""
import os
import subprocess
import sys
import time

import psycopg

from statements import ROOT, const, message_columns

PORT = int(os.environ.get('PORT', 54331))
DSN = f"host=127.0.0.1 port={PORT} user=postgres dbname=%s"
N = int(os.environ.get('N', 100000))
K = int(os.environ.get('K', 1000))
LIMIT = 500
FIRST = 5

CLAIM = const('CLAIM_LOCKED')
SETTLE = const('MARK_SENT_LOCKED')


def replaced(sql, old, new):
    assert old in sql, old
    return sql.replace(old, new)


PROBE = """    WHERE l.msg_key IS NULL OR l.id = (
        SELECT o.id FROM outbox_message o
        WHERE o.msg_key >= l.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1)"""
CLAIM_N = replaced(CLAIM, PROBE, "")

CLAIM_S = CLAIM
for a in 'xm':
    CLAIM_S = replaced(CLAIM_S, message_columns(a), ", ".join(
        [f"{a}.id", "NULL::text AS biz_type", "NULL::text AS biz_key", "NULL::text AS topic", f"{a}.msg_key",
         f"{a}.payload"]))

# R: the columns a publish reads (the bookkeeping ones NULL); H: R without the headers' jsonb.
def _trimmed(a, headers=True):
    keep = [f"{a}.id", f"{a}.biz_type", f"{a}.biz_key", f"{a}.topic", f"{a}.msg_key", f"{a}.tag",
            f"{a}.headers::text AS headers" if headers else "NULL::text AS headers", f"{a}.payload",
            f"{a}.status", f"{a}.attempts", f"{a}.max_attempts", f"{a}.last_error", f"{a}.created_at"]
    return ", ".join(keep)


CLAIM_R = CLAIM
CLAIM_H = CLAIM
for a in 'xm':
    CLAIM_R = replaced(CLAIM_R, message_columns(a), _trimmed(a))
    CLAIM_H = replaced(CLAIM_H, message_columns(a), _trimmed(a, headers=False))

PICKED = """), picked AS (
    SELECT * FROM taken UNION ALL SELECT * FROM more
)"""
CLAIM_P = replaced(CLAIM, PICKED, PICKED + """, upd AS (
    UPDATE outbox_message u
    SET status = 'sent', lease_owner = NULL, lease_until = NULL, next_attempt_at = now(),
        last_attempt_at = now(), updated_at = now(), updated_by = 'parts'
    FROM picked p WHERE u.id = p.id
)""")

# C: the ctid travels from the window to the lock and to the settlement (first column `tid`).
CLAIM_C = replaced(CLAIM, "SELECT x.id, x.biz_type", "SELECT x.ctid AS tid, x.id, x.biz_type")
CLAIM_C = replaced(CLAIM_C, "SELECT m.id, m.biz_type", "SELECT m.ctid AS tid, m.id, m.biz_type")
CLAIM_C = replaced(CLAIM_C, "SELECT w.id, w.msg_key, w.next_attempt_at FROM (\n        SELECT m.id, m.msg_key, m.next_attempt_at FROM",
                   "SELECT w.id, w.tid, w.msg_key, w.next_attempt_at FROM (\n        SELECT m.id, m.ctid AS tid, m.msg_key, m.next_attempt_at FROM")
CLAIM_C = replaced(CLAIM_C, "SELECT f.id FROM (\n        SELECT DISTINCT ON (w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END) w.id, w.next_attempt_at",
                   "SELECT f.id, f.tid FROM (\n        SELECT DISTINCT ON (w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END) w.id, w.tid, w.next_attempt_at")
CLAIM_C = replaced(CLAIM_C, "WHERE x.id = k.id AND", "WHERE x.ctid = k.tid AND")
SETTLE_C = replaced(SETTLE, "WHERE id = ANY($1)", "WHERE ctid = ANY($1::tid[])")

# L: the window itself locked (rows another batch holds are skipped by the lock), the first row
# of each key in it probed, the heads taken in due order up to the limit. The rows locked and not
# taken stay locked until the COMMIT. First message column at 5, as in A.
CLAIM_L = f"""WITH win AS (
    SELECT {message_columns('m')} FROM outbox_message m
    WHERE m.status IN ('pending', 'sending')
      AND (m.next_attempt_at, m.id) >= (COALESCE($5::timestamptz, '-infinity'::timestamptz), $6::int8)
      AND (m.next_attempt_at <= now()) IS TRUE AND m.id <> ALL ($4::int8[]) AND $3 = 0
    ORDER BY m.next_attempt_at, m.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), firsts AS (
    SELECT DISTINCT ON (w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END) w.*
    FROM win w
    ORDER BY w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END, w.id
)
SELECT NULL::int8, NULL::int8, NULL::bool, NULL::timestamptz, NULL::int8, l.* FROM firsts l
{PROBE.strip()}
ORDER BY l.next_attempt_at, l.id
LIMIT $1"""

# T: each key's first row of the window locked by one set-based statement (no lateral lookup
# per row), the probe on the rows locked, with a window of the batch's size (W's), so that
# locking every first locks at most a batch. Only firsts are locked, as in A.
TAKEN_LATERAL = """    SELECT l.* FROM firsts k
    CROSS JOIN LATERAL (
        SELECT """ + message_columns('x') + """ FROM outbox_message x
        WHERE x.id = k.id AND (x.status IN ('pending', 'sending') AND x.next_attempt_at <= now()) IS TRUE
        FOR UPDATE SKIP LOCKED) l
"""
CLAIM_T = replaced(CLAIM, TAKEN_LATERAL, """    SELECT l.* FROM (
        SELECT """ + message_columns('x') + """ FROM outbox_message x
        WHERE x.id = ANY (ARRAY(SELECT id FROM firsts))
          AND (x.status IN ('pending', 'sending') AND x.next_attempt_at <= now()) IS TRUE
        ORDER BY x.next_attempt_at, x.id
        FOR UPDATE SKIP LOCKED) l
""")

RAW = ("WITH c AS (SELECT id FROM outbox_message WHERE status IN ('pending', 'sending') AND next_attempt_at <= now() "
       "ORDER BY next_attempt_at, id LIMIT %s FOR UPDATE SKIP LOCKED) "
       "UPDATE outbox_message m SET status = 'sent', updated_at = now() FROM c WHERE m.id = c.id RETURNING m.id, m.payload")

# variant: (claim, settlement or None, window, settlement's parameter type). Every claim returns its
# message columns from the sixth on (`FIRST`), after the window's figures; C puts its `tid` there.
VARIANTS = {
    'A': (CLAIM, SETTLE, 2 * LIMIT, 'int8[]'),
    'N': (CLAIM_N, SETTLE, 2 * LIMIT, 'int8[]'),
    'W': (CLAIM, SETTLE, LIMIT, 'int8[]'),
    'S': (CLAIM_S, SETTLE, 2 * LIMIT, 'int8[]'),
    'R': (CLAIM_R, SETTLE, 2 * LIMIT, 'int8[]'),
    'H': (CLAIM_H, SETTLE, 2 * LIMIT, 'int8[]'),
    'P': (CLAIM_P, None, 2 * LIMIT, 'int8[]'),
    'L': (CLAIM_L, SETTLE, LIMIT, 'int8[]'),
    'L2': (CLAIM_L, SETTLE, 2 * LIMIT, 'int8[]'),
    'T': (CLAIM_T, SETTLE, LIMIT, 'int8[]'),
    'C': (CLAIM_C, SETTLE_C, 2 * LIMIT, 'text[]'),
}


def cpu(pid):
    """The backend's CPU time so far, seconds: the scheduler's count in nanoseconds
    (/proc/PID/schedstat), not utime + stime, whose 10 ms ticks are too coarse per statement."""
    return int(open(f'/proc/{pid}/schedstat').read().split()[0]) / 1e9


def taken(variant, rows):
    """The rows a claim took (not the one row of NULLs of a claim that took nothing): their ids,
    and what the variant's settlement finds them by (C: the ctid before the id)."""
    at = FIRST + (1 if variant == 'C' else 0)
    rows = [r for r in rows if r[at] is not None]
    return [r[at] for r in rows], ([str(r[FIRST]) for r in rows] if variant == 'C' else [r[at] for r in rows])


def fill(db):
    psql = ['psql', '-h', '127.0.0.1', '-p', str(PORT), '-U', 'postgres', '-qX', '-v', 'ON_ERROR_STOP=1']
    subprocess.run(psql + ['-d', 'postgres', '-c', f'DROP DATABASE IF EXISTS {db}', '-c', f'CREATE DATABASE {db}'],
                   check=True, capture_output=True)
    migrations = os.path.join(ROOT, 'crates/outbox-store/migrations/postgres')
    for f in sorted(os.listdir(migrations)):
        subprocess.run(psql + ['-d', db, '-1', '-f', os.path.join(migrations, f)], check=True, capture_output=True)
    with psycopg.connect(DSN % db, autocommit=True) as c:
        c.execute(f"INSERT INTO outbox_message (topic, msg_key, payload) SELECT 'bench', 'k-' || (i % {K}), "
                  f"'{{\"seq\":' || i || ',\"pad\":\"' || repeat('x', 170) || '\"}}' FROM generate_series(1, {N}) i")
        c.execute("VACUUM ANALYZE outbox_message")
        c.execute("CHECKPOINT")


def run(variant, db):
    fill(db)
    claimed = settled = 0.0
    with psycopg.connect(DSN % db, cursor_factory=psycopg.ClientCursor) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        if variant != 'raw':
            claim, settle, window, ptype = VARIANTS[variant]
            c.execute("PREPARE cl(int8, int8, int8, int8[], timestamptz, int8) AS " + claim)
            if settle:
                c.execute(f"PREPARE st({ptype}, text) AS " + settle)
        c.commit()
        c0, t0 = cpu(pid), time.perf_counter()
        done = claims = 0
        while True:
            claims += 1
            if variant == 'raw':
                n = len(c.execute(RAW, (LIMIT,)).fetchall())
                c.commit()
            else:
                ca = cpu(pid)
                rows = c.execute(f"EXECUTE cl({LIMIT}, {window}, 0, '{{}}', NULL, 0)").fetchall()
                ids, keys = taken(variant, rows)
                n = len(ids)
                cb = cpu(pid)
                if n and settle:
                    c.execute("EXECUTE st(%s, 'parts')", (keys,))
                c.commit()
                claimed += cb - ca
                settled += cpu(pid) - cb
            if n == 0:
                break
            done += n
        t1, c1 = time.perf_counter(), cpu(pid)
        left = c.execute("SELECT count(*) FROM outbox_message WHERE status <> 'sent'").fetchone()[0]
    assert done == N and left == 0, f"{variant}: drained {done} of {N}, {left} left"
    us = lambda s: 1e6 * s / done  # noqa: E731
    parts = '' if variant == 'raw' else f"; claim {us(claimed):.1f}, settlement and COMMIT {us(settled):.1f}"
    print(f"{variant:>3}: {done} rows in {t1 - t0:.2f} s ({done / (t1 - t0):,.0f} rows/s), {claims} claims, "
          f"backend CPU {us(c1 - c0):.1f} µs/row{parts}", flush=True)


def run_pipelined(variant, db):
    """As the relay with 2 batches in flight: two connections, each claim made while the other
    connection's batch is still locked (its ids left out, as the relay's `InFlight` does), then
    the other batch settled; so every claim meets a batch in flight."""
    fill(db)
    claim, settle, window, ptype = VARIANTS[variant]
    conns = [psycopg.connect(DSN % db, cursor_factory=psycopg.ClientCursor) for _ in range(2)]
    pids = []
    for c in conns:
        pids.append(c.execute("SELECT pg_backend_pid()").fetchone()[0])
        c.execute("PREPARE cl(int8, int8, int8, int8[], timestamptz, int8) AS " + claim)
        if settle:
            c.execute(f"PREPARE st({ptype}, text) AS " + settle)
        c.commit()
    total = lambda: sum(cpu(p) for p in pids)  # noqa: E731
    c0, t0 = total(), time.perf_counter()
    held = [[], []]
    to_settle = [[], []]
    done = claims = empty = 0
    claimed = settled = 0.0
    i = 0
    while True:
        c, other = conns[i], 1 - i
        ca = total()
        ids = '{' + ','.join(str(x) for x in held[other]) + '}'
        rows = c.execute(f"EXECUTE cl({LIMIT}, {window}, 0, '{ids}', NULL, 0)").fetchall()
        ids, keys = taken(variant, rows)
        held[i], to_settle[i] = ids, keys
        claims += 1
        cb = total()
        claimed += cb - ca
        if not ids:
            c.commit()
        # the other batch settles
        if held[other] and settle:
            conns[other].execute("EXECUTE st(%s, 'parts')", (to_settle[other],))
        conns[other].commit()
        settled += total() - cb
        done += len(held[other])
        held[other] = to_settle[other] = []
        if not ids:
            empty += 1
            if empty >= 2:
                break
        else:
            empty = 0
        i = other
    t1, c1 = time.perf_counter(), total()
    left = conns[0].execute("SELECT count(*) FROM outbox_message WHERE status <> 'sent'").fetchone()[0]
    for c in conns:
        c.close()
    assert done == N and left == 0, f"{variant}: drained {done} of {N}, {left} left"
    us = lambda s: 1e6 * s / done  # noqa: E731
    print(f"{variant:>3} (2 in flight): {done} rows in {t1 - t0:.2f} s ({done / (t1 - t0):,.0f} rows/s), {claims} claims, "
          f"backend CPU {us(c1 - c0):.1f} µs/row; claim {us(claimed):.1f}, settlement and COMMIT {us(settled):.1f}", flush=True)


if __name__ == '__main__':
    for i, v in enumerate(sys.argv[1:]):
        if v != 'raw' and v not in VARIANTS:
            sys.exit(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}, raw")
        if os.environ.get('IN_FLIGHT') == '2' and v != 'raw':
            run_pipelined(v, f"parts{i % 2}")
        else:
            run(v, f"parts{i % 2}")
