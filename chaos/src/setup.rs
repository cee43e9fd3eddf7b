//! What a combo's run needs around the processes: each relay's configuration, the `outbox`
//! binary, and reading how far the drain has come.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use outbox_core::RetryPolicy;
use outbox_relay::{BreakerConfig, RelayConfig};

use crate::combo::{Broker, Combo, Names};
use crate::db::{on_pool, Db};

/// The relays' transport, as `[destinations.bus.transport]` in `outbox relay`'s configuration
/// (also the file a writer that runs a relay in its own process reads: `writer --relay-transport`).
pub(crate) fn transport_toml(combo: Combo, names: &Names, broker_url: &str) -> String {
    match combo.broker {
        Broker::Nats => format!(
            "type = \"nats\"\nurl = \"{broker_url}\"\nsubject_prefix = \"{}\"\nstream = \"{}\"\ntimeout = \"1500ms\"\nconnect_timeout = \"2s\"",
            names.subject_prefix(),
            names.stream()
        ),
        Broker::Rabbit => {
            format!("type = \"rabbitmq\"\nurl = \"{broker_url}\"\nexchange = \"amq.topic\"\nconnect_timeout = \"2s\"")
        }
        Broker::Redis => format!(
            "type = \"redis\"\nurl = \"{broker_url}\"\nstream = \"{}\"\ntimeout = \"1500ms\"\nconnect_timeout = \"2s\"",
            names.redis_stream()
        ),
    }
}

/// How many batches each daemon keeps in flight, by its index. Two is the default; four (a
/// locked claim) and three (a leasing one) make the claims run with their window grown by the
/// rows their process holds beyond one batch, under the same faults as the default.
pub(crate) const DAEMON_IN_FLIGHT: [usize; crate::run::RELAYS] = [2, 4, 3];

/// Every relay's tuning, the daemons' (rendered into their TOML by [`relay_toml`]) and the one a
/// writer runs in its own process (`writer --relay-owner`), under `owner`, with locked claims
/// or leases and `in_flight` batches in flight.
pub(crate) fn relay_config(owner: &str, lock_claims: bool, in_flight: usize) -> RelayConfig {
    RelayConfig {
        owner: owner.to_owned(),
        batch_size: 100,
        lease: Duration::from_secs(5),
        lock_claims,
        idle_interval: Duration::from_millis(250),
        max_in_flight_batches: in_flight,
        publish_timeout: Duration::from_secs(2),
        shutdown_timeout: Duration::from_secs(3),
        ..RelayConfig::default()
    }
}

/// Every relay's retries: unlimited in practice (nothing should fail), quick, capped at 2 s.
pub(crate) fn relay_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 100_000,
        initial: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
        multiplier: 2.0,
        jitter: 0.5,
    }
}

/// Every relay's breaker.
pub(crate) fn relay_breaker() -> BreakerConfig {
    BreakerConfig {
        failure_threshold: 3,
        cooldown: Duration::from_millis(300),
        max_cooldown: Duration::from_secs(2),
    }
}

/// The name of the store every daemon relays (the run's database).
pub(crate) const STORE: &str = "chaos";

/// The daemon whose budget is crowded: beside the run's store it serves [`IDLE_STORES`] idle
/// ones (databases of their own on the same server, through the same fault proxy) under a
/// budget of [`CROWDED_SHARES`] batches in flight (`relay.total_in_flight_batches`), fewer
/// than its stores. So its stores' pools keep no connection between turns, each batch queues
/// for a share, and on MySQL/MariaDB its lane runs there: looks on the keeper, each claim on a
/// connection opened under a share it could take (the share its two batches in flight leave
/// free). On PostgreSQL the lane must not run under a crowded budget (see
/// `outbox_store::Wakeups::cheap_connections`). The daemon serves an admin listener whose
/// counters the run reads (see [`crate::run`]'s lane tally).
pub(crate) const CROWDED: usize = 0;
/// How many idle stores the crowded daemon serves.
pub(crate) const IDLE_STORES: usize = 3;
/// The crowded daemon's budget: one share more than its batches in flight, fewer than its stores.
const CROWDED_SHARES: usize = DAEMON_IN_FLIGHT[CROWDED] + 1;
const _: () = assert!(CROWDED_SHARES < 1 + IDLE_STORES, "the budget must be crowded");

/// What the crowded daemon's configuration adds: its idle stores' URLs and its admin port.
pub(crate) struct Crowded {
    pub(crate) idle_urls: Vec<String>,
    pub(crate) admin_port: u16,
}

/// `relay.owner` of daemon `i`.
fn daemon_relay_owner(i: usize) -> String {
    format!("chaos-r{i}")
}

/// The owner daemon `i` records in `updated_by`: `<relay.owner>-<store name>`, as `outbox relay`
/// names the relay of each store.
pub(crate) fn daemon_owner(i: usize) -> String {
    format!("{}-{STORE}", daemon_relay_owner(i))
}

/// Daemon `i`'s configuration; `crowded` for [`CROWDED`].
pub(crate) fn relay_toml(
    combo: Combo,
    names: &Names,
    db_url: &str,
    broker_url: &str,
    i: usize,
    crowded: Option<&Crowded>,
) -> String {
    let transport = transport_toml(combo, names, broker_url);
    // The last relay leases its claims while the others hold row locks: both protocols share
    // the table, as in a rolling change of `lock_claims` or beside a foreign relay that leases.
    let c = relay_config(&daemon_relay_owner(i), i + 1 < crate::run::RELAYS, DAEMON_IN_FLIGHT[i]);
    let (r, b) = (relay_retry(), relay_breaker());
    let ms = |d: Duration| format!("\"{}ms\"", d.as_millis());
    // A locked batch in flight holds a connection, the listener one more (`outbox relay`
    // refuses a smaller pool); one spare for the keeper's turns.
    let pool = (c.max_in_flight_batches + 2).max(4);
    let (budget, idle, admin) = match crowded {
        None => (String::new(), String::new(), String::new()),
        Some(cr) => (
            format!("total_in_flight_batches = {CROWDED_SHARES}\n"),
            cr.idle_urls
                .iter()
                .enumerate()
                .map(|(n, url)| {
                    format!("\n[[stores]]\nname = \"idle{n}\"\nurl = \"{url}\"\nmax_connections = {pool}\n")
                })
                .collect(),
            format!("\n[admin]\nlisten = \"127.0.0.1:{}\"\n", cr.admin_port),
        ),
    };
    format!(
        r#"# generated by outbox-chaos
[relay]
owner = "{owner}"
batch_size = {batch_size}
lease = {lease}
lock_claims = {lock_claims}
idle_interval = {idle_interval}
max_in_flight_batches = {in_flight}
publish_timeout = {publish_timeout}
shutdown_timeout = {shutdown_timeout}
{budget}
[[stores]]
name = "{STORE}"
url = "{db_url}"
max_connections = {pool}
{idle}
[destinations.bus]
retry = {{ max_attempts = {max_attempts}, initial = {initial}, max_delay = {max_delay}, multiplier = {multiplier:?}, jitter = {jitter:?} }}
breaker = {{ failure_threshold = {failure_threshold}, cooldown = {cooldown}, max_cooldown = {max_cooldown} }}
[destinations.bus.transport]
{transport}

[[routes]]
topic = "{topic}"
destinations = ["bus"]

[retention]
finished_after = "0s"
{admin}"#,
        owner = c.owner,
        batch_size = c.batch_size,
        lease = ms(c.lease),
        lock_claims = c.lock_claims,
        idle_interval = ms(c.idle_interval),
        in_flight = c.max_in_flight_batches,
        publish_timeout = ms(c.publish_timeout),
        shutdown_timeout = ms(c.shutdown_timeout),
        max_attempts = r.max_attempts,
        initial = ms(r.initial),
        max_delay = ms(r.max_delay),
        multiplier = r.multiplier,
        jitter = r.jitter,
        failure_threshold = b.failure_threshold,
        cooldown = ms(b.cooldown),
        max_cooldown = ms(b.max_cooldown),
        topic = names.topic()
    )
}

/// Builds (or finds) the `outbox` binary.
pub(crate) fn outbox_bin(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "-p", "outbox-cli", "--bin", "outbox"])
        .current_dir(&root)
        .status()
        .context("running cargo build -p outbox-cli")?;
    if !status.success() {
        bail!("cargo build -p outbox-cli failed");
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root.join("target"));
    let bin = target.join("debug").join("outbox");
    if !bin.exists() {
        bail!("{} does not exist after the build; pass --outbox-bin", bin.display());
    }
    Ok(bin)
}

/// Counts read while waiting for the drain: open, sent, received by the raw group, effects.
pub(crate) async fn drain_state(url: &str) -> anyhow::Result<(i64, i64, i64, i64)> {
    let q_open = "SELECT COUNT(*) FROM outbox_message WHERE status IN ('pending', 'sending')";
    let q_sent = "SELECT COUNT(*) FROM outbox_message WHERE status IN ('sent', 'acked')";
    let q_raw = "SELECT COUNT(DISTINCT msg_id) FROM chaos_raw";
    let q_eff = "SELECT COUNT(DISTINCT msg_id) FROM chaos_effect";
    let db = Db::connect(url).await?;
    let mut out = [0i64; 4];
    for (i, q) in [q_open, q_sent, q_raw, q_eff].iter().enumerate() {
        out[i] = on_pool!(&db, pool => sqlx::query_scalar(q).fetch_one(pool).await?);
    }
    db.close().await;
    Ok((out[0], out[1], out[2], out[3]))
}
