//! Text that crosses a boundary (a foreign row, a broker's answer, an HTTP request) before it
//! is written to the table, a log line or a terminal.
//!
//! Two rules, written once here:
//! - [`bounded_error`]: every error text written to a `last_error` column is at most
//!   [`crate::limits::ERROR`] characters and holds no control character (PostgreSQL refuses a
//!   NUL in text; MySQL refuses a value longer than its column). A broker that quotes a 70 KB
//!   header name in its error can no longer make a settlement fail.
//! - [`printable`]: anything shown in a log line or a terminal has its control characters
//!   escaped (CR/LF cannot forge a log line, ESC cannot drive a terminal) and is cut to a
//!   length.
//!
//! And two reading aids: [`run_start`] finds the name before a delimiter (`password` before
//! `=`, `postgres` before `://`) for the redaction scanners, and [`line_col`] turns a parser's
//! byte offset into the line and column a person looks for.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with every control character (C0, DEL, C1, and the Unicode line/paragraph separators and
/// bidirectional overrides) written as `\u{..}` (`\n`, `\r`, `\t` as themselves escaped), cut
/// after `max_chars` characters with a note of how much was left out. Borrowed when nothing
/// had to change.
pub fn printable(s: &str, max_chars: usize) -> Cow<'_, str> {
    let needs_escape = s.chars().any(is_unsafe);
    let too_long = s.len() > max_chars && s.chars().nth(max_chars).is_some();
    if !needs_escape && !too_long {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(2)) + 32);
    for (taken, (i, c)) in s.char_indices().enumerate() {
        if taken >= max_chars {
            let rest = s.len() - i;
            let _ = write!(out, "… ({rest} more bytes)");
            return Cow::Owned(out);
        }
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// An error text fit for a `last_error` column: [`printable`] with the limit
/// [`crate::limits::ERROR`], so it is never longer than the column and never holds a NUL.
pub fn bounded_error(s: &str) -> String {
    // Escaping can lengthen the text (one control character becomes up to 10 characters), so
    // escape first with the character budget, then cut again on the result.
    let escaped = printable(s, crate::limits::ERROR);
    if escaped.chars().count() <= crate::limits::ERROR {
        return escaped.into_owned();
    }
    let cut: String = escaped.chars().take(crate::limits::ERROR - 20).collect();
    format!("{cut}… (cut)")
}

/// Checks a name that configuration gives and the relay writes to the table or prints (relay
/// owner, destination, store): 1 to `max` characters, no control character, no white space
/// at either end. The error says what is wrong without echoing the value raw.
pub fn check_name(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.chars().any(is_unsafe) {
        return Err(format!("must not contain control characters (got {:?})", printable(value, 64)));
    }
    if value.trim() != value {
        return Err("must not start or end with white space".into());
    }
    let n = value.chars().count();
    if n > max {
        return Err(format!("is {n} characters long, at most {max} allowed"));
    }
    Ok(())
}

/// The byte index where the run of `part` characters that ends at byte `end` of `s` begins,
/// read backwards from a delimiter at `end` (the name before a `=`, the scheme before a
/// `://`); `end` itself when the character before it is not a `part`.
pub fn run_start(s: &str, end: usize, part: impl Fn(char) -> bool) -> usize {
    s[..end].char_indices().rev().take_while(|&(_, c)| part(c)).last().map_or(end, |(i, _)| i)
}

/// Line and column (1-based, in characters) of byte `offset` of `text`; an offset past the end
/// or inside a character counts from the start of that character or the end of the text.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    (line, col)
}

fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if is_unsafe(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters_and_cuts() {
        assert!(matches!(printable("plain text", 100), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb\r\0c\x1b[31m", 100), "a\\nb\\r\\u{0}c\\u{1b}[31m");
        assert_eq!(printable("abcdef", 3), "abc… (3 more bytes)");
        assert_eq!(printable("é\u{202e}x", 10), "é\\u{202e}x");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("relay-1", 128).is_ok());
        assert!(check_name("", 128).is_err());
        assert!(check_name("a\u{0}c", 128).unwrap_err().contains("control"));
        assert!(check_name(" a", 128).is_err());
        assert!(check_name(&"x".repeat(129), 128).is_err());
    }

    #[test]
    fn runs_are_read_back_from_their_end() {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        assert_eq!(run_start("a b_c=1", 5, word), 2);
        assert_eq!(run_start("mot=1", 3, word), 0);
        assert_eq!(run_start("a =1", 2, word), 2);
        assert_eq!(run_start("", 0, word), 0);
        assert_eq!(run_start("x éé=1", 6, word), 2, "char boundaries, not bytes");
    }

    #[test]
    fn bounded_error_fits_every_column() {
        let huge = format!("bad header {}: {}", "n".repeat(70_000), "\0".repeat(5000));
        let e = bounded_error(&huge);
        assert!(e.chars().count() <= crate::limits::ERROR, "{}", e.chars().count());
        assert!(!e.contains('\0'));
        let nuls = "\0".repeat(10_000);
        let e = bounded_error(&nuls);
        assert!(e.chars().count() <= crate::limits::ERROR);
        assert!(e.starts_with("\\u{0}"));
        assert_eq!(bounded_error("timeout"), "timeout");
    }

    #[test]
    fn line_numbers() {
        assert_eq!(line_col("a\nb\nc", 0), (1, 1));
        assert_eq!(line_col("a\nb\nc", 2), (2, 1));
        assert_eq!(line_col("a\nbé c", 6), (2, 4));
        assert_eq!(line_col("a\nbé c", 4), (2, 2), "inside `é`: counted from its start");
        assert_eq!(line_col("a\nb", 99), (2, 2), "past the end: counted from the end");
    }
}
