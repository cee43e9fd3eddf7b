-- Seed 001's message table adapted to PostgreSQL: the same columns and indexes.
CREATE TABLE message (
id bigserial PRIMARY KEY,
create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
status_delete smallint NOT NULL DEFAULT 0,
topic varchar(64) NOT NULL,
tag varchar(128) NOT NULL,
msg_id varchar(64) NOT NULL DEFAULT '',
msg_key varchar(64) DEFAULT NULL,
data text NOT NULL,
try_num int NOT NULL DEFAULT 0,
status smallint NOT NULL DEFAULT 0,
next_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX idx_key ON message (msg_key);
CREATE INDEX idx_nexttime_status ON message (next_time, status);
