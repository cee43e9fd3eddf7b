-- outbox schema version 7 for SQLite: the relays running on this database (each refreshes its
-- row about every 5 seconds and deletes it when it stops; read by `GET /api/v1/relays`).
CREATE TABLE outbox_relay (
    owner         TEXT    NOT NULL PRIMARY KEY CHECK (owner <> ''),
    host          TEXT    NOT NULL,
    pid           INTEGER NOT NULL,
    version       TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    started_at    INTEGER NOT NULL,
    seen_at       INTEGER NOT NULL,
    last_claim_at INTEGER,
    claimed       INTEGER NOT NULL DEFAULT 0,
    delivered     INTEGER NOT NULL DEFAULT 0,
    failed        INTEGER NOT NULL DEFAULT 0
) STRICT;

INSERT INTO outbox_schema_migrations (version, description) VALUES (7, 'relay presence');
