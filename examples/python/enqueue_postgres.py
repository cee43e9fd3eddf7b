#!/usr/bin/env python3
"""Enqueue outbox messages from Python on PostgreSQL (psycopg 3). See docs/sql-contract.md.

Usage: enqueue_postgres.py postgres://USER@HOST:5432/DB N

Creates N orders. Each order is ONE transaction: the business row in `shop_order` and its
message in `outbox_message` commit together or not at all. Odd orders use the minimal insert
(topic, payload), even ones the fuller insert (key, idempotency pair, headers). Then a retried
enqueue returns the existing message, and a failed order is rolled back, leaving no trace.

Prints one line per outcome:
    committed <id> order=<order id> variant=minimal|full
    duplicate <id> order=<order id>
    rolled-back order=<order id>
"""

import json
import sys

import psycopg

TOPIC = "shop.order.created"


def enqueue_minimal(cur, payload):
    """The whole contract: topic and payload. Every other column has a default."""
    cur.execute(
        "INSERT INTO outbox_message (topic, payload) VALUES (%s, %s) RETURNING id",
        (TOPIC, payload),
    )
    return cur.fetchone()[0]


def enqueue_full(cur, order_id, payload):
    """Ordering key, idempotency pair and headers. Returns (id, created).

    A duplicate (biz_type, biz_key) must not raise: in PostgreSQL an error aborts the whole
    transaction, business row included. ON CONFLICT DO NOTHING inserts nothing instead, and
    the existing message is then read back.
    """
    biz = ("order", str(order_id))                  # (biz_type, biz_key): unique together
    key = f"order-{order_id}"                       # msg_key: same key => published in id order
    headers = json.dumps({"source": "python", "trace-id": f"trace-{order_id}"})  # a JSON object
    cur.execute(
        "INSERT INTO outbox_message (topic, payload, msg_key, biz_type, biz_key, headers, created_by)"
        " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)"
        " ON CONFLICT (biz_type, biz_key) DO NOTHING RETURNING id",
        (TOPIC, payload, key, *biz, headers, "enqueue_postgres.py"),
    )
    row = cur.fetchone()
    if row is not None:
        return row[0], True
    cur.execute("SELECT id FROM outbox_message WHERE biz_type = %s AND biz_key = %s", biz)
    return cur.fetchone()[0], False


def create_order(cur, order_id, amount_cents):
    """The business change; returns the message payload describing it."""
    cur.execute("INSERT INTO shop_order (id, amount_cents) VALUES (%s, %s)", (order_id, amount_cents))
    return json.dumps({"order_id": order_id, "amount_cents": amount_cents})


class PaymentDeclined(Exception):
    pass


def main(argv):
    if len(argv) != 3 or not argv[1].startswith(("postgres://", "postgresql://")):
        sys.exit("usage: enqueue_postgres.py postgres://USER@HOST:PORT/DB N   (N: number of orders, >= 1)")
    try:
        n = int(argv[2])
    except ValueError:
        n = 0
    if n < 1:
        sys.exit(f"enqueue_postgres.py: N must be a positive integer, got {argv[2]!r}")

    # autocommit=True: nothing is implicit; each `with conn.transaction()` is BEGIN ... COMMIT
    # (or ROLLBACK when the block raises).
    with psycopg.connect(argv[1], autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS shop_order (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL)")
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM shop_order")
        first = cur.fetchone()[0] + 1

        for order_id in range(first, first + n):
            with conn.transaction():
                payload = create_order(cur, order_id, 1000 + order_id)
                if order_id % 2:
                    msg_id, variant = enqueue_minimal(cur, payload), "minimal"
                else:
                    msg_id, variant = enqueue_full(cur, order_id, payload)[0], "full"
            print(f"committed {msg_id} order={order_id} variant={variant}")  # after COMMIT only

        # A retried request for an order that already has its message: same id, no new row.
        retried = next((o for o in range(first, first + n) if o % 2 == 0), None)
        if retried is not None:
            with conn.transaction():
                msg_id, created = enqueue_full(cur, retried, json.dumps({"order_id": retried}))
            if created:
                sys.exit(f"enqueue_postgres.py: retry of order {retried} created a second message")
            print(f"duplicate {msg_id} order={retried}")

        # A failure after both inserts: the transaction rolls back the order AND its message.
        order_id = first + n
        try:
            with conn.transaction():
                enqueue_minimal(cur, create_order(cur, order_id, 1000 + order_id))
                raise PaymentDeclined(order_id)
        except PaymentDeclined:
            print(f"rolled-back order={order_id}")


if __name__ == "__main__":
    main(sys.argv)
