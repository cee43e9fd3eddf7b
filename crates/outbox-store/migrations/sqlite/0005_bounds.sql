-- outbox schema version 5 for SQLite: the table refuses at INSERT what `NewMessage::validate`
-- refuses (docs/sql-contract.md, "Limits"). SQLite cannot add a CHECK constraint to an existing
-- table, so a trigger does it for new rows, with the constraint names the other databases use:
-- - times (milliseconds since 1970) from 0 to 9999-12-31;
-- - an open (`pending` / `sending`) row has no control character in topic, key, tag, business
--   key or created_by, no space at either end of them, and at most 64 headers with names of
--   1-128 characters (no control character, no space at the ends) and values of at most 4096
--   characters;
-- - an error text is at most 2000 characters.
-- SQLite does not check that text is UTF-8: a row with invalid UTF-8 is refused by the relay
-- when it claims it (the row fails alone, with the reason).

CREATE TRIGGER outbox_message_times_in_range BEFORE INSERT ON outbox_message
WHEN NOT (NEW.next_attempt_at BETWEEN 0 AND 253402214400000
          AND NEW.created_at BETWEEN 0 AND 253402214400000
          AND NEW.updated_at BETWEEN 0 AND 253402214400000
          AND (NEW.last_attempt_at IS NULL OR NEW.last_attempt_at BETWEEN 0 AND 253402214400000)
          AND (NEW.lease_until IS NULL OR NEW.lease_until BETWEEN 0 AND 253402214400000))
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_message_times_in_range');
END;

CREATE TRIGGER outbox_message_well_formed BEFORE INSERT ON outbox_message
WHEN NEW.status IN ('pending', 'sending') AND (
       NEW.topic GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*'
    OR coalesce(NEW.msg_key GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*' OR NEW.msg_key <> trim(NEW.msg_key), 0)
    OR coalesce(NEW.tag GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*' OR NEW.tag <> trim(NEW.tag), 0)
    OR coalesce(NEW.biz_type GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*' OR NEW.biz_type <> trim(NEW.biz_type), 0)
    OR coalesce(NEW.biz_key GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*' OR NEW.biz_key <> trim(NEW.biz_key), 0)
    OR coalesce(NEW.created_by GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*', 0)
    OR (json_valid(NEW.headers) AND json_type(NEW.headers) = 'object' AND (
           (SELECT count(*) FROM json_each(NEW.headers)) > 64
        OR EXISTS (SELECT 1 FROM json_each(NEW.headers) AS e
                   WHERE length(e.key) NOT BETWEEN 1 AND 128 OR e.key <> trim(e.key)
                      OR e.key GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*'
                      OR length(CAST(e.value AS TEXT)) > 4096)))
    OR coalesce(length(NEW.last_error) > 2000, 0))
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_message_well_formed');
END;

INSERT INTO outbox_schema_migrations (version, description) VALUES (5, 'bounds');
