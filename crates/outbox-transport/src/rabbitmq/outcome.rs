//! How RabbitMQ's answers and the client's errors map to [`Outcome`]s.
//!
//! | what happened | outcome |
//! | --- | --- |
//! | publisher confirm `basic.ack`, message not returned | `Delivered` |
//! | `basic.return` (mandatory, no queue bound), then ack | `Permanent`: no queue bound for the routing key |
//! | `basic.nack` (the broker could not take it, e.g. an internal error in a queue) | `Retryable` |
//! | payload over `max_payload_bytes`, routing key or header name over 255 bytes | `Permanent`, before publishing |
//! | connection refused / lost, heartbeat missed, channel or connection closed, broker connection-level (hard) AMQP errors such as 320 connection-forced or 541 internal-error | `Unavailable` |
//! | channel closed with 404 NOT_FOUND (exchange missing) or 403 ACCESS_REFUSED | `Unavailable`: the whole destination is misconfigured, so the breaker holds messages back instead of failing each one |
//! | channel closed with 311 CONTENT_TOO_LARGE | `Permanent` |
//! | channel closed with 406 PRECONDITION_FAILED or another soft error (the broker does not say which message caused it) | `Retryable` |
//! | any other client error | `Retryable` |

use lapin::protocol::AMQPError;
use outbox_core::Outcome;

/// AMQP reply codes (AMQP 0-9-1 spec, section 1.9 "Constants").
pub(crate) mod code {
    /// 311 content-too-large.
    pub(crate) const CONTENT_TOO_LARGE: u16 = 311;
    /// 312 no-route (a mandatory message that no queue is bound for).
    pub(crate) const NO_ROUTE: u16 = 312;
    /// 403 access-refused.
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    /// 404 not-found.
    pub(crate) const NOT_FOUND: u16 = 404;
}

/// The outcome of a message the broker returned (`basic.return`): with `mandatory` set this
/// means no queue is bound for its routing key, which retrying will not change.
pub(crate) fn returned(exchange: &str, routing_key: &str, reply_code: u16, reply_text: &str) -> Outcome {
    let ex = if exchange.is_empty() { "(default)" } else { exchange };
    if reply_code == code::NO_ROUTE {
        Outcome::permanent(format!(
            "no queue bound for routing key {routing_key:?} on exchange {ex:?} (the broker returned the message: {reply_code} {reply_text})"
        ))
    } else {
        Outcome::permanent(format!(
            "the broker returned the message published with routing key {routing_key:?} on exchange {ex:?}: {reply_code} {reply_text}"
        ))
    }
}

/// The outcome of a `basic.nack`: the broker did not take responsibility for the message.
pub(crate) fn nacked() -> Outcome {
    Outcome::retryable("the broker nacked the message (it could not be made durable)")
}

/// The outcome when the confirm channel gave no answer type we asked for.
pub(crate) fn not_confirmed() -> Outcome {
    Outcome::retryable(
        "the broker did not confirm the message (publisher confirms are not active on the channel)",
    )
}

/// The outcome when the connection or channel could not be (re)opened.
pub(crate) fn cannot_connect(address: &str, reason: &str) -> Outcome {
    Outcome::unavailable(format!("cannot connect to RabbitMQ at {address}: {reason}"))
}

/// Classifies a client error met while publishing or waiting for a confirm.
pub(crate) fn from_error(err: &lapin::Error) -> Outcome {
    use lapin::Error as E;
    match err {
        E::IOError(e) => Outcome::unavailable(format!("connection to RabbitMQ lost: {e}")),
        E::MissingHeartbeatError => Outcome::unavailable("connection to RabbitMQ lost: missed heartbeats"),
        E::InvalidConnectionState(s) => Outcome::unavailable(format!("RabbitMQ connection is {s:?}")),
        E::InvalidChannelState(s) => Outcome::unavailable(format!("RabbitMQ channel is {s:?}")),
        E::InvalidChannel(_) | E::ChannelsLimitReached => {
            Outcome::unavailable(format!("RabbitMQ channel unusable: {err}"))
        }
        E::ProtocolError(e) => from_amqp(e),
        other => Outcome::retryable(format!("RabbitMQ client error: {other}")),
    }
}

fn from_amqp(e: &AMQPError) -> Outcome {
    use lapin::protocol::AMQPErrorKind;
    let id = e.get_id();
    let text = e.get_message().as_str();
    match e.kind() {
        // Connection-level errors: the connection is gone, the broker is down or going down.
        AMQPErrorKind::Hard(_) => {
            Outcome::unavailable(format!("RabbitMQ closed the connection: {id} {text}"))
        }
        AMQPErrorKind::Soft(_) => match id {
            code::CONTENT_TOO_LARGE => {
                Outcome::permanent(format!("RabbitMQ refused the message: {id} {text}"))
            }
            code::NO_ROUTE => Outcome::permanent(format!("no queue bound for the routing key: {id} {text}")),
            code::NOT_FOUND | code::ACCESS_REFUSED => Outcome::unavailable(format!(
                "RabbitMQ closed the channel: {id} {text} (fix the destination's exchange or permissions)"
            )),
            _ => Outcome::retryable(format!("RabbitMQ closed the channel: {id} {text}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::Arc;

    use outbox_core::FailureKind;

    use super::*;

    fn kind(o: &Outcome) -> FailureKind {
        match o {
            Outcome::Failed { kind, .. } => *kind,
            Outcome::Delivered => panic!("not a failure"),
        }
    }

    fn reason(o: &Outcome) -> &str {
        match o {
            Outcome::Failed { reason, .. } => reason,
            Outcome::Delivered => panic!("not a failure"),
        }
    }

    fn amqp(id: u16, text: &str) -> lapin::Error {
        lapin::Error::ProtocolError(AMQPError::from_id(id, text.to_owned().into()).unwrap())
    }

    #[test]
    fn lost_connections_are_unavailable() {
        let refused = lapin::Error::IOError(Arc::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(kind(&from_error(&refused)), FailureKind::Unavailable);
        let reset = lapin::Error::IOError(Arc::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert_eq!(kind(&from_error(&reset)), FailureKind::Unavailable);
        assert_eq!(kind(&from_error(&lapin::Error::MissingHeartbeatError)), FailureKind::Unavailable);
        assert_eq!(
            kind(&from_error(&lapin::Error::InvalidChannelState(lapin::ChannelState::Closed))),
            FailureKind::Unavailable
        );
        assert_eq!(
            kind(&from_error(&lapin::Error::InvalidConnectionState(lapin::ConnectionState::Error))),
            FailureKind::Unavailable
        );
        assert_eq!(kind(&from_error(&amqp(320, "CONNECTION_FORCED - shutdown"))), FailureKind::Unavailable);
        assert_eq!(kind(&from_error(&amqp(541, "INTERNAL_ERROR"))), FailureKind::Unavailable);
    }

    #[test]
    fn channel_errors_by_reply_code() {
        let missing = from_error(&amqp(404, "NOT_FOUND - no exchange 'x' in vhost '/'"));
        assert_eq!(kind(&missing), FailureKind::Unavailable);
        assert!(reason(&missing).contains("no exchange 'x'"));
        assert_eq!(kind(&from_error(&amqp(403, "ACCESS_REFUSED"))), FailureKind::Unavailable);
        assert_eq!(kind(&from_error(&amqp(311, "CONTENT_TOO_LARGE"))), FailureKind::Permanent);
        assert_eq!(kind(&from_error(&amqp(312, "NO_ROUTE"))), FailureKind::Permanent);
        assert_eq!(
            kind(&from_error(&amqp(
                406,
                "PRECONDITION_FAILED - message size 2 is larger than configured max size 1"
            ))),
            FailureKind::Retryable
        );
    }

    #[test]
    fn returns_nacks_and_missing_confirms() {
        let r = returned("events", "order.paid", 312, "NO_ROUTE");
        assert_eq!(kind(&r), FailureKind::Permanent);
        assert!(reason(&r).starts_with("no queue bound for routing key \"order.paid\""), "{}", reason(&r));
        assert!(reason(&returned("", "q", 312, "NO_ROUTE")).contains("(default)"));
        assert_eq!(kind(&returned("e", "k", 313, "NO_CONSUMERS")), FailureKind::Permanent);
        assert_eq!(kind(&nacked()), FailureKind::Retryable);
        assert_eq!(kind(&not_confirmed()), FailureKind::Retryable);
        assert_eq!(kind(&cannot_connect("amqp://u:***@h", "refused")), FailureKind::Unavailable);
    }
}
