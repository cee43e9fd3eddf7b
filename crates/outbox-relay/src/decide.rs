//! The decision before publishing: for one message at one destination, publish it now (and
//! with how many failed attempts behind it), or settle a result without publishing. Pure: no
//! IO, no clock. What happens after a publish is [`crate::settle`]'s part.

use outbox_core::{FailureKind, OutboxMessage, RetryPolicy, Status};
use outbox_store::DeliveryState;

use crate::settle::TargetResult;

/// What a destination's settings bring to the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    /// The destination's retry policy.
    pub(crate) retry: &'a RetryPolicy,
    /// The destination requires the consumer's ACK.
    pub(crate) ack: bool,
    /// The largest payload it takes, if bounded.
    pub(crate) payload_limit: Option<usize>,
}

/// Publish now, or settle a result without publishing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Publish; `attempts` failed attempts to this destination so far.
    Publish { attempts: i32 },
    /// Do not publish; settle this.
    Settle(TargetResult),
}

/// Decides for `m` at one destination. `rows`: the message keeps per-destination rows (it
/// fans out, or the destination wants ACKs), and `prior` is this destination's row if one was
/// written; otherwise the message row's attempts count.
pub(crate) fn decide(
    m: &OutboxMessage,
    rows: bool,
    prior: Option<&DeliveryState>,
    rules: Rules<'_>,
) -> Decision {
    let attempts = if rows {
        match prior {
            Some(r) if matches!(r.status, Status::Sent | Status::Acked) => {
                return Decision::Settle(TargetResult::AlreadyDone)
            }
            Some(r) if matches!(r.status, Status::Failed | Status::Cancelled) => {
                return Decision::Settle(TargetResult::AlreadyFailed {
                    attempts: r.attempts,
                    error: r.last_error.clone(),
                })
            }
            Some(r) if !r.wait.is_zero() => {
                return Decision::Settle(TargetResult::Waiting { attempts: r.attempts, wait: r.wait })
            }
            Some(r) => r.attempts,
            None => 0,
        }
    } else {
        m.attempts
    };
    let per_message_max = m.max_attempts.and_then(|n| u32::try_from(n).ok());
    // In ACK mode an attempt is a delivery that was not confirmed in time: once they are all
    // spent, the message fails here instead of being delivered once more.
    if rules.ack && rules.retry.exhausted(u32::try_from(attempts).unwrap_or(0), per_message_max) {
        return Decision::Settle(TargetResult::Failed {
            attempts: attempts.saturating_sub(1),
            kind: FailureKind::Permanent,
            reason: format!("no ACK from the consumer after {attempts} deliveries"),
            retry_after: None,
        });
    }
    if let Some(limit) = rules.payload_limit.filter(|l| m.payload.len() > *l) {
        return Decision::Settle(TargetResult::Failed {
            attempts,
            kind: FailureKind::Permanent,
            reason: format!(
                "payload is {} bytes, larger than the destination's limit of {limit} bytes",
                m.payload.len()
            ),
            retry_after: None,
        });
    }
    Decision::Publish { attempts }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use outbox_core::MessageId;

    use super::*;
    use crate::fixtures::message;

    fn row(status: Status, attempts: i32, wait: Duration) -> DeliveryState {
        DeliveryState {
            message_id: MessageId(7),
            destination: "d".into(),
            status,
            attempts,
            wait,
            last_error: Some("earlier".into()),
        }
    }

    /// The reason of a decision to fail the message for good with `attempts` attempts spent;
    /// any other decision panics.
    fn failed_for_good(decision: Decision, attempts: i32) -> String {
        match decision {
            Decision::Settle(TargetResult::Failed {
                attempts: spent,
                kind: FailureKind::Permanent,
                reason,
                ..
            }) if spent == attempts => reason,
            other => panic!("{other:?}"),
        }
    }

    fn rules(retry: &RetryPolicy) -> Rules<'_> {
        Rules { retry, ack: false, payload_limit: None }
    }

    #[test]
    fn a_single_destination_message_counts_its_own_attempts() {
        let p = RetryPolicy::default();
        assert_eq!(decide(&message(2, None), false, None, rules(&p)), Decision::Publish { attempts: 2 });
    }

    #[test]
    fn a_fan_out_target_follows_its_delivery_row() {
        let p = RetryPolicy::default();
        let m = message(5, None);
        let at = |r: Option<&DeliveryState>| decide(&m, true, r, rules(&p));
        assert_eq!(at(None), Decision::Publish { attempts: 0 }, "no row: never attempted");
        assert_eq!(at(Some(&row(Status::Pending, 1, Duration::ZERO))), Decision::Publish { attempts: 1 });
        for done in [Status::Sent, Status::Acked] {
            assert_eq!(at(Some(&row(done, 1, Duration::ZERO))), Decision::Settle(TargetResult::AlreadyDone));
        }
        for over in [Status::Failed, Status::Cancelled] {
            assert_eq!(
                at(Some(&row(over, 3, Duration::ZERO))),
                Decision::Settle(TargetResult::AlreadyFailed { attempts: 3, error: Some("earlier".into()) })
            );
        }
        let wait = Duration::from_secs(4);
        assert_eq!(
            at(Some(&row(Status::Pending, 2, wait))),
            Decision::Settle(TargetResult::Waiting { attempts: 2, wait })
        );
    }

    #[test]
    fn an_ack_destination_fails_a_message_whose_deliveries_are_spent() {
        let p = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
        let ack = Rules { ack: true, ..rules(&p) };
        let m = message(0, None);
        assert_eq!(
            decide(&m, true, Some(&row(Status::Pending, 2, Duration::ZERO)), ack),
            Decision::Publish { attempts: 2 }
        );
        let reason =
            failed_for_good(decide(&m, true, Some(&row(Status::Pending, 3, Duration::ZERO)), ack), 2);
        assert!(reason.contains("no ACK"), "{reason}");
        // The message's own max_attempts wins over the destination's.
        let own = message(0, Some(1));
        assert!(matches!(
            decide(&own, true, Some(&row(Status::Pending, 1, Duration::ZERO)), ack),
            Decision::Settle(TargetResult::Failed { .. })
        ));
    }

    #[test]
    fn a_payload_over_the_destination_limit_fails_without_a_publish() {
        let p = RetryPolicy::default();
        let m = message(1, None);
        let fits = Rules { payload_limit: Some(m.payload.len()), ..rules(&p) };
        assert_eq!(decide(&m, false, None, fits), Decision::Publish { attempts: 1 });
        let small = Rules { payload_limit: Some(m.payload.len() - 1), ..rules(&p) };
        let reason = failed_for_good(decide(&m, false, None, small), 1);
        assert!(reason.contains("larger than the destination's limit"), "{reason}");
    }
}
