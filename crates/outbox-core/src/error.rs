//! The error type shared by the outbox crates.

use crate::{MessageId, Status};

/// `Result` with [`Error`] as its default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the outbox library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A message given to `enqueue` breaks a rule; `field` names the offending field.
    #[error("invalid message: {field}: {reason}")]
    InvalidMessage {
        /// The field that is wrong (`topic`, `biz_key`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The database rejected a row because it violates one of the table's constraints.
    #[error("the database rejected the row: constraint {constraint} failed ({message})")]
    Constraint {
        /// Name of the violated constraint, e.g. `outbox_message_topic_not_empty`.
        constraint: String,
        /// The database's own message.
        message: String,
    },
    /// The database holds a schema version this binary does not know: it was migrated by a
    /// newer release.
    #[error(
        "the outbox schema in this database is at version {found}, but this build only knows \
         versions up to {supported}: upgrade outbox (a newer release migrated this database)"
    )]
    SchemaTooNew {
        /// Highest version recorded in the database.
        found: i64,
        /// Highest version this build ships.
        supported: i64,
    },
    /// The outbox tables are missing or older than this build expects.
    #[error("the outbox schema is not migrated (at version {found}, need {required}): run `outbox migrate` or `Outbox::migrate`")]
    SchemaNotMigrated {
        /// Version found (0 when the tables do not exist).
        found: i64,
        /// Version this build needs.
        required: i64,
    },
    /// A stored row could not be decoded (for example a foreign application wrote a value the
    /// relay cannot read).
    #[error("malformed row in {table} (id {id}): {reason}")]
    MalformedRow {
        /// Table name.
        table: &'static str,
        /// Primary key of the row, as text.
        id: String,
        /// What could not be decoded.
        reason: String,
    },
    /// A database URL or store option is wrong.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// No message with this id exists (it was never enqueued, or it was purged).
    #[error("message {id} not found")]
    NotFound {
        /// The id asked for.
        id: MessageId,
    },
    /// An operator action (retry, cancel) is not allowed from the message's current status.
    #[error("cannot {action} message {id}: its status is {from} ({})", transition_hint(action, *from))]
    InvalidTransition {
        /// The message.
        id: MessageId,
        /// Its status when the action was attempted.
        from: Status,
        /// The action refused: `retry`, `cancel` or `resend`.
        action: &'static str,
    },
    /// An argument of an operations call (page size, batch size, age) is out of range.
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument {
        /// The argument (`limit`, `batch`, `older_than`, ...).
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Communicating with the database failed.
    #[error("error communicating with the database: {0}")]
    Database(Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// A coarse classification of [`Error`] for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input was wrong: fix the message or the row.
    InvalidInput,
    /// The schema is missing, too old or too new.
    Schema,
    /// Configuration is wrong.
    Config,
    /// The database failed or is unreachable; retrying may help.
    Database,
    /// The message asked for does not exist.
    NotFound,
    /// The action conflicts with the message's current status.
    Conflict,
}

impl Error {
    /// The broad category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidMessage { .. }
            | Error::Constraint { .. }
            | Error::MalformedRow { .. }
            | Error::InvalidArgument { .. } => ErrorKind::InvalidInput,
            Error::SchemaTooNew { .. } | Error::SchemaNotMigrated { .. } => ErrorKind::Schema,
            Error::Config(_) => ErrorKind::Config,
            Error::Database(_) => ErrorKind::Database,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::InvalidTransition { .. } => ErrorKind::Conflict,
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidMessage { field, reason: reason.into() }
    }
}

/// Why an operator action is refused from a status, and what to do instead.
fn transition_hint(action: &str, from: Status) -> &'static str {
    match (action, from) {
        (_, Status::Sending) => {
            "a relay is publishing it right now; wait for the attempt to end and look again"
        }
        ("retry", Status::Pending) => "it is already waiting to be published",
        ("retry", Status::Sent | Status::Acked) => {
            "it was already published; only failed or cancelled messages can be retried"
        }
        ("retry", _) => "only failed or cancelled messages can be retried",
        ("cancel", Status::Cancelled) => "it is already cancelled",
        ("cancel", Status::Sent | Status::Acked) => {
            "it was already published; only pending or failed messages can be cancelled"
        }
        ("cancel", _) => "only pending or failed messages can be cancelled",
        // Refused from the status it may leave: a destination already received it.
        ("resend", Status::Failed) => {
            "a destination already received it, so a copy would reach it twice under another id; retry it instead"
        }
        ("resend", _) => "only failed messages can be resent as a copy",
        _ => "not allowed from this status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_errors_say_the_status_and_what_to_do() {
        let e = Error::InvalidTransition { id: MessageId(7), from: Status::Sent, action: "retry" };
        assert_eq!(e.kind(), ErrorKind::Conflict);
        let text = e.to_string();
        assert!(text.contains("cannot retry message 7") && text.contains("status is sent"), "{text}");
        let e = Error::InvalidTransition { id: MessageId(8), from: Status::Sending, action: "cancel" };
        assert!(e.to_string().contains("a relay is publishing it right now"), "{e}");
        assert_eq!(Error::NotFound { id: MessageId(9) }.to_string(), "message 9 not found");
        assert_eq!(Error::NotFound { id: MessageId(9) }.kind(), ErrorKind::NotFound);
    }
}
