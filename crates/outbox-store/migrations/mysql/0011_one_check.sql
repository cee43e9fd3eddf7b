-- outbox schema version 11: on PostgreSQL, the message table's CHECK rules are checked by one
-- constraint that calls one PL/pgSQL function, in the name of the rule a refused row breaks
-- (PostgreSQL prepared each of its thirteen constraints again for every INSERT and UPDATE).
-- Nothing changes on this database; the version is recorded so that every dialect is at the
-- same version.

INSERT INTO outbox_schema_migrations (version, description) VALUES (11, 'one check');
