//! The relay's configuration file: one TOML file plus `OUTBOX__*` environment overrides.
//!
//! Unknown keys are errors. Every error names the key and where its value came from: the file
//! and line (`outbox.toml:12: relay.lease: ...`), or the environment variable that set it.
//! Errors never print a source line or a value that may be a secret (a TOML syntax error on the
//! line of a password shows the line and column, not the line).
//!
//! `outbox check` and `outbox relay` both load through [`Config::load`], so `check` refuses
//! exactly what the relay would refuse at start, including what the engine refuses
//! (`RelayBuilder::build`) and bounds it takes as given (a lease of 10^8 days).

mod env;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};
use env::Override;
use outbox_core::{limits, redact_url, RetryPolicy};
use outbox_relay::{validate_pattern, BreakerConfig, RelayConfig};
use outbox_transport::TransportConfig;
use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Relay tuning.
    #[serde(default)]
    pub(crate) relay: RelaySection,
    /// The databases whose outbox tables this relay serves (a sharded application has several).
    pub(crate) stores: Vec<StoreConfig>,
    /// Named destinations.
    #[serde(default)]
    pub(crate) destinations: BTreeMap<String, DestinationConfig>,
    /// Topic pattern to destination names.
    #[serde(default)]
    pub(crate) routes: Vec<RouteConfig>,
    /// Deleting finished messages.
    #[serde(default)]
    pub(crate) retention: RetentionConfig,
    /// The ACK endpoint (ACK mode).
    #[serde(default)]
    pub(crate) ack: AckSection,
}

/// `[ack]`: the endpoint consumers confirm deliveries on, for destinations with `ack = {...}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct AckSection {
    /// Address of the ACK endpoint. Defaults to `127.0.0.1:8099` (loopback).
    pub(crate) listen: String,
    /// Key of the ACK tokens, at least 16 bytes; required when a destination requires ACKs.
    /// Set it with `OUTBOX__ACK__SECRET`.
    pub(crate) secret: Option<String>,
    /// How long a token stays valid. Defaults to 7 days.
    #[serde(with = "outbox_core::duration")]
    pub(crate) token_ttl: Duration,
    /// Most connections to the ACK endpoint open at once. Defaults to 256; 1 to 65,536. At the
    /// limit, the connection that has waited longest for a request head is closed to make room;
    /// when every connection is busy with a request, a new one is answered 503 and closed.
    pub(crate) max_connections: usize,
    /// How long a client may take to send a request head (also between two requests on a
    /// kept-alive connection) before the connection is closed. Defaults to 5 s; at most 5 min.
    #[serde(with = "outbox_core::duration")]
    pub(crate) header_timeout: Duration,
    /// How long one request may take from its head to its answer, body included: a body that
    /// has not arrived by then is answered 408. Defaults to 10 s; at most 5 min.
    #[serde(with = "outbox_core::duration")]
    pub(crate) request_timeout: Duration,
}

impl Default for AckSection {
    fn default() -> Self {
        AckSection {
            listen: "127.0.0.1:8099".into(),
            secret: None,
            token_ttl: Duration::from_secs(7 * 86_400),
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl AckSection {
    /// The bounds of the endpoint's connection limits: `(key, reason)` of the first one broken.
    fn check_limits(&self) -> Result<(), (&'static str, String)> {
        const MAX_CONNECTIONS: usize = 65_536;
        const MAX_TIMEOUT: Duration = Duration::from_secs(300);
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err((
                "ack.max_connections",
                format!("must be between 1 and {MAX_CONNECTIONS}, got {}", self.max_connections),
            ));
        }
        for (key, d) in
            [("ack.header_timeout", self.header_timeout), ("ack.request_timeout", self.request_timeout)]
        {
            if d.is_zero() || d > MAX_TIMEOUT {
                return Err((key, format!("must be positive and at most {}", human(MAX_TIMEOUT))));
            }
        }
        Ok(())
    }
}

/// `ack = { timeout = "30s" }` on a destination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DestinationAck {
    /// How long the consumer has to confirm a delivery.
    #[serde(with = "outbox_core::duration")]
    pub(crate) timeout: Duration,
}

/// `[relay]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RelaySection {
    /// Lease owner name prefix; the store name is appended. Defaults to `<host>-<pid>-<random>`.
    pub(crate) owner: Option<String>,
    /// Messages per claim. Defaults to 500.
    pub(crate) batch_size: usize,
    /// Lease time. Defaults to 30 s.
    #[serde(with = "outbox_core::duration")]
    pub(crate) lease: Duration,
    /// Scan period when idle. Defaults to 1 s.
    #[serde(with = "outbox_core::duration")]
    pub(crate) idle_interval: Duration,
    /// Batches in flight. Defaults to 2.
    pub(crate) max_in_flight_batches: usize,
    /// Publish timeout. Defaults to 10 s.
    #[serde(with = "outbox_core::duration")]
    pub(crate) publish_timeout: Duration,
    /// Graceful shutdown bound. Defaults to 10 s.
    #[serde(with = "outbox_core::duration")]
    pub(crate) shutdown_timeout: Duration,
    /// Keep claimed rows locked through the publish instead of writing a lease (PostgreSQL,
    /// MySQL/MariaDB). Defaults to true.
    pub(crate) lock_claims: bool,
    /// How long a message whose topic this relay does not route waits for a relay that does
    /// (a rolling deploy adding a route) before it fails with "no route". Defaults to 10 min.
    #[serde(with = "outbox_core::duration")]
    pub(crate) unrouted_grace: Duration,
}

impl Default for RelaySection {
    fn default() -> Self {
        let d = RelayConfig::default();
        RelaySection {
            owner: None,
            batch_size: d.batch_size,
            lease: d.lease,
            idle_interval: d.idle_interval,
            max_in_flight_batches: d.max_in_flight_batches,
            publish_timeout: d.publish_timeout,
            shutdown_timeout: d.shutdown_timeout,
            lock_claims: d.lock_claims,
            unrouted_grace: d.unrouted_grace,
        }
    }
}

/// `[[stores]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreConfig {
    /// Name, for logs and lease owners.
    pub(crate) name: Spanned<String>,
    /// Database URL (postgres://, mysql://, sqlite:). Secrets: set `OUTBOX__STORES__<i>__URL`.
    pub(crate) url: Spanned<String>,
    /// Pool size. Defaults to 4.
    #[serde(default = "default_pool")]
    pub(crate) max_connections: u32,
    /// Apply migrations at start. Defaults to false (the schema is checked, not changed).
    #[serde(default)]
    pub(crate) migrate: bool,
}

fn default_pool() -> u32 {
    4
}

/// `[destinations.<name>]`: a transport plus delivery policy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DestinationConfig {
    /// The transport: `[destinations.<name>.transport]` with `type = "nats" | "rabbitmq" |
    /// "redis" | "mqtt" | "http"` and that transport's own keys.
    pub(crate) transport: TransportConfig,
    /// Retry policy. Defaults to 12 attempts, 1 s doubling to 10 min, equal jitter.
    #[serde(default)]
    pub(crate) retry: RetryPolicy,
    /// Circuit breaker. Defaults to 3 failures, 1 s cool-down doubling to 30 s.
    #[serde(default)]
    pub(crate) breaker: BreakerConfig,
    /// Largest payload in bytes. Defaults to the transport's own limit.
    #[serde(default)]
    pub(crate) max_payload_bytes: Option<usize>,
    /// Require the consumer's ACK within `timeout` (ACK mode). Defaults to none.
    #[serde(default)]
    pub(crate) ack: Option<DestinationAck>,
}

/// `[[routes]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteConfig {
    /// Topic pattern: `*` one segment, `#` the rest (e.g. `order.*`, `order.#`).
    pub(crate) topic: Spanned<String>,
    /// Destination names.
    pub(crate) destinations: Vec<Spanned<String>>,
}

/// `[retention]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RetentionConfig {
    /// Delete finished (sent, acked, cancelled) messages older than this. Defaults to 7 days;
    /// `"0s"` disables retention.
    #[serde(with = "outbox_core::duration")]
    pub(crate) finished_after: Duration,
    /// How often to run. Defaults to 1 min.
    #[serde(with = "outbox_core::duration")]
    pub(crate) interval: Duration,
    /// Rows per delete statement (short locks). Defaults to 1000.
    pub(crate) batch: usize,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            finished_after: Duration::from_secs(7 * 86_400),
            interval: Duration::from_secs(60),
            batch: 1000,
        }
    }
}

/// Largest configuration file read: a configuration is a few kilobytes; this bounds what a
/// wrong `--config` (`/dev/zero`, a log file) can make the command read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Longest `relay.lease`: a relay that dies holding a claim leaves its messages unpublished for
/// up to this long before another relay takes them over, so a lease of days would look like a
/// silent outage; the database adds it to its clock, so it must also stay far from the range
/// of its time types.
const MAX_LEASE: Duration = Duration::from_secs(86_400);
/// Longest `relay.idle_interval`: the scan is the safety net for wake-ups that were missed.
const MAX_IDLE_INTERVAL: Duration = Duration::from_secs(3_600);
/// Longest `relay.unrouted_grace`: a deploy that takes longer than a week is not a rolling one,
/// and an unrouted message should reach a person before then.
const MAX_UNROUTED_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest `relay.shutdown_timeout`: longer than any orchestrator waits before killing.
const MAX_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3_600);
/// Longest `retention.interval`.
const MAX_RETENTION_INTERVAL: Duration = Duration::from_secs(86_400);
/// Longest `retention.finished_after` (ten years): beyond that, "never" is `"0s"`.
const MAX_FINISHED_AFTER: Duration = Duration::from_secs(3_650 * 86_400);
/// Longest `ack.token_ttl` (one year).
const MAX_TOKEN_TTL: Duration = Duration::from_secs(365 * 86_400);
/// Longest `destinations.<name>.ack.timeout` (a week: a delivery unconfirmed for that long is
/// lost, not slow).
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);
/// Longest retry delay and breaker cool-down (a week, an hour).
const MAX_RETRY_DELAY: Duration = Duration::from_secs(7 * 86_400);
const MAX_BREAKER_COOLDOWN: Duration = Duration::from_secs(3_600);
/// Bounds of counts.
const MAX_IN_FLIGHT_BATCHES: usize = 256;
const MAX_POOL: u32 = 1_000;
const MAX_RETENTION_BATCH: usize = 100_000;
const MAX_PAYLOAD_BYTES: usize = 1 << 30;

impl Config {
    /// Loads `path` (a regular file of at most 1 MiB), applies `OUTBOX__*` overrides from the
    /// environment, and validates. `outbox check` and `outbox relay` both load through here, so
    /// they accept and refuse the same files.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Config> {
        let shown = outbox_core::text::printable(&path.display().to_string(), 500).into_owned();
        let text = read_file(path, &shown)?;
        Self::parse(&text, std::env::vars(), &shown)
    }

    /// Parses and validates `text`; `source` names the file in errors.
    pub(crate) fn parse(
        text: &str,
        vars: impl Iterator<Item = (String, String)>,
        source: &str,
    ) -> anyhow::Result<Config> {
        let vars: Vec<(String, String)> = vars.filter(|(k, _)| k.starts_with("OUTBOX__")).collect();
        let mut origin = Origin { file: source, text, overrides: Vec::new(), located: OnceLock::new() };
        let table: toml::Table = toml::from_str(text).map_err(|e| origin.parse_error(&e))?;
        if vars.is_empty() {
            // Parse the file's own text, so every span points into the file.
            let config: Config = toml::from_str(text).map_err(|e| origin.parse_error(&e))?;
            config.validate(&origin)?;
            return Ok(config);
        }
        let mut typed = table.clone();
        origin.overrides = env::apply_overrides(&mut typed, vars.iter().cloned(), true)?;
        let merged = toml::to_string(&typed).map_err(|_| {
            anyhow::anyhow!("{source}: the OUTBOX__ overrides do not form a valid configuration")
        })?;
        let config = match toml::from_str::<Config>(&merged) {
            Ok(config) => config,
            Err(first) => {
                // A value typed by its look (`OUTBOX__X__SUBJECT=123` for a key the file does not
                // set) may be meant as a string: try them all as strings before giving up.
                let as_strings = origin.overrides.iter().any(|o| o.guessed).then(|| {
                    let mut t = table.clone();
                    env::apply_overrides(&mut t, vars.iter().cloned(), false).ok()?;
                    toml::from_str::<Config>(&toml::to_string(&t).ok()?).ok()
                });
                match as_strings.flatten() {
                    Some(config) => config,
                    None => return Err(origin.merged_error(&merged, &first)),
                }
            }
        };
        config.validate(&origin)?;
        Ok(config)
    }

    fn validate(&self, origin: &Origin<'_>) -> anyhow::Result<()> {
        let err = |key: &str, msg: String| origin.error(key, msg);
        if self.stores.is_empty() {
            return Err(err("stores", "is empty: add at least one [[stores]] with a name and url".into()));
        }
        let mut names = std::collections::HashSet::new();
        for (i, s) in self.stores.iter().enumerate() {
            let name = s.name.get_ref();
            outbox_core::text::check_name(name, limits::OWNER)
                .map_err(|e| err(&format!("stores[{i}].name"), e))?;
            if !names.insert(name.clone()) {
                return Err(err(&format!("stores[{i}].name"), format!("{:?} is used twice", shown(name))));
            }
            let url_key = format!("stores[{i}].url");
            let dialect = dialect_of(s.url.get_ref()).map_err(|e| err(&url_key, e))?;
            if s.max_connections == 0 || s.max_connections > MAX_POOL {
                return Err(err(
                    &format!("stores[{i}].max_connections"),
                    format!("must be between 1 and {MAX_POOL}, got {}", s.max_connections),
                ));
            }
            let locks = self.relay.lock_claims && dialect != outbox_store::Dialect::Sqlite;
            if locks && (s.max_connections as usize) < self.relay.max_in_flight_batches {
                return Err(err(
                    &format!("stores[{i}].max_connections"),
                    format!(
                        "stores[{i}].max_connections ({}) is below relay.max_in_flight_batches ({}): \
                         with relay.lock_claims each batch in flight holds a connection while it publishes",
                        s.max_connections, self.relay.max_in_flight_batches
                    ),
                ));
            }
            // The lease owner the relay of this store records: `<relay.owner>-<store name>`.
            let owner = self.relay_config(name).owner;
            if let Err(e) = outbox_core::text::check_name(&owner, limits::OWNER) {
                let key = if self.relay.owner.is_some() {
                    "relay.owner".to_owned()
                } else {
                    format!("stores[{i}].name")
                };
                return Err(err(
                    &key,
                    format!("the relay owner of store {:?} ({{owner}}-{{store}}) {e}", shown(name)),
                ));
            }
        }
        if let Some(owner) = &self.relay.owner {
            outbox_core::text::check_name(owner, limits::OWNER).map_err(|e| err("relay.owner", e))?;
        }
        self.validate_relay(origin)?;
        for (name, d) in &self.destinations {
            let key = |k: &str| {
                let mut p = "destinations".to_owned();
                env::push_key(&mut p, name);
                if !k.is_empty() {
                    p.push('.');
                    p.push_str(k);
                }
                p
            };
            outbox_core::text::check_name(name, limits::DESTINATION)
                .map_err(|e| err(&key(""), format!("destination name {e}")))?;
            d.transport.validate().map_err(|e| err(&key("transport"), e.to_string()))?;
            d.retry.validate().map_err(|e| err(&key("retry"), e))?;
            if d.retry.max_delay > MAX_RETRY_DELAY {
                return Err(err(
                    &key("retry.max_delay"),
                    format!("must be at most {}", human(MAX_RETRY_DELAY)),
                ));
            }
            if d.breaker.failure_threshold == 0 {
                return Err(err(&key("breaker.failure_threshold"), "must be at least 1".into()));
            }
            if d.breaker.cooldown.is_zero() || d.breaker.cooldown > d.breaker.max_cooldown {
                return Err(err(
                    &key("breaker.cooldown"),
                    "must be positive and at most breaker.max_cooldown".into(),
                ));
            }
            if d.breaker.max_cooldown > MAX_BREAKER_COOLDOWN {
                return Err(err(
                    &key("breaker.max_cooldown"),
                    format!("must be at most {}", human(MAX_BREAKER_COOLDOWN)),
                ));
            }
            if let Some(n) = d.max_payload_bytes {
                if n == 0 || n > MAX_PAYLOAD_BYTES {
                    return Err(err(
                        &key("max_payload_bytes"),
                        format!("must be between 1 and {MAX_PAYLOAD_BYTES} (1 GiB), got {n}"),
                    ));
                }
            }
            if let Some(ack) = &d.ack {
                if ack.timeout.is_zero() || ack.timeout > MAX_ACK_TIMEOUT {
                    return Err(err(
                        &key("ack.timeout"),
                        format!("must be positive and at most {}", human(MAX_ACK_TIMEOUT)),
                    ));
                }
                if self.ack.token_ttl <= ack.timeout {
                    return Err(err(
                        "ack.token_ttl",
                        format!(
                            "is {} but must be longer than {} ({}): a token that expires before its delivery \
                             times out cannot be used to confirm it",
                            human(self.ack.token_ttl),
                            key("ack.timeout"),
                            human(ack.timeout)
                        ),
                    ));
                }
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            let topic = r.topic.get_ref();
            let key = format!("routes[{i}].topic");
            outbox_core::text::check_name(topic, limits::TOPIC)
                .map_err(|e| err(&key, format!("topic pattern {e}")))?;
            validate_pattern(topic).map_err(|e| err(&key, printable(&e)))?;
            if r.destinations.is_empty() {
                return Err(err(&format!("routes[{i}].destinations"), "is empty".into()));
            }
            for (j, d) in r.destinations.iter().enumerate() {
                if !self.destinations.contains_key(d.get_ref()) {
                    let known: Vec<String> = self.destinations.keys().map(|k| shown(k)).collect();
                    return Err(err(
                        &format!("routes[{i}].destinations[{j}]"),
                        format!(
                            "unknown destination {:?} (defined: {})",
                            shown(d.get_ref()),
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ),
                    ));
                }
            }
        }
        if self.ack.token_ttl.is_zero() || self.ack.token_ttl > MAX_TOKEN_TTL {
            return Err(err(
                "ack.token_ttl",
                format!("must be positive and at most {}", human(MAX_TOKEN_TTL)),
            ));
        }
        if let Err((key, msg)) = self.ack.check_limits() {
            return Err(err(key, msg));
        }
        if self.destinations.values().any(|d| d.ack.is_some()) {
            match &self.ack.secret {
                None => {
                    return Err(err(
                        "ack.secret",
                        "must be set, as a destination requires ACKs (use OUTBOX__ACK__SECRET)".into(),
                    ))
                }
                Some(s) if s.len() < 16 => return Err(err("ack.secret", "must be at least 16 bytes".into())),
                Some(_) => {}
            }
            self.ack.listen.parse::<std::net::SocketAddr>().map_err(|e| {
                err(
                    "ack.listen",
                    format!("{:?} is not an address like 127.0.0.1:8099: {e}", shown(&self.ack.listen)),
                )
            })?;
        }
        let r = &self.retention;
        if r.finished_after > MAX_FINISHED_AFTER {
            return Err(err(
                "retention.finished_after",
                format!("must be at most {} (\"0s\" disables retention)", human(MAX_FINISHED_AFTER)),
            ));
        }
        if r.interval.is_zero() || r.interval > MAX_RETENTION_INTERVAL {
            return Err(err(
                "retention.interval",
                format!("must be positive and at most {}", human(MAX_RETENTION_INTERVAL)),
            ));
        }
        if r.batch == 0 || r.batch > MAX_RETENTION_BATCH {
            return Err(err(
                "retention.batch",
                format!(
                    "must be between 1 and {MAX_RETENTION_BATCH} (rows per delete statement), got {}",
                    r.batch
                ),
            ));
        }
        Ok(())
    }

    /// The `[relay]` bounds: those `RelayBuilder::build` checks, and bounds on durations it
    /// takes as given.
    fn validate_relay(&self, origin: &Origin<'_>) -> anyhow::Result<()> {
        let err = |key: &str, msg: String| origin.error(key, msg);
        let r = &self.relay;
        if r.batch_size == 0 || r.batch_size > 10_000 {
            return Err(err(
                "relay.batch_size",
                format!("must be between 1 and 10000, got {}", r.batch_size),
            ));
        }
        if r.max_in_flight_batches == 0 || r.max_in_flight_batches > MAX_IN_FLIGHT_BATCHES {
            return Err(err(
                "relay.max_in_flight_batches",
                format!("must be between 1 and {MAX_IN_FLIGHT_BATCHES}, got {}", r.max_in_flight_batches),
            ));
        }
        if r.lease.is_zero() || r.lease > MAX_LEASE {
            return Err(err(
                "relay.lease",
                format!(
                    "must be positive and at most {}: a relay that dies holding a claim leaves its messages \
                     waiting this long",
                    human(MAX_LEASE)
                ),
            ));
        }
        if r.publish_timeout.is_zero() {
            return Err(err("relay.publish_timeout", "must be positive".into()));
        }
        if r.publish_timeout >= r.lease {
            return Err(err(
                "relay.publish_timeout",
                format!(
                    "({}) must be shorter than relay.lease ({}), or a slow publish would outlive its lease",
                    human(r.publish_timeout),
                    human(r.lease)
                ),
            ));
        }
        if r.idle_interval.is_zero() || r.idle_interval > MAX_IDLE_INTERVAL {
            return Err(err(
                "relay.idle_interval",
                format!("must be positive and at most {}", human(MAX_IDLE_INTERVAL)),
            ));
        }
        if r.shutdown_timeout > MAX_SHUTDOWN_TIMEOUT {
            return Err(err(
                "relay.shutdown_timeout",
                format!("must be at most {}", human(MAX_SHUTDOWN_TIMEOUT)),
            ));
        }
        if r.unrouted_grace > MAX_UNROUTED_GRACE {
            return Err(err(
                "relay.unrouted_grace",
                format!("must be at most {}", human(MAX_UNROUTED_GRACE)),
            ));
        }
        Ok(())
    }

    /// The engine's configuration for the store named `store`.
    pub(crate) fn relay_config(&self, store: &str) -> RelayConfig {
        // Every field is listed: a new engine setting must get a key here, not a silent default.
        let owner = match &self.relay.owner {
            Some(o) => format!("{o}-{store}"),
            None => format!("{}-{store}", RelayConfig::default().owner),
        };
        RelayConfig {
            owner,
            batch_size: self.relay.batch_size,
            lease: self.relay.lease,
            idle_interval: self.relay.idle_interval,
            max_in_flight_batches: self.relay.max_in_flight_batches,
            publish_timeout: self.relay.publish_timeout,
            shutdown_timeout: self.relay.shutdown_timeout,
            lock_claims: self.relay.lock_claims,
            unrouted_grace: self.relay.unrouted_grace,
        }
    }
}

/// Reads a configuration file: a regular file of at most [`MAX_FILE_BYTES`], in UTF-8.
fn read_file(path: &Path, shown: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let cannot = || format!("cannot read the configuration file {shown}");
    // Look before opening: opening a FIFO would block until someone writes to it.
    let meta = std::fs::metadata(path).with_context(cannot)?;
    if !meta.is_file() {
        bail!("{shown}: not a regular file; --config must name a TOML file");
    }
    let file = std::fs::File::open(path).with_context(cannot)?;
    if !file.metadata().with_context(cannot)?.is_file() {
        bail!("{shown}: not a regular file; --config must name a TOML file");
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).with_context(cannot)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!("{shown}: larger than {} KiB; a configuration file is a few KB of TOML", MAX_FILE_BYTES / 1024);
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        anyhow::anyhow!("{shown}: not UTF-8 text (invalid byte at offset {at}); is it a TOML file?")
    })
}

/// The dialect of a store URL, with an error that never echoes the URL's secrets.
fn dialect_of(url: &str) -> Result<outbox_store::Dialect, String> {
    if url.trim().is_empty() {
        return Err("must not be empty".into());
    }
    outbox_store::Dialect::of_url(url).map_err(|_| {
        // The scheme is shown when it is one (`oracle://`), never a prefix of a bare secret.
        let scheme = url.split("://").next().unwrap_or_default();
        let scheme_ok = url.contains("://")
            && !scheme.is_empty()
            && scheme.len() <= 32
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let what = if scheme_ok { format!("unsupported scheme {scheme:?}") } else { "not a URL".to_owned() };
        format!(
            "{what} in {}: expected postgres://, mysql://, mariadb:// or sqlite:",
            printable(&redact_url(url))
        )
    })
}

/// `s` escaped for an error message.
fn printable(s: &str) -> String {
    outbox_core::text::printable(s, 1000).into_owned()
}

/// A name from the file, escaped and cut for an error message.
fn shown(s: &str) -> String {
    outbox_core::text::printable(s, 80).into_owned()
}

fn human(d: Duration) -> String {
    humantime_like(d)
}

/// `90s` as `1m 30s`, for the bounds in error messages.
fn humantime_like(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Where the configuration's values come from, to say where a wrong one is: the file (with
/// its line), or the environment variable that set it.
struct Origin<'a> {
    file: &'a str,
    text: &'a str,
    overrides: Vec<Override>,
    /// Key path to span in `text`, computed on the first error.
    located: OnceLock<Vec<(String, Range<usize>)>>,
}

impl Origin<'_> {
    fn located(&self) -> &[(String, Range<usize>)] {
        self.located.get_or_init(|| locate::locate(self.text))
    }

    /// `environment variable OUTBOX__X (key)`, `file:line: key`, or `file: key`; when
    /// variables set keys inside `key`, they are named too.
    fn at(&self, key: &str) -> String {
        if let Some(o) = self.overrides.iter().find(|o| o.key == key) {
            return format!("environment variable {} ({key})", o.var);
        }
        let line =
            self.located().iter().find(|(k, _)| k == key).map(|(_, span)| line_col(self.text, span.start).0);
        let mut at = match line {
            Some(line) => format!("{}:{line}: {key}", self.file),
            None => format!("{}: {key}", self.file),
        };
        let inside: Vec<String> = self
            .overrides
            .iter()
            .filter(|o| o.key.strip_prefix(key).is_some_and(|rest| rest.starts_with(['.', '['])))
            .map(|o| format!("{} sets {}", o.var, o.key))
            .collect();
        if !inside.is_empty() {
            at.push_str(&format!(" (environment variable {})", inside.join(", ")));
        }
        at
    }

    fn error(&self, key: &str, msg: String) -> anyhow::Error {
        anyhow::anyhow!("{}: {}", self.at(key), self.scrub(&msg, &[]))
    }

    /// An error of the TOML parser or of the typed deserialization of the file: the file, line
    /// and column, the key when known, and the message without the value (it may be a secret).
    /// Never the source line itself.
    fn parse_error(&self, e: &toml::de::Error) -> anyhow::Error {
        let Some(span) = e.span() else {
            return anyhow::anyhow!("{}: {}", self.file, self.scrub(e.message(), &[]));
        };
        let raw = self.text.get(span.clone()).unwrap_or_default();
        let msg = self.scrub(e.message(), &[value_text(e.message(), raw)]);
        let (line, col) = line_col(self.text, span.start);
        let key = key_at(self.located(), self.text, &span).or_else(|| key_on_line(self.text, line));
        match key {
            Some(key) => anyhow::anyhow!("{}:{line}:{col}: {key}: {msg}", self.file),
            None => anyhow::anyhow!("{}:{line}:{col}: {msg}", self.file),
        }
    }

    /// An error of the typed deserialization of the file merged with the overrides: blamed on
    /// the environment variable when its key is at fault, else on the file's key.
    fn merged_error(&self, merged: &str, e: &toml::de::Error) -> anyhow::Error {
        let raw = e.span().and_then(|s| merged.get(s)).unwrap_or_default();
        let msg = self.scrub(e.message(), &[value_text(e.message(), raw)]);
        let key = e.span().and_then(|span| key_at(&locate::locate(merged), merged, &span));
        match key {
            Some(key) => anyhow::anyhow!("{}: {msg}", self.at(&key)),
            None => anyhow::anyhow!("{} (with OUTBOX__ overrides): {msg}", self.file),
        }
    }

    /// `msg` without any value that may be secret: serde's quoted literal after `invalid type:`
    /// and `invalid value:`, the text at the error (`raws`), and every override's value; with
    /// control characters escaped.
    fn scrub(&self, msg: &str, raws: &[&str]) -> String {
        let mut out = drop_serde_literals(msg);
        let values = raws.iter().map(|r| unquote(r)).chain(self.overrides.iter().map(|o| o.raw.trim()));
        for v in values {
            // Shorter values are not secrets and would garble the message (`1`, `true`).
            if v.chars().count() >= 4 {
                out = out.replace(v, "***");
            }
        }
        outbox_core::text::printable(out.trim_end(), 2000).replace("\\n", "; ")
    }
}

/// The text at an error that may be a value: none when the error points at a key (an
/// unknown field, which the message names and which is no secret).
fn value_text<'a>(message: &str, raw: &'a str) -> &'a str {
    if message.starts_with("unknown field") || message.starts_with("duplicate key") {
        ""
    } else {
        raw
    }
}

/// `raw` (a TOML value as written) without its quotes.
fn unquote(raw: &str) -> &str {
    let t = raw.trim();
    for q in ["\"\"\"", "'''", "\"", "'"] {
        if t.len() >= 2 * q.len() && t.starts_with(q) && t.ends_with(q) {
            return &t[q.len()..t.len() - q.len()];
        }
    }
    t
}

/// `msg` with the literal serde quotes after `invalid type: <kind>` / `invalid value: <kind>`
/// left out (`invalid type: string "hunter2", expected u32` -> `invalid type: string, expected
/// u32`).
fn drop_serde_literals(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    loop {
        let next = ["invalid type: ", "invalid value: "]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, m.len())))
            .min();
        let Some((i, len)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + len]);
        rest = &rest[i + len..];
        // `<kind words> "literal"` or `<kind words> `literal``
        let kind_end = rest.find(['"', '`', ',']).unwrap_or(rest.len());
        let quote = rest[kind_end..].chars().next();
        if let Some(q @ ('"' | '`')) = quote {
            out.push_str(rest[..kind_end].trim_end());
            let body = &rest[kind_end + 1..];
            let close = if q == '"' { closing_quote(body) } else { body.find('`') };
            rest = match close {
                Some(c) => &body[c + 1..],
                None => "",
            };
        }
    }
}

/// Index of the closing `"` of a Debug-quoted string body (skipping `\"`).
fn closing_quote(body: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// The key an error at `span` is about: among the keys whose value starts on the error's line,
/// the innermost holding `span`, else the longest (an error pointing at a key, like an unknown
/// field); failing that, the innermost key whose value holds `span` (a table).
fn key_at(located: &[(String, Range<usize>)], text: &str, span: &Range<usize>) -> Option<String> {
    let holds = |s: &Range<usize>| s.start <= span.start && span.start < s.end.max(s.start + 1);
    let line = line_col(text, span.start).0;
    let on_line: Vec<&(String, Range<usize>)> =
        located.iter().filter(|(_, s)| line_col(text, s.start).0 == line).collect();
    let found = on_line
        .iter()
        .filter(|(_, s)| holds(s))
        .min_by_key(|(_, s)| s.end - s.start)
        .or_else(|| on_line.iter().max_by_key(|(k, _)| k.len()))
        .map(|(k, _)| k.clone());
    found.or_else(|| {
        located.iter().filter(|(_, s)| holds(s)).min_by_key(|(_, s)| s.end - s.start).map(|(k, _)| k.clone())
    })
}

/// The key a line of a document that does not parse sets, read the simple way: the last
/// `[table]` or `[[array]]` header above it and the bare (or dotted bare) key before its `=`.
/// Only key characters are ever returned, never a value. `None` when the line is no
/// `key = ...` line.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let bare = |s: &str| {
        let parts: Vec<&str> = s.split('.').map(str::trim).collect();
        parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .then(|| parts.join("."))
    };
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?;
    let key = bare(this.split_once('=')?.0)?;
    let mut table: Option<String> = None;
    for (i, l) in lines[..line - 1].iter().enumerate().rev() {
        let l = l.trim();
        let Some(header) = l.strip_prefix('[') else { continue };
        let array = header.starts_with('[');
        let name = header.trim_start_matches('[').split(']').next().and_then(bare)?;
        table = Some(if array {
            let this_header = format!("[[{name}]]");
            let index = lines[..=i]
                .iter()
                .filter(|h| h.trim().replace(' ', "").starts_with(&this_header))
                .count()
                .saturating_sub(1);
            format!("{name}[{index}]")
        } else {
            name
        });
        break;
    }
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key,
    })
}

/// Line and column (1-based, in characters) of a byte offset in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    (line, col)
}

/// Where each key of a TOML document is. The `toml` parser gives spans through
/// `toml::Spanned`; this reads every value of the document through the same mechanism, but
/// falls back to "no span" where the parser has none (implicit tables), instead of failing.
mod locate {
    use std::ops::Range;

    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

    use super::env::{push_index, push_key};

    // The names `toml::Spanned` (serde_spanned) uses to ask the parser for a value's span.
    const NAME: &str = "$__serde_spanned_private_Spanned";
    const START: &str = "$__serde_spanned_private_start";
    const END: &str = "$__serde_spanned_private_end";
    const VALUE: &str = "$__serde_spanned_private_value";
    const FIELDS: &[&str] = &[START, END, VALUE];

    /// Every key path of `text` (`relay.lease`, `stores[0].url`) with the span of its value.
    /// Empty when `text` does not parse.
    pub(super) fn locate(text: &str) -> Vec<(String, Range<usize>)> {
        let Ok(root) = toml::from_str::<Located>(text) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        walk(&root, "", &mut out);
        out
    }

    fn walk(l: &Located, path: &str, out: &mut Vec<(String, Range<usize>)>) {
        if let (Some(span), false) = (&l.span, path.is_empty()) {
            out.push((path.to_owned(), span.clone()));
        }
        match &l.node {
            Node::Table(entries) => {
                for (k, v) in entries {
                    let mut p = path.to_owned();
                    push_key(&mut p, k);
                    walk(v, &p, out);
                }
            }
            Node::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let mut p = path.to_owned();
                    push_index(&mut p, i);
                    walk(v, &p, out);
                }
            }
            Node::Leaf => {}
        }
    }

    struct Located {
        span: Option<Range<usize>>,
        node: Node,
    }

    enum Node {
        Table(Vec<(String, Located)>),
        Array(Vec<Located>),
        Leaf,
    }

    impl<'de> Deserialize<'de> for Located {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_struct(NAME, FIELDS, LocatedVisitor)
        }
    }

    /// The value inside a span: any TOML value.
    struct Inner(Node);

    impl<'de> Deserialize<'de> for Inner {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(LocatedVisitor).map(|l| Inner(l.node))
        }
    }

    struct LocatedVisitor;

    fn leaf() -> Located {
        Located { span: None, node: Node::Leaf }
    }

    impl<'de> Visitor<'de> for LocatedVisitor {
        type Value = Located;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a TOML value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Located, A::Error> {
            let Some(first) = map.next_key::<String>()? else {
                return Ok(Located { span: None, node: Node::Table(Vec::new()) });
            };
            if first == START {
                let start: usize = map.next_value()?;
                let mut end = start;
                let mut node = Node::Leaf;
                while let Some(k) = map.next_key::<String>()? {
                    if k == END {
                        end = map.next_value()?;
                    } else if k == VALUE {
                        node = map.next_value::<Inner>()?.0;
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                return Ok(Located { span: Some(start..end.max(start)), node });
            }
            let mut entries = vec![(first, map.next_value::<Located>()?)];
            while let Some(k) = map.next_key::<String>()? {
                let v = map.next_value::<Located>()?;
                entries.push((k, v));
            }
            Ok(Located { span: None, node: Node::Table(entries) })
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Located, A::Error> {
            let mut items = Vec::new();
            while let Some(v) = seq.next_element::<Located>()? {
                items.push(v);
            }
            Ok(Located { span: None, node: Node::Array(items) })
        }

        fn visit_bool<E>(self, _: bool) -> Result<Located, E> {
            Ok(leaf())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Located, E> {
            Ok(leaf())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Located, E> {
            Ok(leaf())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Located, E> {
            Ok(leaf())
        }
        fn visit_str<E>(self, _: &str) -> Result<Located, E> {
            Ok(leaf())
        }
        fn visit_unit<E>(self) -> Result<Located, E> {
            Ok(leaf())
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[relay]
batch_size = 200
lease = "20s"

[[stores]]
name = "shop"
url = "sqlite:shop.db"

[destinations.hook]
retry = { max_attempts = 5, initial = "500ms" }
transport = { type = "http", url = "http://127.0.0.1:9/hook", secret = "0123456789abcdef0123" }

[[routes]]
topic = "order.*"
destinations = ["hook"]
"#;

    fn parse(text: &str) -> anyhow::Result<Config> {
        Config::parse(text, std::iter::empty(), "outbox.toml")
    }

    fn parse_env(text: &str, vars: &[(&str, &str)]) -> anyhow::Result<Config> {
        let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
        Config::parse(text, vars.into_iter(), "outbox.toml")
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.relay.batch_size, 200);
        assert_eq!(c.relay.lease, Duration::from_secs(20));
        assert_eq!(c.relay.idle_interval, Duration::from_secs(1));
        assert_eq!(c.destinations["hook"].retry.max_attempts, 5);
        assert_eq!(c.destinations["hook"].retry.initial, Duration::from_millis(500));
        assert_eq!(c.retention.finished_after, Duration::from_secs(7 * 86_400));
        assert_eq!(c.relay_config("shop").unrouted_grace, Duration::from_secs(600));
        let now =
            parse(&GOOD.replace("lease = \"20s\"", "lease = \"20s\"\nunrouted_grace = \"0s\"")).unwrap();
        assert_eq!(now.relay_config("shop").unrouted_grace, Duration::ZERO);
    }

    #[test]
    fn locked_claims_need_a_connection_per_batch_in_flight() {
        let pg = GOOD.replace("sqlite:shop.db", "postgres://relay@db/shop");
        let small = pg.replace("lease = \"20s\"", "lease = \"20s\"\nmax_in_flight_batches = 6");
        let e = parse(&small).unwrap_err().to_string();
        assert!(
            e.contains("stores[0].max_connections (4)") && e.contains("max_in_flight_batches (6)"),
            "{e}"
        );
        // Leases, or SQLite (always leases), need no such headroom.
        let leases = small.replace("lease = \"20s\"", "lease = \"20s\"\nlock_claims = false");
        assert!(!parse(&leases).unwrap().relay.lock_claims);
        let sqlite = GOOD.replace("lease = \"20s\"", "lease = \"20s\"\nmax_in_flight_batches = 6");
        assert!(parse(&sqlite).unwrap().relay.lock_claims);
    }

    #[test]
    fn unknown_keys_are_errors_with_the_line() {
        let bad = GOOD.replace("batch_size = 200", "batch_size = 200\nbatchsize = 1");
        let e = err(&bad);
        assert!(e.starts_with("outbox.toml:4:1: relay.batchsize: unknown field `batchsize`"), "{e}");
    }

    #[test]
    fn type_errors_name_the_line_and_key() {
        let bad = GOOD.replace("lease = \"20s\"", "lease = \"soon\"");
        let e = err(&bad);
        assert!(e.contains("invalid duration") && e.starts_with("outbox.toml:4:9: relay.lease:"), "{e}");
    }

    #[test]
    fn a_route_to_an_unknown_destination_names_it_and_its_line() {
        let bad = GOOD.replace(r#"destinations = ["hook"]"#, r#"destinations = ["hook", "kafka"]"#);
        let e = err(&bad);
        assert!(e.contains("outbox.toml:16: routes[0].destinations[1]"), "{e}");
        assert!(e.contains("unknown destination \"kafka\""), "{e}");
    }

    #[test]
    fn bad_patterns_and_urls_are_named() {
        let e = err(&GOOD.replace("order.*", "order.#.x"));
        assert!(e.contains("outbox.toml:15: routes[0].topic"), "{e}");
        let e = err(&GOOD.replace("sqlite:shop.db", "oracle://u:pw@h/x"));
        assert!(e.contains("outbox.toml:8: stores[0].url") && !e.contains("pw@"), "{e}");
        let e = err(&GOOD.replace("sqlite:shop.db", "host=db password=hunter2"));
        assert!(e.contains("stores[0].url: not a URL") && !e.contains("hunter2"), "{e}");
        let e =
            err(&GOOD.replace("[[stores]]\nname = \"shop\"\nurl = \"sqlite:shop.db\"\n", "stores = []\n"));
        assert!(e.contains("stores"), "{e}");
    }

    /// Finding 11: every value the relay would refuse, or misbehave on, is refused here, naming
    /// the key and its line.
    #[test]
    fn values_the_relay_cannot_run_with_are_refused_by_key_and_line() {
        let relay = |line: &str| GOOD.replace("lease = \"20s\"", &format!("lease = \"20s\"\n{line}"));
        let cases: Vec<(String, &str)> = vec![
            (relay("idle_interval = \"0s\""), "outbox.toml:5: relay.idle_interval"),
            (relay("idle_interval = \"2h\""), "outbox.toml:5: relay.idle_interval"),
            (relay("max_in_flight_batches = 0"), "outbox.toml:5: relay.max_in_flight_batches"),
            (relay("owner = \"\""), "outbox.toml:5: relay.owner"),
            (relay("owner = \"a\\u001b[31m\""), "outbox.toml:5: relay.owner"),
            (relay(&format!("owner = \"{}\"", "o".repeat(200))), "outbox.toml:5: relay.owner"),
            (relay("shutdown_timeout = \"2h\""), "outbox.toml:5: relay.shutdown_timeout"),
            (relay("unrouted_grace = \"8d\""), "outbox.toml:5: relay.unrouted_grace"),
            (relay("publish_timeout = \"0s\""), "outbox.toml:5: relay.publish_timeout"),
            (GOOD.replace("lease = \"20s\"", "lease = \"100000000d\""), "outbox.toml:4: relay.lease"),
            (GOOD.replace("lease = \"20s\"", "lease = \"0s\""), "outbox.toml:4: relay.lease"),
            (GOOD.replace("batch_size = 200", "batch_size = 0"), "outbox.toml:3: relay.batch_size"),
            (GOOD.replace("name = \"shop\"", "name = \"\""), "outbox.toml:7: stores[0].name"),
            (GOOD.replace("name = \"shop\"", "name = \"sh\\rop\""), "outbox.toml:7: stores[0].name"),
            (GOOD.replace("name = \"shop\"", &format!("name = \"{}\"", "s".repeat(130))), "stores[0].name"),
            (
                GOOD.replace("[destinations.hook]", "[destinations.\"\"]").replace("[\"hook\"]", "[\"\"]"),
                "destinations.\"\"",
            ),
            (
                GOOD.replace("[destinations.hook]", &format!("[destinations.{}]", "d".repeat(129)))
                    .replace("[\"hook\"]", &format!("[\"{}\"]", "d".repeat(129))),
                "destinations.ddd",
            ),
            (
                GOOD.replace("[destinations.hook]", "[destinations.\"a\\u0007b\"]")
                    .replace("[\"hook\"]", "[\"a\\u0007b\"]"),
                "control characters",
            ),
            (
                GOOD.replace("[destinations.hook]", "[destinations.hook]\nmax_payload_bytes = 0"),
                "outbox.toml:11: destinations.hook.max_payload_bytes",
            ),
            (
                GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"0s\" }"),
                "outbox.toml:11: destinations.hook.ack.timeout",
            ),
            (format!("{GOOD}\n[retention]\ninterval = \"0s\"\n"), "outbox.toml:19: retention.interval"),
            (format!("{GOOD}\n[retention]\nbatch = 1000000000\n"), "outbox.toml:19: retention.batch"),
            (format!("{GOOD}\n[retention]\nbatch = 0\n"), "outbox.toml:19: retention.batch"),
            (
                format!("{GOOD}\n[retention]\nfinished_after = \"100000d\"\n"),
                "outbox.toml:19: retention.finished_after",
            ),
            (format!("{GOOD}\n[ack]\ntoken_ttl = \"0s\"\n"), "outbox.toml:19: ack.token_ttl"),
            (
                GOOD.replace("topic = \"order.*\"", "topic = \"order.\\u001b\""),
                "outbox.toml:15: routes[0].topic",
            ),
            (
                GOOD.replace("max_attempts = 5,", "max_attempts = 0,"),
                "outbox.toml:11: destinations.hook.retry",
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.contains(want), "want {want:?} in: {e}");
            assert!(!e.contains('\u{1b}') && !e.contains('\r') && !e.contains('\u{7}'), "{e}");
        }
        // A token TTL shorter than the ACK timeout.
        let ack = GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"2h\" }");
        let e = err(&format!("{ack}\n[ack]\nsecret = \"0123456789abcdef\"\ntoken_ttl = \"1h\"\n"));
        assert!(e.contains("outbox.toml:21: ack.token_ttl") && e.contains("ack.timeout"), "{e}");
        assert!(!e.contains("0123456789abcdef"), "{e}");
    }

    #[test]
    fn environment_overrides_replace_values() {
        let vars = [
            ("OUTBOX__STORES__0__URL", "postgres://app:secret@db/shop"),
            ("OUTBOX__RELAY__BATCH_SIZE", "50"),
            ("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET", "another-secret-0123456"),
            ("UNRELATED", "x"),
        ];
        let c = parse_env(GOOD, &vars).unwrap();
        assert_eq!(c.stores[0].url.get_ref(), "postgres://app:secret@db/shop");
        assert_eq!(c.relay.batch_size, 50);
        // A key the file does not set: typed by its look.
        let c = parse_env(GOOD, &[("OUTBOX__RELAY__MAX_IN_FLIGHT_BATCHES", "3")]).unwrap();
        assert_eq!(c.relay.max_in_flight_batches, 3);
        let c = parse_env(GOOD, &[("OUTBOX__RETENTION__INTERVAL", "30000")]).unwrap();
        assert_eq!(c.retention.interval, Duration::from_secs(30));
    }

    #[test]
    fn an_all_digit_secret_stays_a_string() {
        let ack = GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"30s\" }");
        let c = parse_env(&ack, &[("OUTBOX__ACK__SECRET", "1234567890123456789")]).unwrap();
        assert_eq!(c.ack.secret.as_deref(), Some("1234567890123456789"));
        // Also over a string in the file, and for a transport secret.
        let file = format!("{ack}\n[ack]\nsecret = \"0123456789abcdef\"\n");
        let c = parse_env(&file, &[("OUTBOX__ACK__SECRET", "98765432109876543210")]).unwrap();
        assert_eq!(c.ack.secret.as_deref(), Some("98765432109876543210"));
        parse_env(GOOD, &[("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET", "12345678901234567890")])
            .unwrap();
    }

    #[test]
    fn override_errors_name_the_variable_and_hide_the_value() {
        let cases = [
            ("OUTBOX__RELAY__BATCH_SIZE", "hunter2hunter2", "relay.batch_size"),
            ("OUTBOX__RELAY__BATCH_SIZE", "0", "relay.batch_size"),
            ("OUTBOX__RELAY__IDLE_INTERVAL", "0s", "relay.idle_interval"),
            ("OUTBOX__RELAY__LEASE", "hunter2hunter2", "relay.lease"),
            ("OUTBOX__RELAY__MAX_IN_FLIGHT_BATCHES", "hunter2hunter2", "relay.max_in_flight_batches"),
            ("OUTBOX__RELAY__BATCHSIZE", "hunter2hunter2", "relay.batchsize"),
            ("OUTBOX__ACK__TOKEN_TTL", "hunter2hunter2", "ack.token_ttl"),
            ("OUTBOX__STORES__0__URL", "oracle://u:hunter2hunter2@h/db", "stores[0].url"),
            ("OUTBOX__STORES__0__MAX_CONNECTIONS", "hunter2hunter2", "stores[0].max_connections"),
        ];
        for (var, value, key) in cases {
            let e = format!("{:#}", parse_env(GOOD, &[(var, value)]).unwrap_err());
            assert!(e.contains(&format!("environment variable {var} ({key})")), "{var}: {e}");
            assert!(!e.contains("hunter2"), "{var}: {e}");
        }
    }

    #[test]
    fn parse_errors_never_print_the_source_line() {
        // A syntax error on the line of a secret: the position, not the line.
        let bad =
            GOOD.replace("secret = \"0123456789abcdef0123\" }", "secret = \"hunter2-0123456789abcdef }");
        let e = err(&bad);
        assert!(e.starts_with("outbox.toml:12:"), "{e}");
        assert!(e.contains("destinations.hook.transport"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains('|'), "{e}");
        let bad = format!("{GOOD}\n[ack]\nsecret = hunter2-secret-value\n");
        let e = err(&bad);
        assert!(e.starts_with("outbox.toml:19:10: ack.secret:"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // A type error on a secret: the key, not the value.
        let bad = format!("{GOOD}\n[ack]\nsecret = 12345678901234567890123\n");
        let e = err(&bad);
        assert!(!e.contains("12345678901234567890123"), "{e}");
        let bad = format!("{GOOD}\n[ack]\nsecret = 1234567890123456789\n");
        let e = err(&bad);
        assert!(e.contains("outbox.toml:19:10: ack.secret") && !e.contains("1234567890123456789"), "{e}");
        let bad = GOOD.replace("batch_size = 200", "batch_size = \"hunter2-secret\"");
        let e = err(&bad);
        assert!(e.contains("relay.batch_size") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn serde_literals_are_dropped() {
        assert_eq!(
            drop_serde_literals("invalid type: string \"hun\\\"ter2\", expected u32"),
            "invalid type: string, expected u32"
        );
        assert_eq!(
            drop_serde_literals(
                "invalid value: integer `12345`, expected u32 and invalid type: floating point `1.5`, x"
            ),
            "invalid value: integer, expected u32 and invalid type: floating point, x"
        );
        assert_eq!(
            drop_serde_literals("invalid type: map, expected a string"),
            "invalid type: map, expected a string"
        );
        assert_eq!(drop_serde_literals("invalid type: string \"unterminated"), "invalid type: string");
    }

    #[test]
    fn keys_are_located() {
        let located = locate::locate(GOOD);
        let line = |key: &str| located.iter().find(|(k, _)| k == key).map(|(_, s)| line_col(GOOD, s.start).0);
        assert_eq!(line("relay.lease"), Some(4));
        assert_eq!(line("stores[0].url"), Some(8));
        assert_eq!(line("destinations.hook.retry.max_attempts"), Some(11));
        assert_eq!(line("destinations.hook.transport.secret"), Some(12));
        assert_eq!(line("routes[0].destinations[0]"), Some(16));
        assert!(locate::locate("not toml [").is_empty());
    }

    mod prop {
        //! Property tests of the parser: whatever the file or the environment holds, parsing
        //! never panics, every error names the file (or the environment variable), and what
        //! parses is valid.
        use proptest::prelude::*;

        use super::super::*;
        use super::GOOD;

        fn check_parsed(r: anyhow::Result<Config>) -> Result<(), TestCaseError> {
            match r {
                Ok(c) => {
                    prop_assert!(!c.stores.is_empty());
                    prop_assert!(c.relay.batch_size >= 1 && c.relay.batch_size <= 10_000);
                    prop_assert!(c.relay.publish_timeout < c.relay.lease);
                    prop_assert!(c.relay.lease <= MAX_LEASE && !c.relay.idle_interval.is_zero());
                    prop_assert!(c.relay.max_in_flight_batches >= 1);
                    prop_assert!(c.retention.batch >= 1 && !c.retention.interval.is_zero());
                    for r in &c.routes {
                        for d in &r.destinations {
                            prop_assert!(c.destinations.contains_key(d.get_ref()));
                        }
                    }
                }
                // Errors name the file, or the environment variable that caused them, and hold
                // no control character.
                Err(e) => {
                    let e = format!("{e:#}");
                    prop_assert!(
                        e.contains("outbox.toml") || e.contains("environment variable OUTBOX__"),
                        "{e}"
                    );
                    prop_assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn arbitrary_text_never_panics(text in ".{0,400}") {
                check_parsed(Config::parse(&text, std::iter::empty(), "outbox.toml"))?;
            }

            #[test]
            fn a_good_file_with_one_line_replaced_never_panics(
                line in 0usize..20,
                replacement in prop_oneof![
                    ".{0,60}",
                    "[a-z_]{1,12} = (\"[a-z0-9.#*]{0,10}\"|-?[0-9]{1,12}|true|\\[\\]|\\{\\})",
                    Just("[[stores]]".to_owned()),
                    Just("[destinations.hook.transport]".to_owned()),
                    Just("lease = \"1ms\"".to_owned()),
                    Just("batch_size = 0".to_owned()),
                    Just("topic = \"\"".to_owned()),
                ],
            ) {
                let mut lines: Vec<&str> = GOOD.lines().collect();
                let i = line.min(lines.len() - 1);
                lines[i] = &replacement;
                let text = lines.join("\n");
                check_parsed(Config::parse(&text, std::iter::empty(), "outbox.toml"))?;
            }

            #[test]
            fn arbitrary_environment_overrides_never_panic(
                key in prop_oneof![
                    "OUTBOX__[A-Z_]{1,20}",
                    "OUTBOX__(RELAY|STORES|DESTINATIONS|ROUTES)__[A-Z0-9_]{0,12}(__[A-Z0-9_]{0,12}){0,3}",
                    Just("OUTBOX__".to_owned()),
                    Just("OUTBOX____".to_owned()),
                    Just("OUTBOX__STORES__99__URL".to_owned()),
                ],
                value in ".{0,40}",
            ) {
                let vars = vec![(key, value)];
                check_parsed(Config::parse(GOOD, vars.into_iter(), "outbox.toml"))?;
            }

            /// A secret-looking value given for a real key never appears in the error.
            #[test]
            fn override_values_never_echo(
                key in prop_oneof![
                    Just("OUTBOX__RELAY__BATCH_SIZE"),
                    Just("OUTBOX__RELAY__LEASE"),
                    Just("OUTBOX__RELAY__LOCK_CLAIMS"),
                    Just("OUTBOX__STORES__0__URL"),
                    Just("OUTBOX__STORES__0__MAX_CONNECTIONS"),
                    Just("OUTBOX__ACK__TOKEN_TTL"),
                    Just("OUTBOX__RETENTION__BATCH"),
                    Just("OUTBOX__DESTINATIONS__HOOK__RETRY__MAX_ATTEMPTS"),
                    Just("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__URL"),
                ],
                value in prop_oneof![
                    "SEKRIT[a-zA-Z0-9@?=]{0,20}",
                    "oracle://u:SEKRIT[a-zA-Z0-9:/@?=]{0,20}@h/db",
                    "nats://SEKRIT[a-zA-Z0-9]{0,20}@h:4222",
                ],
            ) {
                let vars = vec![(key.to_owned(), value)];
                if let Err(e) = Config::parse(GOOD, vars.into_iter(), "outbox.toml") {
                    let e = format!("{e:#}");
                    prop_assert!(!e.contains("SEKRIT"), "{e}");
                    prop_assert!(e.contains(key), "{e}");
                }
            }
        }
    }

    #[test]
    fn ack_endpoint_limits_have_defaults_and_bounds() {
        let c = parse(GOOD).unwrap();
        assert_eq!(
            (c.ack.max_connections, c.ack.header_timeout, c.ack.request_timeout),
            (256, Duration::from_secs(5), Duration::from_secs(10))
        );
        let c = parse(&format!("{GOOD}\n[ack]\nmax_connections = 64\nheader_timeout = \"2s\"\n")).unwrap();
        assert_eq!((c.ack.max_connections, c.ack.header_timeout), (64, Duration::from_secs(2)));
        for (text, want) in [
            ("max_connections = 0", "outbox.toml:19: ack.max_connections"),
            ("max_connections = 1000000", "outbox.toml:19: ack.max_connections"),
            ("header_timeout = \"0s\"", "outbox.toml:19: ack.header_timeout"),
            ("request_timeout = \"1h\"", "outbox.toml:19: ack.request_timeout"),
        ] {
            let e = err(&format!("{GOOD}\n[ack]\n{text}\n"));
            assert!(e.contains(want), "want {want:?} in: {e}");
        }
    }

    #[test]
    fn keys_of_lines_that_do_not_parse() {
        let text = "a = 1\n[relay]\nlease = \"x\n[[stores]]\n[[stores]]\nurl = \"p\n[ x . y ]\nk.l = {\nv\n";
        assert_eq!(key_on_line(text, 1).as_deref(), Some("a"));
        assert_eq!(key_on_line(text, 3).as_deref(), Some("relay.lease"));
        assert_eq!(key_on_line(text, 6).as_deref(), Some("stores[1].url"));
        assert_eq!(key_on_line(text, 8).as_deref(), Some("x.y.k.l"));
        assert_eq!(key_on_line(text, 9), None);
        assert_eq!(key_on_line(text, 99), None);
        assert_eq!(key_on_line("\"quoted key\" = 1", 1), None);
    }

    #[test]
    fn line_numbers() {
        assert_eq!(line_col("a\nb\nc", 0), (1, 1));
        assert_eq!(line_col("a\nb\nc", 2), (2, 1));
        assert_eq!(line_col("a\nbé c", 6), (2, 4));
    }
}
