//! The broker's confirmations, timed: a transport around the scenario's real one that notes, for
//! every message the broker confirmed, the instant the relay learnt it. The latency scenario
//! measures with it the SPEC's own latency, commit → broker-confirmed, beside commit → consumer
//! received (which adds the broker's delivery to a consumer).

use std::sync::Arc;
use std::time::Instant;

use outbox_core::{Envelope, Outcome, Transport};
use tokio::sync::mpsc::UnboundedSender;

/// Publishes through `inner`, then sends `(message id, now)` for every envelope the broker
/// confirmed. The instant is when the whole batch's confirmations are back: the moment the relay
/// itself knows the message is durable and goes on to settle it.
#[derive(Debug)]
pub(crate) struct Confirmed {
    inner: Arc<dyn Transport>,
    tx: UnboundedSender<(i64, Instant)>,
}

impl Confirmed {
    pub(crate) fn new(inner: Arc<dyn Transport>, tx: UnboundedSender<(i64, Instant)>) -> Self {
        Self { inner, tx }
    }
}

#[async_trait::async_trait]
impl Transport for Confirmed {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let outcomes = self.inner.publish(batch).await;
        let now = Instant::now();
        for (e, o) in batch.iter().zip(&outcomes) {
            if matches!(o, Outcome::Delivered) {
                let _ = self.tx.send((e.id.0, now));
            }
        }
        outcomes
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        self.inner.max_payload_bytes()
    }

    async fn health(&self) -> Result<(), String> {
        self.inner.health().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::null::NullTransport;
    use outbox_core::MessageId;

    fn envelope(id: i64) -> Envelope {
        Envelope {
            id: MessageId(id),
            topic: "t".into(),
            key: None,
            tag: None,
            payload: "{}".into(),
            headers: Default::default(),
            attempt: 1,
            created_at: chrono::Utc::now(),
        }
    }

    #[tokio::test]
    async fn every_confirmed_message_is_noted_once_after_its_publish() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::new(NullTransport::new());
        let t = Confirmed::new(inner.clone(), tx);
        let before = Instant::now();
        let out = t.publish(&[envelope(7), envelope(9)]).await;
        assert_eq!(out.len(), 2);
        assert_eq!(inner.published(), 2);
        let (a, b) = (rx.try_recv().unwrap(), rx.try_recv().unwrap());
        assert_eq!((a.0, b.0), (7, 9));
        assert!(a.1 >= before && b.1 >= before);
        assert!(rx.try_recv().is_err(), "one note per confirmed message");
        assert_eq!(t.kind(), "null");
    }

    /// Confirms the first envelope of a batch and fails the rest.
    #[derive(Debug)]
    struct FirstOnly;

    #[async_trait::async_trait]
    impl Transport for FirstOnly {
        fn kind(&self) -> &'static str {
            "first-only"
        }
        async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
            (0..batch.len())
                .map(|i| if i == 0 { Outcome::Delivered } else { Outcome::retryable("refused") })
                .collect()
        }
    }

    #[tokio::test]
    async fn a_failed_message_is_not_noted_as_confirmed() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let t = Confirmed::new(Arc::new(FirstOnly), tx);
        let out = t.publish(&[envelope(1), envelope(2), envelope(3)]).await;
        assert!(matches!(out[0], Outcome::Delivered));
        assert!(matches!(out[1], Outcome::Failed { .. }));
        assert_eq!(rx.try_recv().unwrap().0, 1);
        assert!(rx.try_recv().is_err(), "only the confirmed message is noted");
    }
}
