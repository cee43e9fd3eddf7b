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
            let constraint = named.unwrap_or_else(|| format!("{kind:?}").to_lowercase());
            return Error::Constraint { constraint, message };
        }
    }
    Error::Database(Box::new(err))
}

/// Finds an `outbox_inbox_...` constraint name in a database message (MySQL and SQLite put the
/// name only in the text). Table names (`outbox_inbox`, `outbox_inbox_schema_migrations`) are
/// not constraint names.
fn constraint_in(message: &str) -> Option<String> {
    let start = message.find("outbox_inbox_")?;
    let name: String = message[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    (!name.starts_with("outbox_inbox_schema_migrations")).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::constraint_in;

    #[test]
    fn finds_constraint_names_in_messages() {
        assert_eq!(
            constraint_in("CONSTRAINT `outbox_inbox_group_not_blank` failed").as_deref(),
            Some("outbox_inbox_group_not_blank")
        );
        assert_eq!(constraint_in("connection reset"), None);
        assert_eq!(constraint_in("relation \"outbox_inbox\" does not exist"), None);
        assert_eq!(constraint_in("Table 'db.outbox_inbox_schema_migrations' doesn't exist"), None);
    }
}
