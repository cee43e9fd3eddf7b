-- Seed 004's t_local_message, exactly as the article gives it (MySQL).
CREATE TABLE `t_local_message` (
`id` bigint NOT NULL AUTO_INCREMENT COMMENT '主键ID',
`biz_type` varchar(64) NOT NULL COMMENT '业务类型',
`biz_key` varchar(128) NOT NULL COMMENT '业务幂等键',
`topic` varchar(255) NOT NULL COMMENT 'RocketMQ Topic',
`message_body` text NOT NULL COMMENT '消息内容(JSON格式)',
`status` tinyint NOT NULL COMMENT '消息状态:0-待发送,1-发送中,2-已发送,3-发送失败',
`retry_count` int NOT NULL DEFAULT 0 COMMENT '消息已重试次数',
`next_retry_time` datetime DEFAULT NULL COMMENT '下一次重试时间',
`last_exec_time` datetime DEFAULT NULL COMMENT '最后一次发送时间',
`fail_reason` varchar(512) DEFAULT NULL COMMENT '最后一次失败原因',
`created_by` varchar(64) NOT NULL COMMENT '创建人或系统代码标识',
`updated_by` varchar(64) NOT NULL COMMENT '修改人或系统代码标识',
`gmt_create` datetime NOT NULL DEFAULT CURRENT_TIMESTAMP COMMENT '创建时间',
`gmt_modified` datetime NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP COMMENT '修改时间',
PRIMARY KEY (`id`),
UNIQUE KEY `uk_biz_type_key` (`biz_type`, `biz_key`) COMMENT '业务幂等约束',
KEY `idx_status_next_retry` (`status`, `next_retry_time`) COMMENT '扫描待重试的消息',
KEY `idx_topic` (`topic`) COMMENT '按 topic 查找'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='本地消息表(生产者侧)';
