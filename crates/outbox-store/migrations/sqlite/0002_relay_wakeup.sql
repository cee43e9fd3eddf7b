-- outbox schema version 2 for SQLite: the relays' idle registry (SQLite has no push channel;
-- the in-process commit signal wakes an embedded relay).
CREATE TABLE outbox_relay_idle (
    owner TEXT    NOT NULL PRIMARY KEY,
    until INTEGER NOT NULL
) STRICT;

INSERT INTO outbox_schema_migrations (version, description) VALUES (2, 'relay wake-up');
