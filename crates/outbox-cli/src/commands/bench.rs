//! `outbox bench`: a thin wrapper over the `outbox-bench` crate.

use std::time::Duration;

use anyhow::Context;
use outbox_bench::{BenchConfig, Scenario, TransportKind};

use crate::cli::{BenchArgs, BenchTransport};

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(n) = args.relay_pool {
        // Locked claims hold a connection per batch in flight, and the next claim needs one.
        let least = args.in_flight.saturating_add(1);
        anyhow::ensure!(
            usize::try_from(n).is_ok_and(|n| n >= least),
            "--relay-pool {n} is too small: locked claims need at least --in-flight + 1 ({least}) connections"
        );
    }
    let scenarios = args.scenario.iter().map(|s| Scenario::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let cfg = BenchConfig {
        store: args.store.clone(),
        transport: match args.transport {
            BenchTransport::Nats => TransportKind::Nats,
            BenchTransport::Redis => TransportKind::Redis,
            BenchTransport::Rabbitmq => TransportKind::Rabbitmq,
            BenchTransport::Null => TransportKind::Null,
        },
        nats_url: args.nats_url,
        redis_url: args.redis_url,
        amqp_url: args.amqp_url,
        scenarios,
        n: args.n,
        keys: args.keys,
        rate: args.rate,
        latency_duration: Duration::from_secs(args.latency_secs),
        latency_backlog: args.latency_backlog,
        latency_backlog_keys: args.latency_backlog_keys,
        latency_writer_apart: args.latency_writer_apart,
        relay_pool: args.relay_pool,
        enqueue_txs: args.enqueue_txs as usize,
        relays: args.relays,
        sent_rows: args.sent_rows,
        idle_duration: Duration::from_secs(args.idle_secs),
        batch_size: args.batch_size,
        in_flight: args.in_flight,
        max_run: args.max_run,
        lock_claims: !args.leases,
        many_stores: if args.many_stores.is_empty() {
            vec![outbox_bench::StoreServer { url: args.store.clone(), count: 64 }]
        } else {
            args.many_stores
                .iter()
                .map(|s| s.parse::<outbox_bench::StoreServer>())
                .collect::<Result<Vec<_>, _>>()
                .context("--stores")?
        },
        stores_budget: args.stores_budget,
        stores_big: args.stores_big,
        stores_trickle_period: Duration::from_millis(args.stores_trickle_ms.max(1)),
        active_scan_interval: Duration::from_millis(args.active_scan_ms.max(1)),
        consume_during_drain: args.consume_during_drain,
        label: args.label,
    };
    let report = outbox_bench::run(&cfg).await.context("the bench failed")?;
    let files = outbox_bench::report::write(&report, &args.out)
        .with_context(|| format!("writing the report into {}", args.out.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", outbox_bench::report::markdown(&report, &[]));
        for f in files {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}
