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

/// A timeout must be positive and at most 10 minutes (the NATS, Redis and MQTT configurations).
#[cfg(any(feature = "nats", feature = "redis", feature = "mqtt"))]
pub(crate) fn check_timeout(
    transport: &'static str,
    key: &'static str,
    d: std::time::Duration,
) -> Result<()> {
    if d.is_zero() || d > std::time::Duration::from_secs(600) {
        return Err(TransportError::Config {
            transport,
            key,
            reason: format!("must be more than 0 and at most 10 min, got {d:?}"),
        });
    }
    Ok(())
}

/// The key a configuration error names (the configurations' unit tests).
#[cfg(test)]
pub(crate) fn config_key(e: TransportError) -> &'static str {
    match e {
        TransportError::Config { key, .. } => key,
        other => panic!("expected a config error, got {other}"),
    }
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
