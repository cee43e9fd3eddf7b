//! How the answers of `rocketmq-client-rust` map onto [`Outcome`]s (the table is in the module
//! documentation of [`crate::rocketmq`]).

use outbox_core::Outcome;
use rocketmq_client_rust::ClientError;
use rocketmq_error::ErrorClass;
use rocketmq_model::result::SendStatus;

use crate::validate::quote;

/// RocketMQ remoting response codes (`org.apache.rocketmq.remoting.protocol.ResponseCode`).
mod code {
    pub(super) const SYSTEM_ERROR: i32 = 1;
    pub(super) const SYSTEM_BUSY: i32 = 2;
    pub(super) const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub(super) const FLUSH_DISK_TIMEOUT: i32 = 10;
    pub(super) const SLAVE_NOT_AVAILABLE: i32 = 11;
    pub(super) const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    pub(super) const MESSAGE_ILLEGAL: i32 = 13;
    pub(super) const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub(super) const VERSION_NOT_SUPPORTED: i32 = 15;
    pub(super) const NO_PERMISSION: i32 = 16;
    pub(super) const TOPIC_NOT_EXIST: i32 = 17;
}

/// The outcome of a send answered with `status`.
pub(crate) fn status(status: SendStatus, topic: &str) -> Outcome {
    let topic = &quote(topic);
    match status {
        SendStatus::SendOk => Outcome::Delivered,
        // Stored on the master, but not flushed or replicated as the broker is configured to
        // guarantee: not confirmed durable, so it counts as a failed attempt and is sent again.
        other => Outcome::retryable(format!(
            "RocketMQ broker answered {other:?} for topic {topic} instead of SEND_OK (not confirmed durable)"
        )),
    }
}

/// The outcome of a send that failed with `e`.
pub(crate) fn error(e: &ClientError, topic: &str) -> Outcome {
    let topic = &quote(topic);
    let reason = format!("send to RocketMQ topic {topic} failed: {e}");
    if let Some(c) = e.broker_response_code() {
        return match c {
            code::MESSAGE_ILLEGAL => {
                Outcome::permanent(format!("{reason} (the broker refused the message as illegal)"))
            }
            code::TOPIC_NOT_EXIST => Outcome::permanent(format!(
                "{reason} (topic {topic} does not exist and the broker does not create it; create it, then \
                 `outbox retry` the message)"
            )),
            code::NO_PERMISSION | code::REQUEST_CODE_NOT_SUPPORTED | code::VERSION_NOT_SUPPORTED => {
                Outcome::permanent(reason)
            }
            code::SYSTEM_BUSY
            | code::SERVICE_NOT_AVAILABLE
            | code::FLUSH_DISK_TIMEOUT
            | code::SLAVE_NOT_AVAILABLE
            | code::FLUSH_SLAVE_TIMEOUT => Outcome::unavailable(reason),
            code::SYSTEM_ERROR => Outcome::retryable(reason),
            _ => Outcome::retryable(reason),
        };
    }
    if is_route_miss(e) {
        // The name server knows no broker that serves this topic (asked twice: see `send`).
        return Outcome::permanent(format!(
            "{reason} (no broker serves topic {topic} and auto-create is off; create the topic, then \
             `outbox retry` the message)"
        ));
    }
    let class = e.descriptor().class();
    if class == ErrorClass::VALIDATION {
        Outcome::permanent(reason)
    } else if [
        ErrorClass::TIMEOUT,
        ErrorClass::UNAVAILABLE,
        ErrorClass::IO,
        ErrorClass::ROUTING,
        ErrorClass::CAPACITY,
        ErrorClass::AUTHENTICATION,
        ErrorClass::AUTHORIZATION,
    ]
    .contains(&class)
    {
        Outcome::unavailable(reason)
    } else {
        Outcome::retryable(reason)
    }
}

/// A route miss for `topic` after this transport had delivered to it: the topic exists, so its
/// broker is down or restarting (the name server drops a dead broker's routes), and the message
/// waits for it like any other outage instead of failing for good.
pub(crate) fn route_lost(e: &ClientError, topic: &str) -> Outcome {
    Outcome::unavailable(format!(
        "send to RocketMQ topic {} failed: {e} (this relay delivered to the topic before, so its broker is \
         down or restarting)",
        quote(topic)
    ))
}

/// Whether `e` is the client's own "no route for this topic" (no broker answered): the name
/// server knows no route, or the client's route table entry was empty when it looked.
pub(crate) fn is_route_miss(e: &ClientError) -> bool {
    if e.broker_response_code().is_some() {
        return false;
    }
    if e.is(&rocketmq_error::ROUTE_TOPIC_NOT_FOUND) {
        return true;
    }
    // The selector path reports it as an invalid-argument error whose source holds the text.
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        if c.to_string().contains("No route info") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether the broker answered `TOPIC_NOT_EXIST`.
pub(crate) fn is_topic_missing(e: &ClientError) -> bool {
    e.broker_response_code() == Some(code::TOPIC_NOT_EXIST)
}

/// No answer within the transport's timeout.
pub(crate) fn deadline(timeout: std::time::Duration, topic: &str) -> Outcome {
    Outcome::unavailable(format!("no answer from RocketMQ for topic {} within {timeout:?}", quote(topic)))
}

/// The body is over the configured limit.
pub(crate) fn oversized(size: usize, limit: usize) -> Outcome {
    Outcome::permanent(format!(
        "message body is {size} bytes, larger than the RocketMQ transport's max_message_bytes of {limit} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::kind;
    use outbox_core::FailureKind;

    #[test]
    fn route_misses_are_told_from_other_errors() {
        let selector = ClientError::from(rocketmq_client_rust::MQClientException::new(
            "No route info for this topic, OutboxOrders",
        ));
        assert!(is_route_miss(&selector));
        assert!(is_route_miss(&ClientError::route_not_found("OutboxOrders")));
        assert_eq!(kind(&error(&selector, "OutboxOrders")), FailureKind::Permanent);
        let other = ClientError::from(rocketmq_client_rust::MQClientException::new("message body is empty"));
        assert!(!is_route_miss(&other));
        let missing = ClientError::broker_operation_failed("send", code::TOPIC_NOT_EXIST, "x");
        assert!(!is_route_miss(&missing));
        assert!(is_topic_missing(&missing));
        assert!(!is_topic_missing(&selector));
        assert!(!is_topic_missing(&ClientError::broker_operation_failed("send", code::NO_PERMISSION, "x")));
        assert_eq!(kind(&route_lost(&selector, "OutboxOrders")), FailureKind::Unavailable);
    }

    #[test]
    fn statuses() {
        assert_eq!(status(SendStatus::SendOk, "T"), Outcome::Delivered);
        assert_eq!(kind(&status(SendStatus::FlushDiskTimeout, "T")), FailureKind::Retryable);
        assert_eq!(kind(&status(SendStatus::SlaveNotAvailable, "T")), FailureKind::Retryable);
    }

    #[test]
    fn errors() {
        for (expected, codes) in [
            (
                FailureKind::Permanent,
                &[code::MESSAGE_ILLEGAL, code::TOPIC_NOT_EXIST, code::NO_PERMISSION][..],
            ),
            (FailureKind::Unavailable, &[code::SYSTEM_BUSY, code::SERVICE_NOT_AVAILABLE]),
            (FailureKind::Retryable, &[code::SYSTEM_ERROR]),
        ] {
            for &c in codes {
                let e = ClientError::broker_operation_failed("send", c, "x");
                assert_eq!(kind(&error(&e, "T")), expected, "broker code {c}");
            }
        }
        assert_eq!(kind(&error(&ClientError::route_not_found("T"), "T")), FailureKind::Permanent);
        assert_eq!(kind(&error(&ClientError::timeout("send", 10), "T")), FailureKind::Unavailable);
        assert_eq!(kind(&error(&ClientError::illegal_argument("bad"), "T")), FailureKind::Permanent);
        assert_eq!(kind(&oversized(10, 5)), FailureKind::Permanent);
        assert_eq!(kind(&deadline(std::time::Duration::from_secs(1), "T")), FailureKind::Unavailable);
    }
}
