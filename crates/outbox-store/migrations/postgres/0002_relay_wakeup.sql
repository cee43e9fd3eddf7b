-- outbox schema version 2 for PostgreSQL: push wake-up for idle relays.
--
-- A NOTIFY inside a transaction takes a database-wide lock at commit, which would serialize
-- concurrent writers. So writers notify only while some relay has declared itself idle (a row
-- here, refreshed while it waits). A busy relay is not waiting for a wake-up: it claims again as
-- soon as a batch is done, so under load no writer pays for NOTIFY. Relays that die leave a row
-- that expires by itself (`until`).
CREATE TABLE outbox_relay_idle (
    owner VARCHAR(128) PRIMARY KEY,
    until TIMESTAMPTZ  NOT NULL
);

CREATE OR REPLACE FUNCTION outbox_notify_relay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_relay_idle WHERE until > now()) THEN
        PERFORM pg_notify('outbox_message', '');
    END IF;
    RETURN NULL;
END;
$$;

-- Once per INSERT statement (a batch insert notifies once), delivered at commit only.
CREATE TRIGGER outbox_message_notify AFTER INSERT ON outbox_message
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_relay();

INSERT INTO outbox_schema_migrations (version, description) VALUES (2, 'relay wake-up');
