\timing on
TRUNCATE m_plain, m_tt;
DO $$ BEGIN FOR i IN 1..50000 LOOP INSERT INTO m_plain (topic, payload) VALUES ('orders', 'x'); END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..50000 LOOP INSERT INTO m_tt (topic, payload) VALUES ('orders', 'x'); END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..50000 LOOP INSERT INTO m_tt (topic, payload) VALUES ('orders', 'x'); END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..50000 LOOP INSERT INTO m_plain (topic, payload) VALUES ('orders', 'x'); END LOOP; END $$;
TRUNCATE m_plain, m_tt;
INSERT INTO m_plain (topic, payload) SELECT 'orders', 'x' FROM generate_series(1, 1000000);
INSERT INTO m_tt (topic, payload) SELECT 'orders', 'x' FROM generate_series(1, 1000000);
TRUNCATE m_plain, m_tt;
INSERT INTO m_tt (topic, payload) SELECT 'orders', 'x' FROM generate_series(1, 1000000);
INSERT INTO m_plain (topic, payload) SELECT 'orders', 'x' FROM generate_series(1, 1000000);
