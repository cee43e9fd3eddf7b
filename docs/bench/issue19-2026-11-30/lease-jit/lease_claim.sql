-- The lease claim (CLAIM of crates/outbox-store/src/postgres/relay.rs at 4fad224, RETURNING m.id for its column list), as run by run.sh: $1 limit, $2 window, $3 offset, $4 taken, $5 owner, $6 lease in ms.
PREPARE lc(int8,int8,int8,int8[],text,int8) AS
WITH RECURSIVE win AS (
    SELECT w.id, w.msg_key FROM (
        SELECT m.id, m.msg_key, m.next_attempt_at FROM outbox_message m
        WHERE m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $2 OFFSET $3) w
    WHERE w.next_attempt_at <= now()
), win_keys AS (
    SELECT DISTINCT w.msg_key FROM win w WHERE w.msg_key IS NOT NULL
), key_heads AS (
    SELECT f.id FROM win_keys k
    CROSS JOIN LATERAL (
        SELECT o.msg_key, o.id FROM outbox_message o
        WHERE o.msg_key >= k.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1) f
    WHERE f.msg_key = k.msg_key
), win_heads AS (
    SELECT w.id FROM win w
    WHERE w.msg_key IS NULL OR w.id IN (SELECT id FROM key_heads)
), need_heads AS (
    SELECT (SELECT count(*) FROM win) >= $2 AND (SELECT count(*) FROM win_heads) < $1 AS yes
), nokey AS (
    SELECT w.id FROM (
        SELECT m.id, m.next_attempt_at FROM outbox_message m
        WHERE m.msg_key IS NULL AND m.status IN ('pending', 'sending')
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
)
, cand AS (
SELECT m.id FROM outbox_message m
WHERE m.id = ANY (ARRAY(
        SELECT id FROM win_heads UNION SELECT id FROM nokey UNION SELECT id FROM heads))
  AND (m.status IN ('pending', 'sending') AND m.next_attempt_at <= now()) IS TRUE
  AND NOT (m.id = ANY ($4::int8[]))
ORDER BY m.next_attempt_at, m.id
LIMIT $1
FOR UPDATE SKIP LOCKED
)
UPDATE outbox_message m
SET status = 'sending', lease_owner = $5,
    lease_until = now() + $6 * interval '1 millisecond',
    next_attempt_at = now() + $6 * interval '1 millisecond',
    updated_at = now(), updated_by = $5
FROM cand WHERE m.id = cand.id
RETURNING m.id;
