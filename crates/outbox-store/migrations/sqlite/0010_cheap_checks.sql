-- outbox schema version 10: on PostgreSQL, `outbox_message_well_formed` and
-- `outbox_message_times_in_range` check the same rules at a fraction of their cost (PostgreSQL
-- parsed the bodies of the SQL functions they called again for every INSERT and UPDATE). Nothing
-- changes on this database; the version is recorded so that every dialect is at the same version.

INSERT INTO outbox_schema_migrations (version, description) VALUES (10, 'cheap checks');
