//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The transactional outbox: reliable messages out of a database transaction.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "OUTBOX_LOG_FORMAT")]
    pub(crate) log_format: LogFormat,
    /// More logging (-v debug, -vv trace). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the outbox tables in a database.
    ///
    /// Idempotent: running it again is a no-op. Refuses a database migrated by a newer release.
    ///
    /// Examples:
    ///   outbox migrate --database-url postgres://app@db/shop
    ///   OUTBOX_DATABASE_URL=mysql://root@127.0.0.1/shop outbox migrate --json
    ///   outbox migrate --database-url sqlite:app.db
    #[command(verbatim_doc_comment)]
    Migrate(MigrateArgs),
    /// Run the whole flow on an embedded SQLite database, with no servers.
    ///
    /// Creates the database, commits orders with their messages (one transaction rolled back,
    /// one enqueued twice), and shows what the outbox holds.
    ///
    /// Example:
    ///   outbox demo
    #[command(verbatim_doc_comment)]
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Database URL: postgres://, mysql:// (also MariaDB) or sqlite:PATH.
    #[arg(long, env = "OUTBOX_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Directory for the demo database (created if missing).
    #[arg(long, default_value = ".outbox-demo")]
    pub(crate) dir: PathBuf,
    /// Number of orders to place.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) orders: u32,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}
