//! Publishing a batch's messages: the circuit breaker gates each destination (a destination
//! that is down gets one probe), then each destination gets one publish call, all of them
//! concurrently, each bounded by the publish timeout; the answers feed the breakers.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use outbox_core::{Envelope, FailureKind, OutboxMessage, Outcome};

use crate::breaker::Permit;
use crate::destination::DestRuntime;

/// A message to publish to one destination: (index in the batch, index among the message's
/// targets, failed attempts so far).
pub(crate) type Item = (usize, usize, i32);

/// What a destination's breaker lets through.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Gate {
    /// Published now.
    pub(crate) go: Vec<Item>,
    /// Not attempted; due again after `wait` (their attempts are not spent).
    pub(crate) defer: Vec<Item>,
    /// How long the deferred ones wait.
    pub(crate) wait: Duration,
}

/// Splits `items` by the breaker's `permit`. With a half-open circuit one item probes: the
/// `turn`-th (modulo), so the probe rotates and one message the broker chokes on cannot be the
/// only probe forever. Pure.
pub(crate) fn gate(permit: Permit, mut items: Vec<Item>, turn: u64, cooldown: Duration) -> Gate {
    match permit {
        Permit::All => Gate { go: items, defer: Vec::new(), wait: Duration::ZERO },
        Permit::Probe if items.is_empty() => Gate { go: items, defer: Vec::new(), wait: cooldown },
        Permit::Probe => {
            let pick = usize::try_from(turn % items.len() as u64).unwrap_or(0);
            let probe = vec![items.remove(pick)];
            Gate { go: probe, defer: items, wait: cooldown }
        }
        Permit::Wait(wait) => Gate { go: Vec::new(), defer: items, wait },
    }
}

impl DestRuntime {
    /// Gates `items` by this destination's breaker, as of `now`.
    pub(crate) fn admit(&self, items: Vec<Item>, now: Instant) -> Gate {
        let permit = self.permit(now);
        let turn =
            if matches!(permit, Permit::Probe) { self.probes.fetch_add(1, Ordering::Relaxed) } else { 0 };
        gate(permit, items, turn, self.d.breaker.cooldown)
    }

    /// Feeds one publish's outcomes to the breaker: any answer from the broker (delivered or
    /// refused) closes it; only "unavailable" from every message counts against it.
    pub(crate) fn observe(&self, outcomes: &[Outcome]) {
        let any_answer =
            outcomes.iter().any(|o| !matches!(o, Outcome::Failed { kind: FailureKind::Unavailable, .. }));
        if let Ok(mut b) = self.breaker.lock() {
            if any_answer {
                b.on_success();
            } else if b.on_unavailable(Instant::now()) {
                tracing::warn!(destination = %self.d.name, "Destination unavailable; circuit opened, probing with one message");
            }
        }
    }

    /// The envelope of `m` for its `attempt`-th publish here (with an ACK token when the
    /// destination wants ACKs).
    fn envelope(&self, m: &OutboxMessage, attempt: u32) -> Envelope {
        let mut e = Envelope::new(m, attempt);
        if let Some(ack) = &self.d.ack {
            let expires = unix_now() + i64::try_from(ack.token_ttl.as_secs()).unwrap_or(i64::MAX / 2);
            let token = outbox_core::ack::sign(&ack.secret, &ack.store, e.id, &self.d.name, expires);
            e.headers.insert(outbox_core::header::ACK_TOKEN.into(), token);
            e.headers.insert(outbox_core::header::ACK_DESTINATION.into(), self.d.name.clone());
            e.headers.insert(outbox_core::header::ACK_STORE.into(), ack.store.clone());
        }
        e
    }

    /// Publishes `items` of `batch` here in one call bounded by `timeout`: one outcome per
    /// item, in order. No answer in time counts as the destination being unavailable.
    pub(crate) async fn publish(
        &self,
        batch: &[OutboxMessage],
        items: &[Item],
        timeout: Duration,
    ) -> Vec<Outcome> {
        let envelopes: Vec<Envelope> = items
            .iter()
            .map(|(mi, _, attempts)| self.envelope(&batch[*mi], u32::try_from(*attempts).unwrap_or(0) + 1))
            .collect();
        // One span per message, open for the destination's publish call.
        let spans: Vec<tracing::Span> = if crate::trace::enabled() {
            items
                .iter()
                .zip(&envelopes)
                .map(|((mi, _, _), e)| crate::trace::publish(&batch[*mi], &self.d.name, e.attempt))
                .collect()
        } else {
            Vec::new()
        };
        let outcomes = self.publish_envelopes(&envelopes, timeout).await;
        for (span, o) in spans.iter().zip(&outcomes) {
            crate::trace::outcome(span, o);
        }
        outcomes
    }

    /// One publish call bounded by `timeout`: one outcome per envelope, in order.
    async fn publish_envelopes(&self, envelopes: &[Envelope], timeout: Duration) -> Vec<Outcome> {
        match tokio::time::timeout(timeout, self.d.transport.publish(envelopes)).await {
            Ok(mut outcomes) => {
                if outcomes.len() != envelopes.len() {
                    tracing::error!(
                        destination = %self.d.name,
                        expected = envelopes.len(),
                        got = outcomes.len(),
                        "Transport returned the wrong number of outcomes"
                    );
                    outcomes.resize(
                        envelopes.len(),
                        Outcome::retryable("transport returned no outcome for this message"),
                    );
                }
                outcomes
            }
            Err(_) => {
                vec![Outcome::unavailable(format!("publish timed out after {timeout:?}")); envelopes.len()]
            }
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<Item> {
        (0..n).map(|i| (i, 0, 0)).collect()
    }

    #[test]
    fn a_closed_circuit_lets_everything_through() {
        assert_eq!(
            gate(Permit::All, items(3), 5, Duration::from_secs(1)),
            Gate { go: items(3), defer: Vec::new(), wait: Duration::ZERO }
        );
    }

    #[test]
    fn an_open_circuit_defers_everything_for_what_is_left_of_it() {
        let w = Duration::from_millis(700);
        let g = gate(Permit::Wait(w), items(3), 0, Duration::from_secs(1));
        assert!(g.go.is_empty());
        assert_eq!((g.defer, g.wait), (items(3), w));
    }

    #[test]
    fn a_half_open_circuit_probes_with_one_message_in_turn() {
        let cooldown = Duration::from_secs(2);
        let probes: Vec<usize> =
            (0..6).map(|turn| gate(Permit::Probe, items(3), turn, cooldown).go[0].0).collect();
        assert_eq!(probes, [0, 1, 2, 0, 1, 2], "the probe rotates over the waiting messages");
        let g = gate(Permit::Probe, items(3), 1, cooldown);
        assert_eq!((g.go.len(), g.defer.len(), g.wait), (1, 2, cooldown));
        assert!(!g.defer.contains(&g.go[0]));
        assert!(gate(Permit::Probe, Vec::new(), 3, cooldown).go.is_empty());
    }
}
