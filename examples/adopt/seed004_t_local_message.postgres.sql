-- Seed 004's t_local_message adapted to PostgreSQL: the same columns, types and keys; comments and
-- MySQL's ON UPDATE CURRENT_TIMESTAMP dropped.
CREATE TABLE t_local_message (
id bigserial PRIMARY KEY,
biz_type varchar(64) NOT NULL,
biz_key varchar(128) NOT NULL,
topic varchar(255) NOT NULL,
message_body text NOT NULL,
status smallint NOT NULL,
retry_count int NOT NULL DEFAULT 0,
next_retry_time timestamp DEFAULT NULL,
last_exec_time timestamp DEFAULT NULL,
fail_reason varchar(512) DEFAULT NULL,
created_by varchar(64) NOT NULL,
updated_by varchar(64) NOT NULL,
gmt_create timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
gmt_modified timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
CONSTRAINT uk_biz_type_key UNIQUE (biz_type, biz_key)
);
CREATE INDEX idx_status_next_retry ON t_local_message (status, next_retry_time);
