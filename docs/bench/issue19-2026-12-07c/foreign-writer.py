#!/usr/bin/env python3
"""Another process's load for daemon-check.sh: N messages on keys of their own (cold-1 .. cold-N),
each INSERT its own transaction (autocommit), at RATE per second on one connection, paced by the
schedule (a late one does not delay the next ones' times). Usage: foreign-writer.py postgres|mariadb
DB RATE N"""
import sys
import time

store, db, rate, n = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
if store == "postgres":
    import psycopg
    conn = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={db} sslmode=disable", autocommit=True)
    sql = "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('cold', 'y', %s)"
else:
    import pymysql
    conn = pymysql.connect(host="127.0.0.1", user="root", password="", database=db, autocommit=True)
    sql = "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('cold', 'y', %s)"
cur = conn.cursor()
start = time.monotonic()
for i in range(1, n + 1):
    due = start + (i - 1) / rate
    wait = due - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    cur.execute(sql, (f"cold-{i}",))
conn.close()
