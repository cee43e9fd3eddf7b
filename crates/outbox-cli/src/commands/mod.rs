//! One module per subcommand.

mod demo;
mod migrate;

use crate::cli::{Cli, Command};

/// Runs the chosen subcommand.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate(args) => migrate::run(args).await,
        Command::Demo(args) => demo::run(args).await,
    }
}
