//! Errors of building a transport (configuration and first connection). Publication failures
//! are not errors: they are [`outbox_core::Outcome`]s.

/// `Result` with [`TransportError`].
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// A transport could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A configuration value is wrong; `key` names it (e.g. `url`, `stream`).
    #[error("invalid {transport} configuration: {key}: {reason}")]
    Config {
        /// Transport kind.
        transport: &'static str,
        /// The offending key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The broker could not be reached or refused the set-up. The address is redacted.
    #[error("cannot connect {transport} to {address}: {reason}")]
    Connect {
        /// Transport kind.
        transport: &'static str,
        /// Broker address, with any password replaced by `***`.
        address: String,
        /// Why.
        reason: String,
    },
}

/// `url` with any password replaced by `***`, for errors and logs.
pub fn redact(url: &str) -> String {
    outbox_core::redact_url(url)
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(super::redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
