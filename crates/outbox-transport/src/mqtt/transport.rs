//! The MQTT [`Transport`].
//!
//! rumqttc's event loop assigns packet ids itself and only reports them as events: a publish
//! request becomes `Outgoing::Publish(pkid)` when written, and `Incoming::PubAck(pkid)` when the
//! broker acknowledges it. One background task owns the event loop and correlates them:
//! publishers append their request to the client's channel and a waiter to `queued` under one
//! lock, so the two stay in the same order; each `Outgoing::Publish` moves the oldest queued
//! waiter to `inflight[pkid]`, and each PUBACK resolves it. When the connection fails, rumqttc
//! moves everything unacknowledged (in flight, or taken out of the channel) to its `pending`
//! queue; with a clean session those would be dropped at reconnection anyway, so the task
//! clears them and fails exactly their waiters as `Unavailable` (the relay publishes them again).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outbox_core::{Envelope, Headers, Outcome, Transport};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Outgoing, Packet, QoS, Request};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::config::{check_topic, MqttConfig, MqttFormat};
use super::outcome;
use crate::common::batch::Outcomes;
use crate::common::config::Rules;
use crate::common::connect::Connecting;
use crate::TransportError;

const KIND: &str = "mqtt";
const RULES: Rules = Rules(KIND);
/// Capacity of the channel between publishers and the event loop (requests not yet written).
const REQUEST_QUEUE: usize = 32_768;

type Waiter = oneshot::Sender<Outcome>;

/// Correlation state shared by the publishers and the event-loop task.
#[derive(Default)]
struct Shared {
    connected: bool,
    last_error: Option<String>,
    /// Waiters whose request is in the client's channel, oldest first.
    queued: VecDeque<Waiter>,
    /// Waiters whose PUBLISH was written, by packet id.
    inflight: HashMap<u16, Waiter>,
    /// Waiters whose PUBLISH waits for its packet id to be freed (broker acked out of order).
    parked: HashMap<u16, Waiter>,
}

impl Shared {
    fn on_event(&mut self, event: &Event) {
        match event {
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                let waiter = match self.parked.remove(pkid) {
                    Some(w) => Some(w),
                    None => self.queued.pop_front(),
                };
                if let Some(w) = waiter {
                    if let Some(old) = self.inflight.insert(*pkid, w) {
                        let _ = old.send(Outcome::unavailable("MQTT packet id reused before its PUBACK"));
                    }
                }
            }
            Event::Outgoing(Outgoing::AwaitAck(pkid)) => {
                if let Some(w) = self.queued.pop_front() {
                    self.parked.insert(*pkid, w);
                }
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                if let Some(w) = self.inflight.remove(&ack.pkid) {
                    let _ = w.send(Outcome::Delivered);
                }
            }
            _ => {}
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Publishes at QoS 1 to an MQTT 3.1.1 broker and reports a message delivered only when its
/// PUBACK arrived. One connection (clean session), driven by a background task that reconnects
/// after any outage; a batch is pipelined up to `inflight` unacknowledged packets.
pub struct MqttTransport {
    client: AsyncClient,
    shared: Arc<Mutex<Shared>>,
    config: MqttConfig,
    address: String,
    timeout: Duration,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for MqttTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttTransport")
            .field("address", &self.address)
            .field("config", &self.config)
            .field("connected", &lock(&self.shared).connected)
            .finish()
    }
}

impl Drop for MqttTransport {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The JSON envelope of [`MqttFormat::Envelope`].
#[derive(Serialize)]
struct Wire<'a> {
    id: String,
    headers: &'a Headers,
    payload: &'a str,
}

fn default_client_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("outbox-{}-{:x}", std::process::id(), nanos ^ (n << 48))
}

/// Size of a QoS 1 PUBLISH packet on the wire.
fn packet_size(topic: usize, payload: usize) -> usize {
    let remaining = 2 + topic + 2 + payload;
    let len_len = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + len_len + remaining
}

impl MqttTransport {
    /// Validates `config`, connects (waiting for the broker's CONNACK) and starts the event-loop
    /// task. Fails with [`TransportError::Config`] naming the key, or [`TransportError::Connect`]
    /// (URL redacted) when the broker is unreachable or refuses the connection.
    ///
    /// With an `mqtts://` URL, a failed handshake says why: the broker's certificate not signed
    /// by a trusted CA, not valid for the host name, expired, or this client's certificate
    /// refused or missing.
    pub async fn connect(config: MqttConfig) -> Result<Self, TransportError> {
        let (broker, tls) = config.checked()?;
        let connecting = Connecting::new(KIND, &config.url);
        let client_id = config.client_id.clone().unwrap_or_else(default_client_id);
        let mut options = MqttOptions::new(client_id, broker.host.clone(), broker.port);
        options
            .set_keep_alive(config.keep_alive)
            .set_clean_session(true)
            .set_max_packet_size(config.max_packet_bytes, config.max_packet_bytes)
            .set_inflight(config.inflight);
        if let Some((user, pass)) = &broker.credentials {
            options.set_credentials(user.clone(), pass.clone());
        }
        if let Some(files) = &tls {
            let client_config = files.client_config(RULES)?;
            options.set_transport(rumqttc::Transport::Tls(rumqttc::TlsConfiguration::Rustls(client_config)));
        }
        let (client, mut eventloop) = AsyncClient::new(options, REQUEST_QUEUE);
        let connect_timeout = config.connect_timeout;
        let mut network = NetworkOptions::new();
        network.set_connection_timeout(connect_timeout.as_millis().div_ceil(1000).max(1) as u64);
        eventloop.set_network_options(network);

        let connack = async { eventloop.poll().await.map_err(|e| outcome::describe(&e)) };
        let limit = connect_timeout + Duration::from_secs(1);
        connecting.within(limit, format!("no CONNACK within {connect_timeout:?}"), connack).await?;
        let address = connecting.address;
        let shared = Arc::new(Mutex::new(Shared { connected: true, ..Shared::default() }));
        let max_delay = config.reconnect_max_delay;
        let task = tokio::spawn(drive(eventloop, shared.clone(), address.clone(), max_delay));
        let timeout = config.timeout;
        Ok(MqttTransport { client, shared, config, address, timeout, task })
    }

    /// The MQTT topic and payload of `env`, or why it cannot be published.
    fn prepare(&self, env: &Envelope) -> Result<(String, Vec<u8>), Outcome> {
        // Checked on the topic as built from the template: what the broker would see.
        let topic = self.config.topic_for(&env.topic);
        if let Err(why) = check_topic(&topic, self.config.max_topic_levels) {
            return Err(outcome::invalid_topic(&env.topic, &topic, &why));
        }
        let body = match self.config.format {
            MqttFormat::Raw => env.payload.as_bytes().to_vec(),
            MqttFormat::Envelope => {
                let wire = Wire { id: env.id.to_string(), headers: &env.headers, payload: &env.payload };
                serde_json::to_vec(&wire)
                    .map_err(|e| crate::validate::refuse(format!("cannot encode the JSON envelope: {e}")))?
            }
        };
        let size = packet_size(topic.len(), body.len());
        if size > self.config.max_packet_bytes {
            return Err(outcome::oversized(size, self.config.max_packet_bytes));
        }
        Ok((topic, body))
    }
}

/// Owns the event loop: correlates PUBACKs with waiters and reconnects after failures.
async fn drive(mut eventloop: EventLoop, shared: Arc<Mutex<Shared>>, address: String, max_delay: Duration) {
    let min_delay = Duration::from_millis(100);
    let mut delay = min_delay;
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                let mut s = lock(&shared);
                if !s.connected {
                    tracing::info!(broker = %address, "MQTT connection re-established");
                }
                s.connected = true;
                s.last_error = None;
                delay = min_delay;
            }
            Ok(event) => lock(&shared).on_event(&event),
            Err(e) => {
                let was_connected = {
                    let mut s = lock(&shared);
                    // Events rumqttc produced before failing (acks read, packets written) first.
                    let buffered: Vec<Event> = eventloop.state.events.drain(..).collect();
                    for event in &buffered {
                        s.on_event(event);
                    }
                    let failure = outcome::connection_error(&e);
                    let mut lost: Vec<(u16, Waiter)> = s.inflight.drain().collect();
                    lost.extend(s.parked.drain());
                    for (_, w) in lost {
                        let _ = w.send(failure.clone());
                    }
                    // Requests taken back out of the channel (never written) are the oldest
                    // queued ones; requests sent into the channel since are still there.
                    let drained = eventloop
                        .pending
                        .iter()
                        .filter(|r| matches!(r, Request::Publish(p) if p.pkid == 0))
                        .count();
                    for _ in 0..drained {
                        if let Some(w) = s.queued.pop_front() {
                            let _ = w.send(failure.clone());
                        }
                    }
                    let was = s.connected;
                    s.connected = false;
                    s.last_error = Some(outcome::describe(&e));
                    was
                };
                eventloop.pending.clear();
                eventloop.state.collision = None;
                if was_connected {
                    tracing::warn!(broker = %address, error = %outcome::describe(&e), "MQTT connection lost; reconnecting");
                } else {
                    tracing::debug!(broker = %address, error = %outcome::describe(&e), retry_in = ?delay, "MQTT reconnection failed");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(max_delay);
            }
        }
    }
}

#[async_trait::async_trait]
impl Transport for MqttTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let deadline = Instant::now() + self.timeout;
        let mut out = Outcomes::new(batch);
        let mut waits = Vec::with_capacity(batch.len());
        for (i, env) in batch.iter().enumerate() {
            if out.held_back(i) {
                continue;
            }
            let (topic, body) = match self.prepare(env) {
                Ok(p) => p,
                Err(o) => {
                    out.not_sent(i, o);
                    continue;
                }
            };
            let (tx, rx) = oneshot::channel();
            let mut s = lock(&self.shared);
            if self.task.is_finished() {
                out.not_sent(i, Outcome::unavailable("the MQTT event loop has stopped"));
            } else if !s.connected {
                out.not_sent(i, outcome::not_connected(&self.address, s.last_error.as_deref()));
            } else {
                match self.client.try_publish(topic.clone(), QoS::AtLeastOnce, self.config.retain, body) {
                    Ok(()) => {
                        s.queued.push_back(tx);
                        waits.push((i, topic, rx));
                    }
                    Err(e) => out.not_sent(i, outcome::client_error(&e)),
                }
            }
        }
        let timeout = self.timeout;
        out.await_answers(waits, deadline, |topic, answer| match answer {
            Some(Ok(o)) => o,
            Some(Err(_)) => Outcome::unavailable("the MQTT event loop stopped before the PUBACK"),
            None => outcome::no_puback(timeout, &topic),
        })
        .await;
        out.finish()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_packet_bytes)
    }

    async fn health(&self) -> Result<(), String> {
        let s = lock(&self.shared);
        if s.connected {
            Ok(())
        } else {
            Err(outcome::not_connected_reason(&self.address, s.last_error.as_deref()))
        }
    }
}

#[cfg(test)]
mod tests {
    use rumqttc::PubAck;

    use super::*;

    /// A waiter queued for the next outgoing publish, as `publish` queues one.
    fn queue_waiter(s: &mut Shared) -> oneshot::Receiver<Outcome> {
        let (waiter, answer) = oneshot::channel();
        s.queued.push_back(waiter);
        answer
    }

    #[test]
    fn packet_sizes_match_the_wire() {
        // 2 (topic length) + 11 + 2 (packet id) + 100 = 115 remaining -> 1 length byte.
        assert_eq!(packet_size(11, 100), 117);
        let mut p = rumqttc::Publish::new("hello/world", QoS::AtLeastOnce, vec![1; 300]);
        p.pkid = 1;
        assert_eq!(packet_size(11, 300), p.size());
        let mut p = rumqttc::Publish::new("t", QoS::AtLeastOnce, vec![1; 20_000]);
        p.pkid = 1;
        assert_eq!(packet_size(1, 20_000), p.size());
    }

    #[test]
    fn acks_resolve_the_waiter_of_their_packet_id() {
        let mut s = Shared::default();
        let mut ra = queue_waiter(&mut s);
        let mut rb = queue_waiter(&mut s);
        s.on_event(&Event::Outgoing(Outgoing::Publish(7)));
        s.on_event(&Event::Outgoing(Outgoing::Publish(8)));
        s.on_event(&Event::Incoming(Packet::PubAck(PubAck::new(8))));
        assert_eq!(rb.try_recv().unwrap(), Outcome::Delivered);
        assert!(ra.try_recv().is_err(), "7 not acked yet");
        s.on_event(&Event::Incoming(Packet::PubAck(PubAck::new(7))));
        assert_eq!(ra.try_recv().unwrap(), Outcome::Delivered);
        assert!(s.inflight.is_empty() && s.queued.is_empty());
    }

    #[test]
    fn a_collision_parks_the_waiter_until_its_packet_id_is_free() {
        let mut s = Shared::default();
        let mut ra = queue_waiter(&mut s);
        s.on_event(&Event::Outgoing(Outgoing::Publish(1)));
        let mut rb = queue_waiter(&mut s);
        s.on_event(&Event::Outgoing(Outgoing::AwaitAck(1)));
        s.on_event(&Event::Incoming(Packet::PubAck(PubAck::new(1))));
        assert_eq!(ra.try_recv().unwrap(), Outcome::Delivered);
        s.on_event(&Event::Outgoing(Outgoing::Publish(1)));
        assert!(rb.try_recv().is_err());
        s.on_event(&Event::Incoming(Packet::PubAck(PubAck::new(1))));
        assert_eq!(rb.try_recv().unwrap(), Outcome::Delivered);
    }
}
