//! RocketMQ transport (feature `rocketmq`, client: `rocketmq-client-rust` 1.0).
//!
//! **Why this client.** It is the only complete RocketMQ client on crates.io: a Rust port of the
//! Java client speaking the classic remoting protocol (name server + broker) of RocketMQ 4.x and
//! 5.x, with routes from the name server, queue selectors, ACL signing and send statuses. The
//! other crates wrap the C++ `librocketmq` or the 5.x gRPC proxy. Its limits, as met here: it
//! needs rustc 1.95 (the whole rocketmq-rust 1.0 line does); it is a community port (Apache
//! RocketMQ does not publish a Rust client), tested here against the rocketmq-rust 1.0 broker,
//! not against the Java broker; it brings its own small Tokio runtime, which the transport owns
//! (one worker thread); no gRPC/proxy mode.
//!
//! **Delivery guarantee.** A message counts as delivered only when the broker answered
//! `SEND_OK`. `FLUSH_DISK_TIMEOUT`, `FLUSH_SLAVE_TIMEOUT` and `SLAVE_NOT_AVAILABLE` mean the
//! master stored it but could not make it as durable as the broker is configured to guarantee:
//! a failed attempt (retryable), and the message is sent again (consumers deduplicate on the
//! `outbox-message-id` property; the inbox does). At-least-once: RocketMQ has no broker-side
//! deduplication.
//!
//! **Mapping** (the article schemas' `topic`, `tag`, `msg_key`):
//! - RocketMQ topic: the outbox topic, `<topic_prefix>_<topic>`, or a fixed `topic`
//!   ([`RocketMqConfig`]). RocketMQ topic names allow only letters, digits, `_`, `-`, `%` and
//!   `|`: an outbox topic like `order.paid` fails permanently unless a fixed `topic` is set.
//! - Tag: the message's `tag` (consumers subscribe with `TagA || TagB`).
//! - Keys: the outbox message id and the message's `key` (spaces become `_`), so operators find a
//!   message by either with `queryMsgByKey`. The key is also the sharding key.
//! - Queue: with `order_by_key` (the default) a keyed message goes to the queue the Java client's
//!   `SelectMessageQueueByHash` picks for its key, so a key stays in one queue and an orderly
//!   consumer (`MessageListenerOrderly`) sees its messages in order. Unkeyed messages are spread
//!   by the client. The mapping depends on the topic's queue count: create topics up front (an
//!   auto-created topic is first routed through the broker's default topic and changes its queue
//!   count once, as with the Java client).
//! - User properties: every envelope header (`outbox-message-id`, `outbox-biz-type`,
//!   `outbox-biz-key`, `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`,
//!   `traceparent` and the application's own). A header named like a system property (`KEYS`,
//!   `TAGS`, ...) or holding `\u0001`/`\u0002` fails permanently.
//! - Body: the payload's UTF-8 bytes.
//!
//! **Batches** are sent concurrently, one request per message (the broker answers each with
//! its own status); messages with the same key go one after the other.
//!
//! **Classification.**
//!
//! | what happened | kind |
//! | --- | --- |
//! | `SEND_OK` | delivered |
//! | `FLUSH_DISK_TIMEOUT`, `FLUSH_SLAVE_TIMEOUT`, `SLAVE_NOT_AVAILABLE` | retryable |
//! | body over `max_message_bytes` (checked before sending), broker `MESSAGE_ILLEGAL` (13) | permanent |
//! | broker `TOPIC_NOT_EXIST` (17), no route for a topic never delivered to (auto-create off) | permanent |
//! | no route for, or `TOPIC_NOT_EXIST` from, a topic this transport delivered to before (its broker died or is restarting) | unavailable |
//! | broker `NO_PERMISSION` (16), unsupported request or version | permanent |
//! | invalid topic name or a system topic, tag with `|` or a control character, key with a control character, header with `\u0001`/`\u0002` or an empty name, properties over 31743 bytes, empty body (checked before sending), client validation errors | permanent |
//! | broker `SYSTEM_BUSY` (2), `SERVICE_NOT_AVAILABLE` (14), flush/slave codes as errors | unavailable |
//! | timeouts, connection failures, no broker reachable, ACL authentication failures | unavailable |
//! | broker `SYSTEM_ERROR` (1), anything else | retryable |
//!
//! **Unknown topics.** When the broker does not create topics (`autoCreateTopicEnable=false`,
//! the production setting), the name server has no route for a new topic and the send fails
//! *permanently*, naming the topic: it is this message's topic that is missing, and other topics
//! of the destination keep flowing. Create the topic and `outbox retry` the failed messages.
//! A route miss for a topic this transport has already delivered to is different: the name
//! server drops the routes of a broker that died, so it means the broker is down or restarting,
//! and the send is *unavailable* (the message waits, the destination's circuit opens) rather
//! than failed for good. The transport remembers up to 10,000 such topics.

mod config;
mod outcome;
mod transport;

pub use config::RocketMqConfig;
pub use transport::RocketMqTransport;
