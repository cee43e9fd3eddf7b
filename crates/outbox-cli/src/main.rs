//! `outbox`: the relay daemon and operations tool of the transactional outbox.
//!
//! See `outbox --help`. This binary is the only place that uses `anyhow`; the libraries return
//! typed errors.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod ack_server;
mod admin;
mod cli;
mod commands;
mod config;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `outbox relay` listens for SIGTERM and SIGINT before anything else (its configuration, its
    // log): a stop asked for at any moment from here on is a graceful one, never the signal's
    // default action (found by the chaos suite: a niced daemon on a loaded machine, given
    // SIGTERM before it had listened, died of it).
    let stop_signals = matches!(cli.command, cli::Command::Relay(_)).then(|| {
        let _in_runtime = runtime.enter();
        commands::StopSignals::listen()
    });
    // One rustls crypto provider for the whole process (the binary's dependencies enable two, and
    // rustls then picks none by itself): ring, which sqlx and the transports use.
    outbox_store::ensure_crypto_provider();
    // The demo prints its own story; only warnings and errors go to the log unless -v.
    let quiet = matches!(cli.command, cli::Command::Demo(_));
    // The relay's configuration is read once, before the log is set up: its spans are
    // exported when it names a collector; one that does not load is reported by the command.
    let relay_config = match &cli.command {
        cli::Command::Relay(args) => Some(config::Config::load(&args.config)),
        _ => None,
    };
    let telemetry = relay_config.as_ref().and_then(|c| c.as_ref().ok()).map(|c| &c.telemetry);
    let otel = telemetry::init(cli.log_format, cli.verbose, quiet, telemetry);
    let result = runtime.block_on(commands::run(cli, relay_config, stop_signals));
    drop(runtime);
    // Flushes the spans still buffered (the exporter's own thread, outside the runtime).
    if let Some(guard) = otel {
        guard.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain may quote a URL or a connection string (a driver's, a broker client's
            // error): the same redaction as the log.
            let text = format!("{e:#}");
            eprintln!("error: {}", telemetry::redact_text(&text));
            ExitCode::FAILURE
        }
    }
}
