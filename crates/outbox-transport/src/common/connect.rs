//! How a transport that connects to a URL reports failing to: a [`TransportError::Connect`]
//! naming the address with its password redacted, also where a client's error quotes the URL.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::TransportError;

/// The failures of connecting transport `transport` to `url`.
#[derive(Debug)]
pub(crate) struct Connecting {
    transport: &'static str,
    url: String,
    /// `url` with any password replaced by `***`.
    pub(crate) address: String,
}

impl Connecting {
    pub(crate) fn new(transport: &'static str, url: &str) -> Self {
        Connecting { transport, url: url.to_owned(), address: crate::redact(url) }
    }

    /// The connection failed, for `reason` (the URL in it redacted; a TLS failure explained, see
    /// [`outbox_core::tls::explain`]).
    pub(crate) fn fail(&self, reason: impl Into<String>) -> TransportError {
        let reason = reason.into();
        let mut reason = if self.url.is_empty() { reason } else { reason.replace(&self.url, &self.address) };
        if let Some(why) = outbox_core::tls::explain(&reason) {
            reason = format!("{reason} ({why})");
        }
        TransportError::Connect { transport: self.transport, address: self.address.clone(), reason }
    }

    /// What `step` answers, or its error; `no_answer` when it does not answer within `limit`.
    pub(crate) async fn within<T, E: Display>(
        &self,
        limit: Duration,
        no_answer: impl Into<String>,
        step: impl Future<Output = Result<T, E>>,
    ) -> Result<T, TransportError> {
        match tokio::time::timeout(limit, step).await {
            Err(_) => Err(self.fail(no_answer)),
            Ok(Err(e)) => Err(self.fail(e.to_string())),
            Ok(Ok(v)) => Ok(v),
        }
    }
}

/// The raw (still percent-encoded) password of `url`, if it has a non-empty one: client errors
/// may quote it, and it is scrubbed from them.
pub(crate) fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    userinfo.split_once(':').map(|(_, pw)| pw).filter(|pw| !pw.is_empty())
}

/// `text` with every non-empty one of `secrets` replaced by `***`.
pub(crate) fn scrub<'s>(text: &str, secrets: impl IntoIterator<Item = &'s str>) -> String {
    let mut out = text.to_owned();
    for s in secrets.into_iter().filter(|s| !s.is_empty()) {
        out = out.replace(s, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_and_scrubbed() {
        assert_eq!(password_of("https://u:p@h/x"), Some("p"));
        assert_eq!(password_of("amqp://a:pw1@h/%2f"), Some("pw1"));
        assert_eq!(password_of("https://h/x@y"), None);
        assert_eq!(password_of("https://u@h/"), None);
        assert_eq!(password_of("https://u:@h/"), None);
        assert_eq!(password_of("no scheme"), None);
        assert_eq!(scrub("a pw1 b tok c", ["pw1", "", "tok"]), "a *** b *** c");
    }

    #[tokio::test]
    async fn failures_name_the_redacted_address() {
        let c = Connecting::new("nats", "nats://u:s3cret@h:4222");
        let text = c.fail("refused by nats://u:s3cret@h:4222").to_string();
        assert_eq!(text, "cannot connect nats to nats://u:***@h:4222: refused by nats://u:***@h:4222");
        let slow =
            c.within(Duration::from_millis(1), "no answer", std::future::pending::<Result<(), String>>());
        assert!(slow.await.unwrap_err().to_string().ends_with(": no answer"));
        let refused = c.within(Duration::from_secs(1), "-", async { Err::<(), _>("refused") });
        assert!(refused.await.unwrap_err().to_string().ends_with(": refused"));
        assert_eq!(c.within(Duration::from_secs(1), "-", async { Ok::<_, String>(7) }).await.unwrap(), 7);
    }
}
