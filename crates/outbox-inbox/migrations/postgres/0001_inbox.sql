-- outbox inbox schema version 1 for PostgreSQL 12+ (consumer side).
-- Applied by `Inbox::migrate`, or by hand: `psql -v ON_ERROR_STOP=1 -1 -f 0001_inbox.sql`.
-- Independent of the outbox tables: a consumer database needs only these. The last statement
-- records the version, so the library sees a hand-applied file as applied.

CREATE TABLE IF NOT EXISTS outbox_inbox_schema_migrations (
    version     BIGINT       PRIMARY KEY,
    description VARCHAR(255) NOT NULL,
    applied_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
);

-- One row per (consumer group, message id) whose business effect was committed.
-- message_id is text so ids of several producer databases can be namespaced ("shop:42").
CREATE TABLE outbox_inbox (
    consumer_group VARCHAR(128) NOT NULL,
    message_id     VARCHAR(191) NOT NULL,
    topic          VARCHAR(255) NULL,
    processed_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT outbox_inbox_pkey PRIMARY KEY (consumer_group, message_id),
    CONSTRAINT outbox_inbox_group_not_blank CHECK (consumer_group <> ''),
    CONSTRAINT outbox_inbox_message_id_not_blank CHECK (message_id <> '')
);

-- Pruning by age.
CREATE INDEX outbox_inbox_processed_at_idx ON outbox_inbox (processed_at);

INSERT INTO outbox_inbox_schema_migrations (version, description) VALUES (1, 'outbox_inbox');
