//! Turns what happened to a message at each of its destinations into the rows to write. Pure:
//! no IO, no clock, randomness passed in.

use std::time::Duration;

use outbox_core::{FailureKind, MessageId, OutboxMessage, RetryPolicy, Status};
use outbox_store::{DeliveryWrite, MessageWrite};

/// What happened to one (message, destination) pair in this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TargetResult {
    /// Delivered in an earlier round.
    AlreadyDone,
    /// Failed for good in an earlier round.
    AlreadyFailed { attempts: i32, error: Option<String> },
    /// Retrying later; not due yet. Unchanged.
    Waiting { attempts: i32, wait: Duration },
    /// Delivered now.
    Delivered { attempts: i32 },
    /// Failed now.
    Failed { attempts: i32, kind: FailureKind, reason: String, retry_after: Option<Duration> },
    /// Not attempted: the destination's circuit is open. Attempts untouched.
    Deferred { attempts: i32, wait: Duration },
}

/// One target: destination name, its retry policy, and the result.
#[derive(Debug)]
pub(crate) struct Target<'a> {
    pub(crate) destination: &'a str,
    pub(crate) policy: &'a RetryPolicy,
    pub(crate) result: TargetResult,
    /// The destination requires the consumer's ACK within this long.
    pub(crate) ack: Option<Duration>,
}

/// The rows to write for one message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Every destination done: the message becomes `sent`.
    pub(crate) sent: bool,
    /// Otherwise the message's new state.
    pub(crate) message: Option<MessageWrite>,
    /// Per-destination rows (fan-out only).
    pub(crate) deliveries: Vec<DeliveryWrite>,
    /// Set when the message became `failed`: the reason, for the alert hook.
    pub(crate) failed: Option<String>,
}

/// A message with no destination for its topic fails at once with this reason.
pub(crate) fn no_route(msg: &OutboxMessage) -> Plan {
    let reason = format!(
        "no route for topic {:?}: add a route in the relay configuration, then `outbox retry {}`",
        outbox_core::text::printable(&msg.topic, 64),
        msg.id
    );
    Plan {
        sent: false,
        message: Some(MessageWrite {
            id: msg.id,
            status: Status::Failed,
            attempts: msg.attempts.saturating_add(1),
            retry_in: Duration::ZERO,
            last_error: Some(reason.clone()),
            attempted: false,
        }),
        deliveries: Vec::new(),
        failed: Some(reason),
    }
}

/// The longest delay before an unrouted message is due again ([`unrouted_wait`]).
const MAX_UNROUTED_WAIT: Duration = Duration::from_secs(5);

/// A message whose topic no route of this relay matches, within the grace another relay may
/// route it in (a rolling deploy): back to `pending` without spending an attempt, due again
/// after a delay that grows with its age (1 s to 5 s, never past the end of the grace). The
/// delay applies to every relay: kept short, a relay that routes the message (the new version
/// in a rolling deploy) gets it soon even when this one keeps taking it first, and each key's
/// next head is not held back long.
pub(crate) fn unrouted_wait(msg: &OutboxMessage, owner: &str, age: Duration, grace: Duration) -> Plan {
    let left = grace.saturating_sub(age);
    let wait =
        (age / 4).clamp(Duration::from_secs(1), MAX_UNROUTED_WAIT).min(left.max(Duration::from_millis(100)));
    let reason = format!(
        "no route for topic {:?} on relay {owner:?}; waiting up to {}s more for a relay that routes it",
        outbox_core::text::printable(&msg.topic, 64),
        left.as_secs()
    );
    Plan {
        sent: false,
        message: Some(MessageWrite {
            id: msg.id,
            status: Status::Pending,
            attempts: msg.attempts,
            retry_in: wait,
            last_error: Some(reason),
            attempted: false,
        }),
        deliveries: Vec::new(),
        failed: None,
    }
}

struct NewState {
    status: Status,
    attempts: i32,
    retry_in: Duration,
    error: Option<String>,
    attempted: bool,
    changed: bool,
}

/// Plans the writes for `msg` from its targets. `fan_out` says whether per-destination rows are
/// kept (more than one destination, or rows already exist); `random` yields uniform `[0, 1)`.
pub(crate) fn plan(
    msg: &OutboxMessage,
    targets: &[Target<'_>],
    fan_out: bool,
    mut random: impl FnMut() -> f64,
) -> Plan {
    let per_message_max = msg.max_attempts.and_then(|m| u32::try_from(m).ok());
    let states: Vec<NewState> = targets
        .iter()
        .map(|t| match &t.result {
            TargetResult::AlreadyDone => NewState {
                status: Status::Sent,
                attempts: 0,
                retry_in: Duration::ZERO,
                error: None,
                attempted: false,
                changed: false,
            },
            TargetResult::AlreadyFailed { attempts, error } => NewState {
                status: Status::Failed,
                attempts: *attempts,
                retry_in: Duration::ZERO,
                error: error.clone(),
                attempted: false,
                changed: false,
            },
            TargetResult::Waiting { attempts, wait } => NewState {
                status: Status::Pending,
                attempts: *attempts,
                retry_in: *wait,
                error: None,
                attempted: false,
                changed: false,
            },
            TargetResult::Delivered { attempts } => NewState {
                status: Status::Sent,
                attempts: *attempts,
                retry_in: Duration::ZERO,
                error: None,
                attempted: true,
                changed: true,
            },
            TargetResult::Deferred { attempts, wait } => NewState {
                status: Status::Pending,
                attempts: *attempts,
                retry_in: *wait,
                error: None,
                attempted: false,
                changed: true,
            },
            TargetResult::Failed { attempts, kind, reason, retry_after } => {
                let error = Some(format!("[{}] {}", t.destination, reason));
                match kind {
                    FailureKind::Permanent => NewState {
                        status: Status::Failed,
                        attempts: attempts.saturating_add(1),
                        retry_in: Duration::ZERO,
                        error,
                        attempted: true,
                        changed: true,
                    },
                    FailureKind::Retryable => {
                        let failures = attempts.saturating_add(1);
                        let n = u32::try_from(failures).unwrap_or(u32::MAX);
                        if t.policy.exhausted(n, per_message_max) {
                            NewState {
                                status: Status::Failed,
                                attempts: failures,
                                retry_in: Duration::ZERO,
                                error: error.map(|e| format!("{e} (gave up after {failures} attempts)")),
                                attempted: true,
                                changed: true,
                            }
                        } else {
                            let backoff = t.policy.delay(n, random());
                            NewState {
                                status: Status::Pending,
                                attempts: failures,
                                retry_in: backoff.max(retry_after.unwrap_or_default()),
                                error,
                                attempted: true,
                                changed: true,
                            }
                        }
                    }
                    // The destination is down: not the message's fault, no attempt consumed.
                    FailureKind::Unavailable => NewState {
                        status: Status::Pending,
                        attempts: *attempts,
                        retry_in: retry_after.unwrap_or_else(|| t.policy.delay(1, random())),
                        error,
                        attempted: true,
                        changed: true,
                    },
                }
            }
        })
        .collect();

    let attempts = states.iter().map(|s| s.attempts).max().unwrap_or(0).max(msg.attempts);
    let attempted = states.iter().any(|s| s.attempted);
    let first_error = states.iter().find_map(|s| if s.changed { s.error.clone() } else { None });
    let deliveries: Vec<DeliveryWrite> = if fan_out {
        targets
            .iter()
            .zip(&states)
            .filter(|(_, s)| s.changed)
            .map(|(t, s)| DeliveryWrite {
                message_id: msg.id,
                destination: t.destination.to_owned(),
                status: s.status,
                attempts: s.attempts,
                retry_in: s.retry_in,
                last_error: s.error.clone(),
                attempted: s.attempted,
                ack_timeout: match t.result {
                    TargetResult::Delivered { .. } => t.ack,
                    _ => None,
                },
            })
            .collect()
    } else {
        Vec::new()
    };

    if states.iter().all(|s| s.status == Status::Sent) {
        return Plan { sent: true, message: None, deliveries, failed: None };
    }
    if let Some(retry_in) = states.iter().filter(|s| s.status == Status::Pending).map(|s| s.retry_in).min() {
        return Plan {
            sent: false,
            message: Some(MessageWrite {
                id: msg.id,
                status: Status::Pending,
                attempts,
                retry_in,
                last_error: first_error,
                attempted,
            }),
            deliveries,
            failed: None,
        };
    }
    // Nothing pending, not all sent: at least one destination failed for good.
    let reason = first_error
        .or_else(|| {
            states.iter().find_map(|s| if s.status == Status::Failed { s.error.clone() } else { None })
        })
        .unwrap_or_else(|| "failed".to_owned());
    Plan {
        sent: false,
        message: Some(MessageWrite {
            id: msg.id,
            status: Status::Failed,
            attempts,
            retry_in: Duration::ZERO,
            last_error: Some(reason.clone()),
            attempted,
        }),
        deliveries,
        failed: Some(reason),
    }
}

/// Ids helper for logs.
pub(crate) fn ids(msgs: &[OutboxMessage]) -> Vec<MessageId> {
    msgs.iter().map(|m| m.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(attempts: i32, max: Option<i32>) -> OutboxMessage {
        crate::fixtures::message(attempts, max)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy { max_attempts: 3, jitter: 0.0, ..RetryPolicy::default() }
    }

    /// The plan for `msg` whose destinations `a`, `b`, `c` (each with [`policy`]) answered
    /// `results`, in that order; per-destination rows are kept when there is more than one.
    fn plan_of<const N: usize>(msg: &OutboxMessage, results: [TargetResult; N]) -> Plan {
        let p = policy();
        let targets: Vec<Target<'_>> = ["a", "b", "c"]
            .into_iter()
            .zip(results)
            .map(|(destination, result)| Target { destination, policy: &p, ack: None, result })
            .collect();
        assert_eq!(targets.len(), N, "at most three destinations");
        plan(msg, &targets, N > 1, || 0.5)
    }

    fn failed(attempts: i32, kind: FailureKind) -> TargetResult {
        TargetResult::Failed { attempts, kind, reason: "boom".into(), retry_after: None }
    }

    #[test]
    fn delivered_everywhere_is_sent_with_no_extra_rows() {
        let plan = plan_of(&msg(0, None), [TargetResult::Delivered { attempts: 0 }]);
        assert!(plan.sent && plan.message.is_none() && plan.deliveries.is_empty());
    }

    #[test]
    fn retryable_backs_off_then_fails_when_exhausted() {
        let plan1 = plan_of(&msg(1, None), [failed(1, FailureKind::Retryable)]);
        let m = plan1.message.unwrap();
        assert_eq!((m.status, m.attempts, m.retry_in), (Status::Pending, 2, Duration::from_secs(2)));
        assert_eq!(m.last_error.as_deref(), Some("[a] boom"));

        let plan2 = plan_of(&msg(2, None), [failed(2, FailureKind::Retryable)]);
        let m = plan2.message.unwrap();
        assert_eq!((m.status, m.attempts), (Status::Failed, 3));
        assert!(plan2.failed.unwrap().contains("gave up after 3 attempts"));
    }

    #[test]
    fn per_message_max_attempts_overrides_the_policy() {
        let m = plan_of(&msg(0, Some(1)), [failed(0, FailureKind::Retryable)]).message.unwrap();
        assert_eq!(m.status, Status::Failed);
    }

    #[test]
    fn permanent_fails_at_once_and_unavailable_costs_no_attempt() {
        let pl = plan_of(&msg(0, None), [failed(0, FailureKind::Permanent)]);
        assert_eq!(pl.message.unwrap().status, Status::Failed);
        assert!(pl.failed.is_some());

        let m = plan_of(&msg(2, None), [failed(2, FailureKind::Unavailable)]).message.unwrap();
        assert_eq!((m.status, m.attempts), (Status::Pending, 2), "still pending, attempts untouched");
    }

    #[test]
    fn retry_after_is_honoured() {
        let result = TargetResult::Failed {
            attempts: 0,
            kind: FailureKind::Retryable,
            reason: "429".into(),
            retry_after: Some(Duration::from_secs(30)),
        };
        assert_eq!(plan_of(&msg(0, None), [result]).message.unwrap().retry_in, Duration::from_secs(30));
    }

    #[test]
    fn fan_out_keeps_each_destination_and_the_failing_one_does_not_undo_the_others() {
        let pl = plan_of(
            &msg(0, None),
            [
                TargetResult::Delivered { attempts: 0 },
                failed(0, FailureKind::Retryable),
                TargetResult::AlreadyDone,
            ],
        );
        assert!(!pl.sent);
        let m = pl.message.unwrap();
        assert_eq!((m.status, m.attempts), (Status::Pending, 1));
        assert_eq!(pl.deliveries.len(), 2, "only changed destinations are written");
        assert_eq!(pl.deliveries[0].status, Status::Sent);
        assert_eq!(pl.deliveries[1].status, Status::Pending);

        // Next round: b delivers, a and c are done: the message is sent.
        let pl = plan_of(
            &msg(1, None),
            [TargetResult::AlreadyDone, TargetResult::Delivered { attempts: 1 }, TargetResult::AlreadyDone],
        );
        assert!(pl.sent);
    }

    #[test]
    fn fan_out_with_one_failed_for_good_ends_failed_once_the_others_are_done() {
        let pl = plan_of(
            &msg(0, None),
            [TargetResult::Delivered { attempts: 0 }, failed(0, FailureKind::Permanent)],
        );
        assert_eq!(pl.message.unwrap().status, Status::Failed);
        assert!(pl.failed.unwrap().starts_with("[b]"));
    }

    #[test]
    fn waiting_destination_sets_the_next_due_time() {
        let m = plan_of(
            &msg(1, None),
            [
                TargetResult::Delivered { attempts: 0 },
                TargetResult::Waiting { attempts: 1, wait: Duration::from_secs(5) },
            ],
        )
        .message
        .unwrap();
        assert_eq!((m.status, m.retry_in), (Status::Pending, Duration::from_secs(5)));
    }

    #[test]
    fn no_route_fails_with_the_reason() {
        let pl = no_route(&msg(0, None));
        assert!(pl.failed.unwrap().contains("no route for topic \"t\""));
    }
}
