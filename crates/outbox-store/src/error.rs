//! Conversion of sqlx errors into the outbox's typed errors.

use outbox_core::Error;

/// Turns a sqlx error into an [`Error`], naming the violated constraint when the database
/// rejected a row.
pub(crate) fn db(err: sqlx::Error) -> Error {
    map_sqlx_error(err, constraint_in, "not null")
}

/// Turns a sqlx error into an [`Error`]: a violation (or any error naming a constraint) becomes
/// [`Error::Constraint`], named by the database, else by `find` in the message (MySQL and SQLite
/// put the name only in the text), else `not_null` for an unnamed NOT NULL violation and the
/// violation's kind for the others; anything else is [`Error::Database`]. Shared with
/// `outbox-inbox`, which finds only its own names.
#[doc(hidden)]
pub fn map_sqlx_error(err: sqlx::Error, find: fn(&str) -> Option<String>, not_null: &str) -> Error {
    if let sqlx::Error::Database(dbe) = &err {
        let message = dbe.message().to_owned();
        let kind = dbe.kind();
        let named = dbe.constraint().map(str::to_owned).or_else(|| find(&message));
        let violation = matches!(
            kind,
            sqlx::error::ErrorKind::CheckViolation
                | sqlx::error::ErrorKind::NotNullViolation
                | sqlx::error::ErrorKind::UniqueViolation
                | sqlx::error::ErrorKind::ForeignKeyViolation
        );
        if violation || named.is_some() {
            let constraint = named.unwrap_or_else(|| match kind {
                sqlx::error::ErrorKind::NotNullViolation => not_null.to_owned(),
                other => format!("{other:?}").to_lowercase(),
            });
            return Error::Constraint { constraint, message };
        }
    }
    Error::Database(Box::new(err))
}

/// Finds an `outbox_...` constraint name in a database message (MySQL and SQLite put the name
/// only in the text), or, for tables with another prefix ([`crate::Tables`]), a word ending in
/// the name of one of the outbox's constraints.
fn constraint_in(message: &str) -> Option<String> {
    // `outbox_message.headers` is MariaDB's name for the JSON validity check of that column.
    name_in(message, "outbox_").or_else(|| {
        message
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .find(|word| {
                crate::names::OTHER_SUFFIXES
                    .iter()
                    .any(|s| word.len() > s.len() && word.ends_with(s) && !s.ends_with("_idx"))
            })
            .map(str::to_owned)
    })
}

/// The first name starting with `prefix` in a database message (letters, digits, `_` and `.`).
#[doc(hidden)]
pub fn name_in(message: &str, prefix: &str) -> Option<String> {
    let start = message.find(prefix)?;
    Some(
        message[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect(),
    )
}

/// True when the error is a unique violation of the `(biz_type, biz_key)` constraint.
#[cfg(feature = "mysql")]
pub(crate) fn is_biz_duplicate(err: &sqlx::Error, constraint: &str) -> bool {
    match err {
        sqlx::Error::Database(dbe) => {
            dbe.kind() == sqlx::error::ErrorKind::UniqueViolation && dbe.message().contains(constraint)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::constraint_in;

    #[test]
    fn finds_constraint_names_in_messages() {
        assert_eq!(
            constraint_in("CHECK constraint failed: outbox_message_topic_not_blank").as_deref(),
            Some("outbox_message_topic_not_blank")
        );
        assert_eq!(
            constraint_in("CONSTRAINT `outbox_message_headers_object` failed for `t`.`x`").as_deref(),
            Some("outbox_message_headers_object")
        );
        assert_eq!(constraint_in("connection reset"), None);
        assert_eq!(
            constraint_in("CONSTRAINT `app_message_headers_object` failed for `t`.`x`").as_deref(),
            Some("app_message_headers_object")
        );
    }
}
