//! The bench as a smoke test: every scenario at a tiny size against real servers (PostgreSQL +
//! NATS JetStream, and SQLite + the null transport). Asserts outcomes (every message delivered,
//! none twice, the report well-formed), never speed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use outbox_bench::{BenchConfig, Report, Scenario, TransportKind};

fn tiny(store: String, transport: TransportKind) -> BenchConfig {
    BenchConfig {
        store,
        transport,
        nats_url: std::env::var("OUTBOX_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into()),
        scenarios: Scenario::ALL.to_vec(),
        n: 600,
        rate: 100,
        latency_duration: Duration::from_secs(1),
        enqueue_txs: 20,
        relays: vec![1, 2],
        sent_rows: vec![1_000],
        idle_duration: Duration::from_secs(2),
        batch_size: 100,
        label: "smoke".into(),
        ..BenchConfig::default()
    }
}

fn check(report: &Report, n: u64) {
    let raw = report.raw.as_ref().expect("raw ran");
    assert_eq!(raw.db_rows, n);
    assert!(raw.db_rows_per_s > 0.0 && raw.limit_per_s > 0.0);
    let drain = report.drain.as_ref().expect("drain ran");
    assert_eq!(drain.consumer_received, n, "every message reached the consumer");
    assert!(drain.ratio_to_limit.is_some());
    let lat = report.latency.as_ref().expect("latency ran");
    assert_eq!(lat.left_behind, 0);
    assert_eq!(lat.received, lat.sent);
    assert!(lat.sent >= 100);
    assert!(lat.commit_to_consumer.count == lat.sent);
    assert!((0.0..=1.0).contains(&lat.fast_path_share));
    assert!(
        lat.claim_ms_mean > 0.0 && lat.settle_ms_mean > 0.0,
        "the relay's claims and settlements were timed"
    );
    let enq = report.enqueue.as_ref().expect("enqueue ran");
    assert_eq!(enq.rows.iter().map(|r| r.clients).collect::<Vec<_>>(), vec![1, 8]);
    assert!(enq.rows.iter().all(|r| r.rate_with > 0.0 && r.rate_without > 0.0 && r.rate_raw_insert > 0.0));
    assert!(enq.rows.iter().all(|r| r.raw_insert.count == r.with.count && r.with.count == r.without.count));
    let scale = report.scale.as_ref().expect("scale ran");
    assert_eq!(scale.drains.iter().map(|d| d.relays).collect::<Vec<_>>(), vec![1, 2]);
    assert!(scale.drains.iter().all(|d| d.consumer_received == n && d.duplicates == 0));
    assert_eq!(scale.claims.len(), 1);
    assert_eq!(scale.claims[0].claim.count, 20, "20 batches of 100 claimed");
    let idle = report.idle.as_ref().expect("idle ran");
    assert!(idle.seconds >= 2.0);
    assert!(idle.claims_per_s < 10.0, "an idle relay scans about once a second: {}", idle.claims_per_s);

    let dir =
        std::env::temp_dir().join(format!("outbox-bench-smoke-{}-{}", report.store_kind, std::process::id()));
    let files = outbox_bench::report::write(report, &dir).unwrap();
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for name in ["results.json", "report.md", "throughput.svg", "latency.svg"] {
        assert!(names.contains(&name.to_owned()), "{name} written: {names:?}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["drain"]["consumer_received"], n);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for section in ["## Raw limits", "## Drain", "## Latency", "## Enqueue overhead", "## Scale", "## Idle"] {
        assert!(md.contains(section), "{section} in the report");
    }
    let svg = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("drain"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_on_postgres_and_nats() {
    let pg = std::env::var("OUTBOX_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let report = outbox_bench::run(&tiny(pg, TransportKind::Nats)).await.unwrap();
    let raw = report.raw.as_ref().unwrap();
    assert!(raw.broker_msgs_per_s.unwrap() > 0.0);
    // Both loops at once ran over the whole backlog (it fails the run otherwise).
    assert!(raw.together_per_s.unwrap() > 0.0);
    assert!(report.drain.as_ref().unwrap().ratio_to_together.is_some());
    assert!(report.idle.as_ref().unwrap().server_queries_per_s.is_some());
    check(&report, 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_on_sqlite_with_the_null_transport() {
    let report = outbox_bench::run(&tiny("sqlite:".into(), TransportKind::Null)).await.unwrap();
    assert!(report.raw.as_ref().unwrap().broker_msgs_per_s.is_none(), "the null transport has no limit");
    check(&report, 600);
}

/// The latency scenario beside a hot backlog (`--latency-backlog`): the backlog's messages and
/// the load's all reach the consumer, each once, and the report says what ran beside the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_beside_a_hot_backlog_on_postgres_and_nats() {
    let pg = std::env::var("OUTBOX_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let cfg = BenchConfig {
        scenarios: vec![Scenario::Latency],
        latency_backlog: 2_000,
        latency_backlog_keys: 4,
        ..tiny(pg, TransportKind::Nats)
    };
    let report = outbox_bench::run(&cfg).await.unwrap();
    let lat = report.latency.as_ref().expect("latency ran");
    assert_eq!(lat.left_behind, 0);
    assert_eq!(lat.received, lat.sent);
    assert_eq!(lat.duplicates, 0);
    let b = lat.backlog.as_ref().expect("the backlog is reported");
    assert_eq!((b.messages, b.keys), (2_000, 4));
    assert!(b.runs_continued > 0, "4 hot keys with 500 messages each: runs continued across batches");
    let md = outbox_bench::report::markdown(&report, &[]);
    assert!(md.contains("Beside a backlog of 2,000 messages on 4 hot keys"), "{md}");
}

/// The same with the load written by "another process" (`--latency-writer-apart`): the relay is
/// not told of its commits, every message still reaches the consumer once, and the lane looked
/// for new messages while the hot keys' runs were in flight. The relay has a pool of its own
/// sized as `outbox relay`'s by default (`--relay-pool 4`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_of_another_processs_load_beside_a_hot_backlog_on_postgres_and_nats() {
    let pg = std::env::var("OUTBOX_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let cfg = BenchConfig {
        scenarios: vec![Scenario::Latency],
        latency_backlog: 2_000,
        latency_backlog_keys: 4,
        latency_writer_apart: true,
        relay_pool: Some(4),
        ..tiny(pg, TransportKind::Nats)
    };
    let report = outbox_bench::run(&cfg).await.unwrap();
    let lat = report.latency.as_ref().expect("latency ran");
    assert!(lat.writer_apart);
    assert_eq!(lat.relay_pool, Some(4));
    assert_eq!(lat.left_behind, 0);
    assert_eq!(lat.received, lat.sent);
    assert_eq!(lat.duplicates, 0);
    let b = lat.backlog.as_ref().expect("the backlog is reported");
    assert!(b.runs_continued > 0, "4 hot keys with 500 messages each: runs continued across batches");
    assert!(b.lane_looks > 0, "the lane looked while the hot keys' runs were in flight");
    let md = outbox_bench::report::markdown(&report, &[]);
    assert!(md.contains("written through a pool of its own"), "{md}");
    assert!(md.contains("The relay had a pool of its own of 4 connections"), "{md}");
}
