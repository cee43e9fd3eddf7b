-- Version 3 adds an index for PostgreSQL and SQLite's claim (messages without a key, found past
-- held-back keyed rows). MySQL has no partial indexes and its claim is unchanged: nothing to do.
INSERT INTO outbox_schema_migrations (version, description) VALUES (3, 'claim heads');
