-- outbox schema version 8: on PostgreSQL, the relay's wake-up names the rows it announces.
-- Nothing changes on this database (it has no push notification); the version is recorded so
-- that every dialect is at the same version.

INSERT INTO outbox_schema_migrations (version, description) VALUES (8, 'push rows');
