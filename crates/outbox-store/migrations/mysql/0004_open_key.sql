-- outbox schema version 4 for MySQL / MariaDB: the claim finds the head of every open key
-- without reading the rows held back behind it (ADR 0003).
--
-- MySQL has no partial indexes, and neither MySQL nor MariaDB uses a loose index scan
-- ("Using index for group-by") on a generated column. So `open_key` is a plain column, kept by
-- the two triggers below: the message's key while the message is open (pending, sending or
-- failed), NULL otherwise. Applications never write it; whatever they write is replaced.
-- With it, `SELECT MIN(id) FROM outbox_message WHERE open_key IS NOT NULL GROUP BY open_key`
-- reads one index entry per open key (measured on MariaDB 10.11: 25 keys over 123,000 open
-- rows in 0.1 ms, 5,024 keys in 5 ms), and "is an older message of this key open?" is one probe.
-- Creating the triggers needs the TRIGGER privilege and, when binary logging is on (MySQL's
-- default since 8.0), SUPER or the server setting log_bin_trust_function_creators = 1; without
-- either MySQL and MariaDB refuse with error 1419. Every statement below can run again, so once
-- that is fixed, migrating again finishes the version (the column the first attempt added stays).

-- The column and its index, unless an earlier attempt added them (MySQL has no
-- ADD COLUMN IF NOT EXISTS; one ALTER adds both or neither).
SET @outbox_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.columns
     WHERE table_schema = DATABASE() AND table_name = 'outbox_message' AND column_name = 'open_key') = 0,
    'ALTER TABLE outbox_message ADD COLUMN open_key VARCHAR(255) NULL, ADD KEY outbox_message_open_head_idx (open_key, id)',
    'DO 0');
PREPARE outbox_ddl FROM @outbox_ddl;
EXECUTE outbox_ddl;
DEALLOCATE PREPARE outbox_ddl;
SET @outbox_ddl = NULL;

-- The triggers first, then the backfill: a row written while this runs is either kept by the
-- triggers or set by the UPDATE. (Only a run after a failed one finds a trigger to drop.)
DROP TRIGGER IF EXISTS outbox_message_open_key_insert;
CREATE TRIGGER outbox_message_open_key_insert BEFORE INSERT ON outbox_message FOR EACH ROW
    SET NEW.open_key = CASE WHEN NEW.status IN ('pending', 'sending', 'failed') THEN NEW.msg_key END;

DROP TRIGGER IF EXISTS outbox_message_open_key_update;
CREATE TRIGGER outbox_message_open_key_update BEFORE UPDATE ON outbox_message FOR EACH ROW
    SET NEW.open_key = CASE WHEN NEW.status IN ('pending', 'sending', 'failed') THEN NEW.msg_key END;

UPDATE outbox_message SET open_key = msg_key
WHERE msg_key IS NOT NULL AND status IN ('pending', 'sending', 'failed');

INSERT INTO outbox_schema_migrations (version, description) VALUES (4, 'open key');
