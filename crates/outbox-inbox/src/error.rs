//! Conversion of sqlx errors into the outbox's typed errors.

use outbox_core::Error;

/// Turns a sqlx error into an [`Error`], naming the violated constraint when the database
/// rejected a row (`outbox-store`'s mapping, with the inbox's names).
pub(crate) fn db(err: sqlx::Error) -> Error {
    // An unnamed NOT NULL violation reads as its kind here, as it always has for the inbox.
    outbox_store::map_sqlx_error(err, constraint_in, "notnullviolation")
}

/// Finds an `outbox_inbox_...` constraint name in a database message (MySQL and SQLite put the
/// name only in the text). Table names (`outbox_inbox`, `outbox_inbox_schema_migrations`) are
/// not constraint names.
fn constraint_in(message: &str) -> Option<String> {
    outbox_store::name_in(message, "outbox_inbox_")
        .filter(|name| !name.starts_with("outbox_inbox_schema_migrations"))
        .or_else(|| {
            // Tables with another prefix (`outbox_store::Tables`): the name ends the same way.
            message
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .find(|w| w.ends_with("_inbox_group_not_blank") || w.ends_with("_inbox_message_id_not_blank"))
                .map(str::to_owned)
        })
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
