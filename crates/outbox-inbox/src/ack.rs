//! Automatic ACK (ACK mode): after the consumer's transaction committed, confirm the delivery
//! to the relay's ACK endpoint with the token the message carried.
//!
//! ```no_run
//! # async fn demo(msg: outbox_inbox::InboxMessage) -> Result<(), outbox_inbox::AckClientError> {
//! let acks = outbox_inbox::AckClient::new("http://127.0.0.1:8099");
//! // ... inbox.process(&mut tx, group, &msg, business).await?; tx.commit().await?;
//! acks.ack(&msg).await?; // also after `Processed::Duplicate`: an earlier ACK may have been lost
//! # Ok(()) }
//! ```

use std::time::Duration;

use outbox_core::header;

use crate::message::InboxMessage;

/// What [`AckClient::ack`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckSent {
    /// The relay recorded the ACK (or had it already).
    Acked,
    /// The message carries no ACK token: its destination does not require ACKs.
    NotRequired,
}

/// Why an ACK could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AckClientError {
    /// The relay refused it (403 token refused, 404 unknown delivery, 409 not awaiting, ...).
    /// Retrying will not help.
    #[error("the relay refused the ACK: HTTP {status}")]
    Rejected {
        /// The HTTP status.
        status: u16,
    },
    /// The relay could not be reached or failed; retry later (the delivery's ACK timeout
    /// causes a redelivery otherwise, which the inbox then reports as a duplicate).
    #[error("the ACK endpoint is unreachable or failed: {0}")]
    Unavailable(String),
}

/// Sends ACKs to one relay's ACK endpoint. Cheap to clone (one pooled HTTP client).
#[derive(Debug, Clone)]
pub struct AckClient {
    base_url: String,
    client: reqwest::Client,
}

impl AckClient {
    /// A client for the endpoint at `base_url` (e.g. `http://127.0.0.1:8099`), 5 s timeout.
    pub fn new(base_url: impl Into<String>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        AckClient::with_client(base_url, client)
    }

    /// A client for the endpoint at `base_url` that sends through `client`: build it with what
    /// an `https://` endpoint needs beyond the system's trust store, e.g. a private CA
    /// (`reqwest::ClientBuilder::add_root_certificate`) or a client certificate (`identity`),
    /// and a timeout.
    pub fn with_client(base_url: impl Into<String>, client: reqwest::Client) -> Self {
        AckClient { base_url: base_url.into().trim_end_matches('/').to_owned(), client }
    }

    /// Confirms `msg`'s delivery if it carries an ACK token; a no-op otherwise.
    pub async fn ack(&self, msg: &InboxMessage) -> Result<AckSent, AckClientError> {
        let (Some(token), Some(destination), Some(store)) = (
            msg.headers.get(header::ACK_TOKEN),
            msg.headers.get(header::ACK_DESTINATION),
            msg.headers.get(header::ACK_STORE),
        ) else {
            return Ok(AckSent::NotRequired);
        };
        // The id as published (a consumer may have namespaced `msg.id`).
        let id = msg.headers.get(header::MESSAGE_ID).map(String::as_str).unwrap_or(msg.id.as_str());
        let url =
            format!("{}/v1/ack/{}/{}/{}", self.base_url, encode(store), encode(id), encode(destination));
        let resp =
            self.client.post(&url).header("outbox-ack-token", token.as_str()).send().await.map_err(|e| {
                // The whole chain (a TLS failure is only in a source), with its cause named.
                let e = e.without_url();
                let text = outbox_core::tls::chain(&e);
                AckClientError::Unavailable(outbox_core::tls::with_explanation(text, &e))
            })?;
        let status = resp.status();
        if status.is_success() {
            Ok(AckSent::Acked)
        } else if status.is_server_error() {
            Err(AckClientError::Unavailable(format!("HTTP {}", status.as_u16())))
        } else {
            Err(AckClientError::Rejected { status: status.as_u16() })
        }
    }
}

/// Percent-encodes a path segment.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
