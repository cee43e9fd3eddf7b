//! Where each key of a TOML document is. The `toml` parser gives spans through
//! `toml::Spanned`; this reads every value of the document through the same mechanism, but
//! falls back to "no span" where the parser has none (implicit tables), instead of failing.
//! Also the line and column of an offset, and the key an error at a span, or on a line of a
//! document that does not parse, is about.

use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::env::{push_index, push_key};
use outbox_core::text::line_col;

// The names `toml::Spanned` (serde_spanned) uses to ask the parser for a value's span.
const NAME: &str = "$__serde_spanned_private_Spanned";
const START: &str = "$__serde_spanned_private_start";
const END: &str = "$__serde_spanned_private_end";
const VALUE: &str = "$__serde_spanned_private_value";
const FIELDS: &[&str] = &[START, END, VALUE];

/// Every key path of `text` (`relay.lease`, `stores[0].url`) with the span of its value.
/// Empty when `text` does not parse.
pub(super) fn locate(text: &str) -> Vec<(String, Range<usize>)> {
    let Ok(root) = toml::from_str::<Located>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk(&root, "", &mut out);
    out
}

fn walk(l: &Located, path: &str, out: &mut Vec<(String, Range<usize>)>) {
    if let (Some(span), false) = (&l.span, path.is_empty()) {
        out.push((path.to_owned(), span.clone()));
    }
    match &l.node {
        Node::Table(entries) => {
            for (k, v) in entries {
                let mut p = path.to_owned();
                push_key(&mut p, k);
                walk(v, &p, out);
            }
        }
        Node::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut p = path.to_owned();
                push_index(&mut p, i);
                walk(v, &p, out);
            }
        }
        Node::Leaf => {}
    }
}

struct Located {
    span: Option<Range<usize>>,
    node: Node,
}

enum Node {
    Table(Vec<(String, Located)>),
    Array(Vec<Located>),
    Leaf,
}

impl<'de> Deserialize<'de> for Located {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct(NAME, FIELDS, LocatedVisitor)
    }
}

/// The value inside a span: any TOML value.
struct Inner(Node);

impl<'de> Deserialize<'de> for Inner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LocatedVisitor).map(|l| Inner(l.node))
    }
}

struct LocatedVisitor;

fn leaf() -> Located {
    Located { span: None, node: Node::Leaf }
}

impl<'de> Visitor<'de> for LocatedVisitor {
    type Value = Located;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a TOML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Located, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Ok(Located { span: None, node: Node::Table(Vec::new()) });
        };
        if first == START {
            let start: usize = map.next_value()?;
            let mut end = start;
            let mut node = Node::Leaf;
            while let Some(k) = map.next_key::<String>()? {
                if k == END {
                    end = map.next_value()?;
                } else if k == VALUE {
                    node = map.next_value::<Inner>()?.0;
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            return Ok(Located { span: Some(start..end.max(start)), node });
        }
        let mut entries = vec![(first, map.next_value::<Located>()?)];
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value::<Located>()?;
            entries.push((k, v));
        }
        Ok(Located { span: None, node: Node::Table(entries) })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Located, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<Located>()? {
            items.push(v);
        }
        Ok(Located { span: None, node: Node::Array(items) })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Located, E> {
        Ok(leaf())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Located, E> {
        Ok(leaf())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Located, E> {
        Ok(leaf())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Located, E> {
        Ok(leaf())
    }
    fn visit_str<E>(self, _: &str) -> Result<Located, E> {
        Ok(leaf())
    }
    fn visit_unit<E>(self) -> Result<Located, E> {
        Ok(leaf())
    }
}

/// The key an error at `span` is about: among the keys whose value starts on the error's line,
/// the innermost holding `span`, else the longest (an error pointing at a key, like an unknown
/// field); failing that, the innermost key whose value holds `span` (a table).
pub(super) fn key_at(located: &[(String, Range<usize>)], text: &str, span: &Range<usize>) -> Option<String> {
    let holds = |s: &Range<usize>| s.start <= span.start && span.start < s.end.max(s.start + 1);
    let line = line_col(text, span.start).0;
    let on_line: Vec<&(String, Range<usize>)> =
        located.iter().filter(|(_, s)| line_col(text, s.start).0 == line).collect();
    let found = on_line
        .iter()
        .filter(|(_, s)| holds(s))
        .min_by_key(|(_, s)| s.end - s.start)
        .or_else(|| on_line.iter().max_by_key(|(k, _)| k.len()))
        .map(|(k, _)| k.clone());
    found.or_else(|| {
        located.iter().filter(|(_, s)| holds(s)).min_by_key(|(_, s)| s.end - s.start).map(|(k, _)| k.clone())
    })
}

/// The key a line of a document that does not parse sets, read the simple way: the last
/// `[table]` or `[[array]]` header above it and the bare (or dotted bare) key before its `=`.
/// Only key characters are ever returned, never a value. `None` when the line is no
/// `key = ...` line.
pub(super) fn key_on_line(text: &str, line: usize) -> Option<String> {
    let bare = |s: &str| {
        let parts: Vec<&str> = s.split('.').map(str::trim).collect();
        parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .then(|| parts.join("."))
    };
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?;
    let key = bare(this.split_once('=')?.0)?;
    let mut table: Option<String> = None;
    for (i, l) in lines[..line - 1].iter().enumerate().rev() {
        let l = l.trim();
        let Some(header) = l.strip_prefix('[') else { continue };
        let array = header.starts_with('[');
        let name = header.trim_start_matches('[').split(']').next().and_then(bare)?;
        table = Some(if array {
            let this_header = format!("[[{name}]]");
            let index = lines[..=i]
                .iter()
                .filter(|h| h.trim().replace(' ', "").starts_with(&this_header))
                .count()
                .saturating_sub(1);
            format!("{name}[{index}]")
        } else {
            name
        });
        break;
    }
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_lines_that_do_not_parse() {
        let text = "a = 1\n[relay]\nlease = \"x\n[[stores]]\n[[stores]]\nurl = \"p\n[ x . y ]\nk.l = {\nv\n";
        assert_eq!(key_on_line(text, 1).as_deref(), Some("a"));
        assert_eq!(key_on_line(text, 3).as_deref(), Some("relay.lease"));
        assert_eq!(key_on_line(text, 6).as_deref(), Some("stores[1].url"));
        assert_eq!(key_on_line(text, 8).as_deref(), Some("x.y.k.l"));
        assert_eq!(key_on_line(text, 9), None);
        assert_eq!(key_on_line(text, 99), None);
        assert_eq!(key_on_line("\"quoted key\" = 1", 1), None);
    }
}
