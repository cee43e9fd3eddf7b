//! Pure domain types of `outbox`: what a message is, the statuses it moves through, the limits a
//! message must respect and the errors every layer shares.
//!
//! Nothing here performs IO or needs a runtime, so the rules that matter (validation, status
//! transitions) are tested in microseconds. The database layer lives in `outbox-store`, the
//! public facade in `outbox`.
//!
//! ```
//! use outbox_core::NewMessage;
//! let msg = NewMessage::new("order.paid", r#"{"order":42}"#)
//!     .key("order-42")
//!     .biz("order", "42")
//!     .header("source", "checkout");
//! assert!(msg.validate().is_ok());
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod ack;
pub mod duration;
mod error;
pub mod failure;
mod message;
mod redact;
mod retry;
mod status;
pub mod text;
pub mod tls;
#[cfg(feature = "otel")]
pub mod trace;
mod transport;
pub mod url;
pub mod webhook;

pub use error::{Error, ErrorKind, Result};
pub use message::{decode_headers, limits, Enqueued, Headers, MessageId, NewMessage, OutboxMessage};
pub use redact::redact_url;
pub use retry::RetryPolicy;
pub use status::{Status, UnknownStatus};
pub use transport::{header, Envelope, FailureKind, Outcome, Transport};
