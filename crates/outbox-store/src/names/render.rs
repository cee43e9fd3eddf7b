//! [`Renderer`]: rewrites SQL written with the canonical names for a schema and prefix, token by
//! token (see the parent module for the rules).

use super::{push_schema, Dialect, CANONICAL_PREFIX, FUNCTIONS, MYSQL_TRIGGERS, TABLES};

pub(super) struct Renderer<'a> {
    pub(super) dialect: Dialect,
    pub(super) schema: Option<&'a str>,
    pub(super) prefix: &'a str,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

impl Renderer<'_> {
    pub(super) fn render(&self, sql: &str) -> String {
        let b = sql.as_bytes();
        let mut out = String::with_capacity(sql.len() + 64);
        let mut i = 0;
        let mut last = 0; // start of the text not yet copied
        while i < b.len() {
            let c = b[i];
            if c == b'-' && b.get(i + 1) == Some(&b'-') {
                // A line comment: its names are renamed like code (it may show SQL to copy).
                let end = sql[i..].find('\n').map_or(b.len(), |n| i + n);
                out.push_str(&sql[last..i]);
                self.code(&sql[i..end], &mut out);
                i = end;
                last = i;
            } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
                let end = sql[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                out.push_str(&sql[last..i]);
                self.code(&sql[i..end], &mut out);
                i = end;
                last = i;
            } else if c == b'\'' {
                let end = self.literal_end(b, i);
                out.push_str(&sql[last..i]);
                self.literal(&sql[i..end], &mut out);
                i = end;
                last = i;
            } else if c == b'"' || c == b'`' {
                // A quoted identifier: left as written.
                i = sql[i + 1..].find(c as char).map_or(b.len(), |n| i + 1 + n + 1);
            } else if is_ident(c) {
                let start = i;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                out.push_str(&sql[last..start]);
                self.token(&sql[start..i], &sql[i..], &mut out, &mut i);
                last = i;
            } else {
                i += 1;
            }
        }
        out.push_str(&sql[last..]);
        out
    }

    /// The end (exclusive) of the string literal opening at `start`: `''` is a quote inside
    /// it, and so is `\'` on MySQL.
    fn literal_end(&self, b: &[u8], start: usize) -> usize {
        let mut i = start + 1;
        while i < b.len() {
            match b[i] {
                b'\\' if self.dialect == Dialect::MySql => i += 2,
                b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
                b'\'' => return i + 1,
                _ => i += 1,
            }
        }
        b.len()
    }

    /// A string literal (quotes included): one name alone gets the prefix only; SQL text in
    /// a string is rendered like code.
    fn literal(&self, lit: &str, out: &mut String) {
        let inner = lit.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')).unwrap_or("");
        if inner.starts_with(CANONICAL_PREFIX) && inner.bytes().all(is_ident) {
            out.push('\'');
            self.prefixed(inner, out);
            out.push('\'');
        } else {
            self.code(lit, out);
        }
    }

    /// Renders every name in `text` as code (no literal or comment inside it is looked for).
    fn code(&self, text: &str, out: &mut String) {
        let b = text.as_bytes();
        let mut i = 0;
        let mut last = 0;
        while i < b.len() {
            if is_ident(b[i]) {
                let start = i;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                out.push_str(&text[last..start]);
                self.token(&text[start..i], &text[i..], out, &mut i);
                last = i;
            } else {
                i += 1;
            }
        }
        out.push_str(&text[last..]);
    }

    /// One identifier token; `rest` is the text after it (and `*i` its end, advanced past
    /// anything consumed with it).
    fn token(&self, tok: &str, rest: &str, out: &mut String, i: &mut usize) {
        if tok.starts_with(CANONICAL_PREFIX) {
            let qualify = TABLES.contains(&tok)
                || (self.dialect == Dialect::Postgres && FUNCTIONS.contains(&tok))
                || (self.dialect == Dialect::MySql && MYSQL_TRIGGERS.contains(&tok));
            if qualify {
                if let Some(s) = self.schema {
                    push_schema(out, self.dialect, s);
                }
            }
            self.prefixed(tok, out);
        } else if self.dialect == Dialect::MySql
            && tok.eq_ignore_ascii_case("DATABASE")
            && rest.starts_with("()")
            && self.schema.is_some()
        {
            out.push('\'');
            out.push_str(self.schema.unwrap_or_default());
            out.push('\'');
            *i += 2;
        } else {
            out.push_str(tok);
        }
    }

    fn prefixed(&self, tok: &str, out: &mut String) {
        out.push_str(self.prefix);
        out.push_str(&tok[CANONICAL_PREFIX.len()..]);
    }
}
