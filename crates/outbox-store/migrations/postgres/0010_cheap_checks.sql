-- outbox schema version 10 for PostgreSQL: version 5's rules, `outbox_message_well_formed` and
-- `outbox_message_times_in_range`, checked at a fraction of their cost. Nothing about what the
-- table accepts changes.
--
-- PostgreSQL prepares a table's CHECK expressions again for every INSERT or UPDATE statement: it
-- reads each one back from its stored text and inlines every `LANGUAGE sql` function it calls,
-- which means parsing and analysing the function's body each time. Version 5's constraints
-- called `outbox_text_ok` six times and `outbox_headers_ok` once (its body cannot be inlined,
-- but is parsed to find that out), and spelled out fifteen time comparisons: about a tenth of a
-- millisecond of the server's CPU for every single-row INSERT, claim and settlement, a quarter
-- of PostgreSQL's CPU at 1,000 messages/s (docs/benchmarks.md, "The table's checks").
--
-- Both rules are now one call each of a PL/pgSQL function, which is compiled once per connection
-- and keeps its query's plan: `outbox_fields_ok` (exactly `outbox_text_ok` on topic, key, tag,
-- business type and key and created_by, and `outbox_headers_ok`'s limits on the headers) and
-- `outbox_times_ok`. Their bodies call no function of ours (PL/pgSQL resolves names when it
-- runs, with the inserting session's search_path; built-in functions always resolve).
-- `outbox_text_ok` and `outbox_headers_ok` stay (the adoption bridge calls the first).
--
-- The constraints are replaced without reading the table (`NOT VALID`): the rows already there
-- met the same rules under version 5, and every row written from now on is checked. A table
-- still empty is validated at once, so a new database shows them valid; on an older one,
-- `ALTER TABLE outbox_message VALIDATE CONSTRAINT ...` can be run any time without blocking
-- writes.

CREATE OR REPLACE FUNCTION outbox_fields_ok(topic text, msg_key text, tag text, biz_type text,
                                            biz_key text, created_by text, headers jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    -- One expression without a query, which PL/pgSQL evaluates without the executor; the query
    -- over the headers runs only for a row that has some.
    IF NOT (topic = btrim(topic) AND topic !~ '[\u0001-\u001f\u007f-\u009f]'
        AND (msg_key IS NULL OR (msg_key = btrim(msg_key) AND msg_key !~ '[\u0001-\u001f\u007f-\u009f]'))
        AND (tag IS NULL OR (tag = btrim(tag) AND tag !~ '[\u0001-\u001f\u007f-\u009f]'))
        AND (biz_type IS NULL OR (biz_type = btrim(biz_type) AND biz_type !~ '[\u0001-\u001f\u007f-\u009f]'))
        AND (biz_key IS NULL OR (biz_key = btrim(biz_key) AND biz_key !~ '[\u0001-\u001f\u007f-\u009f]'))
        AND (created_by IS NULL OR (created_by = btrim(created_by) AND created_by !~ '[\u0001-\u001f\u007f-\u009f]'))) THEN
        RETURN false;
    END IF;
    IF headers = '{}'::jsonb THEN
        RETURN true;
    END IF;
    IF jsonb_typeof(headers) <> 'object' THEN
        RETURN false;
    END IF;
    RETURN (SELECT count(*) <= 64 AND coalesce(bool_and(
                       char_length(e.key) BETWEEN 1 AND 128 AND e.key = btrim(e.key)
                       AND e.key !~ '[\u0001-\u001f\u007f-\u009f]'
                       AND char_length(e.value) <= 4096), true)
            FROM jsonb_each_text(headers) AS e);
END
$$;

CREATE OR REPLACE FUNCTION outbox_times_ok(next_attempt_at timestamptz, created_at timestamptz,
                                updated_at timestamptz, last_attempt_at timestamptz,
                                lease_until timestamptz) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND (last_attempt_at IS NULL OR last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
        AND (lease_until IS NULL OR lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00');
END
$$;

ALTER TABLE outbox_message
    DROP CONSTRAINT outbox_message_well_formed,
    DROP CONSTRAINT outbox_message_times_in_range,
    ADD CONSTRAINT outbox_message_well_formed CHECK (
        status NOT IN ('pending', 'sending')
        OR outbox_fields_ok(topic, msg_key, tag, biz_type, biz_key, created_by, headers)) NOT VALID,
    ADD CONSTRAINT outbox_message_times_in_range CHECK (
        outbox_times_ok(next_attempt_at, created_at, updated_at, last_attempt_at, lease_until)) NOT VALID;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox_message) THEN
        ALTER TABLE outbox_message VALIDATE CONSTRAINT outbox_message_well_formed;
        ALTER TABLE outbox_message VALIDATE CONSTRAINT outbox_message_times_in_range;
    END IF;
END
$$;

INSERT INTO outbox_schema_migrations (version, description) VALUES (10, 'cheap checks');
