//! The alert hook: raised once when a message fails for good. [`LogAlert`] logs it;
//! [`TransportAlert`] also sends it through a transport (a webhook, a chat bridge, a topic),
//! at most once per failure cause per window, so a thousand messages failing for one reason
//! page a person once, with a count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use outbox_core::failure::{cause_of, group_id};
use outbox_core::text::printable;
use outbox_core::{Envelope, Headers, MessageId, OutboxMessage, Outcome, Transport};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Called when a message becomes `failed` (attempts exhausted or a permanent error). It needs a
/// person: `outbox retry` re-drives it.
#[async_trait::async_trait]
pub trait AlertHook: Send + Sync + std::fmt::Debug {
    /// `reason` is the last error, prefixed with the destination.
    async fn message_failed(&self, message: &OutboxMessage, reason: &str);

    /// A destination's circuit has stayed open for `open_for` (it keeps being unavailable; its
    /// messages wait, no attempt spent). Raised once per outage, when it passes
    /// [`RelayConfig::alert_circuit_open_after`](crate::RelayConfig::alert_circuit_open_after).
    /// Logs by default.
    async fn destination_down(&self, destination: &str, open_for: Duration) {
        tracing::error!(destination, open_for = ?open_for, "Destination unavailable for too long; its messages wait");
    }

    /// A due message has waited `overdue` past its due time. Raised once until the backlog
    /// is back under [`RelayConfig::alert_overdue_after`](crate::RelayConfig::alert_overdue_after).
    /// Every relay on the store watches it, so each may raise it. Logs by default.
    async fn backlog_overdue(&self, overdue: Duration) {
        tracing::error!(overdue = ?overdue, "Messages wait past their due time; the relays fall behind");
    }
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

/// The topic of the envelopes [`TransportAlert`] sends.
pub const ALERT_TOPIC: &str = "outbox.alert";

/// Alerts waiting to be sent at most; beyond, an alert is dropped (it was logged).
const QUEUE: usize = 256;
/// Failure causes remembered at most for throttling.
const MAX_CAUSES: usize = 10_000;
/// How long one attempt to send an alert may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts to send one alert.
const SEND_ATTEMPTS: u32 = 4;

/// Logs every failed message ([`LogAlert`]) and sends an alert through a transport: the first
/// failure of each cause (topic, destination, error with numbers normalised:
/// [`outbox_core::failure`]), then at most one per cause per `window`, carrying how many were
/// held back since the previous one. Sending happens on a task of its own, so a slow or dead
/// alert endpoint never delays the relay; a full queue drops the alert (it was logged).
///
/// The envelope's topic is [`ALERT_TOPIC`], its id the failed message's, its payload JSON:
/// `{"event":"message_failed","store","message_id","topic","biz_type","biz_key",
/// "destination","cause","group","reason","attempts","failed_at","held_back"}`.
#[derive(Debug, Clone)]
pub struct TransportAlert {
    store: String,
    window: Duration,
    causes: Arc<Mutex<HashMap<String, (Instant, u64)>>>,
    queue: mpsc::Sender<Envelope>,
}

impl TransportAlert {
    /// Alerts of `store` through `transport` (named `destination` in logs), one per cause per
    /// `window`. Starts the sending task: call it inside a tokio runtime.
    pub fn spawn(
        store: impl Into<String>,
        destination: impl Into<String>,
        transport: Arc<dyn Transport>,
        window: Duration,
    ) -> Self {
        let (queue, mut rx) = mpsc::channel::<Envelope>(QUEUE);
        let destination = destination.into();
        tokio::spawn(async move {
            while let Some(mut env) = rx.recv().await {
                let id = env.id;
                // Sent again after 1 s, 4 s and 16 s while the endpoint fails (a refusal that
                // will not change is not retried); the relay is never waited for.
                let mut delay = Duration::from_secs(1);
                for attempt in 1..=SEND_ATTEMPTS {
                    env.attempt = attempt;
                    let answer =
                        tokio::time::timeout(SEND_TIMEOUT, transport.publish(std::slice::from_ref(&env)))
                            .await;
                    let (reason, again) = match answer {
                        Ok(outcomes) => match outcomes.into_iter().next() {
                            Some(Outcome::Failed { reason, kind, .. }) => {
                                (reason, !matches!(kind, outbox_core::FailureKind::Permanent))
                            }
                            _ => break,
                        },
                        Err(_) => (format!("no answer in {SEND_TIMEOUT:?}"), true),
                    };
                    if !again || attempt == SEND_ATTEMPTS {
                        tracing::warn!(destination = %destination, alert_id = %id, attempt, reason = %printable(&reason, 300), "Could not send an alert");
                        break;
                    }
                    tracing::debug!(destination = %destination, alert_id = %id, attempt, retry_in = ?delay, "Alert not sent; trying again");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                }
            }
        });
        TransportAlert { store: store.into(), window, causes: Arc::default(), queue }
    }

    /// Whether an alert for `group` goes out now, and how many were held back before it.
    fn admit(&self, group: &str, now: Instant) -> Option<u64> {
        let mut causes = self.causes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if causes.len() >= MAX_CAUSES && !causes.contains_key(group) {
            let window = self.window;
            causes.retain(|_, (last, _)| now.duration_since(*last) < window);
        }
        if let Some((last, held)) = causes.get_mut(group) {
            if now.duration_since(*last) < self.window {
                *held += 1;
                return None;
            }
            *last = now;
            return Some(std::mem::take(held));
        }
        if causes.len() >= MAX_CAUSES {
            return None;
        }
        causes.insert(group.to_owned(), (now, 0));
        Some(0)
    }
}

#[async_trait::async_trait]
impl AlertHook for TransportAlert {
    async fn message_failed(&self, m: &OutboxMessage, reason: &str) {
        LogAlert.message_failed(m, reason).await;
        let cause = cause_of(Some(reason));
        let group = group_id(&m.topic, cause.destination.as_deref(), &cause.cause);
        let Some(held_back) = self.admit(&group, Instant::now()) else { return };
        let payload = serde_json::json!({
            "event": "message_failed",
            "store": self.store,
            "message_id": m.id.0,
            "topic": m.topic,
            "biz_type": m.biz_type,
            "biz_key": m.biz_key,
            "destination": cause.destination,
            "cause": cause.cause,
            "group": group,
            "reason": printable(reason, 2000),
            "attempts": m.attempts,
            "failed_at": Utc::now(),
            "held_back": held_back,
        });
        self.send(m.id, payload);
    }

    async fn destination_down(&self, destination: &str, open_for: Duration) {
        LogAlert.destination_down(destination, open_for).await;
        let Some(held_back) = self.admit(&format!("destination_down:{destination}"), Instant::now()) else {
            return;
        };
        let payload = serde_json::json!({
            "event": "destination_down",
            "store": self.store,
            "destination": destination,
            "open_for_secs": open_for.as_secs(),
            "at": Utc::now(),
            "held_back": held_back,
        });
        self.send(event_id(), payload);
    }

    async fn backlog_overdue(&self, overdue: Duration) {
        LogAlert.backlog_overdue(overdue).await;
        let Some(held_back) = self.admit("backlog_overdue", Instant::now()) else { return };
        let payload = serde_json::json!({
            "event": "backlog_overdue",
            "store": self.store,
            "overdue_secs": overdue.as_secs(),
            "at": Utc::now(),
            "held_back": held_back,
        });
        self.send(event_id(), payload);
    }
}

/// The id of an alert that is not about one message: the time in milliseconds, so each alert
/// has its own and a receiver that deduplicates by id keeps them all.
fn event_id() -> MessageId {
    MessageId(Utc::now().timestamp_millis())
}

impl TransportAlert {
    /// Queues an alert envelope; a full queue drops it (it was logged).
    fn send(&self, id: MessageId, payload: serde_json::Value) {
        let env = Envelope {
            id,
            topic: ALERT_TOPIC.into(),
            key: None,
            tag: None,
            payload: payload.to_string(),
            headers: Headers::new(),
            attempt: 1,
            created_at: Utc::now(),
        };
        if self.queue.try_send(env).is_err() {
            tracing::warn!(alert_id = %id, "Alert queue full; the alert was only logged");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestTransport;

    fn failed(id: i64, topic: &str) -> OutboxMessage {
        let mut m = crate::fixtures::message(5, None);
        m.id = outbox_core::MessageId(id);
        m.topic = topic.into();
        m.status = outbox_core::Status::Failed;
        m
    }

    #[tokio::test(start_paused = true)]
    async fn one_alert_per_cause_per_window_with_the_count_held_back() {
        let t = TestTransport::new();
        let alert = TransportAlert::spawn("main", "ops", Arc::new(t.clone()), Duration::from_secs(300));
        for id in 1..=5 {
            alert
                .message_failed(&failed(id, "orders"), &format!("[kafka] timed out after {} ms", 5000 + id))
                .await;
        }
        alert.message_failed(&failed(6, "orders"), "[kafka] HTTP 400: schema mismatch").await;
        tokio::time::sleep(Duration::from_secs(301)).await;
        alert.message_failed(&failed(7, "orders"), "[kafka] timed out after 5999 ms").await;
        tokio::time::sleep(Duration::from_secs(1)).await;

        let sent = t.received();
        let bodies: Vec<serde_json::Value> =
            sent.iter().map(|r| serde_json::from_str(&r.envelope.payload).unwrap()).collect();
        assert_eq!(bodies.len(), 3, "{bodies:?}");
        assert_eq!((bodies[0]["message_id"].as_i64(), bodies[0]["held_back"].as_u64()), (Some(1), Some(0)));
        assert_eq!(bodies[0]["cause"], "timed out after # ms");
        assert_eq!(
            (bodies[0]["destination"].as_str(), bodies[0]["store"].as_str()),
            (Some("kafka"), Some("main"))
        );
        assert_eq!(bodies[1]["message_id"], 6, "another cause alerts at once");
        assert_eq!((bodies[2]["message_id"].as_i64(), bodies[2]["held_back"].as_u64()), (Some(7), Some(4)));
        assert!(sent.iter().all(|r| r.envelope.topic == ALERT_TOPIC));
    }

    #[tokio::test(start_paused = true)]
    async fn an_alert_is_sent_again_with_backoff_and_the_new_events_are_throttled() {
        let t = TestTransport::new();
        let alert = TransportAlert::spawn("main", "ops", Arc::new(t.clone()), Duration::from_secs(300));
        // The endpoint refuses twice (unavailable), then takes it: sent at 0 s, 1 s and 5 s.
        t.fail_next([Outcome::unavailable("503"), Outcome::unavailable("503")]);
        alert.destination_down("kafka", Duration::from_secs(301)).await;
        alert.destination_down("kafka", Duration::from_secs(400)).await;
        alert.backlog_overdue(Duration::from_secs(900)).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        let sent = t.received();
        let attempts: Vec<u32> = sent.iter().map(|r| r.envelope.attempt).collect();
        assert_eq!(attempts, [1, 2, 3, 1], "three tries of the first, one of the next: {sent:?}");
        let bodies: Vec<serde_json::Value> =
            sent.iter().map(|r| serde_json::from_str(&r.envelope.payload).unwrap()).collect();
        assert_eq!(
            (bodies[2]["event"].as_str(), bodies[2]["destination"].as_str()),
            (Some("destination_down"), Some("kafka"))
        );
        assert_eq!(bodies[2]["open_for_secs"], 301);
        assert_eq!(
            (bodies[3]["event"].as_str(), bodies[3]["overdue_secs"].as_u64()),
            (Some("backlog_overdue"), Some(900))
        );
        assert_eq!(t.delivered().len(), 2, "the second outage alert of kafka is held back in the window");
        // A refusal that cannot change is not retried.
        t.fail_next([Outcome::permanent("400")]);
        alert.backlog_overdue(Duration::from_secs(900)).await; // throttled: nothing sent
        alert.destination_down("nats", Duration::from_secs(301)).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(t.received().len(), 5, "one try of the refused alert: {:?}", t.received());
    }
}
