-- outbox schema version 6 for SQLite: destinations paused by an operator (the relays re-read
-- the table about once a second and hold the destination's messages until the row is deleted).
CREATE TABLE outbox_destination_pause (
    destination TEXT    NOT NULL PRIMARY KEY CHECK (destination <> ''),
    paused_by   TEXT    NOT NULL CHECK (paused_by <> ''),
    reason      TEXT,
    paused_at   INTEGER NOT NULL
) STRICT;

INSERT INTO outbox_schema_migrations (version, description) VALUES (6, 'destination pause');
