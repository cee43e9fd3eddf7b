//! [`Statement`]: SQL and its bound arguments built together, and the conditions the
//! operations select messages by.

use outbox_core::{Result, Status};
use sqlx::{Arguments, Database, Encode, Type};

use super::{AdminSql, ListFilter};
use crate::error::db;
use crate::outbox::OutboxDatabase;

/// A statement and its arguments, built together (what `QueryBuilder` does, without borrowing
/// the builder for as long as the arguments live, which generic code cannot afford).
pub(super) struct Statement<'q, DB: Database> {
    sql: String,
    args: DB::Arguments<'q>,
}

impl<'q, DB: Database> Statement<'q, DB> {
    pub(super) fn new(sql: String) -> Self {
        Statement { sql, args: DB::Arguments::default() }
    }

    /// The SQL for the names `tables` and the arguments.
    pub(super) fn into_parts(self, tables: &crate::Tables) -> (String, DB::Arguments<'q>)
    where
        DB: OutboxDatabase,
    {
        let sql = match tables.render(DB::DIALECT, &self.sql) {
            std::borrow::Cow::Borrowed(_) => self.sql,
            std::borrow::Cow::Owned(rendered) => rendered,
        };
        (sql, self.args)
    }

    pub(super) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    pub(super) fn bind<T: 'q + Encode<'q, DB> + Type<DB>>(&mut self, value: T) -> Result<&mut Self> {
        self.args.add(value).map_err(|e| db(sqlx::Error::Encode(e)))?;
        self.args.format_placeholder(&mut self.sql).map_err(|e| db(sqlx::Error::Encode(e.into())))?;
        Ok(self)
    }
}

impl<'q, DB: AdminSql> Statement<'q, DB> {
    /// Appends ` AND ...` for every filter set (all bound as parameters).
    pub(super) fn filter(&mut self, f: &ListFilter) -> Result<&mut Self>
    where
        String: Type<DB> + Encode<'q, DB>,
        i64: Type<DB> + Encode<'q, DB>,
    {
        let texts = [
            (" AND status = ", f.status.map(|s| s.as_str().to_owned())),
            (" AND topic = ", f.topic.clone()),
            (" AND biz_type = ", f.biz_type.clone()),
            (" AND biz_key = ", f.biz_key.clone()),
            (" AND msg_key = ", f.key.clone()),
        ];
        for (sql, value) in texts {
            if let Some(v) = value {
                self.push(sql).bind(v)?;
            }
        }
        if let Some(text) = &f.error {
            // `!` escapes the pattern's wildcards: portable (MySQL reads `\` in a literal).
            let mut pattern = String::with_capacity(text.len() + 8);
            pattern.push('%');
            for c in text.chars() {
                if matches!(c, '!' | '%' | '_') {
                    pattern.push('!');
                }
                pattern.push(c);
            }
            pattern.push('%');
            self.push(" AND last_error LIKE ").bind(pattern)?.push(" ESCAPE '!'");
        }
        if let Some(t) = f.created_after {
            self.push(" AND created_at >= ").bind(DB::time(t))?;
        }
        if let Some(t) = f.created_before {
            self.push(" AND created_at < ").bind(DB::time(t))?;
        }
        if let Some(id) = f.after_id {
            self.push(" AND id > ").bind(id.0)?;
        }
        Ok(self)
    }

    /// Appends ` AND <column> IN (...)` with every value bound; `values` must not be empty.
    pub(super) fn any_of<T: 'q + Encode<'q, DB> + Type<DB>>(
        &mut self,
        column: &str,
        values: impl IntoIterator<Item = T>,
    ) -> Result<&mut Self> {
        self.push(" AND ").push(column).push(" IN (");
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(v)?;
        }
        Ok(self.push(")"))
    }
}

/// What a statement on `outbox_message` appends after `WHERE <every row>`: built where the
/// statement runs, so its arguments live as long as the query needs.
pub(super) type Conditions<'f, DB> = &'f (dyn for<'a> Fn(&mut Statement<'a, DB>) -> Result<()> + Sync);

/// ` AND status IN (<statuses>)` and the filter's conditions.
pub(super) fn matching<'q, DB: AdminSql>(
    st: &mut Statement<'q, DB>,
    statuses: &[Status],
    filter: &ListFilter,
) -> Result<()>
where
    String: Type<DB> + Encode<'q, DB>,
    i64: Type<DB> + Encode<'q, DB>,
{
    st.any_of("status", statuses.iter().map(|s| s.as_str().to_owned()))?.filter(filter)?;
    Ok(())
}

/// ` AND status IN (<statuses>) AND id IN (<ids>)`.
pub(super) fn among<'q, DB: AdminSql>(
    st: &mut Statement<'q, DB>,
    statuses: &[Status],
    ids: &[i64],
) -> Result<()>
where
    String: Type<DB> + Encode<'q, DB>,
    i64: Type<DB> + Encode<'q, DB>,
{
    st.any_of("status", statuses.iter().map(|s| s.as_str().to_owned()))?.any_of("id", ids.iter().copied())?;
    Ok(())
}
