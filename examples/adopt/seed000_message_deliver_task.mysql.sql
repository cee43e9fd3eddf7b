-- Seed 000's message_deliver_task, exactly as the article gives it (MySQL).
CREATE TABLE `message_deliver_task` (
`id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT '主键id',
`task_no` varchar(128) NOT NULL COMMENT '唯一键,通知任务流水号',
`message_code` varchar(255) NOT NULL COMMENT '消息code',
`scene_type` varchar(255) NOT NULL DEFAULT '' COMMENT '业务场景类型',
`deliver_start_time` datetime NOT NULL DEFAULT CURRENT_TIMESTAMP COMMENT '投递起始时间',
`message_body` text COMMENT '消息体',
`retry_times` int(10) NOT NULL DEFAULT '0' COMMENT '重试次数',
`need_callback` int(1) NOT NULL DEFAULT '0' COMMENT '是否需要回执标识,0-不需要,1-需要',
`message_status` int(10) NOT NULL DEFAULT '0' COMMENT '消息状态,DELETE(-1);SENDING(0);HANDLED(1)',
`create_time` datetime NOT NULL DEFAULT '1971-01-01 08:00:00' COMMENT '记录创建时间',
`update_time` datetime NOT NULL DEFAULT '1971-01-01 08:00:00' COMMENT '记录更新时间',
`extend` varchar(1024) NOT NULL DEFAULT '' COMMENT '扩展字段',
PRIMARY KEY (`id`) USING BTREE,
UNIQUE KEY `uniq_task_no` (`task_no`) USING BTREE,
KEY `idx_status_callback_retry` (`message_status`,`need_callback`,`retry_times`) USING BTREE
) ENGINE=InnoDB AUTO_INCREMENT=13 DEFAULT CHARSET=utf8mb4 COMMENT='消息投递任务表';
