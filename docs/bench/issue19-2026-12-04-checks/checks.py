"""The server's CPU per statement on the message table, schema 10 against schema 11.

    python3 checks.py PORT DB single N   # N messages, one per transaction: INSERT, then claim, then settle
    python3 checks.py PORT DB batch N    # N rows: one INSERT ... SELECT, then claims and settlements of 500 rows

The measure is the CPU time of the PostgreSQL backend serving this connection (`perf stat -e
task-clock -p PID`), which the rest of the machine's load does not inflate the way a wall clock
is. Statements are the shape of the library's (the enqueue INSERT of crates/outbox-store's
postgres module, a claim's and a settlement's SET lists), with `synchronous_commit = off` so that
no commit waits for the disk. Run by run.sh.
"""
import random
import subprocess
import sys
import time

import psycopg

port, db, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ENQUEUE = (
    "INSERT INTO outbox_message (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, "
    "next_attempt_at, created_by, updated_by) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, "
    "COALESCE(%s::timestamptz, now() + COALESCE(%s::bigint, 0) * interval '1 microsecond'), %s, %s) RETURNING id"
)
CLAIM = (
    "UPDATE outbox_message SET status = 'sending', lease_owner = %s, lease_until = now() + interval '30 s', "
    "next_attempt_at = now() + interval '30 s', attempts = attempts + 1, updated_at = now() WHERE {}"
)
SETTLE = (
    "UPDATE outbox_message SET status = 'sent', lease_owner = NULL, lease_until = NULL, next_attempt_at = now(), "
    "last_attempt_at = now(), updated_at = now(), updated_by = %s WHERE {} AND status = 'sending'"
)


def cpu_ms(pid, body):
    """The backend's CPU time (ms) while `body` runs."""
    perf = subprocess.Popen(
        ["perf", "stat", "-x,", "-e", "task-clock", "-p", str(pid)], stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.5)  # perf attaches
    body()
    perf.send_signal(2)
    return float(perf.communicate()[1].strip().splitlines()[-1].split(",")[0])


def args(key):
    return (None, None, "orders", key, None, "{}", "x" * 200, None, None, None, "svc", "svc")


with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname={db}", autocommit=True) as c:
    c.execute("SET synchronous_commit = off")
    c.execute("TRUNCATE outbox_message CASCADE")
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    if mode == "single":
        for i in range(50):  # psycopg prepares a statement on its fifth run
            with c.transaction():
                c.execute(ENQUEUE, args(f"w{i}"), prepare=True)
        ids = []

        def enqueue():
            for _ in range(n):
                with c.transaction():
                    ids.append(c.execute(ENQUEUE, args(f"k{random.randrange(1000)}"), prepare=True).fetchone()[0])

        def claim():
            for i in ids:
                with c.transaction():
                    c.execute(CLAIM.format("id = %s"), ("relay-1", i), prepare=True)

        def settle():
            for i in ids:
                with c.transaction():
                    c.execute(SETTLE.format("id = %s"), ("relay-1", i), prepare=True)

        unit = "us per statement (one message per transaction)"
    else:
        ids = []

        def enqueue():
            c.execute(
                "INSERT INTO outbox_message (topic, msg_key, payload, created_by, updated_by) "
                f"SELECT 'orders', 'k' || (g % 1000), repeat('x', 200), 'svc', 'svc' FROM generate_series(1, {n}) g"
            )

        def ranges():
            lo = c.execute("SELECT min(id) FROM outbox_message").fetchone()[0]
            return [(lo + b, lo + b + 500) for b in range(0, n, 500)]

        def claim():
            for lo, hi in ranges():
                c.execute(CLAIM.format("id >= %s AND id < %s"), ("relay-1", lo, hi))

        def settle():
            for lo, hi in ranges():
                c.execute(SETTLE.format("id >= %s AND id < %s"), ("relay-1", lo, hi))

        unit = "us per row (INSERT ... SELECT; claims and settlements of 500 rows)"
    figures = [cpu_ms(pid, body) * 1000 / n for body in (enqueue, claim, settle)]
    print(f"{db} {mode}: enqueue {figures[0]:.1f}, claim {figures[1]:.1f}, settle {figures[2]:.1f} {unit}")
