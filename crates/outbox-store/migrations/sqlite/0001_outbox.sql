-- outbox schema version 1 for SQLite 3.37+ (STRICT tables, RETURNING).
-- Applied by `outbox migrate` / `Outbox::migrate`, or by hand: `sqlite3 app.db < 0001_outbox.sql`.
-- Timestamps are INTEGER milliseconds since the Unix epoch, UTC.

CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version     INTEGER NOT NULL PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
) STRICT;

CREATE TABLE outbox_message (
    -- AUTOINCREMENT: ids are never reused, even after the newest rows are purged.
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    biz_type        TEXT,
    biz_key         TEXT,
    topic           TEXT    NOT NULL,
    msg_key         TEXT,
    tag             TEXT,
    headers         TEXT    NOT NULL DEFAULT '{}',
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER,
    next_attempt_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    last_attempt_at INTEGER,
    last_error      TEXT,
    lease_owner     TEXT,
    lease_until     INTEGER,
    created_by      TEXT,
    updated_by      TEXT,
    created_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    updated_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    CONSTRAINT outbox_message_topic_not_blank
        CHECK (topic <> '' AND topic = trim(topic) AND length(topic) <= 255),
    CONSTRAINT outbox_message_key_not_blank CHECK (msg_key IS NULL OR (msg_key <> '' AND length(msg_key) <= 255)),
    CONSTRAINT outbox_message_tag_not_blank CHECK (tag IS NULL OR (tag <> '' AND length(tag) <= 128)),
    CONSTRAINT outbox_message_biz_pair CHECK ((biz_type IS NULL) = (biz_key IS NULL)),
    CONSTRAINT outbox_message_biz_not_blank CHECK (biz_type IS NULL OR (
        biz_type <> '' AND biz_key <> '' AND length(biz_type) <= 64 AND length(biz_key) <= 255)),
    CONSTRAINT outbox_message_status_known
        CHECK (status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')),
    CONSTRAINT outbox_message_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT outbox_message_max_attempts_positive CHECK (max_attempts IS NULL OR max_attempts > 0),
    CONSTRAINT outbox_message_headers_object CHECK (json_valid(headers) AND json_type(headers) = 'object'),
    CONSTRAINT outbox_message_sending_has_lease
        CHECK (status <> 'sending' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT outbox_message_biz_unique UNIQUE (biz_type, biz_key)
) STRICT;

CREATE INDEX outbox_message_due_idx ON outbox_message (next_attempt_at, id)
    WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_message_open_key_idx ON outbox_message (msg_key, id)
    WHERE msg_key IS NOT NULL AND status IN ('pending', 'sending', 'failed');
CREATE INDEX outbox_message_status_updated_idx ON outbox_message (status, updated_at);

CREATE TABLE outbox_delivery (
    message_id      INTEGER NOT NULL REFERENCES outbox_message (id) ON DELETE CASCADE,
    destination     TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    last_attempt_at INTEGER,
    last_error      TEXT,
    ack_deadline    INTEGER,
    acked_at        INTEGER,
    created_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    updated_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    PRIMARY KEY (message_id, destination),
    CONSTRAINT outbox_delivery_destination_not_blank CHECK (destination <> ''),
    CONSTRAINT outbox_delivery_status_known
        CHECK (status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')),
    CONSTRAINT outbox_delivery_attempts_not_negative CHECK (attempts >= 0)
) STRICT;

CREATE INDEX outbox_delivery_ack_due_idx ON outbox_delivery (ack_deadline)
    WHERE status = 'sent' AND ack_deadline IS NOT NULL;

INSERT INTO outbox_schema_migrations (version, description) VALUES (1, 'outbox_message and outbox_delivery');
