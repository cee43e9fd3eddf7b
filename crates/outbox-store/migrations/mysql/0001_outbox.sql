-- outbox schema version 1 for MySQL 8.0.16+ and MariaDB 10.6+ (both enforce CHECK constraints
-- and support FOR UPDATE SKIP LOCKED).
-- Applied by `outbox migrate` / `Outbox::migrate`, or by hand: `mysql db < 0001_outbox.sql`.
-- Timestamps are DATETIME(6) in UTC (UTC_TIMESTAMP), whatever the session time zone is.
-- Indexes are declared inside CREATE TABLE so each table is created by one atomic statement.

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version     BIGINT       NOT NULL PRIMARY KEY,
    description VARCHAR(255) NOT NULL,
    applied_at  DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_message (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    biz_type        VARCHAR(64)  NULL,
    biz_key         VARCHAR(255) NULL,
    topic           VARCHAR(255) NOT NULL,
    msg_key         VARCHAR(255) NULL,
    tag             VARCHAR(128) NULL,
    headers         JSON         NOT NULL DEFAULT ('{}'),
    payload         LONGTEXT     NOT NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempts        INT          NOT NULL DEFAULT 0,
    max_attempts    INT          NULL,
    next_attempt_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    last_attempt_at DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    lease_owner     VARCHAR(128) NULL,
    lease_until     DATETIME(6)  NULL,
    created_by      VARCHAR(128) NULL,
    updated_by      VARCHAR(128) NULL,
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    CONSTRAINT outbox_message_topic_not_blank CHECK (topic <> '' AND topic = TRIM(topic)),
    CONSTRAINT outbox_message_key_not_blank CHECK (msg_key IS NULL OR msg_key <> ''),
    CONSTRAINT outbox_message_tag_not_blank CHECK (tag IS NULL OR tag <> ''),
    CONSTRAINT outbox_message_biz_pair CHECK ((biz_type IS NULL) = (biz_key IS NULL)),
    CONSTRAINT outbox_message_biz_not_blank CHECK (biz_type IS NULL OR (biz_type <> '' AND biz_key <> '')),
    CONSTRAINT outbox_message_status_known
        CHECK (status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')),
    CONSTRAINT outbox_message_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT outbox_message_max_attempts_positive CHECK (max_attempts IS NULL OR max_attempts > 0),
    CONSTRAINT outbox_message_headers_object CHECK (JSON_TYPE(headers) = 'OBJECT'),
    CONSTRAINT outbox_message_sending_has_lease
        CHECK (status <> 'sending' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    UNIQUE KEY outbox_message_biz_unique (biz_type, biz_key),
    -- The claim: MySQL has no partial indexes, so status leads; `status IN ('pending','sending')
    -- AND next_attempt_at <= now` reads two short ranges and never touches sent rows.
    KEY outbox_message_due_idx (status, next_attempt_at),
    -- Per-key order: older open message with the same key? One probe per status.
    KEY outbox_message_open_key_idx (msg_key, status, id),
    KEY outbox_message_status_updated_idx (status, updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_delivery (
    message_id      BIGINT       NOT NULL,
    destination     VARCHAR(128) NOT NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    last_attempt_at DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    ack_deadline    DATETIME(6)  NULL,
    acked_at        DATETIME(6)  NULL,
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (message_id, destination),
    CONSTRAINT outbox_delivery_message_fk FOREIGN KEY (message_id)
        REFERENCES outbox_message (id) ON DELETE CASCADE,
    CONSTRAINT outbox_delivery_destination_not_blank CHECK (destination <> ''),
    CONSTRAINT outbox_delivery_status_known
        CHECK (status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')),
    CONSTRAINT outbox_delivery_attempts_not_negative CHECK (attempts >= 0),
    KEY outbox_delivery_ack_due_idx (status, ack_deadline)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO outbox_schema_migrations (version, description) VALUES (1, 'outbox_message and outbox_delivery');
