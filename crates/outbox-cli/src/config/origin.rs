//! Where a configuration value comes from (the file, or the environment variable that set
//! it), and error messages that say so without echoing a value that may be a secret.

use std::ops::Range;
use std::sync::OnceLock;

use super::env::Override;
use super::locate::{key_at, key_on_line, locate};
use outbox_core::text::line_col;

/// Where the configuration's values come from, to say where a wrong one is: the file (with
/// its line), or the environment variable that set it.
pub(super) struct Origin<'a> {
    file: &'a str,
    text: &'a str,
    pub(super) overrides: Vec<Override>,
    /// Key path to span in `text`, computed on the first error.
    located: OnceLock<Vec<(String, Range<usize>)>>,
}

impl<'a> Origin<'a> {
    /// The origin of values read from `text`, the file named `file`, with no overrides yet.
    pub(super) fn new(file: &'a str, text: &'a str) -> Self {
        Origin { file, text, overrides: Vec::new(), located: OnceLock::new() }
    }

    fn located(&self) -> &[(String, Range<usize>)] {
        self.located.get_or_init(|| locate(self.text))
    }

    /// `environment variable OUTBOX__X (key)`, `file:line: key`, or `file: key`; when
    /// variables set keys inside `key`, they are named too.
    fn at(&self, key: &str) -> String {
        if let Some(o) = self.overrides.iter().find(|o| o.key == key) {
            return format!("environment variable {} ({key})", o.var);
        }
        let line =
            self.located().iter().find(|(k, _)| k == key).map(|(_, span)| line_col(self.text, span.start).0);
        let mut at = match line {
            Some(line) => format!("{}:{line}: {key}", self.file),
            None => format!("{}: {key}", self.file),
        };
        let inside: Vec<String> = self
            .overrides
            .iter()
            .filter(|o| o.key.strip_prefix(key).is_some_and(|rest| rest.starts_with(['.', '['])))
            .map(|o| format!("{} sets {}", o.var, o.key))
            .collect();
        if !inside.is_empty() {
            at.push_str(&format!(" (environment variable {})", inside.join(", ")));
        }
        at
    }

    pub(super) fn error(&self, key: &str, msg: String) -> anyhow::Error {
        anyhow::anyhow!("{}: {}", self.at(key), self.scrub(&msg, &[]))
    }

    /// An error of the TOML parser or of the typed deserialization of the file: the file, line
    /// and column, the key when known, and the message without the value (it may be a secret).
    /// Never the source line itself.
    pub(super) fn parse_error(&self, e: &toml::de::Error) -> anyhow::Error {
        let Some(span) = e.span() else {
            return anyhow::anyhow!("{}: {}", self.file, self.scrub(e.message(), &[]));
        };
        let raw = self.text.get(span.clone()).unwrap_or_default();
        let msg = self.scrub(e.message(), &[value_text(e.message(), raw)]);
        let (line, col) = line_col(self.text, span.start);
        let key = key_at(self.located(), self.text, &span).or_else(|| key_on_line(self.text, line));
        match key {
            Some(key) => anyhow::anyhow!("{}:{line}:{col}: {key}: {msg}", self.file),
            None => anyhow::anyhow!("{}:{line}:{col}: {msg}", self.file),
        }
    }

    /// An error of the typed deserialization of the file merged with the overrides: blamed on
    /// the environment variable when its key is at fault, else on the file's key.
    pub(super) fn merged_error(&self, merged: &str, e: &toml::de::Error) -> anyhow::Error {
        let raw = e.span().and_then(|s| merged.get(s)).unwrap_or_default();
        let msg = self.scrub(e.message(), &[value_text(e.message(), raw)]);
        let key = e.span().and_then(|span| key_at(&locate(merged), merged, &span));
        match key {
            Some(key) => anyhow::anyhow!("{}: {msg}", self.at(&key)),
            None => anyhow::anyhow!("{} (with OUTBOX__ overrides): {msg}", self.file),
        }
    }

    /// `msg` without any value that may be secret: serde's quoted literal after `invalid type:`
    /// and `invalid value:`, the text at the error (`raws`), and every override's value; with
    /// control characters escaped.
    fn scrub(&self, msg: &str, raws: &[&str]) -> String {
        let mut out = drop_serde_literals(msg);
        let values = raws.iter().map(|r| unquote(r)).chain(self.overrides.iter().map(|o| o.raw.trim()));
        for v in values {
            // Shorter values are not secrets and would garble the message (`1`, `true`).
            if v.chars().count() >= 4 {
                out = out.replace(v, "***");
            }
        }
        outbox_core::text::printable(out.trim_end(), 2000).replace("\\n", "; ")
    }
}

/// The text at an error that may be a value: none when the error points at a key (an
/// unknown field, which the message names and which is no secret).
fn value_text<'a>(message: &str, raw: &'a str) -> &'a str {
    if message.starts_with("unknown field") || message.starts_with("duplicate key") {
        ""
    } else {
        raw
    }
}

/// `raw` (a TOML value as written) without its quotes.
fn unquote(raw: &str) -> &str {
    let t = raw.trim();
    for q in ["\"\"\"", "'''", "\"", "'"] {
        if t.len() >= 2 * q.len() && t.starts_with(q) && t.ends_with(q) {
            return &t[q.len()..t.len() - q.len()];
        }
    }
    t
}

/// `msg` with the literal serde quotes after `invalid type: <kind>` / `invalid value: <kind>`
/// left out (`invalid type: string "hunter2", expected u32` -> `invalid type: string, expected
/// u32`).
fn drop_serde_literals(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    loop {
        let next = ["invalid type: ", "invalid value: "]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, m.len())))
            .min();
        let Some((i, len)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + len]);
        rest = &rest[i + len..];
        // `<kind words> "literal"` or `<kind words> `literal``
        let kind_end = rest.find(['"', '`', ',']).unwrap_or(rest.len());
        let quote = rest[kind_end..].chars().next();
        if let Some(q @ ('"' | '`')) = quote {
            out.push_str(rest[..kind_end].trim_end());
            let body = &rest[kind_end + 1..];
            let close = if q == '"' { closing_quote(body) } else { body.find('`') };
            rest = match close {
                Some(c) => &body[c + 1..],
                None => "",
            };
        }
    }
}

/// Index of the closing `"` of a Debug-quoted string body (skipping `\"`).
fn closing_quote(body: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_literals_are_dropped() {
        assert_eq!(
            drop_serde_literals("invalid type: string \"hun\\\"ter2\", expected u32"),
            "invalid type: string, expected u32"
        );
        assert_eq!(
            drop_serde_literals(
                "invalid value: integer `12345`, expected u32 and invalid type: floating point `1.5`, x"
            ),
            "invalid value: integer, expected u32 and invalid type: floating point, x"
        );
        assert_eq!(
            drop_serde_literals("invalid type: map, expected a string"),
            "invalid type: map, expected a string"
        );
        assert_eq!(drop_serde_literals("invalid type: string \"unterminated"), "invalid type: string");
    }
}
