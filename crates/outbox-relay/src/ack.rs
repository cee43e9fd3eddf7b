//! Confirming a delivery (ACK mode): verify the token, then record the ACK.

use outbox_core::ack::{verify, AckTokenError};
use outbox_core::MessageId;
use outbox_store::{AckOutcome, Acks};

/// Why an ACK was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// The token is malformed, expired, or not for this delivery.
    #[error("ACK refused: {0}")]
    Token(#[from] AckTokenError),
    /// The store failed.
    #[error("ACK could not be recorded: {0}")]
    Store(#[from] outbox_core::Error),
}

/// Verifies `token` for (`store_name`, `id`, `destination`) and records the ACK. Idempotent: a
/// second ACK of the same delivery answers [`AckOutcome::AlreadyAcked`].
pub async fn acknowledge<S: Acks>(
    store: &S,
    secret: &[u8],
    store_name: &str,
    id: MessageId,
    destination: &str,
    token: &str,
) -> Result<AckOutcome, AckError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    verify(secret, token, store_name, id, destination, now)?;
    Ok(store.ack(id, destination).await?)
}
