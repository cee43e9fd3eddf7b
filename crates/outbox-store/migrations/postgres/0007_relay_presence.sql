-- outbox schema version 7 for PostgreSQL: the relays running on this database.
--
-- Every relay writes its row about every 5 seconds (its host, process, state, last claim and
-- counters) and deletes it when it stops; a row not refreshed for 30 seconds is a relay that
-- died without stopping. Read by the admin API (`GET /api/v1/relays`), so one admin listener
-- shows every relay process on the store. Rows older than a day are pruned by the relays.
CREATE TABLE outbox_relay (
    owner         VARCHAR(128) PRIMARY KEY,
    host          VARCHAR(255) NOT NULL,
    pid           BIGINT       NOT NULL,
    version       VARCHAR(64)  NOT NULL,
    state         VARCHAR(16)  NOT NULL,
    started_at    TIMESTAMPTZ  NOT NULL,
    seen_at       TIMESTAMPTZ  NOT NULL DEFAULT now(),
    last_claim_at TIMESTAMPTZ,
    claimed       BIGINT       NOT NULL DEFAULT 0,
    delivered     BIGINT       NOT NULL DEFAULT 0,
    failed        BIGINT       NOT NULL DEFAULT 0,
    CONSTRAINT outbox_relay_named CHECK (owner <> '')
);

INSERT INTO outbox_schema_migrations (version, description) VALUES (7, 'relay presence');
