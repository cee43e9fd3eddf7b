"""Where MariaDB's CPU goes in the relay's locked claim and settlement, part by part
(docs/benchmarks.md, "MariaDB's claim, part by part").

One connection drains a backlog as the relay's locked claim does on MySQL/MariaDB
(crates/outbox-store/src/mysql/relay.rs, `lock_candidates` with `exact`): `SET TRANSACTION
ISOLATION LEVEL READ COMMITTED; BEGIN`, the window (`CANDIDATES`, window 1,000, limit 500), of each
key its oldest candidate (`first_of_each_key`), those locked by primary key with the message
columns (`SELECT MESSAGE_COLUMNS ... FOR UPDATE SKIP LOCKED`), the keyed ones locked probed for
heading their key (`NOT_BLOCKED`), until 500 are kept; then the sent mark (`MARK_SENT`) and
`COMMIT`. The statements are read from the Rust source (so the measurement follows the code).

Variants, one part changed each:
  A    the code of record
  N    without the head probe (NOT a valid claim: it measures the probe)
  S    the lock returning id, key and payload instead of the 20 message columns
  C    the window's read without its `sending` and keyless parts (only the `pending` range)
  M    the sent mark writing only status, updated_at and updated_by (the raw loop's columns)
  G    the head probe as one grouped read of the locked rows' keys (`MIN(id) ... WHERE open_key IN
       (...) GROUP BY open_key`) instead of a correlated sub-select per row
  X    an index that covers the window's read: `(status, next_attempt_at, id, msg_key)` beside the others
  F    A on rows filled with a `last_attempt_at` already (the sent mark then lengthens no row)
  MN   the sent mark without its `next_attempt_at`; ML without its `last_attempt_at`
  raw  the bench's raw claim-and-mark loop (`raw_claim_loop` of crates/outbox-bench/src/db.rs)

Every variant drains a fresh backlog (N rows on K keys, a 200-byte payload, migrated by the
`outbox` binary given as OUTBOX) in a database of its own on a MariaDB of our own
(scripts/own-mariadb.sh start 33071 2G), and must leave no row unsent. Reported per row drained:
the server's CPU (the mariadbd process, purge threads included, from /proc/PID/stat) and the
connection thread's own CPU (its /proc schedstat, read around each statement), split by step.

  pip install pymysql
  scripts/own-mariadb.sh start 33071 2G
  OUTBOX=<release outbox> N=100000 K=1000 python3 docs/bench/issue19-2026-12-06-parts/mparts.py A N S C M raw
"""
import os
import re
import subprocess
import sys
import time

import pymysql

from statements import ROOT, unescape

PORT = int(os.environ.get('PORT', 33071))
N = int(os.environ.get('N', 100000))
K = int(os.environ.get('K', 1000))
OUTBOX = os.environ.get('OUTBOX', 'outbox')
LIMIT = 500
WINDOW = 2 * LIMIT

RELAY = open(os.path.join(ROOT, 'crates/outbox-store/src/mysql/relay.rs')).read()
MOD = open(os.path.join(ROOT, 'crates/outbox-store/src/mysql/mod.rs')).read()


def const(src, name):
    """A `const NAME: &str = "...";` (string literals joined, Rust escapes undone)."""
    body = re.search(r'const ' + name + r': &str =\s*(.*?);\n', src, re.S).group(1)
    return ''.join(unescape(lit) for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', body, re.S))


CANDIDATES = const(RELAY, 'CANDIDATES').replace('?', '%s')
NOT_BLOCKED = const(RELAY, 'NOT_BLOCKED')
MARK_SENT = const(RELAY, 'MARK_SENT')
COLS = const(MOD, 'MESSAGE_COLUMNS').replace('CAST(headers', 'CAST(m.headers')
assert 'FROM outbox_message' in CANDIDATES and 'updated_by = ' in MARK_SENT and 'payload' in COLS

CANDIDATES_C = CANDIDATES.split('\nUNION ALL\n')[1].replace('(SELECT', 'SELECT', 1).rstrip(')')
assert CANDIDATES_C.count('%s') == 1
MARK_SENT_M = "UPDATE outbox_message SET status = 'sent', updated_at = UTC_TIMESTAMP(6), updated_by = "


def without(sql, assignment):
    assert assignment in sql, assignment
    return sql.replace(assignment, '')


MARKS = {
    'M': MARK_SENT_M,
    'MN': without(MARK_SENT, 'next_attempt_at = UTC_TIMESTAMP(6), '),
    'ML': without(MARK_SENT, 'last_attempt_at = UTC_TIMESTAMP(6), '),
}


def in_list(ids):
    return '(' + ','.join(str(int(i)) for i in ids) + ')'


class Meter:
    def __init__(self, conn, server_pid):
        cur = conn.cursor()
        cur.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
        self.tid = cur.fetchone()[0]
        self.server_pid = server_pid
        self.parts = {}

    def thread(self):
        return int(open(f'/proc/{self.server_pid}/task/{self.tid}/schedstat').read().split()[0]) / 1e9

    def server(self):
        f = open(f'/proc/{self.server_pid}/stat').read().rsplit(')', 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

    def run(self, part, cur, sql, args=None):
        t = self.thread()
        cur.execute(sql, args)
        rows = cur.fetchall()
        self.parts[part] = self.parts.get(part, 0.0) + self.thread() - t
        return rows


def server_pid():
    return int(open(f'/tmp/own-mariadb-{PORT}/mysqld.pid').read())


def connect(db=None):
    return pymysql.connect(host='127.0.0.1', port=PORT, user='root', database=db, autocommit=True,
                           client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)


def fill(db, variant):
    with connect() as c:
        cur = c.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
    subprocess.run([OUTBOX, 'migrate', '--database-url', f'mysql://root@127.0.0.1:{PORT}/{db}'],
                   check=True, stdout=subprocess.DEVNULL)
    if variant == 'X':
        with connect(db) as c:
            c.cursor().execute("ALTER TABLE outbox_message ADD KEY parts_due_key_idx (status, next_attempt_at, id, msg_key)")
    with connect(db) as c:
        cur = c.cursor()
        cur.execute(f"INSERT INTO outbox_message (topic, msg_key, payload) "
                    f"SELECT 'bench', CONCAT('k-', seq % {K}), REPEAT('x', 200) FROM seq_1_to_{N}")
        if variant == 'F':
            # Every row already carries a last attempt, so that the sent mark's does not lengthen it.
            cur.execute("UPDATE outbox_message SET last_attempt_at = created_at")
        cur.execute("ANALYZE TABLE outbox_message")
        cur.fetchall()
        # Purge done before the clock starts: InnoDB's history list empty (30 s at most).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cur.execute("SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.05)


def first_of_each_key(found):
    first, seen, probe = {}, set(), []
    for c in found:
        if c[0] in seen:
            continue
        seen.add(c[0])
        if c[2] is None:
            probe.append(c)
        elif c[2] not in first or c[0] < first[c[2]][0]:
            first[c[2]] = c
    probe.extend(first.values())
    probe.sort(key=lambda c: (c[3] if c[3] is not None else -2**63, c[0]))
    return probe


def claim(variant, m, cur):
    m.run('begin', cur, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN")
    while cur.nextset():
        pass
    if variant == 'C':
        found = m.run('window', cur, CANDIDATES_C, (WINDOW,))
    else:
        found = m.run('window', cur, CANDIDATES, (WINDOW, WINDOW, LIMIT))
    probe = first_of_each_key(found)
    cols = 'm.id, m.msg_key, m.payload' if variant == 'S' else COLS
    kept = []
    rest = probe
    while rest and len(kept) < LIMIT:
        chunk, rest = rest[:LIMIT - len(kept)], rest[LIMIT - len(kept):]
        rows = m.run('lock', cur, f"SELECT {cols} FROM outbox_message m WHERE m.id IN {in_list(c[0] for c in chunk)} "
                     "AND m.status IN ('pending', 'sending') AND m.next_attempt_at <= UTC_TIMESTAMP(6) "
                     "FOR UPDATE SKIP LOCKED")
        locked = [r[0] for r in rows]
        keyed = {c[0] for c in chunk if c[2] is not None}
        locked_keyed = [i for i in locked if i in keyed]
        if variant == 'N' or not locked_keyed:
            heads = set(locked_keyed)
        elif variant == 'G':
            key_of = {c[0]: c[2] for c in chunk}
            keys = sorted({key_of[i] for i in locked_keyed})
            marks = ','.join(['%s'] * len(keys))
            firsts = {r[0] for r in m.run('probe', cur, "SELECT MIN(o.id) FROM outbox_message o WHERE o.open_key IN "
                                          f"({marks}) GROUP BY o.open_key", keys)}
            heads = {i for i in locked_keyed if i in firsts}
        else:
            heads = {r[0] for r in m.run('probe', cur, f"SELECT m.id FROM outbox_message m WHERE m.id IN "
                                         f"{in_list(locked_keyed)} AND {NOT_BLOCKED}")}
        kept.extend(i for i in locked if i not in keyed or i in heads)
    return kept


def raw(m, cur):
    m.run('begin', cur, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN")
    while cur.nextset():
        pass
    due = [r[0] for r in m.run('window', cur, "SELECT id FROM outbox_message WHERE status = 'pending' AND "
                               "next_attempt_at <= UTC_TIMESTAMP(6) ORDER BY next_attempt_at, id LIMIT %s", (LIMIT,))]
    if not due:
        return []
    rows = m.run('lock', cur, f"SELECT id, payload FROM outbox_message WHERE id IN {in_list(due)} "
                 "AND status = 'pending' FOR UPDATE SKIP LOCKED")
    ids = [r[0] for r in rows]
    if ids:
        m.run('settle', cur, f"UPDATE outbox_message SET status = 'sent', updated_at = UTC_TIMESTAMP(6) "
              f"WHERE id IN {in_list(ids)}")
    return ids


def run(variant, db):
    fill(db, variant)
    with connect(db) as c:
        cur = c.cursor()
        m = Meter(c, server_pid())
        claims, done = 0, 0
        s0, t0 = m.server(), time.monotonic()
        while True:
            claims += 1
            if variant == 'raw':
                ids = raw(m, cur)
            else:
                ids = claim(variant, m, cur)
                if ids:
                    mark = MARKS.get(variant, MARK_SENT)
                    m.run('settle', cur, mark + f"'parts' WHERE id IN {in_list(ids)}")
            m.run('commit', cur, "COMMIT")
            if not ids:
                break
            done += len(ids)
        wall, server = time.monotonic() - t0, m.server() - s0
        cur.execute("SELECT count(*) FROM outbox_message WHERE status <> 'sent'")
        left = cur.fetchone()[0]
    if left or done != N:
        sys.exit(f"{variant}: {left} rows left unsent, {done} drained of {N}")
    us = lambda s: s / done * 1e6
    split = ', '.join(f"{p} {us(s):.1f}" for p, s in m.parts.items())
    print(f"{variant:>4}: {done} rows in {wall:.2f} s ({done / wall:,.0f} rows/s), {claims} claims, "
          f"server CPU {us(server):.1f} µs/row; connection thread {us(sum(m.parts.values())):.1f}: {split}",
          flush=True)


if __name__ == '__main__':
    known = {'A', 'N', 'S', 'C', 'G', 'X', 'F', 'M', 'MN', 'ML', 'raw'}
    for i, v in enumerate(sys.argv[1:]):
        if v not in known:
            sys.exit(f"unknown variant {v!r}: one of {sorted(known)}")
        run(v, f"mparts{i % 2}")
