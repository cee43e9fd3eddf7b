//! The mapping: a `[[adopt]]` section of the relay's TOML, checked into a [`Bridge`].
//!
//! Every name and value that ends up in SQL is checked here, before any SQL is written:
//! identifiers against a strict pattern (then quoted), constants against a charset that needs
//! no escaping beyond doubling nothing. A bad mapping is refused with the key that is wrong.

use serde::Deserialize;

use crate::AdoptError;

/// Longest bridge name: every object the bridge installs is `<prefix>adopt_<name>_<role>`, and
/// must fit PostgreSQL's 63-character identifiers with a 24-character table prefix.
pub const MAX_BRIDGE_NAME: usize = 20;

/// One `[[adopt]]` section as written in the TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// The bridge's name, `[a-z][a-z0-9_]*`, at most 20 characters: it names the installed
    /// triggers and functions.
    pub name: String,
    /// The `[[stores]]` entry (by name) whose database holds the legacy table. Optional when
    /// the relay has one store.
    #[serde(default)]
    pub store: Option<String>,
    /// The legacy table.
    pub table: String,
    /// The PostgreSQL schema / MySQL database of the legacy table. Defaults to the
    /// connection's own.
    #[serde(default)]
    pub schema: Option<String>,
    /// Its integer primary key. Defaults to `id`.
    #[serde(default)]
    pub id_column: Option<String>,
    /// A constant topic for every row (`topic` or `topic_column`, exactly one).
    #[serde(default)]
    pub topic: Option<String>,
    /// The column that holds each row's topic.
    #[serde(default)]
    pub topic_column: Option<String>,
    /// The column that holds the payload (text or JSON).
    pub payload_column: String,
    /// The ordering key (messages of one key are delivered in insert order).
    #[serde(default)]
    pub key_column: Option<String>,
    /// A tag (RocketMQ tag, AMQP routing key suffix; carried as the message's tag).
    #[serde(default)]
    pub tag_column: Option<String>,
    /// Business type and key (both or neither); the legacy table should have them unique
    /// together, as `outbox_message` has.
    #[serde(default)]
    pub biz_type_column: Option<String>,
    /// See `biz_type_column`.
    #[serde(default)]
    pub biz_key_column: Option<String>,
    /// The legacy status column: only rows inserted with the `pending` value become messages,
    /// and the outcome is written back to it.
    #[serde(default)]
    pub status_column: Option<String>,
    /// What the legacy status values mean (required with `status_column`).
    #[serde(default)]
    pub status_values: Option<StatusValuesConfig>,
    /// Receives the message's attempt count.
    #[serde(default)]
    pub attempts_column: Option<String>,
    /// Receives the next attempt's time.
    #[serde(default)]
    pub next_attempt_column: Option<String>,
    /// Also read at insert: a row whose `next_attempt_column` is in the future is first sent
    /// then (a delayed message). Defaults to false: sent right after commit.
    #[serde(default)]
    pub delay_from_next_attempt: bool,
    /// Receives the last attempt's time.
    #[serde(default)]
    pub last_attempt_column: Option<String>,
    /// Receives the last failure's reason (cut to the column's length).
    #[serde(default)]
    pub reason_column: Option<String>,
}

/// `[adopt.status_values]`: the legacy value of each outbox status. `pending` and `sent` are
/// required; `sending` defaults to `pending`, `acked` to `sent`; a status with no legacy value
/// (`failed`, `cancelled` by default) leaves the legacy status as it is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusValuesConfig {
    /// Inserted rows with this value become messages.
    pub pending: Literal,
    /// While the relay publishes.
    #[serde(default)]
    pub sending: Option<Literal>,
    /// Published and confirmed by the broker.
    pub sent: Literal,
    /// Confirmed by the consumer (ACK mode).
    #[serde(default)]
    pub acked: Option<Literal>,
    /// Failed for good (a person re-drives it).
    #[serde(default)]
    pub failed: Option<Literal>,
    /// Cancelled by a person.
    #[serde(default)]
    pub cancelled: Option<Literal>,
}

/// A legacy status value: an integer (`0`) or a short string (`"SENT"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Literal {
    /// An integer status.
    Int(i64),
    /// A string status: letters, digits, `_`, `-`, `.`, at most 32.
    Text(String),
}

/// A checked identifier: `[A-Za-z_][A-Za-z0-9_]*`, at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident(String);

impl Ident {
    fn parse(key: &str, value: &str) -> Result<Ident, AdoptError> {
        let ok = !value.is_empty()
            && value.len() <= 64
            && value.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            Ok(Ident(value.to_owned()))
        } else {
            Err(AdoptError::config(
                key,
                format!("{} is not a plain SQL name ([A-Za-z_][A-Za-z0-9_]*, at most 64)", shown(value)),
            ))
        }
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where each row's topic comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSource {
    /// The same topic for every row.
    Constant(String),
    /// A column of the row.
    Column(Ident),
}

/// The legacy status column and its values, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMap {
    /// The column.
    pub column: Ident,
    /// Inserted rows with this value become messages.
    pub pending: Literal,
    /// Written while the relay publishes.
    pub sending: Literal,
    /// Written once the broker confirmed.
    pub sent: Literal,
    /// Written once the consumer confirmed.
    pub acked: Literal,
    /// Written when the message failed for good, if set.
    pub failed: Option<Literal>,
    /// Written when a person cancelled the message, if set.
    pub cancelled: Option<Literal>,
}

impl StatusMap {
    /// The legacy value of an outbox status, if it has one (`pending` and `sending` share
    /// the legacy value the mapping gives them).
    pub fn value_of(&self, status: &str) -> Option<&Literal> {
        match status {
            "pending" => Some(&self.pending),
            "sending" => Some(&self.sending),
            "sent" => Some(&self.sent),
            "acked" => Some(&self.acked),
            "failed" => self.failed.as_ref(),
            "cancelled" => self.cancelled.as_ref(),
            _ => None,
        }
    }
}

/// A checked mapping: everything `install`, `check` and `remove` need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    /// The bridge's name.
    pub name: String,
    /// The legacy table's schema, if not the connection's own.
    pub schema: Option<Ident>,
    /// The legacy table.
    pub table: Ident,
    /// Its integer primary key.
    pub id: Ident,
    /// Topic.
    pub topic: TopicSource,
    /// Payload column.
    pub payload: Ident,
    /// Ordering key column.
    pub key: Option<Ident>,
    /// Tag column.
    pub tag: Option<Ident>,
    /// Business type and key columns.
    pub biz: Option<(Ident, Ident)>,
    /// Status column and values.
    pub status: Option<StatusMap>,
    /// Attempt count column.
    pub attempts: Option<Ident>,
    /// Next attempt time column.
    pub next_attempt: Option<Ident>,
    /// Whether the next attempt column delays the first send.
    pub delay_from_next_attempt: bool,
    /// Last attempt time column.
    pub last_attempt: Option<Ident>,
    /// Failure reason column.
    pub reason: Option<Ident>,
}

impl BridgeConfig {
    /// Checks the mapping. Errors name the key (`adopt.<name>.<key>`) and what is wrong.
    pub fn check(&self) -> Result<Bridge, AdoptError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_BRIDGE_NAME
            && self.name.starts_with(|c: char| c.is_ascii_lowercase())
            && self.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !name_ok {
            return Err(AdoptError::config(
                "adopt.name",
                format!(
                    "{} is not a bridge name ([a-z][a-z0-9_]*, at most {MAX_BRIDGE_NAME})",
                    shown(&self.name)
                ),
            ));
        }
        let key = |k: &str| format!("adopt.{}.{k}", self.name);
        let ident = |k: &str, v: &str| Ident::parse(&key(k), v);
        let opt = |k: &str, v: &Option<String>| v.as_deref().map(|v| ident(k, v)).transpose();
        let topic = match (&self.topic, &self.topic_column) {
            (Some(t), None) => TopicSource::Constant(constant_topic(&key("topic"), t)?),
            (None, Some(c)) => TopicSource::Column(ident("topic_column", c)?),
            _ => return Err(AdoptError::config(&key("topic"), "set exactly one of topic and topic_column")),
        };
        let biz = match (
            opt("biz_type_column", &self.biz_type_column)?,
            opt("biz_key_column", &self.biz_key_column)?,
        ) {
            (Some(t), Some(k)) => Some((t, k)),
            (None, None) => None,
            _ => {
                return Err(AdoptError::config(
                    &key("biz_type_column"),
                    "biz_type_column and biz_key_column go together",
                ))
            }
        };
        let status = match (opt("status_column", &self.status_column)?, &self.status_values) {
            (Some(column), Some(v)) => {
                let lit = |k: &str, l: &Literal| check_literal(&key(&format!("status_values.{k}")), l);
                lit("pending", &v.pending)?;
                lit("sent", &v.sent)?;
                for (k, l) in [
                    ("sending", &v.sending),
                    ("acked", &v.acked),
                    ("failed", &v.failed),
                    ("cancelled", &v.cancelled),
                ] {
                    if let Some(l) = l {
                        lit(k, l)?;
                    }
                }
                if v.pending == v.sent {
                    return Err(AdoptError::config(
                        &key("status_values.sent"),
                        "the sent value must differ from the pending value",
                    ));
                }
                if v.failed.as_ref() == Some(&v.pending) {
                    return Err(AdoptError::config(
                        &key("status_values.failed"),
                        "the failed value must differ from the pending value (a failed row would be sent again)",
                    ));
                }
                Some(StatusMap {
                    column,
                    sending: v.sending.clone().unwrap_or_else(|| v.pending.clone()),
                    acked: v.acked.clone().unwrap_or_else(|| v.sent.clone()),
                    pending: v.pending.clone(),
                    sent: v.sent.clone(),
                    failed: v.failed.clone(),
                    cancelled: v.cancelled.clone(),
                })
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(AdoptError::config(
                    &key("status_values"),
                    "status_column needs [adopt.status_values]",
                ))
            }
            (None, Some(_)) => {
                return Err(AdoptError::config(&key("status_column"), "status_values needs status_column"))
            }
        };
        let next_attempt = opt("next_attempt_column", &self.next_attempt_column)?;
        if self.delay_from_next_attempt && next_attempt.is_none() {
            return Err(AdoptError::config(
                &key("delay_from_next_attempt"),
                "needs next_attempt_column (the column that holds the delay)",
            ));
        }
        let bridge = Bridge {
            name: self.name.clone(),
            schema: opt("schema", &self.schema)?,
            table: ident("table", &self.table)?,
            id: ident("id_column", self.id_column.as_deref().unwrap_or("id"))?,
            topic,
            payload: ident("payload_column", &self.payload_column)?,
            key: opt("key_column", &self.key_column)?,
            tag: opt("tag_column", &self.tag_column)?,
            biz,
            status,
            attempts: opt("attempts_column", &self.attempts_column)?,
            next_attempt,
            delay_from_next_attempt: self.delay_from_next_attempt,
            last_attempt: opt("last_attempt_column", &self.last_attempt_column)?,
            reason: opt("reason_column", &self.reason_column)?,
        };
        bridge.check_written_once(&key(""))?;
        Ok(bridge)
    }
}

impl Bridge {
    /// The legacy columns the bridge writes back: each at most once, never the id.
    pub fn written_columns(&self) -> Vec<&Ident> {
        [self.status.as_ref().map(|s| &s.column), self.attempts.as_ref(), self.next_attempt.as_ref()]
            .into_iter()
            .chain([self.last_attempt.as_ref(), self.reason.as_ref()])
            .flatten()
            .collect()
    }

    fn check_written_once(&self, key: &str) -> Result<(), AdoptError> {
        let written = self.written_columns();
        for (i, c) in written.iter().enumerate() {
            if written[..i].contains(c) || **c == self.id {
                return Err(AdoptError::config(
                    key.trim_end_matches('.'),
                    format!("column {} is written back twice, or is the id", c.as_str()),
                ));
            }
        }
        Ok(())
    }
}

fn constant_topic(key: &str, topic: &str) -> Result<String, AdoptError> {
    let ok = !topic.is_empty()
        && topic.len() <= 255
        && topic.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:#*>".contains(c));
    if ok {
        Ok(topic.to_owned())
    } else {
        Err(AdoptError::config(
            key,
            format!("{} is not a topic (letters, digits and ._-/:#*>, at most 255)", shown(topic)),
        ))
    }
}

fn check_literal(key: &str, l: &Literal) -> Result<(), AdoptError> {
    match l {
        Literal::Int(_) => Ok(()),
        Literal::Text(t)
            if !t.is_empty()
                && t.len() <= 32
                && t.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) =>
        {
            Ok(())
        }
        Literal::Text(t) => Err(AdoptError::config(
            key,
            format!("{} is not a status value (an integer, or letters, digits and _-. up to 32)", shown(t)),
        )),
    }
}

/// A value from the config, quoted and cut for an error message (never raw control characters).
pub(crate) fn shown(value: &str) -> String {
    let mut s: String = value.chars().take(80).flat_map(char::escape_debug).collect();
    if value.chars().count() > 80 {
        s.push('…');
    }
    format!("\"{s}\"")
}
