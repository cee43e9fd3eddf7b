INSERT INTO outbox_message (topic, msg_key, payload, status)
SELECT 'bench', 'k-' || (g % 1000),
 '{"seq":' || g || ',"customer":"c-' || lpad((g % 1000)::text, 4, '0') || '","amount_cents":' || ((g * 7919) % 100000) || ',"currency":"EUR","note":"' || repeat('x',120) || '"}',
 'pending' FROM generate_series(1::int8, 1000000::int8) AS g;
VACUUM ANALYZE outbox_message;
