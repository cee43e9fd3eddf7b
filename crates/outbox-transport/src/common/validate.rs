//! What every transport checks on each envelope *before* it goes on the wire, and how the
//! reasons of all outcomes are written.
//!
//! A broker that meets a value it cannot parse often answers by closing the connection (MQTT
//! 3.1.1 has no other answer; NATS closes on an over-long control line; AMQP closes on an
//! oversized frame). Seen from the client, that is indistinguishable from an outage: the
//! message would be reported `Unavailable`, the destination's breaker would open, and its probe
//! would send the same message again, forever, holding back every other message. So each
//! transport checks the message against its broker's documented rules first, and a violation
//! fails **that message alone**, `Permanent`, with a reason naming the field, without touching
//! the connection. The broker-specific rules live next to each transport's configuration
//! (`<broker>/config.rs`); the helpers shared by all are here.
//!
//! Reasons are stored in `last_error` and shown in logs and terminals, and may quote the
//! message's own text (a topic, a header name): every reason a transport returns passes
//! through [`bounded`] (at most [`outbox_core::limits::ERROR`] characters, no control
//! characters), and message text is quoted with [`quote`] (escaped, cut to [`QUOTE_CHARS`]), so
//! a 70 KB header name can never fill a reason.

use outbox_core::text::{bounded_error, printable};
use outbox_core::Outcome;

/// Most characters of a message's own text (a topic, a header name) quoted in a reason.
pub(crate) const QUOTE_CHARS: usize = 64;

/// `s` in double quotes for a reason: control characters escaped (`\n`, `\u{0}`), cut after
/// [`QUOTE_CHARS`] characters with a note of how much was left out.
pub(crate) fn quote(s: &str) -> String {
    format!("\"{}\"", printable(s, QUOTE_CHARS))
}

/// A permanent failure for a message its broker would refuse; the reason is bounded.
pub(crate) fn refuse(reason: impl AsRef<str>) -> Outcome {
    Outcome::permanent(bounded_error(reason.as_ref()))
}

/// A payload over the transport's `max_payload_bytes`: refused before the wire.
pub(crate) fn oversized_payload(size: usize, limit: usize) -> Outcome {
    refuse(format!("payload is {size} bytes, larger than max_payload_bytes ({limit})"))
}

/// `o` with its reason rewritten by `rewrite` (a failure's kind and `retry_after` are kept).
pub(crate) fn with_reason(o: Outcome, rewrite: impl FnOnce(&str) -> String) -> Outcome {
    match o {
        Outcome::Failed { kind, reason, retry_after } => {
            Outcome::Failed { kind, reason: rewrite(&reason), retry_after }
        }
        d @ Outcome::Delivered => d,
    }
}

/// `o` with its reason made fit for `last_error`: at most [`outbox_core::limits::ERROR`]
/// characters, control characters escaped.
pub(crate) fn bounded(o: Outcome) -> Outcome {
    with_reason(o, bounded_error)
}

/// The outcomes of a batch, each slot filled (a missing one is an internal error, retryable)
/// and every reason bounded.
pub(crate) fn finish(out: Vec<Option<Outcome>>) -> Vec<Outcome> {
    out.into_iter()
        .map(|o| bounded(o.unwrap_or_else(|| Outcome::retryable("internal error: no outcome recorded"))))
        .collect()
}

/// A character named for a reason: `U+000A (line feed)`, `'+'`.
pub(crate) fn describe_char(c: char) -> String {
    let name = match c {
        '\0' => Some("NUL"),
        '\t' => Some("tab"),
        '\n' => Some("line feed"),
        '\r' => Some("carriage return"),
        ' ' => Some("space"),
        '\u{7f}' => Some("DEL"),
        _ => None,
    };
    match name {
        Some(n) => format!("U+{:04X} ({n})", c as u32),
        None if c.is_control() || c.is_whitespace() || !c.is_ascii() => format!("U+{:04X}", c as u32),
        None => format!("'{c}'"),
    }
}

/// The first control character of `s` (C0, DEL, C1), if any.
pub(crate) fn first_control(s: &str) -> Option<char> {
    s.chars().find(|c| c.is_control())
}

/// Whether `c` is a Unicode noncharacter (U+FDD0 to U+FDEF, and the last two code points of
/// every plane): MQTT brokers (Mosquitto) refuse them in topics.
pub(crate) fn is_noncharacter(c: char) -> bool {
    let v = c as u32;
    (0xFDD0..=0xFDEF).contains(&v) || (v & 0xFFFE) == 0xFFFE
}

#[cfg(test)]
mod tests {
    use outbox_core::FailureKind;

    use super::*;

    #[test]
    fn quotes_are_escaped_and_short() {
        assert_eq!(quote("order.paid"), "\"order.paid\"");
        assert_eq!(quote("sec.a\nb"), "\"sec.a\\nb\"");
        let q = quote(&format!("{} x", "n".repeat(70_000)));
        assert!(q.len() < 120, "{q}");
        assert!(q.contains("more bytes"), "{q}");
    }

    #[test]
    fn reasons_are_bounded() {
        let huge = format!("header {}\n{}", "x".repeat(70_000), "\0".repeat(100));
        for o in [refuse(&huge), bounded(Outcome::unavailable(huge.clone()))] {
            let Outcome::Failed { reason, .. } = &o else { panic!() };
            assert!(reason.chars().count() <= outbox_core::limits::ERROR);
            assert!(!reason.chars().any(char::is_control), "{reason}");
        }
        assert_eq!(bounded(Outcome::Delivered), Outcome::Delivered);
        let out = finish(vec![Some(Outcome::Delivered), None]);
        assert_eq!(out[0], Outcome::Delivered);
        assert!(matches!(out[1], Outcome::Failed { kind: FailureKind::Retryable, .. }));
    }

    #[test]
    fn characters_are_named() {
        assert_eq!(describe_char('\n'), "U+000A (line feed)");
        assert_eq!(describe_char('\0'), "U+0000 (NUL)");
        assert_eq!(describe_char('\u{85}'), "U+0085");
        assert_eq!(describe_char('+'), "'+'");
        assert_eq!(first_control("a\u{9b}b"), Some('\u{9b}'));
        assert_eq!(first_control("a b é"), None);
        assert!(is_noncharacter('\u{fffe}') && is_noncharacter('\u{1ffff}') && is_noncharacter('\u{fdd0}'));
        assert!(!is_noncharacter('\u{fffd}') && !is_noncharacter('a'));
    }
}
