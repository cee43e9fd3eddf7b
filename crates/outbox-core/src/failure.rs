//! Failures grouped by cause, for triage: a thousand messages that failed because one broker
//! refused one topic are one problem, not a thousand.
//!
//! The relay writes a failure as `[destination] reason`. [`cause_of`] splits off the destination
//! and normalises the reason so that what differs from message to message (ids, sizes,
//! timestamps, addresses, durations) does not split a group, while what names the problem
//! (words, short codes such as an HTTP status or a broker error number) stays:
//!
//! - a word without digits is kept;
//! - a number of 1 to 3 digits is kept (`HTTP 503`, `error 42`);
//! - a word made mostly of digits, or a hexadecimal run of 8 or more characters (UUIDs,
//!   hashes, addresses, timestamps) becomes `#`;
//! - in other words, digit runs of 4 or more become `#` (`order12345` becomes `order#`);
//! - whitespace runs become one space; the result is at most [`MAX_CAUSE_CHARS`] characters,
//!   control characters escaped.
//!
//! A group is named by [`group_id`]: a short stable hash of (topic, destination, cause), safe
//! in a URL.

use sha2::{Digest, Sha256};

use crate::text::printable;

/// Longest normalised cause, in characters.
pub const MAX_CAUSE_CHARS: usize = 300;

/// Where and why a message failed, normalised for grouping.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cause {
    /// The destination named by the failure's `[destination]` prefix, if any.
    pub destination: Option<String>,
    /// The reason with ids and numbers normalised away.
    pub cause: String,
}

/// Splits a stored `last_error` into its destination and normalised reason.
pub fn cause_of(last_error: Option<&str>) -> Cause {
    let text = last_error.unwrap_or("").trim();
    let (destination, reason) = match text.strip_prefix('[').and_then(|rest| rest.split_once("] ")) {
        Some((dest, reason)) if !dest.is_empty() && dest.len() <= 128 && !dest.contains('[') => {
            (Some(printable(dest, 128).into_owned()), reason)
        }
        _ => (None, text),
    };
    let cause = normalise(reason);
    let cause = if cause.is_empty() { "(no error recorded)".to_owned() } else { cause };
    Cause { destination, cause }
}

/// The stable name of a group: 16 hexadecimal characters.
pub fn group_id(topic: &str, destination: Option<&str>, cause: &str) -> String {
    let mut h = Sha256::new();
    for part in [topic, destination.unwrap_or(""), cause] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// Whether `c` continues a word (the unit the rules above look at).
fn in_word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')
}

/// The reason with ids and numbers replaced (rules in the module docs).
fn normalise(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len().min(4 * MAX_CAUSE_CHARS));
    let mut word = String::new();
    let mut space = false;
    for c in reason.chars() {
        if in_word(c) {
            word.push(c);
            continue;
        }
        flush(&mut out, &mut word, &mut space);
        if c.is_whitespace() {
            space = !out.is_empty();
        } else {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
        if out.len() > 4 * MAX_CAUSE_CHARS {
            break;
        }
    }
    flush(&mut out, &mut word, &mut space);
    // Cut before escaping, without a note of the length cut: the cause must not vary with it.
    let cut: String = out.chars().take(MAX_CAUSE_CHARS).collect();
    printable(&cut, usize::MAX).into_owned()
}

fn flush(out: &mut String, word: &mut String, space: &mut bool) {
    if word.is_empty() {
        return;
    }
    if *space {
        out.push(' ');
        *space = false;
    }
    // Punctuation around a word (`503:`, `(id.`) is kept as it is; the core is judged.
    let core = word.trim_matches(|c: char| !c.is_alphanumeric());
    let lead = &word[..word.find(core).unwrap_or(0)];
    let tail = &word[lead.len() + core.len()..];
    out.push_str(lead);
    out.push_str(&normalise_word(core));
    out.push_str(tail);
    word.clear();
}

fn normalise_word(w: &str) -> String {
    let digits = w.chars().filter(char::is_ascii_digit).count();
    if digits == 0 {
        return w.to_owned();
    }
    if digits == w.len() && digits <= 3 {
        return w.to_owned();
    }
    let alnum = w.chars().filter(|c| c.is_alphanumeric()).count();
    let hexish = w.len() >= 8 && w.chars().all(|c| c.is_ascii_hexdigit() || matches!(c, '-' | ':' | '.'));
    if digits * 2 > alnum || hexish {
        return "#".to_owned();
    }
    let mut out = String::with_capacity(w.len());
    let mut run = String::new();
    for c in w.chars() {
        if c.is_ascii_digit() {
            run.push(c);
            continue;
        }
        out.push_str(if run.len() >= 4 { "#" } else { &run });
        run.clear();
        out.push(c);
    }
    out.push_str(if run.len() >= 4 { "#" } else { &run });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(s: &str) -> String {
        cause_of(Some(s)).cause
    }

    #[test]
    fn what_differs_per_message_is_normalised_away() {
        let a = cause_of(Some("[kafka] publish of message 182736 timed out after 5012 ms at 10.0.3.7:9092"));
        let b = cause_of(Some("[kafka] publish of message 99 timed out after 4997 ms at 10.0.3.8:9092"));
        assert_eq!(a.destination.as_deref(), Some("kafka"));
        assert_eq!(a.cause, "publish of message # timed out after # ms at #");
        // A short number is kept: here it is an id, but usually it is a code.
        assert_eq!(b.cause, "publish of message 99 timed out after # ms at #");
        assert_eq!(
            cause("consumer 550e8400-e29b-41d4-a716-446655440000 rejected at 2026-11-24T03:31:29Z"),
            "consumer # rejected at #"
        );
        assert_eq!(cause("order12345 unknown, trace deadbeefcafe0042"), "order# unknown, trace #");
        assert_eq!(cause("payload of 2000000 bytes exceeds 1048576"), "payload of # bytes exceeds #");
    }

    #[test]
    fn what_names_the_problem_stays() {
        assert_eq!(cause("[hook] HTTP 503: Service Unavailable"), "HTTP 503: Service Unavailable");
        assert_ne!(cause("HTTP 503"), cause("HTTP 400"));
        assert_eq!(cause("utf8 decode error in v2 header"), "utf8 decode error in v2 header");
        assert_eq!(cause("  spaced \n\t out  "), "spaced out");
        assert_eq!(cause_of(None).cause, "(no error recorded)");
        assert_eq!(cause_of(Some("[] x")).destination, None);
    }

    #[test]
    fn hostile_text_is_bounded_and_printable() {
        let long = "word ".repeat(10_000);
        assert_eq!(cause(&long).chars().count(), MAX_CAUSE_CHARS);
        assert_eq!(cause(&long), cause(&"word ".repeat(20_000)), "the cut does not depend on the length");
        let c = cause("bad \u{1b}[31m red \u{7f}");
        assert!(!c.contains('\u{1b}') && !c.contains('\u{7f}'), "{c:?}");
        let d = cause_of(Some(&format!("[{}] boom", "d".repeat(500))));
        assert_eq!(d.destination, None, "an over-long prefix is not a destination");
    }

    #[test]
    fn group_ids_are_stable_and_distinct() {
        let g = group_id("orders", Some("kafka"), "HTTP 503");
        assert_eq!(g.len(), 16);
        assert!(g.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(g, group_id("orders", Some("kafka"), "HTTP 503"));
        assert_ne!(g, group_id("orders", None, "HTTP 503"));
        assert_ne!(group_id("a", Some("bc"), "x"), group_id("ab", Some("c"), "x"));
    }
}
