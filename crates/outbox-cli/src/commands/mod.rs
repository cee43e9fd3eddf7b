//! One module per subcommand.

pub(crate) mod adopt;
#[cfg(feature = "bench")]
mod bench;
mod cancel;
mod check;
mod demo;
mod list;
mod migrate;
pub(crate) mod ops;
mod purge;
mod relay;
mod retry;
mod show;
mod status;

pub(crate) use relay::StopSignals;

use crate::cli::{Cli, Command};
use crate::config::Config;

/// Runs the chosen subcommand; `relay_config` is the relay's configuration when `main` has
/// read it already.
pub(crate) async fn run(
    cli: Cli,
    relay_config: Option<anyhow::Result<Config>>,
    stop_signals: Option<StopSignals>,
) -> anyhow::Result<()> {
    match cli.command {
        Command::Relay(args) => {
            let config = relay_config.unwrap_or_else(|| Config::load(&args.config))?;
            relay::run(config, stop_signals.unwrap_or_else(StopSignals::listen)).await
        }
        Command::Check(args) => check::run(&args.config, args.json).await,
        Command::Migrate(args) => migrate::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::List(args) => list::run(args).await,
        Command::Show(args) => show::run(args).await,
        Command::Retry(args) => retry::run(args).await,
        Command::Cancel(args) => cancel::run(args).await,
        Command::Purge(args) => purge::run(args).await,
        Command::Adopt(args) => adopt::run(args).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(args).await,
    }
}
