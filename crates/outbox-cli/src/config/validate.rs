//! The semantic checks of a parsed configuration: every value the relay would refuse at start
//! (`RelayBuilder::build`), or misbehave on, is refused here, naming its key; with the bounds
//! (`MAX_*`) of values the engine takes as given.

use std::time::Duration;

use outbox_core::{limits, redact_url};
use outbox_relay::validate_pattern;

use super::origin::Origin;
use super::{env, AckSection, AdminSection, Config};

/// Longest `relay.lease`: a relay that dies holding a claim leaves its messages unpublished for
/// up to this long before another relay takes them over, so a lease of days would look like a
/// silent outage; the database adds it to its clock, so it must also stay far from the range
/// of its time types.
pub(super) const MAX_LEASE: Duration = Duration::from_secs(86_400);
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
impl AdminSection {
    /// The listener's address, tokens and bounds: `(key, reason)` of the first one broken. Off
    /// loopback both tokens are required (SPEC "Security").
    fn check(&self) -> Result<(), (&'static str, String)> {
        const MIN_TOKEN: usize = 16;
        const MAX_TOKEN: usize = 512;
        const MAX_CONNECTIONS: usize = 65_536;
        let addr: std::net::SocketAddr = self.listen.parse().map_err(|_| {
            (
                "admin.listen",
                format!("{:?} is not an address with a port, such as 127.0.0.1:8098", shown(&self.listen)),
            )
        })?;
        for (key, token) in [("admin.read_token", &self.read_token), ("admin.admin_token", &self.admin_token)]
        {
            if let Some(t) = token {
                if t.len() < MIN_TOKEN || t.len() > MAX_TOKEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err((
                        key,
                        format!(
                            "must be {MIN_TOKEN} to {MAX_TOKEN} printable ASCII characters without spaces"
                        ),
                    ));
                }
            }
        }
        match (&self.read_token, &self.admin_token) {
            (Some(r), Some(a)) if r == a => {
                return Err(("admin.admin_token", "must differ from admin.read_token".into()));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err((
                    "admin.admin_token",
                    "set both admin.read_token and admin.admin_token, or neither".into(),
                ));
            }
            (None, None) if !addr.ip().is_loopback() => {
                return Err((
                    "admin.listen",
                    format!(
                        "{addr} is not a loopback address: set admin.read_token and admin.admin_token \
                         (OUTBOX__ADMIN__READ_TOKEN, OUTBOX__ADMIN__ADMIN_TOKEN) to listen there"
                    ),
                ));
            }
            _ => {}
        }
        if self.backlog_interval < Duration::from_secs(1)
            || self.backlog_interval > Duration::from_secs(3_600)
        {
            return Err(("admin.backlog_interval", "must be between 1s and 1h".into()));
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err((
                "admin.max_connections",
                format!("must be between 1 and {MAX_CONNECTIONS}, got {}", self.max_connections),
            ));
        }
        Ok(())
    }
}

impl Config {
    pub(super) fn validate(&self, origin: &Origin<'_>) -> anyhow::Result<()> {
        let err = |key: &str, msg: String| origin.error(key, msg);
        self.telemetry.check().map_err(|(key, msg)| err(key, msg))?;
        if let Some(admin) = &self.admin {
            admin.check().map_err(|(key, msg)| err(key, msg))?;
        }
        if let Some(d) = &self.alerts.destination {
            if !self.destinations.contains_key(d) {
                return Err(err(
                    "alerts.destination",
                    format!("{:?} is not a [destinations.*] name", shown(d)),
                ));
            }
        }
        if self.alerts.window < Duration::from_secs(1) || self.alerts.window > Duration::from_secs(86_400) {
            return Err(err("alerts.window", "must be between 1s and 1d".into()));
        }
        for (key, d) in [
            ("alerts.circuit_open_after", self.alerts.circuit_open_after),
            ("alerts.overdue_after", self.alerts.overdue_after),
        ] {
            if !d.is_zero() && (d < Duration::from_secs(10) || d > Duration::from_secs(7 * 86_400)) {
                return Err(err(key, "must be 0s (never) or between 10s and 7d".into()));
            }
        }
        if self.stores.is_empty() {
            return Err(err("stores", "is empty: add at least one [[stores]] with a name and url".into()));
        }
        self.validate_adopt(origin)?;
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
            // Identifiers that reach SQL: checked here, before anything connects.
            if let Some(schema) = &s.schema {
                outbox_store::Tables::new(Some(schema), outbox_store::CANONICAL_PREFIX)
                    .and_then(|t| t.check_for(dialect))
                    .map_err(|e| err(&format!("stores[{i}].schema"), store_error(name, e)))?;
            }
            if let Some(prefix) = &s.table_prefix {
                outbox_store::Tables::new(None, prefix)
                    .map_err(|e| err(&format!("stores[{i}].table_prefix"), store_error(name, e)))?;
            }
            if s.max_connections == 0 || s.max_connections > MAX_POOL {
                return Err(err(
                    &format!("stores[{i}].max_connections"),
                    format!("must be between 1 and {MAX_POOL}, got {}", s.max_connections),
                ));
            }
            let locks = self.relay.lock_claims && dialect != outbox_store::Dialect::Sqlite;
            // PostgreSQL and MySQL stores keep one pooled connection for the relay's listener
            // and keeper (outbox_store::Keeper); locked batches hold one each besides.
            let needed = self.relay.max_in_flight_batches + 1;
            if locks && (s.max_connections as usize) < needed {
                return Err(err(
                    &format!("stores[{i}].max_connections"),
                    format!(
                        "stores[{i}].max_connections ({}) is below relay.max_in_flight_batches + 1 ({needed}): \
                         with relay.lock_claims each batch in flight holds a connection while it publishes, \
                         and the relay's listening connection takes one more",
                        s.max_connections
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
    /// `[[adopt]]`: each mapping checked (its names reach SQL), names unique, its store known
    /// and a PostgreSQL or MySQL/MariaDB one.
    fn validate_adopt(&self, origin: &Origin<'_>) -> anyhow::Result<()> {
        let mut names = std::collections::HashSet::new();
        for (i, a) in self.adopt.iter().enumerate() {
            let key = |k: &str| format!("adopt[{i}].{k}");
            // The mapping's own error names its key (`adopt.<name>.<key>`).
            a.check().map_err(|e| origin.error(&format!("adopt[{i}]"), e.to_string()))?;
            if !names.insert(a.name.clone()) {
                return Err(origin.error(&key("name"), format!("{} is used twice", shown(&a.name))));
            }
            let store = match &a.store {
                Some(n) => self.stores.iter().find(|s| s.name.get_ref() == n).ok_or_else(|| {
                    origin.error(&key("store"), format!("{} is not a [[stores]] name", shown(n)))
                })?,
                None if self.stores.len() == 1 => &self.stores[0],
                None => return Err(origin.error(
                    &key("store"),
                    "is required when the relay has several stores: the one whose database holds the table"
                        .into(),
                )),
            };
            if dialect_of(store.url.get_ref()).ok() == Some(outbox_store::Dialect::Sqlite) {
                return Err(
                    origin.error(&key("store"), "adopt needs a PostgreSQL or MySQL/MariaDB store".into())
                );
            }
        }
        Ok(())
    }

    fn validate_relay(&self, origin: &Origin<'_>) -> anyhow::Result<()> {
        let err = |key: &str, msg: String| origin.error(key, msg);
        let r = &self.relay;
        if r.batch_size == 0 || r.batch_size > 10_000 {
            return Err(err(
                "relay.batch_size",
                format!("must be between 1 and 10000, got {}", r.batch_size),
            ));
        }
        if r.max_run == 0 || r.max_run > 10_000 {
            return Err(err("relay.max_run", format!("must be between 1 and 10000, got {}", r.max_run)));
        }
        if r.total_in_flight_batches == 0 || r.total_in_flight_batches > 10_000 {
            return Err(err(
                "relay.total_in_flight_batches",
                format!("must be between 1 and 10000, got {}", r.total_in_flight_batches),
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
        if r.active_scan_interval.is_zero() || r.active_scan_interval > MAX_IDLE_INTERVAL {
            return Err(err(
                "relay.active_scan_interval",
                format!(
                    "must be positive and at most {} (at most relay.idle_interval is used)",
                    human(MAX_IDLE_INTERVAL)
                ),
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
        // Text without a scheme is not echoed at all: it may be a bare secret, or a
        // connection string (`host=db password=...`) that `redact_url` cannot parse, and a
        // partly masked copy would defeat the override scrubbing, which looks for the
        // whole value.
        const EXPECTED: &str = "expected postgres://, mysql://, mariadb:// or sqlite:";
        if scheme_ok {
            format!("unsupported scheme {scheme:?} in {}: {EXPECTED}", printable(&redact_url(url)))
        } else {
            format!("not a URL: {EXPECTED}")
        }
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

/// A store option's error, naming the store.
fn store_error(store: &str, e: outbox_store::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("invalid configuration: ").unwrap_or(&text).to_owned();
    format!("store {:?}: {text}", shown(store))
}
