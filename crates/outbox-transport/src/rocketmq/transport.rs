//! The RocketMQ [`Transport`].

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use outbox_core::{Envelope, Outcome, Transport};
use rocketmq_client_rust::{
    AclClientRPCHook, ClientError, ClientRuntime, ClientRuntimeConfig, DefaultMQProducer, SessionCredentials,
};
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::config::{
    check_key, check_property, check_tag, check_topic, RocketMqConfig, MAX_PROPERTIES_BYTES,
};
use super::outcome;
use crate::validate::{quote, refuse};
use crate::TransportError;

const KIND: &str = "rocketmq";

/// How long a send that missed its topic's route waits before its one second try.
const ROUTE_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How many topics a transport remembers having delivered to. Past it, a route miss for a topic
/// it does not remember is believed, as for a topic never seen.
const MAX_KNOWN_TOPICS: usize = 10_000;

/// Publishes to RocketMQ and reports a message delivered only when the broker answered
/// `SEND_OK`. One producer (and the client's own small runtime) per transport.
pub struct RocketMqTransport {
    config: RocketMqConfig,
    producer: DefaultMQProducer,
    client: Arc<ClientRuntime>,
    /// Serialises second tries after a route miss (see [`RocketMqTransport::send`]).
    route_retry: tokio::sync::Mutex<()>,
    /// Topics this transport has delivered to (at most [`MAX_KNOWN_TOPICS`]): a route miss for
    /// one of them means its broker is gone for now, not that the topic is missing.
    delivered_to: std::sync::Mutex<HashSet<String>>,
    /// Owns the threads the client runs on; dropped last.
    _owner: RuntimeOwner,
}

impl std::fmt::Debug for RocketMqTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqTransport").field("config", &self.config).finish()
    }
}

/// Java's `String.hashCode`, so keys select the same queue as the Java client's
/// `SelectMessageQueueByHash`.
pub(crate) fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0_i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The queue for `key` among `queues`, as `SelectMessageQueueByHash` picks it.
pub(crate) fn queue_for(key: &str, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    let n = i32::try_from(count).unwrap_or(i32::MAX);
    (java_hash(key) % n).unsigned_abs() as usize
}

impl RocketMqTransport {
    /// Validates `config`, starts the producer and checks that a name server answers. Fails
    /// with [`TransportError::Config`] naming the key, or [`TransportError::Connect`] when the
    /// client cannot start.
    pub async fn connect(config: RocketMqConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let address = config.namesrv.clone();
        let fail =
            |reason: String| TransportError::Connect { transport: KIND, address: address.clone(), reason };
        let owner = RuntimeOwner::plan(RuntimeConfig {
            worker_threads: 1,
            thread_name: "outbox-rocketmq".into(),
            ..RuntimeConfig::default()
        })
        .map_err(|e| fail(format!("cannot plan the client runtime: {e}")))?
        .build()
        .map_err(|e| fail(format!("cannot start the client runtime: {e}")))?;
        let client = ClientRuntime::try_new(
            owner.root_context().component("outbox"),
            ClientRuntimeConfig::default(),
            rocketmq_observability::TelemetryHandle::noop(),
        )
        .map_err(|e| fail(format!("cannot create the client: {e}")))?;
        let namesrv = config.namesrv_list().join(";");
        let mut builder = DefaultMQProducer::builder(client.clone())
            .producer_group(config.producer_group.as_str())
            .name_server_addr(namesrv.as_str())
            .send_msg_timeout(u32::try_from(config.timeout.as_millis()).unwrap_or(u32::MAX))
            .max_message_size(u32::try_from(config.max_message_bytes).unwrap_or(u32::MAX));
        if let (Some(a), Some(s)) = (&config.access_key, &config.secret_key) {
            builder = builder.rpc_hook(Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(
                a.as_str(),
                s.as_str(),
            ))));
        }
        let mut producer = builder.build();
        tokio::time::timeout(config.timeout, producer.start())
            .await
            .map_err(|_| fail(format!("the producer did not start within {:?}", config.timeout)))?
            .map_err(|e| fail(format!("the producer did not start: {e}")))?;
        let transport = RocketMqTransport {
            config,
            producer,
            client,
            route_retry: tokio::sync::Mutex::new(()),
            delivered_to: std::sync::Mutex::new(HashSet::new()),
            _owner: owner,
        };
        if let Err(e) = transport.probe_namesrv().await {
            return Err(fail(e));
        }
        Ok(transport)
    }

    /// Checks that some name server accepts a connection.
    async fn probe_namesrv(&self) -> Result<(), String> {
        let mut last = String::new();
        for addr in self.config.namesrv_list() {
            match tokio::time::timeout(self.config.timeout, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => last = format!("name server {addr}: {e}"),
                Err(_) => last = format!("name server {addr}: no answer within {:?}", self.config.timeout),
            }
        }
        Err(last)
    }

    fn message(&self, env: &Envelope, topic: &str) -> Result<Message, Outcome> {
        let refused = |r: String| refuse(format!("{r}; the message cannot be sent to RocketMQ"));
        if env.payload.len() > self.config.max_message_bytes {
            return Err(outcome::oversized(env.payload.len(), self.config.max_message_bytes));
        }
        if env.payload.is_empty() {
            return Err(refused("the payload is empty (RocketMQ refuses empty bodies)".into()));
        }
        if let Some(k) = &env.key {
            check_key(k).map_err(refused)?;
        }
        if let Some(tag) = &env.tag {
            check_tag(tag).map_err(refused)?;
        }
        let mut properties = env.key.as_deref().map_or(0, str::len) + env.tag.as_deref().map_or(0, str::len);
        for (name, value) in &env.headers {
            check_property(name, value).map_err(refused)?;
            properties += name.len() + value.len() + 2;
        }
        if properties > MAX_PROPERTIES_BYTES {
            return Err(refused(format!(
                "headers, key and tag take {properties} bytes of properties, more than the \
                 {MAX_PROPERTIES_BYTES} RocketMQ stores"
            )));
        }
        let mut keys = vec![env.id.to_string()];
        keys.extend(env.key.iter().map(|k| k.replace(' ', "_")));
        let mut b = Message::builder().topic(topic).body_slice(env.payload.as_bytes()).keys(keys);
        if let Some(tag) = &env.tag {
            b = b.tags(tag.as_str());
        }
        if let Some(k) = &env.key {
            b = b.sharding_key(k.as_str());
        }
        for (name, value) in &env.headers {
            b = b.raw_property(name.as_str(), value.as_str()).map_err(|e| {
                refuse(format!("header {} cannot be a RocketMQ user property: {e}", quote(name)))
            })?;
        }
        b.build().map_err(|e| refuse(format!("not a valid RocketMQ message: {e}")))
    }

    /// Sends `env`. A client-side route miss ("no route info for this topic") is only believed
    /// on a second try: the client keeps one route table entry per topic and several concurrent
    /// first sends to a topic being auto-created can see each other's empty placeholder, so a
    /// miss may be a race and not a missing topic. The second try runs alone (behind
    /// `route_retry`), after a short pause; a topic that truly has no route fails it the same way.
    async fn send(&self, env: &Envelope) -> Outcome {
        let topic = self.config.topic_for(&env.topic);
        if let Err(r) = check_topic(&topic) {
            return refuse(format!("topic {} does not make a valid RocketMQ topic: {r}", quote(&env.topic)));
        }
        let sent = match self.send_once(env, &topic).await {
            Err(e) if outcome::is_route_miss(&e) => {
                let _alone = self.route_retry.lock().await;
                tokio::time::sleep(ROUTE_RETRY_PAUSE).await;
                match self.send_once(env, &topic).await {
                    Err(e) if outcome::is_route_miss(&e) && self.knows(&topic) => {
                        outcome::route_lost(&e, &topic)
                    }
                    Err(e) => outcome::error(&e, &topic),
                    Ok(o) => o,
                }
            }
            // The broker that took this topic before answers that it does not exist: it is
            // restarting and has not loaded its topics yet, not a topic someone deleted.
            Err(e) if outcome::is_topic_missing(&e) && self.knows(&topic) => outcome::route_lost(&e, &topic),
            Err(e) => outcome::error(&e, &topic),
            Ok(o) => o,
        };
        if matches!(sent, Outcome::Delivered) {
            self.remember(&topic);
        }
        sent
    }

    /// Whether this transport has delivered to `topic`.
    fn knows(&self, topic: &str) -> bool {
        self.delivered_to.lock().unwrap_or_else(PoisonError::into_inner).contains(topic)
    }

    /// Remembers that `topic` took a message (bounded by [`MAX_KNOWN_TOPICS`]).
    fn remember(&self, topic: &str) {
        let mut known = self.delivered_to.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() < MAX_KNOWN_TOPICS && !known.contains(topic) {
            known.insert(topic.to_owned());
        }
    }

    /// One send of `env` to `topic`; `Err` is the client's error, to be classified.
    async fn send_once(&self, env: &Envelope, topic: &str) -> Result<Outcome, ClientError> {
        let msg = match self.message(env, topic) {
            Ok(m) => m,
            Err(o) => return Ok(o),
        };
        let timeout_ms = u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX);
        // The client bounds the send by its timeout; this bounds everything around it too.
        let bound = self.config.timeout + Duration::from_secs(1);
        let sent = match (&env.key, self.config.order_by_key) {
            (Some(key), true) => {
                let selector = |mqs: &[MessageQueue], _m: &Message, key: &String| {
                    mqs.get(queue_for(key, mqs.len())).cloned()
                };
                tokio::time::timeout(
                    bound,
                    self.producer.send_with_selector_timeout(msg, selector, key.clone(), timeout_ms),
                )
                .await
            }
            _ => tokio::time::timeout(bound, self.producer.send_with_timeout(msg, timeout_ms)).await,
        };
        match sent {
            Err(_) => Ok(outcome::deadline(self.config.timeout, topic)),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Some(result))) => Ok(outcome::status(result.send_status, topic)),
            Ok(Ok(None)) => {
                Ok(Outcome::retryable(format!("RocketMQ returned no send result for topic {}", quote(topic))))
            }
        }
    }
}

#[async_trait::async_trait]
impl Transport for RocketMqTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        if self.client.is_shutdown() {
            return vec![Outcome::unavailable("the RocketMQ client is shut down"); batch.len()];
        }
        // Sends run concurrently, except that messages with the same key go one after the
        // other (and stop at the first that is not delivered), so a key keeps its order.
        let mut chains: Vec<Vec<usize>> = Vec::new();
        let mut by_key: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, env) in batch.iter().enumerate() {
            match env.key.as_deref() {
                Some(k) => match by_key.get(k) {
                    Some(&c) => chains[c].push(i),
                    None => {
                        by_key.insert(k, chains.len());
                        chains.push(vec![i]);
                    }
                },
                None => chains.push(vec![i]),
            }
        }
        let results = futures::future::join_all(chains.into_iter().map(|chain| async move {
            let mut out = Vec::with_capacity(chain.len());
            let mut blocked: Option<String> = None;
            for i in chain {
                let o = match &blocked {
                    Some(k) => crate::common::batch::held_back(k),
                    None => self.send(&batch[i]).await,
                };
                if !matches!(o, Outcome::Delivered) && blocked.is_none() {
                    blocked = batch[i].key.clone();
                }
                out.push((i, o));
            }
            out
        }))
        .await;
        let mut out: Vec<Option<Outcome>> = vec![None; batch.len()];
        for (i, o) in results.into_iter().flatten() {
            out[i] = Some(o);
        }
        crate::validate::finish(out)
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_message_bytes)
    }

    async fn health(&self) -> Result<(), String> {
        if self.client.is_shutdown() {
            return Err("the RocketMQ client is shut down".into());
        }
        self.probe_namesrv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_matches_java() {
        // Values of "...".hashCode() in Java.
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("order-1"), -1_207_111_310);
        assert_eq!(java_hash("订单"), 1_129_459);
        assert_eq!(queue_for("a", 4), 1);
        assert_eq!(queue_for("order-1", 8), 6);
        assert_eq!(queue_for("x", 0), 0);
    }
}
