-- The locked claim (CLAIM_LOCKED of crates/outbox-store/src/postgres/relay.rs at 3adee26, with x.* for its column list), prepared and run under EXPLAIN as the relay runs it (a forced generic plan, limit 500, window 1,000). Run in a database migrated by `outbox migrate` and filled by fill.sql; a batch in flight was held by another session: BEGIN; SELECT ... WHERE id BETWEEN <first> AND <first+499> FOR UPDATE.
PREPARE c(int8,int8,int8,int8[]) AS
WITH RECURSIVE win AS (
    SELECT w.id, w.msg_key, w.next_attempt_at FROM (
        SELECT m.id, m.msg_key, m.next_attempt_at FROM outbox_message m
        WHERE m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $2 OFFSET $3) w
    WHERE w.next_attempt_at <= now()
), firsts AS (
    SELECT f.id FROM (
        SELECT DISTINCT ON (w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END) w.id, w.next_attempt_at
        FROM win w
        ORDER BY w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END, w.id) f
    ORDER BY f.next_attempt_at, f.id
), taken AS (
    SELECT l.* FROM firsts k
    CROSS JOIN LATERAL (
        SELECT x.* FROM outbox_message x
        WHERE x.id = k.id AND (x.status IN ('pending', 'sending') AND x.next_attempt_at <= now()) IS TRUE
          AND NOT (x.id = ANY ($4::int8[]))
        FOR UPDATE SKIP LOCKED) l
    WHERE l.msg_key IS NULL OR l.id = (
        SELECT o.id FROM outbox_message o
        WHERE o.msg_key >= l.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1)
    LIMIT $1
), need_heads AS (
    SELECT (SELECT count(*) FROM win) >= $2 AND (SELECT count(*) FROM taken) < $1 AS yes
), nokey AS (
    SELECT w.id FROM (
        SELECT m.id, m.next_attempt_at FROM outbox_message m
        WHERE (SELECT yes FROM need_heads) AND m.msg_key IS NULL AND m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $1) w
    WHERE w.next_attempt_at <= now()
), open_keys(k) AS (
    (SELECT o.msg_key FROM outbox_message o
     WHERE (SELECT yes FROM need_heads) AND o.msg_key IS NOT NULL AND o.status IN ('pending', 'sending', 'failed')
     ORDER BY o.msg_key LIMIT 1)
    UNION ALL
    SELECT (SELECT o.msg_key FROM outbox_message o
            WHERE o.msg_key > open_keys.k AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key LIMIT 1)
    FROM open_keys WHERE open_keys.k IS NOT NULL
), heads AS (
    SELECT h.id FROM open_keys
    CROSS JOIN LATERAL (
        SELECT o.msg_key, o.id, o.status, o.next_attempt_at FROM outbox_message o
        WHERE o.msg_key >= open_keys.k AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1) h
    WHERE open_keys.k IS NOT NULL AND h.msg_key = open_keys.k AND h.status IN ('pending', 'sending')
      AND h.next_attempt_at <= now()
), more AS (
    SELECT m.*
    FROM outbox_message m
    WHERE (SELECT yes FROM need_heads)
      AND m.id = ANY (ARRAY(SELECT id FROM nokey UNION SELECT id FROM heads))
      AND (m.status IN ('pending', 'sending') AND m.next_attempt_at <= now()) IS TRUE
      AND NOT (m.id = ANY ($4::int8[]))
      AND NOT (m.id = ANY (ARRAY(SELECT id FROM taken)))
    ORDER BY m.next_attempt_at, m.id
    LIMIT $1 - (SELECT count(*) FROM taken)
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM taken UNION ALL SELECT * FROM more
)
SELECT w.n AS win_rows,
    CASE WHEN w.n < $2 THEN (SELECT count(DISTINCT x.msg_key) + count(*) FILTER (WHERE x.msg_key IS NULL) FROM win x) END AS win_keys,
    (SELECT yes FROM need_heads) AS walked, p.id
FROM (SELECT count(*) AS n FROM win) w LEFT JOIN picked p ON true;
SET plan_cache_mode = force_generic_plan;  -- add "SET jit = off;" to see the claim without JIT
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE c(500, 1000, 0, '{}');
ROLLBACK;
BEGIN;
EXPLAIN (ANALYZE, BUFFERS) EXECUTE c(500, 1000, 0, '{}');
ROLLBACK;
