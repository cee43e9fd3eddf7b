-- outbox schema version 5 for PostgreSQL: the table refuses what `NewMessage::validate` refuses,
-- so a foreign application's malformed row fails its own transaction at INSERT instead of
-- reaching the relay (docs/sql-contract.md, "Limits"):
-- - times between 1970-01-01 and 9999-12-31 (`infinity`, `-infinity` and years past the
--   drivers' range cannot be read back; before this version they crashed the reader);
-- - an open (`pending` / `sending`) row has no control character in topic, key, tag, business
--   key or created_by, no white space at either end of them, and at most 64 headers with names
--   of 1-128 characters (no control character, no white space at the ends) and values of at
--   most 4096 characters;
-- - an error text is at most 2000 characters.
-- Rows already in the table are brought in line first: times out of range become now(), longer
-- errors are cut, and open rows that break the text rules become `failed` with the reason (they
-- could not be delivered; the constraint keeps them from being retried as they are).
-- Applying this reads the table three times (the repairs, then the constraint checks) under
-- the migration's lock: about a second per million rows on a small machine.

CREATE FUNCTION outbox_headers_ok(h jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(h) <> 'object' THEN false ELSE (
        SELECT count(*) <= 64 AND coalesce(bool_and(
                   char_length(e.key) BETWEEN 1 AND 128 AND e.key = btrim(e.key)
                   AND e.key !~ '[\u0001-\u001f\u007f-\u009f]'
                   AND char_length(e.value) <= 4096), true)
        FROM jsonb_each_text(h) AS e) END
$$;

CREATE FUNCTION outbox_text_ok(t text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t IS NULL OR (t = btrim(t) AND t !~ '[\u0001-\u001f\u007f-\u009f]')
$$;

UPDATE outbox_message SET
    next_attempt_at = CASE WHEN next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                           THEN next_attempt_at ELSE now() END,
    created_at = CASE WHEN created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                      THEN created_at ELSE now() END,
    updated_at = CASE WHEN updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                      THEN updated_at ELSE now() END,
    last_attempt_at = CASE WHEN last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                           THEN last_attempt_at WHEN last_attempt_at IS NULL THEN NULL ELSE now() END,
    lease_until = CASE WHEN lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                       THEN lease_until WHEN lease_until IS NULL THEN NULL ELSE now() END
WHERE NOT (next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
       AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
       AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
       AND coalesce(last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00', true)
       AND coalesce(lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00', true));

UPDATE outbox_message SET last_error = left(last_error, 2000) WHERE char_length(last_error) > 2000;
UPDATE outbox_delivery SET last_error = left(last_error, 2000) WHERE char_length(last_error) > 2000;

UPDATE outbox_message
SET status = 'failed', lease_owner = NULL, lease_until = NULL, updated_at = now(),
    last_error = 'refused by schema version 5: a control character or white space at an end of topic, key, '
                 || 'tag, business key or created_by, or headers beyond the limits (docs/sql-contract.md)'
WHERE status IN ('pending', 'sending')
  AND NOT (outbox_text_ok(topic) AND outbox_text_ok(msg_key) AND outbox_text_ok(tag)
           AND outbox_text_ok(biz_type) AND outbox_text_ok(biz_key) AND outbox_text_ok(created_by)
           AND (headers = '{}'::jsonb OR outbox_headers_ok(headers)));

ALTER TABLE outbox_message
    ADD CONSTRAINT outbox_message_times_in_range CHECK (
        next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND (last_attempt_at IS NULL OR last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
        AND (lease_until IS NULL OR lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')),
    ADD CONSTRAINT outbox_message_well_formed CHECK (
        status NOT IN ('pending', 'sending')
        OR (outbox_text_ok(topic) AND outbox_text_ok(msg_key) AND outbox_text_ok(tag)
            AND outbox_text_ok(biz_type) AND outbox_text_ok(biz_key) AND outbox_text_ok(created_by)
            AND (headers = '{}'::jsonb OR outbox_headers_ok(headers)))),
    ADD CONSTRAINT outbox_message_last_error_bounded CHECK (last_error IS NULL OR char_length(last_error) <= 2000);

ALTER TABLE outbox_delivery
    ADD CONSTRAINT outbox_delivery_last_error_bounded CHECK (last_error IS NULL OR char_length(last_error) <= 2000);

INSERT INTO outbox_schema_migrations (version, description) VALUES (5, 'bounds');
