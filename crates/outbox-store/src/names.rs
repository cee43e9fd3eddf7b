//! Schema and table names: [`Tables`] renames every object of the outbox (and of the inbox).
//!
//! The SQL is written once, with the canonical `outbox_` names (the shipped `.sql` files and
//! the queries in this crate). [`Tables::render`] rewrites it for a configured PostgreSQL schema
//! / MySQL database and table prefix:
//!
//! - every identifier token that starts with `outbox_` gets the prefix in place of `outbox_`
//!   (`outbox_message_due_idx` -> `app_message_due_idx`); tokens are whole runs of
//!   `[A-Za-z0-9_$]`, so a name is never matched inside another one;
//! - tables and PostgreSQL functions are qualified with the quoted schema (`"s".app_message`,
//!   `` `s`.app_message ``), and so are MySQL's triggers (MySQL puts a trigger in the schema
//!   its name says, and refuses one in another schema than its table's); indexes and
//!   constraints get the prefix only (they live in their table's schema);
//! - a string literal that is exactly one name (`'outbox_message'`: the PostgreSQL NOTIFY
//!   channel, `information_schema` lookups) gets the prefix only; a literal holding SQL text
//!   (MySQL's prepared `ALTER TABLE`) is rendered like code;
//! - on MySQL with a schema, `DATABASE()` becomes the schema as a string (the shipped SQL asks
//!   `information_schema` about "the outbox's database").
//!
//! Identifiers are checked against a strict pattern in [`Tables::new`], before any of them can
//! reach SQL. The default (no schema, prefix `outbox_`) renders nothing: [`Tables::render`]
//! returns its input borrowed.

use std::borrow::Cow;
use std::sync::Arc;

use outbox_core::{Error, Result};

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub(crate) use crate::any::Dialect;

/// Which database SQL is rendered for (a build without any database feature has no
/// `AnyOutbox`, whose module defines the public `Dialect` otherwise).
#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

/// The canonical prefix every object name of the shipped SQL starts with.
pub const CANONICAL_PREFIX: &str = "outbox_";

/// Longest prefix [`Tables::new`] accepts.
pub const MAX_PREFIX_LEN: usize = 24;

/// Longest schema name [`Tables::new`] accepts (PostgreSQL's identifier limit).
pub const MAX_SCHEMA_LEN: usize = 63;

/// Longest object name PostgreSQL keeps (MySQL allows 64): every derived name must fit.
pub const MAX_NAME_LEN: usize = 63;

/// Tables (outbox and inbox): qualified with the schema when one is set.
const TABLES: &[&str] = &[
    "outbox_message",
    "outbox_delivery",
    "outbox_relay_idle",
    "outbox_destination_pause",
    "outbox_relay",
    "outbox_schema_migrations",
    "outbox_inbox",
    "outbox_inbox_schema_migrations",
];

/// PostgreSQL functions: qualified with the schema when one is set.
const FUNCTIONS: &[&str] = &["outbox_notify_relay", "outbox_text_ok", "outbox_headers_ok"];

/// MySQL/MariaDB triggers: qualified with the schema when one is set (a trigger lives in the
/// schema its name names, which must be its table's).
const MYSQL_TRIGGERS: &[&str] = &["outbox_message_open_key_insert", "outbox_message_open_key_update"];

/// Every other object name the shipped SQL creates or names (indexes, constraints, triggers,
/// PostgreSQL's implicit `_pkey`/`_seq` names), without the canonical prefix: what the longest
/// derived name is computed from, and what a constraint name is recognised by in a database's
/// error message whatever the prefix.
pub(crate) const OTHER_SUFFIXES: &[&str] = &[
    "message_topic_not_blank",
    "message_key_not_blank",
    "message_tag_not_blank",
    "message_biz_pair",
    "message_biz_not_blank",
    "message_status_known",
    "message_attempts_not_negative",
    "message_max_attempts_positive",
    "message_headers_object",
    "message_sending_has_lease",
    "message_biz_unique",
    "message_times_in_range",
    "message_well_formed",
    "message_last_error_bounded",
    "message_due_idx",
    "message_due_nokey_idx",
    "message_open_key_idx",
    "message_open_head_idx",
    "message_status_updated_idx",
    "message_notify",
    "message_open_key_insert",
    "message_open_key_update",
    "message_id_seq",
    "message_pkey",
    "delivery_message_fk",
    "delivery_destination_not_blank",
    "delivery_status_known",
    "delivery_attempts_not_negative",
    "delivery_last_error_bounded",
    "delivery_ack_due_idx",
    "delivery_pkey",
    "destination_pause_named",
    "destination_pause_pkey",
    "relay_named",
    "relay_pkey",
    "relay_idle_pkey",
    "schema_migrations_pkey",
    "inbox_pkey",
    "inbox_group_not_blank",
    "inbox_message_id_not_blank",
    "inbox_processed_at_idx",
    "inbox_schema_migrations_pkey",
    "inbox_migrate",
    "migrate",
];

/// The longest name derived from any canonical name, without the prefix.
fn longest_suffix() -> usize {
    TABLES
        .iter()
        .chain(FUNCTIONS)
        .map(|t| t.len() - CANONICAL_PREFIX.len())
        .chain(OTHER_SUFFIXES.iter().map(|s| s.len()))
        .max()
        .unwrap_or(0)
}

/// Where the outbox's (and the inbox's) objects live and what they are called: an optional
/// schema (PostgreSQL schema, MySQL/MariaDB database; SQLite has none) and a table prefix
/// (default `outbox_`). Cheap to clone. See the module docs for how SQL is renamed.
///
/// ```
/// use outbox_store::{Dialect, Tables};
/// let t = Tables::new(Some("billing"), "app_")?;
/// assert_eq!(t.render(Dialect::Postgres, "SELECT id FROM outbox_message"),
///            r#"SELECT id FROM "billing".app_message"#);
/// assert!(Tables::new(None, "x; drop").is_err());
/// # Ok::<(), outbox_store::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    /// `None`: the canonical names (nothing to render).
    inner: Option<Arc<Names>>,
}

#[derive(Debug, PartialEq, Eq)]
struct Names {
    schema: Option<String>,
    prefix: String,
}

/// The default names: no schema, prefix `outbox_`.
static CANONICAL: Tables = Tables { inner: None };

impl Tables {
    /// `schema` (PostgreSQL schema / MySQL database; `None` for the connection's own) and
    /// `prefix` (what replaces `outbox_` in every object name), checked:
    /// - schema: `[a-z_][a-z0-9_]*`, at most 63 characters;
    /// - prefix: `[a-z][a-z0-9_]*`, at most 24 characters, and short enough that every name
    ///   derived from it fits PostgreSQL's 63-byte limit.
    ///
    /// Anything else is [`Error::Config`] naming the value (printable, bounded) and the rule,
    /// before any of it reaches SQL.
    pub fn new(schema: Option<&str>, prefix: &str) -> Result<Tables> {
        if let Some(s) = schema {
            check_schema(s)?;
        }
        check_prefix(prefix)?;
        if schema.is_none() && prefix == CANONICAL_PREFIX {
            return Ok(Tables::default());
        }
        Ok(Tables {
            inner: Some(Arc::new(Names { schema: schema.map(str::to_owned), prefix: prefix.to_owned() })),
        })
    }

    /// The default names (no schema, prefix `outbox_`), as a `'static` reference.
    pub fn canonical() -> &'static Tables {
        &CANONICAL
    }

    /// True for the default names: nothing is renamed.
    pub fn is_canonical(&self) -> bool {
        self.inner.is_none()
    }

    /// The schema, if one is set.
    pub fn schema(&self) -> Option<&str> {
        self.inner.as_ref().and_then(|n| n.schema.as_deref())
    }

    /// The prefix (`outbox_` by default).
    pub fn prefix(&self) -> &str {
        self.inner.as_ref().map_or(CANONICAL_PREFIX, |n| n.prefix.as_str())
    }

    /// Fails when `dialect` cannot hold these names: SQLite has no schemas.
    pub fn check_for(&self, dialect: Dialect) -> Result<()> {
        if dialect == Dialect::Sqlite {
            if let Some(s) = self.schema() {
                return Err(Error::Config(format!(
                    "schema {s:?}: SQLite has no schemas (use a table prefix, or another database file)"
                )));
            }
        }
        Ok(())
    }

    /// `canonical` (an `outbox_...` name) with the prefix, unqualified.
    pub fn name<'a>(&self, canonical: &'a str) -> Cow<'a, str> {
        match (&self.inner, canonical.strip_prefix(CANONICAL_PREFIX)) {
            (Some(n), Some(rest)) => Cow::Owned(format!("{}{rest}", n.prefix)),
            _ => Cow::Borrowed(canonical),
        }
    }

    /// The table `canonical` as SQL names it in `dialect`: prefixed, and qualified with the
    /// quoted schema when one is set.
    pub fn table(&self, dialect: Dialect, canonical: &str) -> String {
        let mut out = String::new();
        if let Some(s) = self.schema() {
            push_schema(&mut out, dialect, s);
        }
        out.push_str(&self.name(canonical));
        out
    }

    /// The PostgreSQL `LISTEN`/`NOTIFY` channel of the relay's wake-up.
    pub fn channel(&self) -> Cow<'static, str> {
        match self.name("outbox_message") {
            Cow::Borrowed(_) => Cow::Borrowed("outbox_message"),
            Cow::Owned(s) => Cow::Owned(s),
        }
    }

    /// The PostgreSQL advisory-lock key of a migrator whose canonical key is `base`: `base`
    /// for the default names, else a hash of it with the schema and prefix (so two prefixes
    /// migrate independently).
    pub fn pg_lock(&self, base: i64) -> i64 {
        match &self.inner {
            None => base,
            Some(n) => {
                let mut bytes = base.to_be_bytes().to_vec();
                bytes.extend_from_slice(n.schema.as_deref().unwrap_or("").as_bytes());
                bytes.push(0);
                bytes.extend_from_slice(n.prefix.as_bytes());
                i64::from_be_bytes(fnv1a(&bytes).to_be_bytes())
            }
        }
    }

    /// The MySQL `GET_LOCK` name of a migrator whose canonical name is `base` (an `outbox_...`
    /// name): prefixed, with a hash of the schema when one is set (lock names are server-wide).
    pub fn mysql_lock(&self, base: &str) -> String {
        let mut name = self.name(base).into_owned();
        if let Some(s) = self.schema() {
            name.push_str(&format!("_{:016x}", fnv1a(s.as_bytes())));
        }
        name
    }

    /// `sql` (written with the canonical names) for these names in `dialect`; borrowed when
    /// nothing changes (always for the default names).
    pub fn render<'a>(&self, dialect: Dialect, sql: &'a str) -> Cow<'a, str> {
        let Some(names) = &self.inner else {
            return Cow::Borrowed(sql);
        };
        let schema = names.schema.as_deref();
        let database_call =
            schema.is_some() && dialect == Dialect::MySql && sql.to_ascii_uppercase().contains("DATABASE()");
        if !database_call && !sql.contains(CANONICAL_PREFIX) {
            return Cow::Borrowed(sql);
        }
        let r = Renderer { dialect, schema, prefix: &names.prefix };
        Cow::Owned(r.render(sql))
    }
}

/// FNV-1a, 64 bits: a stable hash for lock keys.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn push_schema(out: &mut String, dialect: Dialect, schema: &str) {
    // The pattern keeps quotes out of `schema`.
    let q = if dialect == Dialect::MySql { '`' } else { '"' };
    out.push(q);
    out.push_str(schema);
    out.push(q);
    out.push('.');
}

fn shown(value: &str) -> String {
    format!("{:?}", outbox_core::text::printable(value, 80))
}

fn check_schema(s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= MAX_SCHEMA_LEN
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "schema {}: must match [a-z_][a-z0-9_]* (lowercase ASCII letters, digits and _, not starting \
             with a digit) and be at most {MAX_SCHEMA_LEN} characters",
            shown(s)
        )))
    }
}

fn check_prefix(p: &str) -> Result<()> {
    let shaped = !p.is_empty()
        && p.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !shaped || p.len() > MAX_PREFIX_LEN {
        return Err(Error::Config(format!(
            "table prefix {}: must match [a-z][a-z0-9_]* (a lowercase ASCII letter, then lowercase letters, \
             digits and _) and be at most {MAX_PREFIX_LEN} characters",
            shown(p)
        )));
    }
    let longest = p.len() + longest_suffix();
    if longest > MAX_NAME_LEN {
        return Err(Error::Config(format!(
            "table prefix {}: the longest name derived from it would be {longest} bytes, over the \
             {MAX_NAME_LEN}-byte limit of PostgreSQL identifiers",
            shown(p)
        )));
    }
    Ok(())
}

struct Renderer<'a> {
    dialect: Dialect,
    schema: Option<&'a str>,
    prefix: &'a str,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

impl Renderer<'_> {
    fn render(&self, sql: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(t: &Tables, s: &str) -> String {
        t.render(Dialect::Postgres, s).into_owned()
    }

    #[test]
    fn the_default_is_the_identity_and_borrows() {
        let t = Tables::new(None, "outbox_").unwrap();
        assert!(t.is_canonical());
        let sql = "SELECT id FROM outbox_message";
        assert!(matches!(t.render(Dialect::Postgres, sql), Cow::Borrowed(s) if std::ptr::eq(s, sql)));
        assert!(matches!(Tables::default().render(Dialect::MySql, sql), Cow::Borrowed(_)));
        for m in crate::postgres::MIGRATIONS
            .iter()
            .chain(crate::mysql::MIGRATIONS)
            .chain(crate::sqlite::MIGRATIONS)
        {
            assert!(matches!(t.render(Dialect::Postgres, m.sql), Cow::Borrowed(_)));
        }
        assert_eq!(t.channel(), "outbox_message");
        assert_eq!(t.pg_lock(42), 42);
        assert_eq!(t.mysql_lock("outbox_migrate"), "outbox_migrate");
    }

    #[test]
    fn tables_and_functions_are_qualified_indexes_and_constraints_are_not() {
        let t = Tables::new(Some("s1"), "app_").unwrap();
        assert_eq!(
            pg(&t, "CREATE INDEX outbox_message_due_idx ON outbox_message (next_attempt_at, id)"),
            r#"CREATE INDEX app_message_due_idx ON "s1".app_message (next_attempt_at, id)"#
        );
        assert_eq!(
            pg(
                &t,
                "CREATE TRIGGER outbox_message_notify AFTER INSERT ON outbox_message \
                    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_relay();"
            ),
            r#"CREATE TRIGGER app_message_notify AFTER INSERT ON "s1".app_message FOR EACH STATEMENT EXECUTE FUNCTION "s1".app_notify_relay();"#
        );
        assert_eq!(
            pg(&t, "CHECK (outbox_text_ok(topic)),CONSTRAINT outbox_message_biz_unique UNIQUE"),
            r#"CHECK ("s1".app_text_ok(topic)),CONSTRAINT app_message_biz_unique UNIQUE"#
        );
        // Column references through the table name stay valid (schema.table.column).
        assert_eq!(
            pg(&t, "SELECT outbox_message.id,outbox_delivery.x"),
            r#"SELECT "s1".app_message.id,"s1".app_delivery.x"#
        );
        let my = t.render(
            Dialect::MySql,
            "DROP TRIGGER IF EXISTS outbox_message_open_key_insert; UPDATE outbox_message",
        );
        assert_eq!(my, "DROP TRIGGER IF EXISTS `s1`.app_message_open_key_insert; UPDATE `s1`.app_message");
    }

    #[test]
    fn tokens_are_whole_words() {
        let t = Tables::new(None, "x_").unwrap();
        assert_eq!(pg(&t, "outbox_message_due_idx outbox_message"), "x_message_due_idx x_message");
        // Not names: inside other words, Rust-like paths, file names.
        assert_eq!(
            pg(&t, "my_outbox_message 0001_outbox.sql aoutbox_x"),
            "my_outbox_message 0001_outbox.sql aoutbox_x"
        );
        assert_eq!(pg(&t, "(outbox_message)"), "(x_message)");
        assert_eq!(pg(&t, "@outbox_ddl,outbox_relay;"), "@x_ddl,x_relay;");
        // Quoted identifiers are left as written.
        assert_eq!(
            pg(&t, r#"SELECT "outbox_message" FROM outbox_relay"#),
            r#"SELECT "outbox_message" FROM x_relay"#
        );
        assert_eq!(pg(&t, "outbox_"), "x_");
    }

    #[test]
    fn literals_with_one_name_get_the_prefix_only() {
        let t = Tables::new(Some("s"), "x_").unwrap();
        assert_eq!(pg(&t, "PERFORM pg_notify('outbox_message', '');"), "PERFORM pg_notify('x_message', '');");
        assert_eq!(
            t.render(Dialect::MySql, "WHERE table_schema = DATABASE() AND table_name = 'outbox_message'"),
            "WHERE table_schema = 's' AND table_name = 'x_message'"
        );
        // SQL held in a string is rendered like code.
        assert_eq!(
            t.render(Dialect::MySql, "'ALTER TABLE outbox_message ADD KEY outbox_message_open_head_idx (k)'"),
            "'ALTER TABLE `s`.x_message ADD KEY x_message_open_head_idx (k)'"
        );
        // A quote in a literal does not end it; an apostrophe in a comment opens nothing.
        assert_eq!(pg(&t, "'it''s outbox_x' outbox_relay"), r#"'it''s x_x' "s".x_relay"#);
        assert_eq!(
            pg(&t, "-- the relay's outbox_relay\nSELECT 'a' FROM outbox_relay"),
            "-- the relay's \"s\".x_relay\nSELECT 'a' FROM \"s\".x_relay"
        );
        assert_eq!(t.channel(), "x_message");
    }

    #[test]
    fn every_shipped_name_is_known() {
        // A new object in a migration must be added to the lists above (its length counts).
        let known = |tok: &str| {
            let rest = &tok[CANONICAL_PREFIX.len()..];
            TABLES.contains(&tok)
                || FUNCTIONS.contains(&tok)
                || OTHER_SUFFIXES.contains(&rest)
                || rest.is_empty()
                || rest == "ddl"
        };
        for m in crate::postgres::MIGRATIONS
            .iter()
            .chain(crate::mysql::MIGRATIONS)
            .chain(crate::sqlite::MIGRATIONS)
        {
            for tok in m.sql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if tok.starts_with(CANONICAL_PREFIX) {
                    assert!(known(tok), "{tok} in migration {}", m.version);
                }
            }
        }
    }

    #[test]
    fn bad_identifiers_are_refused_with_the_rule() {
        for (schema, prefix) in [
            (None, "x; drop"),
            (None, "App_"),
            (None, ""),
            (None, "1x_"),
            (None, "é_"),
            (None, "x-"),
            (None, &*"a".repeat(25)),
            (Some("x; drop"), "x_"),
            (Some("Sales"), "x_"),
            (Some(""), "x_"),
            (Some("ü"), "x_"),
            (Some(&*"s".repeat(64)), "x_"),
            (Some("a\"b"), "x_"),
        ] {
            let err = Tables::new(schema, prefix).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Config(_)), "{text}");
            assert!(text.contains("must match"), "{text}");
        }
        // Shown printable and bounded.
        let text = Tables::new(None, &format!("\u{1b}[31m{}", "y".repeat(10_000))).unwrap_err().to_string();
        assert!(!text.contains('\u{1b}') && text.len() < 400, "{text}");
        assert!(Tables::new(Some(&"s".repeat(63)), &"p".repeat(24)).is_ok());
        assert!(Tables::new(Some("_s"), "p").is_ok());
    }

    #[test]
    fn every_derived_name_fits_63_bytes() {
        let longest = MAX_PREFIX_LEN + longest_suffix();
        assert!(longest <= MAX_NAME_LEN, "{longest}");
        // The check itself: a 40-byte prefix would overflow (refused by the length rule first).
        assert!(40 + longest_suffix() > MAX_NAME_LEN);
        assert!(Tables::new(None, &"p".repeat(40)).is_err());
    }

    #[test]
    fn sqlite_has_no_schema() {
        let t = Tables::new(Some("s"), "x_").unwrap();
        assert!(t.check_for(Dialect::Sqlite).unwrap_err().to_string().contains("SQLite has no schemas"));
        assert!(t.check_for(Dialect::Postgres).is_ok());
        assert!(Tables::new(None, "x_").unwrap().check_for(Dialect::Sqlite).is_ok());
    }

    #[test]
    fn locks_differ_per_names() {
        let a = Tables::new(None, "a_").unwrap();
        let b = Tables::new(None, "b_").unwrap();
        let s = Tables::new(Some("s"), "a_").unwrap();
        assert_ne!(a.pg_lock(7), b.pg_lock(7));
        assert_ne!(a.pg_lock(7), s.pg_lock(7));
        assert_ne!(a.pg_lock(7), a.pg_lock(8));
        assert_eq!(a.mysql_lock("outbox_migrate"), "a_migrate");
        assert!(s.mysql_lock("outbox_inbox_migrate").starts_with("a_inbox_migrate_"));
        assert!(s.mysql_lock("outbox_inbox_migrate").len() <= 64);
        assert_eq!(s.table(Dialect::MySql, "outbox_inbox"), "`s`.a_inbox");
        assert_eq!(a.table(Dialect::Postgres, "outbox_inbox"), "a_inbox");
    }
}
