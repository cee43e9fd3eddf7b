-- outbox schema version 11 for PostgreSQL: the message table's thirteen CHECK rules are checked
-- by one constraint, `outbox_message_rules`, which calls one PL/pgSQL function. Nothing about
-- what the table accepts changes, and a refused row is still refused in the name of the rule it
-- breaks (SQLSTATE 23514, `check_violation`, with the rule's constraint name in the error's
-- constraint field and message), so a client that reads the constraint name sees what it saw.
--
-- PostgreSQL reads every CHECK expression of a table back from its stored node tree and prepares
-- it again for each INSERT and UPDATE statement. Version 10's thirteen constraints were 13,000
-- characters of node trees: `perf` put a quarter of the server's CPU for a single-row enqueue
-- INSERT in `ExecConstraints`, most of it `stringToNode` and `ExecPrepareExpr`, and the relay's
-- claims and settlements, which are UPDATEs of the same table, paid the same per statement.
-- One call with the row's columns is 3,000 characters; a single-row INSERT, claim or settlement
-- costs the server 30-40 µs less (docs/benchmarks.md, "One check instead of thirteen"). Per row
-- of a large statement nothing changes measurably: the function tests every rule as one
-- expression, which PL/pgSQL evaluates without the executor, and looks for the broken rule only
-- when that expression is not true.
--
-- The rules are checked in the order PostgreSQL checked the constraints (their names' order),
-- so a row that breaks several is refused in the name of the same one. As with a CHECK
-- constraint, a rule whose test is NULL is not broken. The function calls no function of ours
-- (PL/pgSQL resolves names when it runs, with the inserting session's search_path); the string
-- literals naming the table and the rules get the configured prefix (docs/schema.md).
--
-- The old constraints and functions are dropped if they exist: a table from which someone dropped
-- one of them ends with every rule checked all the same.
--
-- The constraint is added without reading the table (`NOT VALID`): the rows already there met
-- the same rules, and every row written from now on is checked. A table still empty is validated
-- at once; on an older one, `ALTER TABLE outbox_message VALIDATE CONSTRAINT outbox_message_rules`
-- can be run any time without blocking writes.

CREATE OR REPLACE FUNCTION outbox_message_rules_ok(
    topic text, msg_key text, tag text, biz_type text, biz_key text, created_by text,
    headers jsonb, status text, attempts integer, max_attempts integer, lease_owner text,
    lease_until timestamptz, last_error text, next_attempt_at timestamptz,
    created_at timestamptz, updated_at timestamptz, last_attempt_at timestamptz)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    well_formed boolean;
    broken text;
BEGIN
    -- Every rule at once: one expression without a query. An open row with headers goes on to
    -- the query over its headers below.
    IF attempts >= 0
        AND (biz_type IS NULL OR (biz_type <> '' AND biz_key <> ''))
        AND (biz_type IS NULL) = (biz_key IS NULL)
        AND jsonb_typeof(headers) = 'object'
        AND (msg_key IS NULL OR msg_key <> '')
        AND (last_error IS NULL OR char_length(last_error) <= 2000)
        AND (max_attempts IS NULL OR max_attempts > 0)
        AND (status <> 'sending' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
        AND status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')
        AND (tag IS NULL OR tag <> '')
        AND next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
        AND (last_attempt_at IS NULL OR last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
        AND (lease_until IS NULL OR lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
        AND topic <> '' AND topic = btrim(topic)
        AND (status NOT IN ('pending', 'sending') OR (headers = '{}'::jsonb
            AND topic !~ '[\u0001-\u001f\u007f-\u009f]'
            AND (msg_key IS NULL OR (msg_key = btrim(msg_key) AND msg_key !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (tag IS NULL OR (tag = btrim(tag) AND tag !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (biz_type IS NULL OR (biz_type = btrim(biz_type) AND biz_type !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (biz_key IS NULL OR (biz_key = btrim(biz_key) AND biz_key !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (created_by IS NULL OR (created_by = btrim(created_by) AND created_by !~ '[\u0001-\u001f\u007f-\u009f]'))))
    THEN
        RETURN true;
    END IF;

    -- The text and headers of an open row (version 10's `outbox_fields_ok`); NULL, which breaks
    -- nothing, for a row in any other status.
    IF status IN ('pending', 'sending') THEN
        well_formed := topic = btrim(topic) AND topic !~ '[\u0001-\u001f\u007f-\u009f]'
            AND (msg_key IS NULL OR (msg_key = btrim(msg_key) AND msg_key !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (tag IS NULL OR (tag = btrim(tag) AND tag !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (biz_type IS NULL OR (biz_type = btrim(biz_type) AND biz_type !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (biz_key IS NULL OR (biz_key = btrim(biz_key) AND biz_key !~ '[\u0001-\u001f\u007f-\u009f]'))
            AND (created_by IS NULL OR (created_by = btrim(created_by) AND created_by !~ '[\u0001-\u001f\u007f-\u009f]'));
        IF well_formed AND headers <> '{}'::jsonb THEN
            IF jsonb_typeof(headers) <> 'object' THEN
                well_formed := false;
            ELSE
                well_formed := (SELECT count(*) <= 64 AND coalesce(bool_and(
                                       char_length(e.key) BETWEEN 1 AND 128 AND e.key = btrim(e.key)
                                       AND e.key !~ '[\u0001-\u001f\u007f-\u009f]'
                                       AND char_length(e.value) <= 4096), true)
                                FROM jsonb_each_text(headers) AS e);
            END IF;
        END IF;
    END IF;

    -- The first broken rule, in the order of the constraints' names.
    broken := CASE
        WHEN NOT (attempts >= 0) THEN 'outbox_message_attempts_not_negative'
        WHEN NOT (biz_type IS NULL OR (biz_type <> '' AND biz_key <> '')) THEN 'outbox_message_biz_not_blank'
        WHEN NOT ((biz_type IS NULL) = (biz_key IS NULL)) THEN 'outbox_message_biz_pair'
        WHEN NOT (jsonb_typeof(headers) = 'object') THEN 'outbox_message_headers_object'
        WHEN NOT (msg_key IS NULL OR msg_key <> '') THEN 'outbox_message_key_not_blank'
        WHEN NOT (last_error IS NULL OR char_length(last_error) <= 2000) THEN 'outbox_message_last_error_bounded'
        WHEN NOT (max_attempts IS NULL OR max_attempts > 0) THEN 'outbox_message_max_attempts_positive'
        WHEN NOT (status <> 'sending' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
            THEN 'outbox_message_sending_has_lease'
        WHEN NOT (status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled'))
            THEN 'outbox_message_status_known'
        WHEN NOT (tag IS NULL OR tag <> '') THEN 'outbox_message_tag_not_blank'
        WHEN NOT (next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
            AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
            AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
            AND (last_attempt_at IS NULL OR last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
            AND (lease_until IS NULL OR lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'))
            THEN 'outbox_message_times_in_range'
        WHEN NOT (topic <> '' AND topic = btrim(topic)) THEN 'outbox_message_topic_not_blank'
        WHEN NOT well_formed THEN 'outbox_message_well_formed'
    END;
    IF broken IS NULL THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = broken, TABLE = 'outbox_message',
        MESSAGE = format('new row for relation "%s" violates check constraint "%s"', 'outbox_message', broken);
END
$$;

ALTER TABLE outbox_message
    DROP CONSTRAINT IF EXISTS outbox_message_topic_not_blank,
    DROP CONSTRAINT IF EXISTS outbox_message_key_not_blank,
    DROP CONSTRAINT IF EXISTS outbox_message_tag_not_blank,
    DROP CONSTRAINT IF EXISTS outbox_message_biz_pair,
    DROP CONSTRAINT IF EXISTS outbox_message_biz_not_blank,
    DROP CONSTRAINT IF EXISTS outbox_message_status_known,
    DROP CONSTRAINT IF EXISTS outbox_message_attempts_not_negative,
    DROP CONSTRAINT IF EXISTS outbox_message_max_attempts_positive,
    DROP CONSTRAINT IF EXISTS outbox_message_headers_object,
    DROP CONSTRAINT IF EXISTS outbox_message_sending_has_lease,
    DROP CONSTRAINT IF EXISTS outbox_message_last_error_bounded,
    DROP CONSTRAINT IF EXISTS outbox_message_times_in_range,
    DROP CONSTRAINT IF EXISTS outbox_message_well_formed,
    ADD CONSTRAINT outbox_message_rules CHECK (outbox_message_rules_ok(
        topic, msg_key, tag, biz_type, biz_key, created_by, headers, status, attempts, max_attempts,
        lease_owner, lease_until, last_error, next_attempt_at, created_at, updated_at,
        last_attempt_at)) NOT VALID;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox_message) THEN
        ALTER TABLE outbox_message VALIDATE CONSTRAINT outbox_message_rules;
    END IF;
END
$$;

-- Version 10's functions, called by no constraint any more.
DROP FUNCTION IF EXISTS outbox_fields_ok(text, text, text, text, text, text, jsonb);
DROP FUNCTION IF EXISTS outbox_times_ok(timestamptz, timestamptz, timestamptz, timestamptz, timestamptz);

INSERT INTO outbox_schema_migrations (version, description) VALUES (11, 'one check');
