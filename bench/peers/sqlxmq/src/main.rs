//! sqlxmq's commit → job latency, measured as `outbox bench --scenario latency` measures ours.
//!
//! The same open loop: at `--rate` per second for `--secs`, each business transaction starts at
//! its scheduled time, updates a random one of 1,000 `bench_account` rows, spawns one job whose
//! JSON payload is the bench's ~200-byte message, and commits. The figure is the time from the
//! commit's return to the job function's start in sqlxmq's runner (outbox's: to the consumer's
//! receipt from the broker, one hop more). Every job must arrive within 30 s.
//!
//! Usage: `peer-sqlxmq --url postgres://postgres@127.0.0.1:5432/test --migrations DIR
//! [--rate 1000] [--secs 10] [--keys 1000] [--ordered]`. It works in a fresh database of its own
//! on that server, dropped at the end, and prints one JSON object.

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use sqlxmq::{job, CurrentJob, JobRegistry};

const ACCOUNTS: i64 = 1_000;
/// The bench's pool size for the latency scenario (`outbox-bench` `POOL`).
const POOL: u32 = 24;

#[derive(serde::Serialize, serde::Deserialize)]
struct Probe {
    seq: u64,
    body: String,
}

/// Each job's arrival instants, by sequence number (more than one: run again).
static ARRIVALS: OnceLock<Mutex<HashMap<u64, Vec<Instant>>>> = OnceLock::new();

#[job]
async fn probe(mut current_job: CurrentJob) -> Result<(), Box<dyn Error + Send + Sync + 'static>> {
    let at = Instant::now();
    let seq = current_job.json::<Probe>()?.map(|p| p.seq).ok_or("a job without a payload")?;
    if let Some(arrivals) = ARRIVALS.get() {
        arrivals.lock().map_err(|_| "poisoned")?.entry(seq).or_default().push(at);
    }
    current_job.complete().await?;
    Ok(())
}

/// The bench's message body (`outbox-bench` `db::payload`).
fn body(seq: u64, keys: u64) -> String {
    format!(
        r#"{{"seq":{seq},"customer":"c-{:04}","amount_cents":{},"currency":"EUR","note":"{}"}}"#,
        seq % keys.max(1),
        (seq * 7919) % 100_000,
        "x".repeat(120)
    )
}

struct Args {
    url: String,
    migrations: std::path::PathBuf,
    rate: u32,
    secs: u64,
    keys: u64,
    ordered: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        url: String::new(),
        migrations: std::path::PathBuf::new(),
        rate: 1_000,
        secs: 10,
        keys: 1_000,
        ordered: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--migrations" => a.migrations = value()?.into(),
            "--rate" => a.rate = value()?.parse().context("--rate")?,
            "--secs" => a.secs = value()?.parse().context("--secs")?,
            "--keys" => a.keys = value()?.parse().context("--keys")?,
            "--ordered" => a.ordered = true,
            _ => bail!("unknown argument (see the file's documentation)"),
        }
    }
    if a.url.is_empty() || a.migrations.as_os_str().is_empty() || a.rate == 0 {
        bail!("--url, --migrations and a rate above 0 are needed");
    }
    Ok(a)
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

fn summary(mut d: Vec<Duration>) -> serde_json::Value {
    d.sort();
    serde_json::json!({
        "count": d.len(),
        "p50_ms": quantile(&d, 0.50),
        "p90_ms": quantile(&d, 0.90),
        "p99_ms": quantile(&d, 0.99),
        "max_ms": quantile(&d, 1.0),
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let admin: PgConnectOptions = a.url.parse().context("--url")?;
    let name = format!("peer_sqlxmq_{}", std::process::id());
    let mut conn = admin.connect().await.context("connecting to --url")?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await?;
    let out = run(&a, admin.clone().database(&name)).await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await?;
    conn.close().await?;
    println!("{}", serde_json::to_string_pretty(&out?)?);
    Ok(())
}

async fn run(a: &Args, opts: PgConnectOptions) -> Result<serde_json::Value> {
    let pool = PgPoolOptions::new().max_connections(POOL).connect_with(opts).await?;
    let mut files: Vec<_> = std::fs::read_dir(&a.migrations)
        .context("--migrations")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".up.sql"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no *.up.sql under --migrations");
    }
    for f in &files {
        sqlx::raw_sql(&std::fs::read_to_string(f)?)
            .execute(&pool)
            .await
            .with_context(|| f.display().to_string())?;
    }
    sqlx::raw_sql("CREATE TABLE bench_account (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO bench_account SELECT g, 0 FROM generate_series(1, $1) g")
        .bind(ACCOUNTS)
        .execute(&pool)
        .await?;
    ARRIVALS.get_or_init(|| Mutex::new(HashMap::new()));

    let registry = JobRegistry::new(&[probe]);
    // sqlxmq's own stress test's concurrency.
    let runner = registry.runner(&pool).set_concurrency(50, 100).run().await?;
    // As the bench does: let the runner settle into its idle state.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let total = (u64::from(a.rate) * a.secs.max(1)) as usize;
    let period = Duration::from_secs_f64(1.0 / f64::from(a.rate));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<(u64, Instant, Instant)>>();
    let start = tokio::time::Instant::now();
    let ordered = a.ordered;
    let keys = a.keys;
    for i in 0..total {
        let scheduled = start + period * u32::try_from(i).unwrap_or(u32::MAX);
        tokio::time::sleep_until(scheduled).await;
        let (tx, pool) = (tx.clone(), pool.clone());
        tokio::spawn(async move {
            let r = async {
                let seq = i as u64;
                let begun = Instant::now();
                let account = rand::random::<i64>().rem_euclid(ACCOUNTS) + 1;
                let mut t = pool.begin().await?;
                sqlx::query("UPDATE bench_account SET balance = balance + 1 WHERE id = $1")
                    .bind(account)
                    .execute(&mut *t)
                    .await?;
                let mut b = probe.builder();
                b.set_json(&Probe { seq, body: body(seq, keys) })?;
                let channel = format!("k-{}", seq % keys.max(1));
                if ordered {
                    b.set_channel_args(&channel).set_ordered(true);
                }
                b.spawn(&mut *t).await?;
                t.commit().await?;
                Ok::<_, anyhow::Error>((seq, begun, Instant::now()))
            }
            .await;
            let _ = tx.send(r);
        });
    }
    drop(tx);
    let mut commits = Vec::with_capacity(total);
    let mut errors = 0_u64;
    while let Some(r) = rx.recv().await {
        match r {
            Ok(c) => commits.push(c),
            Err(e) => {
                errors += 1;
                eprintln!("a business transaction failed: {e:#}");
            }
        }
    }
    let gen_secs = start.elapsed().as_secs_f64();
    let arrivals = ARRIVALS.get().context("arrivals")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = arrivals.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len();
        if got >= commits.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(runner);
    let seen = arrivals.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let (mut c2c, mut txd, mut left) = (Vec::new(), Vec::new(), 0_u64);
    for (seq, begun, committed) in &commits {
        txd.push(committed.saturating_duration_since(*begun));
        match seen.get(seq).and_then(|v| v.iter().min()) {
            Some(at) => c2c.push(at.saturating_duration_since(*committed)),
            None => left += 1,
        }
    }
    let duplicates: usize = seen.values().map(|v| v.len().saturating_sub(1)).sum();
    if errors > 0 || left > 0 {
        bail!("{errors} business transactions failed, {left} jobs did not arrive within 30 s");
    }
    Ok(serde_json::json!({
        "peer": "sqlxmq 0.6.0",
        "ordered": ordered,
        "offered_per_s": a.rate,
        "achieved_per_s": commits.len() as f64 / gen_secs.max(1e-9),
        "sent": commits.len(),
        "received": seen.len(),
        "left_behind": left,
        "duplicates": duplicates,
        "commit_to_job": summary(c2c),
        "transaction": summary(txd),
    }))
}
