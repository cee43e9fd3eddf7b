//! [`AnyOutbox`] with a schema and table prefix ([`Tables`]). (Kept apart from `any.rs`.)

use outbox_core::Result;

use crate::any::AnyOutbox;
use crate::names::Tables;

impl AnyOutbox {
    /// Connects like [`connect`](AnyOutbox::connect), for the object names `tables` (refused
    /// before connecting when the database cannot hold them: a schema on SQLite).
    pub async fn connect_with_tables(url: &str, max_connections: u32, tables: Tables) -> Result<AnyOutbox> {
        tables.check_for(crate::Dialect::of_url(url)?)?;
        AnyOutbox::connect(url, max_connections).await?.with_tables(tables)
    }

    /// This outbox for the object names `tables`; see [`Outbox::with_tables`](crate::Outbox::with_tables).
    pub fn with_tables(self, tables: Tables) -> Result<AnyOutbox> {
        Ok(match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => AnyOutbox::Postgres(o.with_tables(tables)?),
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql(o) => AnyOutbox::MySql(o.with_tables(tables)?),
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite(o) => AnyOutbox::Sqlite(o.with_tables(tables)?),
        })
    }

    /// The names of this outbox's tables.
    pub fn tables(&self) -> &Tables {
        match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => o.tables(),
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql(o) => o.tables(),
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite(o) => o.tables(),
        }
    }
}
