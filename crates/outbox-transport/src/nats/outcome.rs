//! How the answers of async-nats map onto [`Outcome`]s (the table, and why "no stream" is
//! `Unavailable`, are in the module documentation of [`crate::nats`]).

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::ErrorCode;
use outbox_core::Outcome;

use crate::validate::{quote, refuse};

/// The outcome of a failed JetStream publish to `subject`.
pub(crate) fn publish_error(err: &PublishError, subject: &str) -> Outcome {
    let subject = &quote(subject);
    match err.kind() {
        PublishErrorKind::StreamNotFound => Outcome::unavailable(format!(
            "no JetStream stream captures subject {subject} (503 no responders); create a stream \
             for it or fix the subject mapping: the messages stay pending until then"
        )),
        PublishErrorKind::TimedOut => {
            Outcome::unavailable(format!("NATS did not acknowledge the publish to {subject} in time"))
        }
        PublishErrorKind::BrokenPipe => Outcome::unavailable(format!(
            "the NATS connection was lost before the publish to {subject} was acknowledged"
        )),
        PublishErrorKind::MaxAckPending => {
            Outcome::unavailable("too many publishes awaiting acknowledgement in the NATS client")
        }
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            Outcome::permanent(format!("JetStream rejected the publish to {subject}: {err}"))
        }
        PublishErrorKind::Other => other(err, subject),
    }
}

/// Words of a client or server error that is about the message itself, not the connection.
const ABOUT_THE_MESSAGE: [&str; 6] =
    ["invalid subject", "invalid header", "header name", "header value", "too large", "maximum payload"];

fn other(err: &PublishError, subject: &str) -> Outcome {
    let js = std::error::Error::source(err).and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>());
    let Some(js) = js else {
        // Not an answer from the server: the request could not be handed to the connection
        // (client closed), the client refused the message, or the ack could not be parsed.
        let text = err.to_string();
        let lower = text.to_ascii_lowercase();
        if ABOUT_THE_MESSAGE.iter().any(|w| lower.contains(w)) {
            return refuse(format!("NATS refused the publish to {subject}: {text}"));
        }
        return if text.contains("send") || text.contains("closed") || text.contains("channel") {
            Outcome::unavailable(format!("cannot publish to {subject}: {err}"))
        } else {
            Outcome::retryable(format!("publish to {subject} failed: {err}"))
        };
    };
    let reason = format!("JetStream rejected the publish to {subject}: {js}");
    match js.error_code() {
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM => Outcome::permanent(reason),
        ErrorCode::CLUSTER_NOT_AVAILABLE | ErrorCode::CLUSTER_NOT_LEADER | ErrorCode::STREAM_NOT_FOUND => {
            Outcome::unavailable(reason)
        }
        ErrorCode::STREAM_STORE_FAILED
        | ErrorCode::ACCOUNT_RESOURCES_EXCEEDED
        | ErrorCode::STORAGE_RESOURCES_EXCEEDED
        | ErrorCode::MEMORY_RESOURCES_EXCEEDED
        | ErrorCode::INSUFFICIENT_RESOURCES => Outcome::retryable(reason),
        _ => match js.code() {
            503 => Outcome::unavailable(reason),
            400..=499 => Outcome::permanent(reason),
            _ => Outcome::retryable(reason),
        },
    }
}

/// The message's topic does not make a valid subject (checked before sending).
pub(crate) fn invalid_subject(topic: &str, why: &str) -> Outcome {
    refuse(format!("topic {} does not make a valid NATS subject: {why}", quote(topic)))
}

/// A header of the message cannot be a NATS header (checked before sending).
pub(crate) fn invalid_header(why: &str) -> Outcome {
    refuse(format!("{why}; the message cannot be published to NATS"))
}

/// The message is larger than the server accepts.
pub(crate) fn oversized(size: usize, limit: usize, source: &str) -> Outcome {
    Outcome::permanent(format!(
        "message is {size} bytes (payload and headers), larger than the {source} of {limit} bytes"
    ))
}

/// Not connected: the client is reconnecting in the background.
pub(crate) fn not_connected(address: &str) -> Outcome {
    Outcome::unavailable(format!("not connected to NATS at {address}; reconnecting"))
}

/// The whole call ran out of time before this envelope was answered.
pub(crate) fn deadline(timeout: std::time::Duration, subject: &str) -> Outcome {
    Outcome::unavailable(format!("no JetStream acknowledgement for {subject} within {timeout:?}"))
}

#[cfg(test)]
mod tests {
    use outbox_core::FailureKind;

    use super::*;
    use crate::common::testing::kind;

    fn js_error(code: u16, err_code: u64, description: &str) -> PublishError {
        let e: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": code, "err_code": err_code, "description": description
        }))
        .unwrap();
        PublishError::with_source(PublishErrorKind::Other, e)
    }

    #[test]
    fn client_side_kinds() {
        use PublishErrorKind as K;
        for (expected, kinds) in [
            (
                FailureKind::Unavailable,
                &[K::StreamNotFound, K::TimedOut, K::BrokenPipe, K::MaxAckPending][..],
            ),
            (FailureKind::Permanent, &[K::WrongLastSequence]),
            (FailureKind::Retryable, &[K::Other]),
        ] {
            for &k in kinds {
                assert_eq!(kind(&publish_error(&PublishError::new(k), "a.b")), expected, "{k:?}");
            }
        }
        let no_stream = publish_error(&PublishError::new(PublishErrorKind::StreamNotFound), "x.y");
        assert!(format!("{no_stream:?}").contains("\\\"x.y\\\""), "{no_stream:?}");
        let refused =
            PublishError::with_source(PublishErrorKind::Other, std::io::Error::other("invalid header"));
        assert_eq!(kind(&publish_error(&refused, "s")), FailureKind::Permanent);
        let long = publish_error(&PublishError::new(PublishErrorKind::TimedOut), &"s".repeat(5000));
        assert!(format!("{long:?}").len() < 400, "the subject is quoted bounded");
    }

    #[test]
    fn jetstream_error_codes() {
        let k = |code, err_code| kind(&publish_error(&js_error(code, err_code, "d"), "s"));
        assert_eq!(k(400, 10054), FailureKind::Permanent, "message exceeds the stream's max_msg_size");
        assert_eq!(k(503, 10077), FailureKind::Retryable, "stream full");
        assert_eq!(k(500, 10047), FailureKind::Retryable, "storage exhausted");
        assert_eq!(k(503, 10008), FailureKind::Unavailable, "cluster not available");
        assert_eq!(k(500, 10009), FailureKind::Unavailable, "not leader");
        assert_eq!(k(503, 1), FailureKind::Unavailable);
        assert_eq!(k(400, 1), FailureKind::Permanent);
        assert_eq!(k(500, 1), FailureKind::Retryable);
    }

    #[test]
    fn helpers() {
        assert_eq!(kind(&oversized(10, 5, "server's max_payload")), FailureKind::Permanent);
        assert!(format!("{:?}", oversized(10, 5, "server's max_payload")).contains("max_payload of 5 bytes"));
        assert_eq!(kind(&not_connected("nats://h")), FailureKind::Unavailable);
        assert_eq!(kind(&deadline(std::time::Duration::from_secs(1), "s")), FailureKind::Unavailable);
        assert_eq!(kind(&invalid_subject("a b", "contains a space")), FailureKind::Permanent);
        assert_eq!(kind(&invalid_header("header name \"a b\" ...")), FailureKind::Permanent);
    }
}
