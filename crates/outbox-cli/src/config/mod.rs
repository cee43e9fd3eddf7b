//! The relay's configuration file: one TOML file plus `OUTBOX__*` environment overrides.
//!
//! Unknown keys are errors; parse and type errors carry the file line (the TOML parser reports
//! it); semantic errors (a route naming an unknown destination, a bad pattern, a store URL with an
//! unknown scheme) name the key and, where the parser kept it, the line.

mod env;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use outbox_core::RetryPolicy;
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
}

impl Default for AckSection {
    fn default() -> Self {
        AckSection {
            listen: "127.0.0.1:8099".into(),
            secret: None,
            token_ttl: Duration::from_secs(7 * 86_400),
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

/// Line (1-based) of a byte offset in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

impl Config {
    /// Loads `path`, applies `OUTBOX__*` overrides from the environment, and validates.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        Self::parse(&text, std::env::vars(), &path.display().to_string())
    }

    /// Parses and validates `text`; `source` names the file in errors.
    pub(crate) fn parse(
        text: &str,
        vars: impl Iterator<Item = (String, String)>,
        source: &str,
    ) -> anyhow::Result<Config> {
        let mut value: toml::Table =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{source}: {}", e.to_string().trim_end()))?;
        let overridden = env::apply_overrides(&mut value, vars)?;
        if !overridden {
            // Parse the file's own text, so every span points at a line of the file.
            let config: Config = toml::from_str(text)
                .map_err(|e| anyhow::anyhow!("{source}: {}", e.to_string().trim_end()))?;
            config.validate(Some(text), source)?;
            return Ok(config);
        }
        // With overrides the values no longer all come from the file: errors name the key only.
        let merged = toml::to_string(&value).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        let source = format!("{source} (with OUTBOX__ overrides)");
        let config: Config = toml::from_str(&merged).map_err(|e| {
            let msg = e.message().to_owned();
            anyhow::anyhow!("{source}: {msg}")
        })?;
        config.validate(None, &source)?;
        Ok(config)
    }

    fn validate(&self, text: Option<&str>, source: &str) -> anyhow::Result<()> {
        let at = |span: std::ops::Range<usize>| match text {
            Some(text) if span.end > 0 => format!("{source}:{}", line_of(text, span.start)),
            _ => source.to_owned(),
        };
        if self.stores.is_empty() {
            bail!("{source}: `stores` is empty: add at least one [[stores]] with a name and url");
        }
        let mut names = std::collections::HashSet::new();
        for (i, s) in self.stores.iter().enumerate() {
            if !names.insert(s.name.get_ref().clone()) {
                bail!("{}: stores[{i}].name {:?} is used twice", at(s.name.span()), s.name.get_ref());
            }
            let dialect = outbox_store::Dialect::of_url(s.url.get_ref())
                .map_err(|e| anyhow::anyhow!("{}: stores[{i}].url: {e}", at(s.url.span())))?;
            if s.max_connections == 0 {
                bail!("{source}: stores[{i}].max_connections must be at least 1");
            }
            let locks = self.relay.lock_claims && dialect != outbox_store::Dialect::Sqlite;
            if locks && (s.max_connections as usize) < self.relay.max_in_flight_batches {
                bail!(
                    "{source}: stores[{i}].max_connections ({}) is below relay.max_in_flight_batches ({}): \
                     with relay.lock_claims each batch in flight holds a connection while it publishes",
                    s.max_connections,
                    self.relay.max_in_flight_batches
                );
            }
        }
        for (name, d) in &self.destinations {
            d.transport.validate().map_err(|e| anyhow::anyhow!("{source}: destinations.{name}: {e}"))?;
            d.retry.validate().map_err(|e| anyhow::anyhow!("{source}: destinations.{name}.retry: {e}"))?;
        }
        for (i, r) in self.routes.iter().enumerate() {
            validate_pattern(r.topic.get_ref())
                .map_err(|e| anyhow::anyhow!("{}: routes[{i}].topic: {e}", at(r.topic.span())))?;
            if r.destinations.is_empty() {
                bail!("{}: routes[{i}].destinations is empty", at(r.topic.span()));
            }
            for d in &r.destinations {
                if !self.destinations.contains_key(d.get_ref()) {
                    let known: Vec<&str> = self.destinations.keys().map(String::as_str).collect();
                    bail!(
                        "{}: routes[{i}].destinations: unknown destination {:?} (defined: {})",
                        at(d.span()),
                        d.get_ref(),
                        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                    );
                }
            }
        }
        if self.destinations.values().any(|d| d.ack.is_some()) {
            match &self.ack.secret {
                None => bail!(
                    "{source}: a destination requires ACKs, so ack.secret must be set (use OUTBOX__ACK__SECRET)"
                ),
                Some(s) if s.len() < 16 => bail!("{source}: ack.secret must be at least 16 bytes"),
                Some(_) => {}
            }
            self.ack
                .listen
                .parse::<std::net::SocketAddr>()
                .map_err(|e| anyhow::anyhow!("{source}: ack.listen {:?}: {e}", self.ack.listen))?;
        }
        for (name, d) in &self.destinations {
            if d.ack.as_ref().is_some_and(|a| a.timeout.is_zero()) {
                bail!("{source}: destinations.{name}.ack.timeout must be positive");
            }
        }
        let relay = self.relay_config("check");
        if relay.publish_timeout >= relay.lease {
            bail!("{source}: relay.publish_timeout must be shorter than relay.lease");
        }
        if self.relay.batch_size == 0 || self.relay.batch_size > 10_000 {
            bail!("{source}: relay.batch_size must be between 1 and 10000");
        }
        if self.retention.batch == 0 {
            bail!("{source}: retention.batch must be at least 1");
        }
        Ok(())
    }

    /// The engine's configuration for the store named `store`.
    pub(crate) fn relay_config(&self, store: &str) -> RelayConfig {
        let base = RelayConfig::default();
        let owner = match &self.relay.owner {
            Some(o) => format!("{o}-{store}"),
            None => format!("{}-{store}", base.owner),
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

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.relay.batch_size, 200);
        assert_eq!(c.relay.lease, Duration::from_secs(20));
        assert_eq!(c.relay.idle_interval, Duration::from_secs(1));
        assert_eq!(c.destinations["hook"].retry.max_attempts, 5);
        assert_eq!(c.destinations["hook"].retry.initial, Duration::from_millis(500));
        assert_eq!(c.retention.finished_after, Duration::from_secs(7 * 86_400));
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
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("batchsize") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn type_errors_name_the_line() {
        let bad = GOOD.replace("lease = \"20s\"", "lease = \"soon\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("invalid duration") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn a_route_to_an_unknown_destination_names_it_and_its_line() {
        let bad = GOOD.replace(r#"destinations = ["hook"]"#, r#"destinations = ["hook", "kafka"]"#);
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("outbox.toml:16") && e.contains("unknown destination \"kafka\""), "{e}");
    }

    #[test]
    fn bad_patterns_and_urls_are_named() {
        let e = parse(&GOOD.replace("order.*", "order.#.x")).unwrap_err().to_string();
        assert!(e.contains("routes[0].topic") && e.contains("outbox.toml:15"), "{e}");
        let e = parse(&GOOD.replace("sqlite:shop.db", "oracle://u:pw@h/x")).unwrap_err().to_string();
        assert!(e.contains("stores[0].url") && !e.contains("pw@"), "{e}");
        let e =
            parse(&GOOD.replace("[[stores]]\nname = \"shop\"\nurl = \"sqlite:shop.db\"\n", "stores = []\n"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("stores"), "{e}");
    }

    #[test]
    fn environment_overrides_replace_values() {
        let vars = vec![
            ("OUTBOX__STORES__0__URL".to_owned(), "postgres://app:secret@db/shop".to_owned()),
            ("OUTBOX__RELAY__BATCH_SIZE".to_owned(), "50".to_owned()),
            ("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET".to_owned(), "another-secret-0123456".to_owned()),
            ("UNRELATED".to_owned(), "x".to_owned()),
        ];
        let c = Config::parse(GOOD, vars.into_iter(), "outbox.toml").unwrap();
        assert_eq!(c.stores[0].url.get_ref(), "postgres://app:secret@db/shop");
        assert_eq!(c.relay.batch_size, 50);
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
                    for r in &c.routes {
                        for d in &r.destinations {
                            prop_assert!(c.destinations.contains_key(d.get_ref()));
                        }
                    }
                }
                // Errors name the file, or the environment variable that caused them.
                Err(e) => {
                    let e = format!("{e:#}");
                    prop_assert!(
                        e.contains("outbox.toml") || e.contains("environment variable OUTBOX__"),
                        "{e}"
                    );
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
        }
    }

    #[test]
    fn line_numbers() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
    }
}
