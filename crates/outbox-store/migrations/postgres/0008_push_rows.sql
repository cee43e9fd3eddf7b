-- outbox schema version 8 for PostgreSQL: the relay's wake-up names the rows it announces.
--
-- The notification of version 2 carried nothing, so a relay could not tell a commit of its own
-- process (which its in-process signal already announces, with the ids) from a foreign one: each
-- of its own commits while it was idle also woke it through the database, and that second claim
-- found nothing. The payload is now `<first id> <last id> <rows>` of the INSERT statement
-- (decimal, one space apart); a relay ignores the notification of rows its own process
-- committed. An INSERT that added no row (ON CONFLICT DO NOTHING on a duplicate) notifies nothing.
--
-- The rows come from the statement's transition table: the trigger still runs once per
-- statement, and notifies only while a relay is idle.

CREATE OR REPLACE FUNCTION outbox_notify_relay() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rows_added TEXT;
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_relay_idle WHERE until > now()) THEN
        SELECT min(id) || ' ' || max(id) || ' ' || count(*) INTO rows_added FROM added_rows;
        IF rows_added IS NOT NULL THEN
            PERFORM pg_notify('outbox_message', rows_added);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER outbox_message_notify ON outbox_message;
CREATE TRIGGER outbox_message_notify AFTER INSERT ON outbox_message
    REFERENCING NEW TABLE AS added_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_relay();

INSERT INTO outbox_schema_migrations (version, description) VALUES (8, 'push rows');
