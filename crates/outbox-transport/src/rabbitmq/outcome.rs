//! How RabbitMQ's answers and the client's errors map to [`Outcome`]s.
//!
//! | what happened | outcome |
//! | --- | --- |
//! | publisher confirm `basic.ack`, message not returned | `Delivered` |
//! | `basic.return` (mandatory, no queue bound), then ack | `Permanent`: no queue bound for the routing key |
//! | `basic.nack` (the broker could not take it, e.g. an internal error in a queue) | `Retryable` |
//! | payload over `max_payload_bytes` | `Permanent`, before publishing |
//! | connection refused / lost, heartbeat missed, channel or connection closed, broker connection-level (hard) AMQP errors such as 320 connection-forced or 541 internal-error | `Unavailable` |
//! | channel closed with 404 NOT_FOUND (exchange missing) or 403 ACCESS_REFUSED | `Unavailable`: the whole destination is misconfigured, so the breaker holds messages back instead of failing each one |
//! | routing key, header name or tag over 255 bytes, a header named `CC` or `BCC`, a content header frame over the connection's `frame_max` | `Permanent`, before publishing (RabbitMQ would close the channel, or the whole connection) |
//! | channel closed with 406 PRECONDITION_FAILED or 311 CONTENT_TOO_LARGE while several messages were in flight | each is published again alone; the one that still makes the broker close the channel is `Permanent` ("refused when published alone"), the others get their own answer |
//! | channel closed with another soft error (the broker does not say which message caused it) | `Retryable` |
//! | any other client error | `Retryable` |

use lapin::protocol::AMQPError;
use outbox_core::Outcome;

/// AMQP reply codes (AMQP 0-9-1 spec, section 1.9 "Constants").
pub(crate) mod code {
    /// 311 content-too-large.
    pub(crate) const CONTENT_TOO_LARGE: u16 = 311;
    /// 312 no-route (a mandatory message that no queue is bound for).
    pub(crate) const NO_ROUTE: u16 = 312;
    /// 406 precondition-failed (e.g. `invalid message`, `message size ... larger than
    /// configured max size`).
    pub(crate) const PRECONDITION_FAILED: u16 = 406;
    /// 403 access-refused.
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    /// 404 not-found.
    pub(crate) const NOT_FOUND: u16 = 404;
}

/// The outcome of a message the broker returned (`basic.return`): with `mandatory` set this
/// means no queue is bound for its routing key, which retrying will not change.
pub(crate) fn returned(exchange: &str, routing_key: &str, reply_code: u16, reply_text: &str) -> Outcome {
    use crate::validate::quote;
    let ex = quote(if exchange.is_empty() { "(default)" } else { exchange });
    let rk = quote(routing_key);
    if reply_code == code::NO_ROUTE {
        Outcome::permanent(format!(
            "no queue bound for routing key {rk} on exchange {ex} (the broker returned the message: {reply_code} {reply_text})"
        ))
    } else {
        Outcome::permanent(format!(
            "the broker returned the message published with routing key {rk} on exchange {ex}: {reply_code} {reply_text}"
        ))
    }
}

/// Whether `err` closed the channel for a reason that may be one message's content (406, 311):
/// RabbitMQ does not say which of the messages in flight it was.
pub(crate) fn may_be_the_message(err: &lapin::Error) -> bool {
    use lapin::protocol::AMQPErrorKind;
    matches!(err, lapin::Error::ProtocolError(e)
        if matches!(e.kind(), AMQPErrorKind::Soft(_))
            && matches!(e.get_id(), code::PRECONDITION_FAILED | code::CONTENT_TOO_LARGE))
}

/// Whether `err` only says the channel (or connection) was already closed: the publish failed
/// because of an earlier error, not its own.
pub(crate) fn channel_closed(err: &lapin::Error) -> bool {
    matches!(err, lapin::Error::InvalidChannelState(_) | lapin::Error::InvalidChannel(_))
}

/// The outcome of a message that made RabbitMQ close the channel when published alone: the
/// broker refuses its content, and publishing it again cannot help.
pub(crate) fn refused_alone(o: Outcome) -> Outcome {
    match o {
        Outcome::Failed { reason, .. } => {
            let reason = reason.trim_end_matches(" (caused by one of the messages in flight)");
            crate::validate::refuse(format!("RabbitMQ refused this message (published alone): {reason}"))
        }
        d @ Outcome::Delivered => d,
    }
}

/// The content header frame (properties and headers) exceeds the connection's `frame_max`:
/// AMQP cannot split it, and RabbitMQ would close the whole connection (`501 FRAME_ERROR`).
pub(crate) fn header_frame_too_large(size: usize, frame_max: usize) -> Outcome {
    crate::validate::refuse(format!(
        "the message's headers and properties take {size} bytes in one AMQP frame, more than the \
         connection's frame_max of {frame_max} bytes (RabbitMQ would close the connection); send \
         fewer or smaller headers"
    ))
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
    match outbox_core::tls::explain(reason) {
        Some(why) => {
            Outcome::unavailable(format!("cannot connect to RabbitMQ at {address}: {reason} ({why})"))
        }
        None => Outcome::unavailable(format!("cannot connect to RabbitMQ at {address}: {reason}")),
    }
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
            // Which message of those in flight? The transport publishes them again one by one
            // (`may_be_the_message`, `refused_alone`).
            code::CONTENT_TOO_LARGE | code::PRECONDITION_FAILED => Outcome::retryable(format!(
                "RabbitMQ closed the channel: {id} {text} (caused by one of the messages in flight)"
            )),
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
    use crate::common::testing::{kind, reason};

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
        assert_eq!(kind(&from_error(&amqp(312, "NO_ROUTE"))), FailureKind::Permanent);
        // 406 and 311 name no message: retryable for each in flight, until the transport has
        // published them again one by one.
        let too_large =
            amqp(406, "PRECONDITION_FAILED - message size 2 is larger than configured max size 1");
        assert_eq!(kind(&from_error(&too_large)), FailureKind::Retryable);
        assert!(may_be_the_message(&too_large));
        assert!(may_be_the_message(&amqp(311, "CONTENT_TOO_LARGE")));
        assert_eq!(kind(&from_error(&amqp(311, "CONTENT_TOO_LARGE"))), FailureKind::Retryable);
        assert!(!may_be_the_message(&amqp(404, "NOT_FOUND")));
        assert!(!may_be_the_message(&amqp(320, "CONNECTION_FORCED")));
        assert!(channel_closed(&lapin::Error::InvalidChannelState(lapin::ChannelState::Closed)));
        assert!(!channel_closed(&too_large));
        let alone = refused_alone(from_error(&too_large));
        assert_eq!(kind(&alone), FailureKind::Permanent);
        assert!(
            reason(&alone).starts_with(
                "RabbitMQ refused this message (published alone): RabbitMQ closed the channel: 406"
            ),
            "{}",
            reason(&alone)
        );
        assert!(!reason(&alone).contains("in flight"), "{}", reason(&alone));
        assert_eq!(kind(&header_frame_too_large(262_901, 131_072)), FailureKind::Permanent);
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
