-- The claim looks past messages held back by an older message of their key (ADR 0003): due
-- messages without a key are found through their own index, so a long run of held-back keyed
-- rows in front of them cannot hide them.
CREATE INDEX outbox_message_due_nokey_idx ON outbox_message (next_attempt_at, id)
    WHERE msg_key IS NULL AND status IN ('pending', 'sending');

INSERT INTO outbox_schema_migrations (version, description) VALUES (3, 'claim heads');
