#!/usr/bin/env python3
"""Enqueue outbox messages from Python on MySQL 8 / MariaDB (PyMySQL). See docs/sql-contract.md.

Usage: enqueue_mysql.py mysql://USER[:PASSWORD]@HOST:3306/DB N

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
from urllib.parse import unquote, urlsplit

import pymysql

TOPIC = "shop.order.created"
ER_DUP_ENTRY = 1062  # MySQL/MariaDB error code of a unique-key violation


def enqueue_minimal(cur, payload):
    """The whole contract: topic and payload. Every other column has a default."""
    cur.execute("INSERT INTO outbox_message (topic, payload) VALUES (%s, %s)", (TOPIC, payload))
    return cur.lastrowid


def enqueue_full(cur, order_id, payload):
    """Ordering key, idempotency pair and headers. Returns (id, created).

    A duplicate (biz_type, biz_key) fails with error 1062, which undoes only this statement
    (the business row stays); the existing message is then read with a locking read, which
    sees the latest committed row whatever the transaction's REPEATABLE READ snapshot.
    """
    biz = ("order", str(order_id))                  # (biz_type, biz_key): unique together
    key = f"order-{order_id}"                       # msg_key: same key => published in id order
    headers = json.dumps({"source": "python", "trace-id": f"trace-{order_id}"})  # a JSON object
    try:
        cur.execute(
            "INSERT INTO outbox_message (topic, payload, msg_key, biz_type, biz_key, headers, created_by)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (TOPIC, payload, key, *biz, headers, "enqueue_mysql.py"),
        )
        return cur.lastrowid, True
    except pymysql.err.IntegrityError as e:
        if e.args[0] != ER_DUP_ENTRY or "outbox_message_biz_unique" not in e.args[1]:
            raise
    cur.execute("SELECT id FROM outbox_message WHERE biz_type = %s AND biz_key = %s LOCK IN SHARE MODE", biz)
    return cur.fetchone()[0], False


def create_order(cur, order_id, amount_cents):
    """The business change; returns the message payload describing it."""
    cur.execute("INSERT INTO shop_order (id, amount_cents) VALUES (%s, %s)", (order_id, amount_cents))
    return json.dumps({"order_id": order_id, "amount_cents": amount_cents})


def connect(url):
    """PyMySQL takes keyword arguments, not a URL: split mysql://user:password@host:port/db."""
    u = urlsplit(url)
    return pymysql.connect(
        host=u.hostname, port=u.port or 3306, user=unquote(u.username or ""),
        password=unquote(u.password or ""), database=u.path.lstrip("/"), charset="utf8mb4",
        autocommit=False,
    )


class PaymentDeclined(Exception):
    pass


def main(argv):
    if len(argv) != 3 or not argv[1].startswith(("mysql://", "mariadb://")):
        sys.exit("usage: enqueue_mysql.py mysql://USER[:PASSWORD]@HOST:PORT/DB N   (N: number of orders, >= 1)")
    try:
        n = int(argv[2])
    except ValueError:
        n = 0
    if n < 1:
        sys.exit(f"enqueue_mysql.py: N must be a positive integer, got {argv[2]!r}")

    conn = connect(argv[1])
    with conn, conn.cursor() as cur:
        # DDL commits implicitly in MySQL: keep it out of the business transactions.
        cur.execute("CREATE TABLE IF NOT EXISTS shop_order (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL)")
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM shop_order")
        first = cur.fetchone()[0] + 1
        conn.commit()

        for order_id in range(first, first + n):
            conn.begin()
            try:
                payload = create_order(cur, order_id, 1000 + order_id)
                if order_id % 2:
                    msg_id, variant = enqueue_minimal(cur, payload), "minimal"
                else:
                    msg_id, variant = enqueue_full(cur, order_id, payload)[0], "full"
                conn.commit()
            except Exception:
                conn.rollback()
                raise
            print(f"committed {msg_id} order={order_id} variant={variant}")  # after COMMIT only

        # A retried request for an order that already has its message: same id, no new row.
        retried = next((o for o in range(first, first + n) if o % 2 == 0), None)
        if retried is not None:
            conn.begin()
            msg_id, created = enqueue_full(cur, retried, json.dumps({"order_id": retried}))
            conn.commit()
            if created:
                sys.exit(f"enqueue_mysql.py: retry of order {retried} created a second message")
            print(f"duplicate {msg_id} order={retried}")

        # A failure after both inserts: the rollback undoes the order AND its message.
        order_id = first + n
        conn.begin()
        try:
            enqueue_minimal(cur, create_order(cur, order_id, 1000 + order_id))
            raise PaymentDeclined(order_id)
        except PaymentDeclined:
            conn.rollback()
            print(f"rolled-back order={order_id}")


if __name__ == "__main__":
    main(sys.argv)
