-- outbox inbox schema version 1 for MySQL 8.0.16+ and MariaDB 10.6+ (consumer side).
-- Applied by `Inbox::migrate`, or by hand: `mysql db < 0001_inbox.sql`.
-- Independent of the outbox tables: a consumer database needs only these.
-- Timestamps are DATETIME(6) in UTC (UTC_TIMESTAMP), whatever the session time zone is.
-- utf8mb4_bin: ids compare byte for byte ("A1" and "a1" are different messages).

CREATE TABLE IF NOT EXISTS outbox_inbox_schema_migrations (
    version     BIGINT       NOT NULL PRIMARY KEY,
    description VARCHAR(255) NOT NULL,
    applied_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per (consumer group, message id) whose business effect was committed.
-- message_id is text so ids of several producer databases can be namespaced ("shop:42").
CREATE TABLE IF NOT EXISTS outbox_inbox (
    consumer_group VARCHAR(128) NOT NULL,
    message_id     VARCHAR(191) NOT NULL,
    topic          VARCHAR(255) NULL,
    processed_at   DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer_group, message_id),
    KEY outbox_inbox_processed_at_idx (processed_at),
    CONSTRAINT outbox_inbox_group_not_blank CHECK (consumer_group <> ''),
    CONSTRAINT outbox_inbox_message_id_not_blank CHECK (message_id <> '')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO outbox_inbox_schema_migrations (version, description) VALUES (1, 'outbox_inbox');
