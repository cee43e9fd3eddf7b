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

mod render;
use render::Renderer;

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
const FUNCTIONS: &[&str] = &[
    "outbox_notify_relay",
    "outbox_text_ok",
    "outbox_headers_ok",
    "outbox_fields_ok",
    "outbox_times_ok",
    "outbox_message_rules_ok",
];

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
    "message_rules",
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

#[cfg(test)]
mod tests;
