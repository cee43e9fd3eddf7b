//! How the answers of the `redis` client map onto [`Outcome`]s (the table is in the module
//! documentation of [`crate::redis`]).

use outbox_core::text::printable;
use outbox_core::Outcome;
use redis::{ErrorKind, RedisError, Value};

use crate::validate::quote;

/// The outcome of one `XADD` reply.
pub(crate) fn reply(value: Value, stream: &str) -> Outcome {
    match value {
        Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. } => Outcome::Delivered,
        Value::ServerError(e) => error(&RedisError::from(e), stream),
        other => Outcome::retryable(format!(
            "unexpected reply to XADD on {}: {}",
            quote(stream),
            printable(&format!("{other:?}"), 256)
        )),
    }
}

/// The outcome of an error for an `XADD` to `stream` (or for the whole pipeline).
pub(crate) fn error(e: &RedisError, stream: &str) -> Outcome {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return Outcome::unavailable(format!("Redis unreachable: {e}"));
    }
    let shown = quote(stream);
    let reason = format!("XADD to {shown} failed: {e}");
    match e.kind() {
        ErrorKind::BusyLoadingError
        | ErrorKind::TryAgain
        | ErrorKind::ClusterDown
        | ErrorKind::MasterDown
        | ErrorKind::ReadOnly
        | ErrorKind::AuthenticationFailed
        | ErrorKind::ClusterConnectionNotFound => Outcome::unavailable(reason),
        ErrorKind::Moved | ErrorKind::Ask | ErrorKind::CrossSlot => Outcome::permanent(format!(
            "{reason} (a Redis Cluster redirection: this transport talks to one node; point it at a \
             standalone server or a proxy)"
        )),
        _ => match e.code().unwrap_or("") {
            "WRONGTYPE" => {
                Outcome::permanent(format!("{reason} (key {shown} holds a value that is not a stream)"))
            }
            "NOPERM" => Outcome::permanent(reason),
            // The server refuses every write for now: out of memory, failing persistence,
            // a script running, the credentials rejected. Not the message's fault.
            "OOM" | "MISCONF" | "BUSY" | "NOAUTH" | "WRONGPASS" | "NOREPLICAS" | "LOADING" | "MASTERDOWN"
            | "READONLY" => Outcome::unavailable(reason),
            "ERR" if e.detail().is_some_and(|d| d.contains("max number of clients")) => {
                Outcome::unavailable(reason)
            }
            _ => Outcome::retryable(reason),
        },
    }
}

/// The message's payload is over the configured limit.
pub(crate) fn oversized(size: usize, limit: usize) -> Outcome {
    Outcome::permanent(format!(
        "payload is {size} bytes, larger than the Redis transport's max_payload_bytes of {limit} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use std::io;

    use outbox_core::FailureKind;

    use super::*;
    use crate::common::testing::kind;

    fn ext(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.into(), Some(detail.into()))
    }

    #[test]
    fn connection_errors_are_unavailable() {
        for k in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::TimedOut,
        ] {
            let e = RedisError::from(io::Error::new(k, "x"));
            assert_eq!(kind(&error(&e, "s")), FailureKind::Unavailable, "{k:?}");
        }
        let e = RedisError::from((ErrorKind::BusyLoadingError, "loading"));
        assert_eq!(kind(&error(&e, "s")), FailureKind::Unavailable);
        let e = RedisError::from((ErrorKind::ReadOnly, "replica"));
        assert_eq!(kind(&error(&e, "s")), FailureKind::Unavailable);
        assert_eq!(kind(&error(&ext("OOM", "command not allowed"), "s")), FailureKind::Unavailable);
        assert_eq!(kind(&error(&ext("NOAUTH", "auth required"), "s")), FailureKind::Unavailable);
    }

    #[test]
    fn server_errors() {
        let wrongtype =
            error(&ext("WRONGTYPE", "Operation against a key holding the wrong kind of value"), "k");
        assert_eq!(kind(&wrongtype), FailureKind::Permanent);
        assert!(format!("{wrongtype:?}").contains("not a stream"));
        assert_eq!(kind(&error(&ext("NOPERM", "no permissions"), "s")), FailureKind::Permanent);
        let e = RedisError::from((ErrorKind::Moved, "moved", "3999 127.0.0.1:6381".to_string()));
        assert_eq!(kind(&error(&e, "s")), FailureKind::Permanent);
        let e = RedisError::from((ErrorKind::ResponseError, "err", "something odd".to_string()));
        assert_eq!(kind(&error(&e, "s")), FailureKind::Retryable);
        let e =
            RedisError::from((ErrorKind::ResponseError, "err", "max number of clients reached".to_string()));
        assert_eq!(kind(&error(&e, "s")), FailureKind::Unavailable);
        assert_eq!(kind(&error(&ext("SOMETHING", "new"), "s")), FailureKind::Retryable);
    }

    #[test]
    fn replies() {
        assert_eq!(reply(Value::BulkString(b"1-0".to_vec()), "s"), Outcome::Delivered);
        assert_eq!(kind(&reply(Value::Nil, "s")), FailureKind::Retryable);
        assert_eq!(kind(&oversized(10, 5)), FailureKind::Permanent);
        assert!(format!("{:?}", oversized(10, 5)).contains("max_payload_bytes of 5 bytes"));
    }
}
