-- outbox inbox schema version 1 for SQLite 3.37+ (STRICT tables), consumer side.
-- Applied by `Inbox::migrate`, or by hand: `sqlite3 app.db < 0001_inbox.sql`.
-- Independent of the outbox tables: a consumer database needs only these.
-- Timestamps are INTEGER milliseconds since the Unix epoch, UTC.

CREATE TABLE IF NOT EXISTS outbox_inbox_schema_migrations (
    version     INTEGER NOT NULL PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
) STRICT;

-- One row per (consumer group, message id) whose business effect was committed.
-- message_id is text so ids of several producer databases can be namespaced ("shop:42").
CREATE TABLE outbox_inbox (
    consumer_group TEXT    NOT NULL CHECK (consumer_group <> '' AND length(consumer_group) <= 128),
    message_id     TEXT    NOT NULL CHECK (message_id <> '' AND length(message_id) <= 191),
    topic          TEXT,
    processed_at   INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    PRIMARY KEY (consumer_group, message_id)
) STRICT;

-- Pruning by age.
CREATE INDEX outbox_inbox_processed_at_idx ON outbox_inbox (processed_at);

INSERT INTO outbox_inbox_schema_migrations (version, description) VALUES (1, 'outbox_inbox');
