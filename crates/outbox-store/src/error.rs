//! Conversion of sqlx errors into the outbox's typed errors.

use outbox_core::Error;

/// Turns a sqlx error into an [`Error`], naming the violated constraint when the database
/// rejected a row.
pub(crate) fn db(err: sqlx::Error) -> Error {
    if let sqlx::Error::Database(dbe) = &err {
        let message = dbe.message().to_owned();
        let kind = dbe.kind();
        let named = dbe.constraint().map(str::to_owned).or_else(|| constraint_in(&message));
        let violation = matches!(
            kind,
            sqlx::error::ErrorKind::CheckViolation
                | sqlx::error::ErrorKind::NotNullViolation
                | sqlx::error::ErrorKind::UniqueViolation
                | sqlx::error::ErrorKind::ForeignKeyViolation
        );
        if violation || named.is_some() {
            let constraint = named.unwrap_or_else(|| match kind {
                sqlx::error::ErrorKind::NotNullViolation => "not null".to_owned(),
                other => format!("{other:?}").to_lowercase(),
            });
            return Error::Constraint { constraint, message };
        }
    }
    Error::Database(Box::new(err))
}

/// Finds an `outbox_...` constraint name in a database message (MySQL and SQLite put the name
/// only in the text).
fn constraint_in(message: &str) -> Option<String> {
    let start = message.find("outbox_")?;
    let name: String = message[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    // `outbox_message.headers` is MariaDB's name for the JSON validity check of that column.
    Some(name)
}

/// True when the error is a unique violation of the `(biz_type, biz_key)` constraint.
#[cfg(feature = "mysql")]
pub(crate) fn is_biz_duplicate(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(dbe) => {
            dbe.kind() == sqlx::error::ErrorKind::UniqueViolation
                && dbe.message().contains("outbox_message_biz_unique")
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
    }
}
