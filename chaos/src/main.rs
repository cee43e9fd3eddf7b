//! `outbox-chaos`: the reliability suite. Real writers, `outbox relay` processes, brokers and
//! consumers; relays SIGKILLed and restarted, broker and database connections cut, black-holed
//! and slowed by proxies the harness controls, the run's own database server and broker crashed
//! and restarted, consumers killed; then a checker per guarantee.
//!
//! ```text
//! cargo run -p outbox-chaos -- run --profile short                 # CI: ~1 min per combo
//! cargo run -p outbox-chaos -- run --profile long --combo pg-nats  # 30 min, more server crashes
//! ```
//!
//! The same binary plays every role: `run` orchestrates and spawns itself as `writer` and
//! `consumer` processes. See docs/guarantees.md ("The chaos suite").
#![allow(clippy::cast_possible_truncation)]

mod check;
mod combo;
mod consumer;
mod db;
mod own;
mod procs;
mod proxy;
mod run;
mod setup;
mod tally;
mod writer;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rand::Rng;

/// The outbox reliability suite.
#[derive(Parser)]
#[command(name = "outbox-chaos", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the suite and check every guarantee; exits non-zero on any violation.
    Run(run::RunArgs),
    /// Run only the checker on a database a run kept (`--keep`, or after a failure).
    Check {
        /// Direct URL of the run's database.
        #[arg(long)]
        db_url: String,
        /// Order by the broker's positions (NATS, Redis) rather than the receive order (RabbitMQ).
        #[arg(long)]
        receive_order: bool,
    },
    /// (role) A business writer; started by `run`.
    Writer(writer::WriterArgs),
    /// (role) A consumer; started by `run`.
    Consumer(consumer::ConsumerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outbox-chaos: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Run(args) => orchestrate(args).await,
            Command::Check { db_url, receive_order } => {
                let snapshot = check::Snapshot::load(&db_url).await?;
                let report = check::Report::of(&snapshot, !receive_order);
                print!("{}", report.table());
                let v = report.violations();
                println!(
                    "{}",
                    if v.is_empty() { "PASS".to_owned() } else { format!("FAIL: {}", v.join("; ")) }
                );
                Ok(v.is_empty())
            }
            Command::Writer(args) => writer::run(args).await.map(|()| true),
            Command::Consumer(args) => consumer::run(args).await.map(|()| true),
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("outbox-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn orchestrate(args: run::RunArgs) -> anyhow::Result<bool> {
    let combos: Vec<combo::Combo> = args.combo.iter().map(|c| c.parse()).collect::<anyhow::Result<_>>()?;
    let bin = run::outbox_bin(args.outbox_bin.clone()).context("locating the outbox binary")?;
    let seed = args.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let mut results = Vec::new();
    for (i, c) in combos.iter().enumerate() {
        let s = seed.wrapping_add(i as u64);
        let started = std::time::Instant::now();
        let (report, chaos, drain, passed) = run::run_combo(*c, args.profile, &args, &bin, s).await?;
        let load = started.elapsed().saturating_sub(drain);
        results.push((*c, s, load, report, chaos, drain, passed));
    }
    println!();
    println!("== outbox chaos suite: {:?} profile, seed {seed}", args.profile);
    let mut all = true;
    for (c, s, load, report, chaos, drain, passed) in &results {
        run::print_summary(*c, *load, *s, report, chaos, *drain);
        all &= *passed;
    }
    println!("== {}", if all { "PASS: every guarantee held" } else { "FAIL" });
    Ok(all)
}
