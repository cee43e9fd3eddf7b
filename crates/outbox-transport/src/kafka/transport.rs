//! The Kafka [`Transport`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use outbox_core::{header, Envelope, Outcome, Transport};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::time::Instant;

use super::config::{check_topic, KafkaConfig};
use super::outcome;
use crate::common::batch::{answers, Outcomes};
use crate::common::connect::Connecting;
use crate::validate::{quote, refuse};
use crate::TransportError;

const KIND: &str = "kafka";

/// Longest client error kept by [`Context`] for a connect error's reason.
const MAX_CLIENT_ERROR: usize = 1000;

/// Routes librdkafka's log lines and error callbacks into `tracing`, and keeps the last client
/// error: librdkafka reports a failed TLS handshake or SASL authentication only there, while
/// the request that failed just says that all brokers are down.
#[derive(Clone, Default)]
pub(crate) struct Context {
    last_error: Arc<Mutex<Option<String>>>,
}

impl Context {
    /// The last error librdkafka reported, if any.
    fn last_error(&self) -> Option<String> {
        match self.last_error.lock() {
            Ok(e) => e.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{log_message}")
            }
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", facility = fac, "{log_message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility = fac, "{log_message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", facility = fac, "{log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "librdkafka", error = %error, "Kafka client error: {reason}");
        // "1/1 brokers are down" follows the error that says why: keep that one.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            return;
        }
        let mut text = outbox_core::text::printable(reason, MAX_CLIENT_ERROR).into_owned();
        if text.is_empty() {
            text = error.to_string();
        }
        match self.last_error.lock() {
            Ok(mut e) => *e = Some(text),
            Err(poisoned) => *poisoned.into_inner() = Some(text),
        }
    }
}

type Producer_ = FutureProducer<Context>;

/// Publishes to Kafka with an idempotent producer (`enable.idempotence`, `acks=all`) and reports
/// a message delivered only when its delivery report says the partition leader and the in-sync
/// replicas stored it. A fatal producer error (the idempotence guarantee can no longer be kept)
/// rebuilds the producer; messages it had in flight are published again.
pub struct KafkaTransport {
    config: KafkaConfig,
    producer: RwLock<Arc<Producer_>>,
    /// Serializes rebuilds.
    rebuild: tokio::sync::Mutex<()>,
    rebuilds: AtomicU64,
    /// Topics known to exist, with when they were checked.
    known: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for KafkaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaTransport")
            .field("config", &self.config)
            .field("rebuilds", &self.rebuilds.load(Ordering::Relaxed))
            .finish()
    }
}

fn producer_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.brokers)
        .set("client.id", &config.client_id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", config.timeout.as_millis().to_string())
        .set("socket.connection.setup.timeout.ms", config.connect_timeout.as_millis().max(1000).to_string())
        .set("compression.type", config.compression.as_str())
        .set("linger.ms", config.linger.as_millis().to_string())
        .set("batch.size", config.batch_bytes.to_string())
        .set("message.max.bytes", config.max_message_bytes.to_string())
        .set("partitioner", &config.partitioner)
        // Topics are infrastructure: looking one up must not create it (override in
        // `properties` to let the cluster auto-create, where its own setting allows).
        .set("allow.auto.create.topics", "false")
        .set_log_level(RDKafkaLogLevel::Warning);
    // Validation refuses the properties that carry the guarantee, so these only add.
    for (k, v) in &config.properties {
        c.set(k, v);
    }
    c
}

fn create(config: &KafkaConfig, context: Context) -> Result<Producer_, TransportError> {
    producer_config(config).create_with_context(context).map_err(|e| {
        let reason = match &e {
            // The property's value is quoted only when it is not a secret (`ssl.key.pem`,
            // `sasl.password`, ...).
            KafkaError::ClientConfig(_, desc, key, value) => {
                let value = if super::config::is_secret(key) { "***" } else { value.as_str() };
                format!("librdkafka refused the producer configuration: {desc} ({key} = {value:?})")
            }
            other => format!("librdkafka refused the producer configuration: {other}"),
        };
        TransportError::Config { transport: KIND, key: "properties", reason }
    })
}

/// Whether the cluster knows `topic`: `Ok(true)` exists, `Ok(false)` unknown, `Err` when the
/// cluster did not answer.
async fn topic_exists(producer: Arc<Producer_>, topic: String, timeout: Duration) -> Result<bool, String> {
    let joined = tokio::task::spawn_blocking(move || {
        let md = producer.client().fetch_metadata(Some(&topic), timeout).map_err(|e| e.to_string())?;
        Ok::<bool, String>(match md.topics().iter().find(|t| t.name() == topic) {
            None => false,
            Some(t) => match t.error() {
                None => !t.partitions().is_empty(),
                Some(e) => {
                    let code = RDKafkaErrorCode::from(e);
                    if matches!(
                        code,
                        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
                    ) {
                        false
                    } else {
                        return Err(format!("metadata of topic {topic:?}: {code}"));
                    }
                }
            },
        })
    })
    .await;
    joined.map_err(|e| format!("metadata lookup panicked: {e}"))?
}

impl KafkaTransport {
    /// Validates `config`, creates the producer and checks that the cluster answers (and that
    /// the fixed `topic` exists, when one is set). Fails with [`TransportError::Config`] naming
    /// the key, or [`TransportError::Connect`] when the cluster is unreachable.
    pub async fn connect(config: KafkaConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let context = Context::default();
        let producer = Arc::new(create(&config, context.clone())?);
        let connecting = Connecting::new(KIND, &config.brokers);
        let fail = |reason: String| connecting.fail(reason);
        let p = producer.clone();
        let timeout = config.connect_timeout;
        tokio::task::spawn_blocking(move || p.client().fetch_metadata(None, timeout))
            .await
            .map_err(|e| fail(format!("metadata lookup panicked: {e}")))?
            .map_err(|e| {
                let mut reason = format!("the cluster did not answer within {timeout:?}: {e}");
                if let Some(last) = context.last_error() {
                    reason.push_str(&format!("; last client error: {last}"));
                }
                fail(reason)
            })?;
        if let Some(t) = &config.topic {
            match topic_exists(producer.clone(), t.clone(), timeout).await {
                Ok(true) => {}
                Ok(false) => return Err(fail(format!("topic {t:?} does not exist"))),
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(KafkaTransport {
            config,
            producer: RwLock::new(producer),
            rebuild: tokio::sync::Mutex::new(()),
            rebuilds: AtomicU64::new(0),
            known: Mutex::new(HashMap::new()),
        })
    }

    fn current(&self) -> Arc<Producer_> {
        match self.producer.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// How many times the producer was rebuilt after a fatal error (or [`Self::rebuild_producer`]).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }

    /// Replaces the producer by a new one, as after a fatal error: messages the old one had in
    /// flight are reported unavailable and published again. `seen` is the producer the caller
    /// found broken; if another call already replaced it, nothing happens.
    async fn replace(&self, seen: &Arc<Producer_>, why: &str) -> Result<(), TransportError> {
        let _guard = self.rebuild.lock().await;
        if !Arc::ptr_eq(seen, &self.current()) {
            return Ok(());
        }
        let fresh = Arc::new(create(&self.config, Context::default())?);
        let old = {
            let mut slot = match self.producer.write() {
                Ok(p) => p,
                Err(poisoned) => poisoned.into_inner(),
            };
            std::mem::replace(&mut *slot, fresh)
        };
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(brokers = %self.config.brokers, reason = why, "Rebuilt the Kafka producer");
        // Dropping a producer joins its polling thread: off the async workers.
        tokio::task::spawn_blocking(move || drop(old));
        Ok(())
    }

    /// Rebuilds the producer now, as a fatal error would. For tests and operators' tooling.
    pub async fn rebuild_producer(&self) -> Result<(), TransportError> {
        let seen = self.current();
        self.replace(&seen, "requested").await
    }

    /// Checks (and caches) that each topic exists: `Ok` for the known ones, the outcome for
    /// the others.
    async fn check_topics(
        &self,
        producer: &Arc<Producer_>,
        topics: &HashSet<&str>,
    ) -> HashMap<String, Outcome> {
        let mut failed = HashMap::new();
        for &topic in topics {
            let fresh = {
                let known = match self.known.lock() {
                    Ok(k) => k,
                    Err(poisoned) => poisoned.into_inner(),
                };
                known.get(topic).is_some_and(|t| t.elapsed() < self.config.topic_check_interval)
            };
            if fresh {
                continue;
            }
            match topic_exists(producer.clone(), topic.to_owned(), self.config.connect_timeout).await {
                Ok(true) => {
                    let mut known = match self.known.lock() {
                        Ok(k) => k,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    known.insert(topic.to_owned(), Instant::now());
                }
                Ok(false) => {
                    failed.insert(topic.to_owned(), outcome::unknown_topic(topic, &self.config.brokers));
                }
                Err(e) => {
                    failed.insert(
                        topic.to_owned(),
                        Outcome::unavailable(format!(
                            "cannot look up Kafka topic {topic:?} on {}: {e}",
                            self.config.brokers
                        )),
                    );
                }
            }
        }
        failed
    }
}

/// Key, value and headers of one record, with its size.
struct Prepared {
    topic: String,
    headers: OwnedHeaders,
    size: usize,
}

fn prepare(config: &KafkaConfig, env: &Envelope) -> Result<Prepared, Outcome> {
    let topic = config.topic_for(&env.topic);
    check_topic(&topic)
        .map_err(|r| refuse(format!("topic {} does not make a valid Kafka topic: {r}", quote(&env.topic))))?;
    let mut headers = OwnedHeaders::new_with_capacity(env.headers.len() + 1);
    // Record overhead is small; count what the message carries.
    let mut size = env.payload.len() + env.key.as_deref().map_or(0, str::len);
    for (name, value) in &env.headers {
        size += name.len() + value.len();
        headers = headers.insert(Header { key: name, value: Some(value.as_bytes()) });
    }
    if let Some(tag) = &env.tag {
        size += header::TAG.len() + tag.len();
        headers = headers.insert(Header { key: header::TAG, value: Some(tag.as_bytes()) });
    }
    if size > config.max_message_bytes {
        return Err(outcome::oversized(size, config.max_message_bytes));
    }
    Ok(Prepared { topic, headers, size })
}

#[async_trait::async_trait]
impl Transport for KafkaTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut producer = self.current();
        if let Some((code, reason)) = producer.client().fatal_error() {
            let why = format!("{code}: {reason}");
            if let Err(e) = self.replace(&producer, &why).await {
                return vec![
                    Outcome::unavailable(format!("cannot rebuild the Kafka producer: {e}"));
                    batch.len()
                ];
            }
            producer = self.current();
        }
        let deadline = Instant::now() + self.config.timeout + Duration::from_secs(1);
        let mut out = Outcomes::new(batch);
        let mut prepared = Vec::with_capacity(batch.len());
        for (i, env) in batch.iter().enumerate() {
            match prepare(&self.config, env) {
                Ok(p) => prepared.push((i, p)),
                Err(o) => out.set(i, o),
            }
        }
        let topics: HashSet<&str> = prepared.iter().map(|(_, p)| p.topic.as_str()).collect();
        let missing = self.check_topics(&producer, &topics).await;

        // Hand every record to the producer (librdkafka batches and pipelines them)...
        let mut pending = Vec::with_capacity(prepared.len());
        for (i, p) in prepared {
            let env = &batch[i];
            if let Some(o) = missing.get(&p.topic) {
                out.not_sent(i, o.clone());
                continue;
            }
            if out.held_back(i) {
                continue;
            }
            let mut record: FutureRecord<'_, str, str> =
                FutureRecord::to(&p.topic).payload(env.payload.as_str()).headers(p.headers);
            if let Some(k) = env.key.as_deref() {
                record = record.key(k);
            }
            record = record.timestamp(env.created_at.timestamp_millis());
            match producer.send_result(record) {
                Ok(delivery) => pending.push((i, p.topic, delivery)),
                Err((e, _)) => {
                    let o = match e.rdkafka_error_code() {
                        Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                            outcome::oversized(p.size, self.config.max_message_bytes)
                        }
                        _ => outcome::produce_error(&e, &p.topic),
                    };
                    out.not_sent(i, o);
                }
            }
        }

        // ...then await every delivery report.
        let timeout = self.config.timeout;
        let reports = answers(pending, deadline, |topic, report| match report {
            Some(Ok(Ok(_))) => (Outcome::Delivered, None),
            Some(Ok(Err((e, _)))) => {
                (outcome::produce_error(&e, &topic), outcome::needs_rebuild(&e).then(|| e.to_string()))
            }
            Some(Err(_cancelled)) => (outcome::cancelled(&topic), None),
            None => (outcome::deadline(timeout, &topic), None),
        })
        .await;
        let mut rebuild = producer.client().fatal_error().map(|(code, reason)| format!("{code}: {reason}"));
        let (mut delivered, mut timed_out) = (0, 0);
        for (i, (o, why)) in reports {
            match &o {
                Outcome::Delivered => delivered += 1,
                Outcome::Failed { reason, .. }
                    if reason.contains("timed out") || reason.contains("within") =>
                {
                    timed_out += 1
                }
                Outcome::Failed { .. } => {}
            }
            out.set(i, o);
            if rebuild.is_none() {
                rebuild = why;
            }
        }
        // Nothing delivered, everything timed out, yet the cluster answers: the producer's own
        // state is stale (a broker that restarted and forgot its producer id keeps it waiting
        // until the timeout, batch after batch). A new producer starts clean.
        if rebuild.is_none() && delivered == 0 && timed_out > 0 {
            let p = producer.clone();
            let t = self.config.connect_timeout;
            if let Ok(Ok(_)) = tokio::task::spawn_blocking(move || p.client().fetch_metadata(None, t)).await {
                rebuild = Some("no delivery report within the timeout while the cluster answers".into());
            }
        }
        if let Some(why) = rebuild {
            if let Err(e) = self.replace(&producer, &why).await {
                tracing::error!(error = %e, "Cannot rebuild the Kafka producer");
            }
        }
        out.finish()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_message_bytes)
    }

    async fn health(&self) -> Result<(), String> {
        let producer = self.current();
        if let Some((code, reason)) = producer.client().fatal_error() {
            return Err(format!(
                "the Kafka producer hit a fatal error ({code}: {reason}); it is rebuilt on the next publish"
            ));
        }
        let timeout = self.config.connect_timeout;
        let brokers = self.config.brokers.clone();
        match tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, timeout)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("Kafka cluster {brokers} did not answer within {timeout:?}: {e}")),
            Err(e) => Err(format!("metadata lookup panicked: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr;

    /// librdkafka's built-in protocol mock: the only way to make a producer hit a genuine fatal
    /// idempotence error on demand. Every other behaviour is tested against a real broker in
    /// `tests/kafka.rs`.
    #[tokio::test]
    async fn a_fatal_idempotence_error_rebuilds_the_producer_and_republishes() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("fatal", 1, 1).unwrap();
        let config = KafkaConfig {
            brokers: cluster.bootstrap_servers(),
            timeout: Duration::from_secs(5),
            ..KafkaConfig::default()
        };
        let transport = KafkaTransport::connect(config).await.unwrap();
        let msg = |id: i64| Envelope {
            id: outbox_core::MessageId(id),
            topic: "fatal".into(),
            key: Some("k".into()),
            tag: None,
            payload: "{}".into(),
            headers: std::collections::BTreeMap::new(),
            attempt: 1,
            created_at: chrono::Utc::now(),
        };
        assert_eq!(transport.publish(&[msg(1)]).await, vec![Outcome::Delivered]);
        // An out-of-sequence answer is fatal for an idempotent producer.
        cluster.request_errors(
            rdkafka::types::RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
        );
        let failed = transport.publish(&[msg(2)]).await;
        assert!(matches!(failed[0], Outcome::Failed { .. }), "{failed:?}");
        assert_eq!(transport.rebuilds(), 1, "the fatal error rebuilt the producer");
        cluster.clear_request_errors(rdkafka::types::RDKafkaApiKey::Produce);
        assert_eq!(transport.publish(&[msg(2)]).await, vec![Outcome::Delivered]);
    }
}
