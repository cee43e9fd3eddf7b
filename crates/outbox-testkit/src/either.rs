//! [`Either`]: plain SQL on a PostgreSQL or a MySQL/MariaDB pool, for tests that play a foreign
//! application writing its own tables (the same SQL text on both servers).

use sqlx::{MySqlPool, PgPool, Row};

/// A pool on either server.
#[derive(Clone, Copy)]
pub enum Either<'a> {
    Pg(&'a PgPool),
    My(&'a MySqlPool),
}

macro_rules! on_either {
    ($e:expr, $pool:ident => $body:expr) => {
        match $e {
            Either::Pg($pool) => $body,
            Either::My($pool) => $body,
        }
    };
}

impl Either<'_> {
    /// Runs `sql` (one or more statements); panics with the statement on error.
    pub async fn exec(&self, sql: &str) {
        on_either!(self, p => sqlx::raw_sql(sql).execute(*p).await.map(drop))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Runs `statements` in one transaction, committed or rolled back.
    pub async fn tx(&self, statements: &[&str], commit: bool) {
        on_either!(self, p => {
            let mut tx = p.begin().await.unwrap();
            for s in statements {
                sqlx::raw_sql(s).execute(&mut *tx).await.unwrap_or_else(|e| panic!("{s}: {e}"));
            }
            if commit { tx.commit().await } else { tx.rollback().await }.unwrap();
        })
    }

    /// The first column of the one row of `sql`, a nullable text.
    pub async fn text(&self, sql: &str) -> Option<String> {
        on_either!(self, p => sqlx::query(sql).fetch_one(*p).await.map(|r| r.get::<Option<String>, _>(0)))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `expr` cast to the 64-bit integer [`count`](Self::count) reads.
    pub fn bigint(&self, expr: &str) -> String {
        match self {
            Either::Pg(_) => format!("CAST({expr} AS BIGINT)"),
            Either::My(_) => format!("CAST({expr} AS SIGNED)"),
        }
    }

    /// The integer of `sql` (a `COUNT(*)`, or a value cast to BIGINT / SIGNED).
    pub async fn count(&self, sql: &str) -> i64 {
        on_either!(self, p => sqlx::query_scalar(sql).fetch_one(*p).await)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}
