-- Version 4 adds MySQL/MariaDB's `open_key` column and triggers, which stand in for the
-- partial open-key index this database already has (0001): nothing to do here.
INSERT INTO outbox_schema_migrations (version, description) VALUES (4, 'open key');
