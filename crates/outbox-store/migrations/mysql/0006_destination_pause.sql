-- outbox schema version 6 for MySQL/MariaDB: destinations paused by an operator.
--
-- A row pauses one destination for every relay on this database: the relays re-read the table
-- about once a second and hold the destination's messages (due again a few seconds later, no
-- attempt spent) until the row is deleted. Written by the admin API (`POST
-- /api/v1/stores/{store}/destinations/{name}/pause`) or by hand.
CREATE TABLE outbox_destination_pause (
    destination VARCHAR(128) NOT NULL PRIMARY KEY,
    paused_by   VARCHAR(128) NOT NULL,
    reason      VARCHAR(512),
    paused_at   DATETIME(6)  NOT NULL,
    CONSTRAINT outbox_destination_pause_named CHECK (destination <> '' AND paused_by <> '')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO outbox_schema_migrations (version, description) VALUES (6, 'destination pause');
