//! The alert hook: raised once when a message fails for good.

use outbox_core::OutboxMessage;

/// Called when a message becomes `failed` (attempts exhausted or a permanent error). It needs a
/// person: `outbox retry` re-drives it.
#[async_trait::async_trait]
pub trait AlertHook: Send + Sync + std::fmt::Debug {
    /// `reason` is the last error, prefixed with the destination.
    async fn message_failed(&self, message: &OutboxMessage, reason: &str);
}

/// Logs every failed message at error level, with its id, topic and business key.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogAlert;

#[async_trait::async_trait]
impl AlertHook for LogAlert {
    async fn message_failed(&self, m: &OutboxMessage, reason: &str) {
        tracing::error!(
            message_id = %m.id,
            topic = %m.topic,
            biz_type = m.biz_type.as_deref().unwrap_or(""),
            biz_key = m.biz_key.as_deref().unwrap_or(""),
            attempts = m.attempts,
            reason,
            "Message failed for good; it needs a person (outbox retry {})",
            m.id
        );
    }
}
