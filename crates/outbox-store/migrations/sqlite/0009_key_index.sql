-- outbox schema version 9: on MySQL / MariaDB, the index on the message key no longer carries the
-- status. Nothing changes on this database (its `outbox_message_open_key_idx` is `(msg_key, id)`
-- already); the version is recorded so that every dialect is at the same version.

INSERT INTO outbox_schema_migrations (version, description) VALUES (9, 'key index');
