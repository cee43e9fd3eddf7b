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
mod locate;
mod origin;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use origin::Origin;
use outbox_core::RetryPolicy;
use outbox_relay::{BreakerConfig, RelayConfig, Retention};
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
    /// The admin listener (health probes, metrics, admin API); off unless the section is there.
    #[serde(default)]
    pub(crate) admin: Option<AdminSection>,
    /// Where alerts of messages failed for good go besides the log.
    #[serde(default)]
    pub(crate) alerts: AlertsSection,
    /// Trace export over OTLP.
    #[serde(default)]
    pub(crate) telemetry: TelemetrySection,
    /// Legacy message tables this relay delivers from (`outbox adopt`, docs/adopt.md).
    #[serde(default)]
    pub(crate) adopt: Vec<outbox_adopt::BridgeConfig>,
}

/// `[telemetry]`: the relay's spans (claim, publish per message and destination, settle)
/// exported over OTLP/HTTP (protobuf) when `otlp_endpoint` is set, or when the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is (docs/admin-api.md
/// "Traces"). Authentication headers go in `OTEL_EXPORTER_OTLP_HEADERS`, never in this file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TelemetrySection {
    /// The collector's traces URL, e.g. `http://otel-collector:4318/v1/traces`. Defaults to
    /// none.
    pub(crate) otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans. Defaults to `outbox-relay`.
    pub(crate) service_name: String,
    /// Share of the relay's traces exported, 0.0 to 1.0. Defaults to 1.0.
    pub(crate) sample_ratio: f64,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection { otlp_endpoint: None, service_name: "outbox-relay".into(), sample_ratio: 1.0 }
    }
}

impl TelemetrySection {
    /// Checks the section: (key, problem) on error.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(url) = &self.otlp_endpoint {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.len() > 2048 || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err((
                    "telemetry.otlp_endpoint",
                    "must be an http:// or https:// URL of at most 2048 characters without spaces".into(),
                ));
            }
            if url.contains('@') {
                return Err((
                    "telemetry.otlp_endpoint",
                    "must not hold credentials: put them in OTEL_EXPORTER_OTLP_HEADERS".into(),
                ));
            }
        }
        outbox_core::text::check_name(&self.service_name, 128).map_err(|e| ("telemetry.service_name", e))?;
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(("telemetry.sample_ratio", "must be between 0.0 and 1.0".into()));
        }
        Ok(())
    }
}

/// `[alerts]`: every message failed for good is logged; with a `destination`, an alert also
/// goes through that destination's transport (a webhook, a chat bridge, a topic), at most one
/// per failure cause per `window` (docs/admin-api.md "Alerts").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct AlertsSection {
    /// A `[destinations.*]` name. Defaults to none (log only).
    pub(crate) destination: Option<String>,
    /// At most one alert per failure cause per window. Defaults to 5 min; 1 s to 1 day.
    #[serde(with = "outbox_core::duration")]
    pub(crate) window: Duration,
    /// Alert when a destination's circuit stays open this long. Defaults to 5 min; "0s" never,
    /// else 10 s to 7 days.
    #[serde(with = "outbox_core::duration")]
    pub(crate) circuit_open_after: Duration,
    /// Alert when a due message has waited this long past its due time. Defaults to 15 min;
    /// "0s" never, else 10 s to 7 days.
    #[serde(with = "outbox_core::duration")]
    pub(crate) overdue_after: Duration,
}

impl Default for AlertsSection {
    fn default() -> Self {
        AlertsSection {
            destination: None,
            window: Duration::from_secs(300),
            circuit_open_after: Duration::from_secs(300),
            overdue_after: Duration::from_secs(900),
        }
    }
}

/// `[admin]`: health probes, Prometheus metrics and the admin API (docs/admin-api.md). Its
/// `Debug` shows whether each token is set, never the token.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct AdminSection {
    /// Address of the admin listener. Defaults to `127.0.0.1:8098` (loopback). Any other
    /// address requires both tokens.
    pub(crate) listen: String,
    /// Bearer token of reads (`GET`), at least 16 characters. Set it with
    /// `OUTBOX__ADMIN__READ_TOKEN`.
    pub(crate) read_token: Option<String>,
    /// Bearer token of actions (and reads), at least 16 characters, not the read token. Set it
    /// with `OUTBOX__ADMIN__ADMIN_TOKEN`.
    pub(crate) admin_token: Option<String>,
    /// How often the backlog gauges of `/metrics` are read from the databases. Defaults to
    /// 15 s; 1 s to 1 h.
    #[serde(with = "outbox_core::duration")]
    pub(crate) backlog_interval: Duration,
    /// Most connections open at once. Defaults to 64; 1 to 65,536.
    pub(crate) max_connections: usize,
    /// Allow edit-and-resend (`POST .../messages/{id}/resend`): an operator with the admin
    /// token may then publish a payload of their own under the original's business key.
    /// Defaults to false.
    pub(crate) allow_resend: bool,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: "127.0.0.1:8098".into(),
            read_token: None,
            admin_token: None,
            backlog_interval: Duration::from_secs(15),
            max_connections: 64,
            allow_resend: false,
        }
    }
}

/// `[ack]`: the endpoint consumers confirm deliveries on, for destinations with `ack = {...}`.
/// Its `Debug` shows whether the secret is set, never the secret.
#[derive(Deserialize)]
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

/// How a secret appears in `Debug` output: whether it is set, never its value.
fn shown_secret(s: &Option<String>) -> &'static str {
    if s.is_some() {
        "Some(<redacted>)"
    } else {
        "None"
    }
}

impl std::fmt::Debug for AdminSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminSection")
            .field("listen", &self.listen)
            .field("read_token", &format_args!("{}", shown_secret(&self.read_token)))
            .field("admin_token", &format_args!("{}", shown_secret(&self.admin_token)))
            .field("backlog_interval", &self.backlog_interval)
            .field("max_connections", &self.max_connections)
            .field("allow_resend", &self.allow_resend)
            .finish()
    }
}

impl std::fmt::Debug for AckSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckSection")
            .field("listen", &self.listen)
            .field("secret", &format_args!("{}", shown_secret(&self.secret)))
            .field("token_ttl", &self.token_ttl)
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
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
    /// Where the store has no push wake-up (MySQL/MariaDB), the scan period of an idle relay
    /// during the 10 s after a claim found messages, so that messages another process writes in
    /// a stream are found this quickly; one read per look. At most `idle_interval` is used.
    /// Defaults to 50 ms.
    #[serde(with = "outbox_core::duration")]
    pub(crate) active_scan_interval: Duration,
    /// Batches in flight. Defaults to 2.
    pub(crate) max_in_flight_batches: usize,
    /// Batches in flight across every store of the process together (a relay over many
    /// databases uses at most this many pooled connections for claiming and publishing; shares
    /// go to the stores in turn). Defaults to 16.
    pub(crate) total_in_flight_batches: usize,
    /// Most messages of one key in one claim (1 to 10000, at most `batch_size` is used; 1: heads
    /// only). Defaults to 32.
    pub(crate) max_run: usize,
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
            active_scan_interval: d.active_scan_interval,
            max_in_flight_batches: d.max_in_flight_batches,
            total_in_flight_batches: DEFAULT_TOTAL_IN_FLIGHT_BATCHES,
            max_run: d.max_run,
            publish_timeout: d.publish_timeout,
            shutdown_timeout: d.shutdown_timeout,
            lock_claims: d.lock_claims,
            unrouted_grace: d.unrouted_grace,
        }
    }
}

/// `relay.total_in_flight_batches` by default.
pub(crate) const DEFAULT_TOTAL_IN_FLIGHT_BATCHES: usize = outbox_relay::Budget::DEFAULT_SIZE;

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
    /// The PostgreSQL schema / MySQL database of the outbox tables (not on SQLite). Defaults
    /// to the connection's own (`search_path` / the URL's database).
    #[serde(default)]
    pub(crate) schema: Option<String>,
    /// What every object name starts with instead of `outbox_` (`app_` makes `app_message`,
    /// `app_delivery`, ...). Defaults to `outbox_`.
    #[serde(default)]
    pub(crate) table_prefix: Option<String>,
}

impl StoreConfig {
    /// The names of this store's tables (checked at load: see `validate`).
    pub(crate) fn tables(&self) -> anyhow::Result<outbox_store::Tables> {
        Ok(outbox_store::Tables::new(
            self.schema.as_deref(),
            self.table_prefix.as_deref().unwrap_or(outbox_store::CANONICAL_PREFIX),
        )?)
    }
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

/// The library's defaults, and what the daemon runs per store: the same fields.
impl Default for RetentionConfig {
    fn default() -> Self {
        let Retention { finished_after, interval, batch } = Retention::default();
        RetentionConfig { finished_after, interval, batch }
    }
}

impl RetentionConfig {
    pub(crate) fn retention(&self) -> Retention {
        Retention { finished_after: self.finished_after, interval: self.interval, batch: self.batch }
    }
}

/// Largest configuration file read: a configuration is a few kilobytes; this bounds what a
/// wrong `--config` (`/dev/zero`, a log file) can make the command read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

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
        let mut origin = Origin::new(source, text);
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
            active_scan_interval: self.relay.active_scan_interval,
            max_in_flight_batches: self.relay.max_in_flight_batches,
            max_run: self.relay.max_run,
            publish_timeout: self.relay.publish_timeout,
            shutdown_timeout: self.relay.shutdown_timeout,
            lock_claims: self.relay.lock_claims,
            unrouted_grace: self.relay.unrouted_grace,
            alert_circuit_open_after: Some(self.alerts.circuit_open_after).filter(|d| !d.is_zero()),
            alert_overdue_after: Some(self.alerts.overdue_after).filter(|d| !d.is_zero()),
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

#[cfg(test)]
mod tests;
