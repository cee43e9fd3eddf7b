-- outbox schema version 5 for MySQL / MariaDB: the table refuses what `NewMessage::validate`
-- refuses, so a foreign application's malformed row fails its own transaction at INSERT instead
-- of reaching the relay (docs/sql-contract.md, "Limits"). CHECK constraints are enforced
-- whatever the session's sql_mode:
-- - times from 1970-01-01 on (a permissive sql_mode lets in '0000-00-00', which the driver
--   cannot read: before this version it stopped every claim of the store);
-- - an open (`pending` / `sending`) row has no control character in topic, key, tag, business
--   key or created_by and no space at either end of them (compared by length: the tables'
--   PAD SPACE collation makes 'a ' = 'a'), at most 64 headers, no header name longer than 128
--   characters, and at most 300,000 bytes of headers in all (MySQL's CHECK cannot call a
--   function that walks the object, so each value's 4096-character limit is covered by the
--   total only);
-- - an error text is at most 2000 characters.
-- Rows already in the table are brought in line first, as on PostgreSQL.

UPDATE outbox_message SET
    next_attempt_at = IF(next_attempt_at >= '1970-01-01', next_attempt_at, UTC_TIMESTAMP(6)),
    created_at = IF(created_at >= '1970-01-01', created_at, UTC_TIMESTAMP(6)),
    updated_at = IF(updated_at >= '1970-01-01', updated_at, UTC_TIMESTAMP(6)),
    last_attempt_at = IF(last_attempt_at IS NULL OR last_attempt_at >= '1970-01-01', last_attempt_at, UTC_TIMESTAMP(6)),
    lease_until = IF(lease_until IS NULL OR lease_until >= '1970-01-01', lease_until, UTC_TIMESTAMP(6))
WHERE NOT (next_attempt_at >= '1970-01-01' AND created_at >= '1970-01-01' AND updated_at >= '1970-01-01'
           AND (last_attempt_at IS NULL OR last_attempt_at >= '1970-01-01')
           AND (lease_until IS NULL OR lease_until >= '1970-01-01'));

UPDATE outbox_message SET last_error = LEFT(last_error, 2000) WHERE CHAR_LENGTH(last_error) > 2000;
UPDATE outbox_delivery SET last_error = LEFT(last_error, 2000) WHERE CHAR_LENGTH(last_error) > 2000;

UPDATE outbox_message
SET status = 'failed', lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6),
    last_error = 'refused by schema version 5: a control character or white space at an end of topic, key, tag, business key or created_by, or headers beyond the limits (docs/sql-contract.md)'
WHERE status IN ('pending', 'sending') AND NOT (
    topic NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(topic) = CHAR_LENGTH(TRIM(topic))
    AND (msg_key IS NULL OR (msg_key NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(msg_key) = CHAR_LENGTH(TRIM(msg_key))))
    AND (tag IS NULL OR (tag NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(tag) = CHAR_LENGTH(TRIM(tag))))
    AND (biz_type IS NULL OR (biz_type NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(biz_type) = CHAR_LENGTH(TRIM(biz_type))
         AND biz_key NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(biz_key) = CHAR_LENGTH(TRIM(biz_key))))
    AND (created_by IS NULL OR created_by NOT REGEXP '[[:cntrl:]]')
    AND JSON_LENGTH(headers) <= 64 AND LENGTH(headers) <= 300000
    AND JSON_KEYS(headers) NOT REGEXP '"[^"]{129,}"');

ALTER TABLE outbox_message
    ADD CONSTRAINT outbox_message_times_in_range CHECK (
        next_attempt_at >= '1970-01-01' AND created_at >= '1970-01-01' AND updated_at >= '1970-01-01'
        AND (last_attempt_at IS NULL OR last_attempt_at >= '1970-01-01')
        AND (lease_until IS NULL OR lease_until >= '1970-01-01')),
    ADD CONSTRAINT outbox_message_well_formed CHECK (
        status NOT IN ('pending', 'sending') OR (
            topic NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(topic) = CHAR_LENGTH(TRIM(topic))
            AND (msg_key IS NULL OR (msg_key NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(msg_key) = CHAR_LENGTH(TRIM(msg_key))))
            AND (tag IS NULL OR (tag NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(tag) = CHAR_LENGTH(TRIM(tag))))
            AND (biz_type IS NULL OR (biz_type NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(biz_type) = CHAR_LENGTH(TRIM(biz_type))
                 AND biz_key NOT REGEXP '[[:cntrl:]]' AND CHAR_LENGTH(biz_key) = CHAR_LENGTH(TRIM(biz_key))))
            AND (created_by IS NULL OR created_by NOT REGEXP '[[:cntrl:]]')
            AND JSON_LENGTH(headers) <= 64 AND LENGTH(headers) <= 300000
            AND JSON_KEYS(headers) NOT REGEXP '"[^"]{129,}"')),
    ADD CONSTRAINT outbox_message_last_error_bounded CHECK (last_error IS NULL OR CHAR_LENGTH(last_error) <= 2000);

ALTER TABLE outbox_delivery
    ADD CONSTRAINT outbox_delivery_last_error_bounded CHECK (last_error IS NULL OR CHAR_LENGTH(last_error) <= 2000);

INSERT INTO outbox_schema_migrations (version, description) VALUES (5, 'bounds');
