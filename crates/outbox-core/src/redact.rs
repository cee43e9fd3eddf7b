//! Redaction of secrets in what we print.

/// `url` with any password replaced by `***`, for logs, errors and `outbox check` output.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let redacted = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    format!("{}{}{}", &url[..scheme_end], redacted, &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_leave() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(
            redact_url("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact_url("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(redact_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
