//! Logging set-up, and the redaction every line written to stderr goes through.
//!
//! Two defences keep secrets out of the log:
//! - Client libraries (database drivers, broker clients, HTTP stacks) are capped at `info`
//!   when the level asked for is more verbose, unless `RUST_LOG` names them: their debug and
//!   trace lines print what they send, and what a NATS client sends first is its `CONNECT`
//!   with the password or token. sqlx's URL parser is capped at `error`: it warns about an
//!   unknown URL parameter with its value (`?auth_token=...`).
//! - Every formatted line (and the final error of a command) passes through [`redact_text`]:
//!   URLs lose their passwords and tokens, `password=...`-like pairs their values.

use std::borrow::Cow;
use std::io::Write;

use outbox_core::text::run_start;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;
use crate::config::TelemetrySection;

#[cfg(feature = "otel")]
#[path = "telemetry/otel.rs"]
mod otel;
#[cfg(not(feature = "otel"))]
#[path = "telemetry/no_otel.rs"]
mod otel;
pub(crate) use otel::OtelGuard;

/// Crates (target prefixes) whose verbose logs may print credentials or whole protocol frames.
const CLIENT_LIBRARIES: &[&str] = &[
    "async_nats",
    "nats",
    "lapin",
    "amq_protocol",
    "pinky_swear",
    "rumqttc",
    "redis",
    "sqlx",
    "rdkafka",
    "rskafka",
    "rocketmq",
    "hyper",
    "h2",
    "reqwest",
    "rustls",
    "tokio_rustls",
    "tungstenite",
    "tokio_tungstenite",
    "tower",
    "tower_http",
    "axum",
    "mio",
    "want",
];

/// Targets that log secrets even at `warn`: sqlx's connect-option parsers (an unknown URL
/// parameter is logged with its value, a malformed `.pgpass` line whole).
const SECRET_WARNINGS: &[&str] = &["sqlx_postgres::options", "sqlx_mysql::options", "sqlx_sqlite::options"];

/// Installs the global subscriber: human or JSON lines on stderr, level from `-v` or `RUST_LOG`;
/// with `otel`, also the relay's spans exported over OTLP. The returned guard flushes the
/// spans still buffered on `shutdown` (call it when the process ends, outside the runtime).
pub(crate) fn init(
    format: LogFormat,
    verbose: u8,
    quiet: bool,
    otel: Option<&TelemetrySection>,
) -> Option<OtelGuard> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;

    let default = match verbose {
        0 if quiet => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let asked = std::env::var("RUST_LOG").ok().filter(|s| !s.trim().is_empty());
    let filter = asked
        .as_deref()
        .and_then(|spec| EnvFilter::try_new(directives(spec)).ok())
        .unwrap_or_else(|| EnvFilter::new(directives(default)));
    let fmt = tracing_subscriber::fmt::layer().with_writer(RedactingStderr);
    let fmt = match format {
        LogFormat::Human => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let (export, guard) = match otel.map(otel::exporter).transpose().map(Option::flatten) {
        Ok(Some((layer, guard))) => (Some(layer), Some(guard)),
        Ok(None) => (None, None),
        Err(e) => {
            // The subscriber is not there yet: say it on stderr, and go on without export.
            eprintln!("warning: trace export disabled: {}", redact_text(&format!("{e:#}")));
            (None, None)
        }
    };
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter)).with(export).try_init();
    guard
}

/// `spec` (a `RUST_LOG` value) with the client libraries capped: at `info` when the global
/// level is more verbose than that, and sqlx's option parsers at `error`, unless `spec` names
/// them itself.
fn directives(spec: &str) -> String {
    let parts: Vec<&str> = spec.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    // The global level is the last directive without a target.
    let global = parts.iter().rev().find_map(|p| level_rank(p));
    let named: Vec<&str> = parts
        .iter()
        .filter(|p| level_rank(p).is_none())
        .map(|p| p.split(['=', '[']).next().unwrap_or_default().trim())
        .filter(|t| !t.is_empty())
        .collect();
    let names = |prefix: &str| named.iter().any(|t| t.starts_with(prefix) || prefix.starts_with(*t));
    let mut out = parts.join(",");
    let mut push = |d: String| {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&d);
    };
    let Some(global) = global else {
        return out;
    };
    if global > INFO {
        for lib in CLIENT_LIBRARIES.iter().filter(|lib| !names(lib)) {
            push(format!("{lib}=info"));
        }
    }
    if global > ERROR {
        for t in SECRET_WARNINGS.iter().filter(|t| !names(t.split("::").next().unwrap_or(t))) {
            push(format!("{t}=error"));
        }
    }
    out
}

const ERROR: u8 = 1;
const INFO: u8 = 3;

/// Verbosity of a bare level directive (`off` 0 ... `trace` 5), `None` for a target directive.
fn level_rank(directive: &str) -> Option<u8> {
    match directive.to_ascii_lowercase().as_str() {
        "off" => Some(0),
        "error" => Some(ERROR),
        "warn" => Some(2),
        "info" => Some(INFO),
        "debug" => Some(4),
        "trace" => Some(5),
        _ => None,
    }
}

/// Writes each formatted log line to stderr after [`redact_text`]. The fmt layer formats a
/// whole event into one buffer and writes it through one writer, so each writer sees one line.
struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter { buf: Vec::with_capacity(256) }
    }
}

struct RedactingWriter {
    buf: Vec<u8>,
}

impl Write for RedactingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf);
        let redacted = redact_text(&text);
        let result = std::io::stderr().lock().write_all(redacted.as_bytes());
        self.buf.clear();
        result
    }
}

impl Drop for RedactingWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// `text` with every `scheme://` URL in it passed through [`outbox_core::redact_url`], the
/// values of `password=...`-like pairs outside URLs and of `password: Some("...")`-like
/// `Debug` fields replaced by `***`. For free text (log lines, error chains) whose parts may
/// quote a URL, a connection string or a client's options.
pub(crate) fn redact_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") && !text.contains('=') && !text.contains(": ") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut copied = 0;
    let mut search = 0;
    while let Some(rel) = text[search..].find("://") {
        let sep = search + rel;
        let start = run_start(text, sep, |c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        // The scheme starts with a letter; skip leading digits and signs (`1+postgres://`).
        let start = text[start..sep].find(|c: char| c.is_ascii_alphabetic()).map_or(sep, |i| start + i);
        if start == sep {
            search = sep + 3;
            continue;
        }
        let end = text[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .map_or(text.len(), |i| sep + i);
        out.push_str(&outbox_core::redact_url(&text[copied..start]));
        out.push_str(&outbox_core::redact_url(&text[start..end]));
        copied = end;
        search = end;
    }
    out.push_str(&outbox_core::redact_url(&text[copied..]));
    let out = redact_debug_fields(&out);
    if out == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(out.into_owned())
    }
}

/// Field names whose values are secrets in `Debug` output (`password: Some("...")`, as a URL
/// or a client's connect options print themselves).
const SECRET_FIELDS: &[&str] =
    &["password", "pass", "passwd", "token", "auth_token", "secret", "user_jwt", "jwt", "nkey", "signature"];

/// `text` with the quoted value of every `<secret field>: "..."` or `<secret field>:
/// Some("...")` replaced by `***`.
fn redact_debug_fields(text: &str) -> Cow<'_, str> {
    if !text.contains(": ") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(rel) = text[search..].find(": ") {
        let colon = search + rel;
        search = colon + 2;
        let name_start = run_start(text, colon, |c| c.is_ascii_alphanumeric() || c == '_');
        let name = text[name_start..colon].to_ascii_lowercase();
        if !SECRET_FIELDS.contains(&name.as_str()) {
            continue;
        }
        let rest = &text[colon + 2..];
        let open = if rest.starts_with("Some(\"") {
            "Some(\"".len()
        } else if rest.starts_with('"') {
            1
        } else {
            continue;
        };
        let body_start = colon + 2 + open;
        let mut escaped = false;
        let close = text[body_start..].char_indices().find_map(|(i, c)| match c {
            '\\' if !escaped => {
                escaped = true;
                None
            }
            '"' if !escaped => Some(i),
            _ => {
                escaped = false;
                None
            }
        });
        let body_end = close.map_or(text.len(), |i| body_start + i);
        out.push_str(&text[copied..body_start]);
        out.push_str("***");
        copied = body_end;
        search = body_end;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_libraries_are_capped_unless_named() {
        let d = directives("debug");
        assert!(d.starts_with("debug,"), "{d}");
        assert!(d.contains("async_nats=info") && d.contains("sqlx=info") && d.contains("hyper=info"), "{d}");
        assert!(d.contains("sqlx_postgres::options=error"), "{d}");
        // Asked for by name: kept as asked.
        let d = directives("debug,async_nats=trace");
        assert!(d.contains("async_nats=trace") && !d.contains("async_nats=info"), "{d}");
        assert!(d.contains("lapin=info"), "{d}");
        let d = directives("info,sqlx_postgres=debug");
        assert!(!d.contains("sqlx_postgres::options=error"), "{d}");
        // Quieter than info: nothing is raised to info.
        let d = directives("warn");
        assert!(!d.contains("=info") && d.contains("sqlx_postgres::options=error"), "{d}");
        assert_eq!(directives("error"), "error");
        // No global level: nothing else is enabled anyway.
        assert_eq!(directives("outbox_relay=debug"), "outbox_relay=debug");
        // The default of -v.
        assert!(EnvFilter::try_new(directives("debug")).is_ok());
        assert!(EnvFilter::try_new(directives("trace,outbox=trace")).is_ok());
    }

    #[test]
    fn free_text_is_redacted() {
        assert_eq!(
            redact_text("cannot connect to postgres://u:hunter2@h/db: refused"),
            "cannot connect to postgres://u:***@h/db: refused"
        );
        assert_eq!(
            redact_text(r#"{"url":"nats://t0ken@h:4222","msg":"x"}"#),
            r#"{"url":"nats://***@h:4222","msg":"x"}"#
        );
        assert_eq!(redact_text("dsn host=h password=hunter2 dbname=x"), "dsn host=h password=*** dbname=x");
        assert_eq!(redact_text("a (redis://:pw@h) b"), "a (redis://:***@h) b");
        assert!(matches!(redact_text("nothing to hide here: 42"), Cow::Borrowed(_)));
        assert_eq!(redact_text("x=1 ://y"), "x=1 ://y");
        assert_eq!(
            redact_text(
                r#"server=ServerAddr(Url { username: "u", password: Some("p\"w"), host: Some("h") })"#
            ),
            r#"server=ServerAddr(Url { username: "u", password: Some("***"), host: Some("h") })"#
        );
        assert_eq!(
            redact_text(r#"ConnectInfo { user: None, pass: Some("x"), auth_token: "t", name: "n" }"#),
            r#"ConnectInfo { user: None, pass: Some("***"), auth_token: "***", name: "n" }"#
        );
        assert_eq!(redact_text("note: password: none given"), "note: password: none given");
        let two = redact_text("postgres://a:p1@h/db and mysql://b:p2@h/db?token=t");
        assert_eq!(two, "postgres://a:***@h/db and mysql://b:***@h/db?token=***");
    }
}
