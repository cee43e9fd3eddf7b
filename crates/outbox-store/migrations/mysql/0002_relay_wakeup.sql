-- outbox schema version 2 for MySQL/MariaDB: the relays' idle registry. MySQL has no NOTIFY, so
-- nothing reads it yet; it keeps the schema version aligned across databases and lets
-- `outbox status` show which relays are idle.
CREATE TABLE outbox_relay_idle (
    owner VARCHAR(128) NOT NULL PRIMARY KEY,
    until DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO outbox_schema_migrations (version, description) VALUES (2, 'relay wake-up');
