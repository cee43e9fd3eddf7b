//! The RabbitMQ [`Transport`]: persistent, mandatory publishes on a confirm channel.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind, TcpStream};
use outbox_core::{Envelope, Outcome, Transport};
use tokio::sync::Mutex;

use super::config::{check_message, content_header_frame_bytes, scrub, RabbitMqConfig};
use super::outcome;
use crate::common::connect::Connecting;
use crate::validate::{oversized_payload, refuse};
use crate::TransportError;

const KIND: &str = "rabbitmq";

/// AMQP `delivery_mode` of a persistent message.
const PERSISTENT: u8 = 2;

/// The `app_id` property of every message.
const APP_ID: &str = "outbox";

/// Publishes to a RabbitMQ exchange with publisher confirms. Build it with
/// [`RabbitMqTransport::connect`]; see the [module docs](super) for the guarantees.
pub struct RabbitMqTransport {
    config: RabbitMqConfig,
    /// `config.url` with the password redacted.
    address: String,
    /// The connection and its confirm channel; `None` after a failure until the next publish
    /// reconnects. Held for the whole of a publish, so batches are serialized on the channel
    /// (which is what lets returned messages be matched to the batch that sent them).
    link: Mutex<Option<Link>>,
    /// The TLS client configuration of an `amqps://` URL (files read once, at connect).
    tls: Option<Arc<rustls::ClientConfig>>,
}

struct Link {
    connection: Connection,
    channel: Channel,
    /// Set while a publish uses the channel. Still set when the next publish takes the lock
    /// means the previous one was cancelled (the relay's publish timeout) with confirms
    /// outstanding: that channel is replaced so stale confirms and returns cannot be mixed up
    /// with the new batch's.
    busy: bool,
}

impl fmt::Debug for RabbitMqTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqTransport")
            .field("address", &self.address)
            .field("exchange", &self.config.exchange)
            .field("routing_key", &self.config.routing_key)
            .finish_non_exhaustive()
    }
}

/// One envelope ready to publish.
struct Prepared {
    index: usize,
    routing_key: String,
    properties: BasicProperties,
    /// Size of the content header frame (checked against the connection's `frame_max`).
    header_frame: usize,
}

impl RabbitMqTransport {
    /// Validates `config`, connects, opens a confirm channel and checks (or declares) the
    /// exchange. Fails with [`TransportError::Config`] naming the wrong key, or with
    /// [`TransportError::Connect`] (password redacted) when the broker cannot be reached, refuses
    /// the credentials, or the exchange does not exist.
    pub async fn connect(config: RabbitMqConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let tls = config.tls()?;
        let connecting = Connecting::new(KIND, &config.url);
        let link = open(&config, tls.as_ref()).await.map_err(|reason| connecting.fail(reason))?;
        let address = connecting.address;
        tracing::info!(address = %address, exchange = %config.exchange, "Connected to RabbitMQ");
        Ok(RabbitMqTransport { config, address, link: Mutex::new(Some(link)), tls })
    }

    /// The configuration (its `Debug` form redacts the password).
    pub fn config(&self) -> &RabbitMqConfig {
        &self.config
    }

    fn prepare(&self, index: usize, e: &Envelope) -> Result<Prepared, Outcome> {
        if e.payload.len() > self.config.max_payload_bytes {
            return Err(oversized_payload(e.payload.len(), self.config.max_payload_bytes));
        }
        let routing_key = self.config.routing_key.clone().unwrap_or_else(|| e.topic.clone());
        check_message(&routing_key, e.tag.as_deref(), e.headers.keys())
            .map_err(|r| refuse(format!("{r}; the message cannot be published to RabbitMQ")))?;
        let mut headers = FieldTable::default();
        for (name, value) in &e.headers {
            headers.insert(
                ShortString::from(name.clone()),
                AMQPValue::LongString(LongString::from(value.clone())),
            );
        }
        let content_type = match &self.config.content_type {
            Some(ct) => ct.clone(),
            None if looks_like_json(&e.payload) => "application/json".to_owned(),
            None => "text/plain; charset=utf-8".to_owned(),
        };
        let message_id = e.id.to_string();
        let header_frame =
            content_header_frame_bytes(&content_type, &message_id, APP_ID, e.tag.as_deref(), &e.headers);
        let mut properties = BasicProperties::default()
            .with_message_id(ShortString::from(message_id))
            .with_delivery_mode(PERSISTENT)
            .with_content_type(ShortString::from(content_type))
            .with_app_id(ShortString::from(APP_ID))
            .with_headers(headers);
        if let Ok(ts) = u64::try_from(e.created_at.timestamp()) {
            properties = properties.with_timestamp(ts);
        }
        if let Some(tag) = &e.tag {
            properties = properties.with_type(ShortString::from(tag.clone()));
        }
        Ok(Prepared { index, routing_key, properties, header_frame })
    }

    /// A usable link, reconnecting (or reopening the channel) when needed.
    async fn ensure_link<'a>(&self, slot: &'a mut Option<Link>) -> Result<&'a mut Link, Outcome> {
        enum Plan {
            Reuse,
            NewChannel,
            Reconnect,
        }
        let plan = match slot.as_ref() {
            Some(l) if l.connection.status().connected() && l.connection.status().blocked() => {
                // Reconnecting would not help: the broker blocks publishers until its alarm clears.
                return Err(Outcome::unavailable(
                    "RabbitMQ blocked publishing on the connection (a memory or disk alarm on the broker)",
                ));
            }
            // The previous publish was cancelled (the relay's publish timeout) with confirms
            // outstanding: the connection itself may be hung, so start afresh.
            Some(l) if l.busy => Plan::Reconnect,
            Some(l) if l.connection.status().connected() && l.channel.status().connected() => Plan::Reuse,
            Some(l) if l.connection.status().connected() => Plan::NewChannel,
            _ => Plan::Reconnect,
        };
        let timeout = self.config.connect_timeout;
        match plan {
            Plan::Reuse => {}
            Plan::NewChannel => {
                let Some(link) = slot.as_mut() else {
                    return Err(outcome::cannot_connect(&self.address, "no connection"));
                };
                tracing::debug!(address = %self.address, "Reopening the RabbitMQ confirm channel");
                match tokio::time::timeout(timeout, confirm_channel(&link.connection)).await {
                    Ok(Ok(channel)) => link.channel = channel,
                    Ok(Err(e)) => {
                        *slot = None;
                        let reason = scrub(&e.to_string(), &self.config.url);
                        return Err(outcome::cannot_connect(&self.address, &reason));
                    }
                    Err(_) => {
                        *slot = None;
                        let reason = format!("opening a channel timed out after {timeout:?}");
                        return Err(outcome::cannot_connect(&self.address, &reason));
                    }
                }
            }
            Plan::Reconnect => {
                *slot = None; // dropping the old link closes it
                match open(&self.config, self.tls.as_ref()).await {
                    Ok(link) => {
                        tracing::info!(address = %self.address, "Reconnected to RabbitMQ");
                        *slot = Some(link);
                    }
                    Err(reason) => return Err(outcome::cannot_connect(&self.address, &reason)),
                }
            }
        }
        slot.as_mut().ok_or_else(|| outcome::cannot_connect(&self.address, "no connection"))
    }

    /// Publishes every prepared envelope on the channel (pipelined), then awaits every confirm.
    /// Returns the envelopes that met a channel error which may have been caused by any one
    /// message of the batch (RabbitMQ closes the channel with 406 or 311 for a message it
    /// refuses, and every publish in flight on it fails with the same error): the caller
    /// publishes those again one at a time to find the culprit.
    async fn publish_on(
        &self,
        link: &mut Link,
        batch: &[Envelope],
        prepared: &[Prepared],
        outcomes: &mut [Option<Outcome>],
    ) -> Vec<usize> {
        link.busy = true;
        let frame_max = usize::try_from(link.connection.configuration().frame_max()).unwrap_or(usize::MAX);
        let mut suspects = Vec::new();
        // Envelopes that failed only because the channel was already closed (by whichever
        // message): published again alone too when the closing may have been a message's fault.
        let mut collateral = Vec::new();
        let mut pending = Vec::with_capacity(prepared.len());
        let mut broken: Option<Outcome> = None;
        for p in prepared {
            if p.header_frame > frame_max {
                // A frame over frame_max makes RabbitMQ close the whole connection (501).
                outcomes[p.index] = Some(outcome::header_frame_too_large(p.header_frame, frame_max));
                continue;
            }
            if let Some(o) = &broken {
                outcomes[p.index] = Some(o.clone());
                collateral.push(p.index);
                continue;
            }
            let options = BasicPublishOptions { mandatory: true, immediate: false };
            let payload = batch[p.index].payload.as_bytes();
            match link
                .channel
                .basic_publish(&self.config.exchange, &p.routing_key, options, payload, p.properties.clone())
                .await
            {
                Ok(confirm) => pending.push((p.index, p.routing_key.as_str(), confirm)),
                Err(e) => {
                    let o = self.scrubbed(outcome::from_error(&e));
                    if outcome::may_be_the_message(&e) {
                        suspects.push(p.index);
                    } else if outcome::channel_closed(&e) {
                        collateral.push(p.index);
                    }
                    outcomes[p.index] = Some(o.clone());
                    broken = Some(o);
                }
            }
        }

        // Returned messages (basic.return precedes the ack of the same message) travel on
        // whichever confirmation lapin completes next, so they are matched to envelopes by their
        // `message_id` property rather than by position.
        let mut returned: HashMap<String, (u16, String)> = HashMap::new();
        let mut answered = Vec::with_capacity(pending.len());
        for (index, routing_key, confirm) in pending {
            let (ret, acked) = match confirm.await {
                Ok(Confirmation::Ack(ret)) => (ret, true),
                Ok(Confirmation::Nack(ret)) => (ret, false),
                Ok(Confirmation::NotRequested) => {
                    outcomes[index] = Some(outcome::not_confirmed());
                    continue;
                }
                Err(e) => {
                    if outcome::may_be_the_message(&e) {
                        suspects.push(index);
                    } else if outcome::channel_closed(&e) {
                        collateral.push(index);
                    }
                    outcomes[index] = Some(self.scrubbed(outcome::from_error(&e)));
                    continue;
                }
            };
            if let Some(r) = ret {
                if let Some(id) = r.delivery.properties.message_id() {
                    returned.insert(id.to_string(), (r.reply_code, r.reply_text.to_string()));
                }
            }
            answered.push((index, routing_key, acked));
        }
        for (index, routing_key, acked) in answered {
            outcomes[index] = Some(match returned.get(&batch[index].id.to_string()) {
                Some((code, text)) => outcome::returned(&self.config.exchange, routing_key, *code, text),
                None if acked => Outcome::Delivered,
                None => outcome::nacked(),
            });
        }
        link.busy = false;
        if !suspects.is_empty() {
            suspects.extend(collateral);
            suspects.sort_unstable();
        }
        suspects
    }

    /// Publishes each of `suspects` alone (on a fresh channel when the last one was closed): a
    /// message that still makes RabbitMQ close the channel is refused for its content
    /// (permanent); the others get their own outcome.
    async fn isolate(
        &self,
        slot: &mut Option<Link>,
        batch: &[Envelope],
        prepared: &[Prepared],
        suspects: Vec<usize>,
        outcomes: &mut [Option<Outcome>],
    ) {
        for index in suspects {
            let Some(p) = prepared.iter().find(|p| p.index == index) else { continue };
            let link = match self.ensure_link(slot).await {
                Ok(link) => link,
                Err(o) => {
                    outcomes[index] = Some(o);
                    continue;
                }
            };
            let again = self.publish_on(link, batch, std::slice::from_ref(p), outcomes).await;
            if !again.is_empty() {
                outcomes[index] = outcomes[index].take().map(outcome::refused_alone);
            }
        }
    }

    fn scrubbed(&self, o: Outcome) -> Outcome {
        crate::validate::with_reason(o, |reason| scrub(reason, &self.config.url))
    }
}

#[async_trait::async_trait]
impl Transport for RabbitMqTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut prepared = Vec::with_capacity(batch.len());
        for (i, e) in batch.iter().enumerate() {
            match self.prepare(i, e) {
                Ok(p) => prepared.push(p),
                Err(o) => outcomes[i] = Some(o),
            }
        }
        if !prepared.is_empty() {
            let mut slot = self.link.lock().await;
            match self.ensure_link(&mut slot).await {
                Ok(link) => {
                    let suspects = self.publish_on(link, batch, &prepared, &mut outcomes).await;
                    let dead = !link.connection.status().connected();
                    if dead {
                        *slot = None;
                    } else if !suspects.is_empty() {
                        // A channel error names no message: when several were in flight, find
                        // the one RabbitMQ refuses by publishing each again alone.
                        if prepared.len() == 1 {
                            for i in suspects {
                                outcomes[i] = outcomes[i].take().map(outcome::refused_alone);
                            }
                        } else {
                            self.isolate(&mut slot, batch, &prepared, suspects, &mut outcomes).await;
                        }
                        if slot.as_ref().is_some_and(|l| !l.connection.status().connected()) {
                            *slot = None;
                        }
                    }
                }
                Err(o) => {
                    for p in prepared {
                        outcomes[p.index] = Some(o.clone());
                    }
                }
            }
        }
        crate::validate::finish(outcomes)
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_payload_bytes)
    }

    async fn health(&self) -> Result<(), String> {
        let mut slot = self.link.lock().await;
        match self.ensure_link(&mut slot).await {
            Ok(_) => Ok(()),
            Err(Outcome::Failed { reason, .. }) => Err(reason),
            Err(Outcome::Delivered) => Ok(()),
        }
    }
}

/// Opens a connection and a confirm channel and checks or declares the topology, within
/// `connect_timeout`. The error is safe to show (no password).
async fn open(config: &RabbitMqConfig, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<Link, String> {
    let timeout = config.connect_timeout;
    let attempt = async {
        let props = ConnectionProperties::default().with_connection_name(LongString::from("outbox-relay"));
        let connection = match tls {
            None => Connection::connect(&config.url, props).await,
            Some(tls) => {
                let uri = config.url.parse::<AMQPUri>()?;
                Connection::connector(uri, Box::new(tls_connector(tls.clone())), props).await
            }
        }
        .map_err(|e| outbox_core::tls::chain(&e))?;
        let channel = confirm_channel(&connection).await.map_err(|e| e.to_string())?;
        topology(&connection, &channel, config).await?;
        Ok::<_, String>(Link { connection, channel, busy: false })
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(link)) => Ok(link),
        Ok(Err(reason)) => Err(scrub(&reason, &config.url)),
        Err(_) => Err(format!("timed out after {timeout:?} (connect_timeout)")),
    }
}

/// How long a connection waits, after a TLS handshake in which the broker asked for a client
/// certificate, for the broker to refuse it. With TLS 1.3 the client's handshake ends before the
/// broker checks the certificate; a refusal then arrives as an alert, which lapin would not read
/// (it writes first and meets a broken pipe). On acceptance the broker says nothing until the
/// client speaks, so this is also the time an accepted connection waits once.
const CLIENT_CERT_VERDICT: Duration = Duration::from_millis(300);

/// Opens the TCP connection of an `amqps://` URI and does the TLS handshake with `tls` (the
/// destination's trust and client certificate; lapin's own `amqps://` handling would use its
/// own). Runs on lapin's blocking executor, as lapin's own connector does.
// `HandshakeResult` is lapin's connector type (its error holds a mid-handshake stream).
#[allow(clippy::result_large_err)]
fn tls_connector(
    tls: Arc<rustls::ClientConfig>,
) -> impl FnOnce(&AMQPUri) -> lapin::tcp::HandshakeResult + Send + Sync + 'static {
    use std::io::{Error, ErrorKind, Read};

    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut config = rustls::ClientConfig::clone(&tls);
    config.client_auth_cert_resolver =
        Arc::new(NoticesRequest { inner: config.client_auth_cert_resolver.clone(), asked: asked.clone() });
    let connector = lapin::tcp::RustlsConnector::from(Arc::new(config));
    move |uri: &AMQPUri| {
        let host = uri.authority.host.as_str();
        let addr = (host, uri.authority.port);
        let stream = match uri.query.connection_timeout {
            Some(ms) => TcpStream::connect_timeout(addr, Duration::from_millis(ms)),
            None => TcpStream::connect(addr),
        }?;
        let mut stream = stream.into_rustls(&connector, host)?;
        if asked.load(std::sync::atomic::Ordering::Relaxed) {
            stream.set_read_timeout(Some(CLIENT_CERT_VERDICT))?;
            // An AMQP broker never speaks first: only an alert (or a close) can arrive.
            match stream.read(&mut [0u8; 1]) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Err(e.into()),
                Ok(0) => {
                    let sent = if tls.client_auth_cert_resolver.has_certs() { "refused" } else { "required" };
                    return Err(Error::new(
                        ErrorKind::ConnectionAborted,
                        format!(
                            "the broker closed the connection right after the TLS handshake, in which it \
                             asked for a client certificate: client certificate {sent}"
                        ),
                    )
                    .into());
                }
                Ok(_) => {
                    return Err(
                        Error::new(ErrorKind::InvalidData, "the broker spoke before the client").into()
                    )
                }
            }
            stream.set_read_timeout(None)?;
        }
        stream.set_nonblocking(true)?;
        Ok(stream)
    }
}

/// Notes that the server asked for a client certificate (rustls asks the resolver only then).
#[derive(Debug)]
struct NoticesRequest {
    inner: Arc<dyn rustls::client::ResolvesClientCert>,
    asked: Arc<std::sync::atomic::AtomicBool>,
}

impl rustls::client::ResolvesClientCert for NoticesRequest {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, std::sync::atomic::Ordering::Relaxed);
        self.inner.resolve(root_hint_subjects, sigschemes)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.inner.only_raw_public_keys()
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

async fn confirm_channel(connection: &Connection) -> lapin::Result<Channel> {
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(channel)
}

/// Declares the configured topology, or checks that the exchange exists. A failed passive check
/// closes the channel, so it is done on a scratch channel.
async fn topology(connection: &Connection, channel: &Channel, config: &RabbitMqConfig) -> Result<(), String> {
    let ex = &config.exchange;
    match &config.declare {
        Some(d) => {
            let options = ExchangeDeclareOptions { durable: d.durable, ..ExchangeDeclareOptions::default() };
            channel
                .exchange_declare(ex, exchange_kind(&d.kind), options, FieldTable::default())
                .await
                .map_err(|e| format!("declaring exchange {ex:?} failed: {e}"))?;
            if let Some(q) = &d.queue {
                let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
                channel
                    .queue_declare(q, options, FieldTable::default())
                    .await
                    .map_err(|e| format!("declaring queue {q:?} failed: {e}"))?;
                channel
                    .queue_bind(q, ex, &d.binding_key, QueueBindOptions::default(), FieldTable::default())
                    .await
                    .map_err(|e| format!("binding queue {q:?} to exchange {ex:?} failed: {e}"))?;
            }
        }
        None if ex.is_empty() => {}
        None => {
            let scratch = connection.create_channel().await.map_err(|e| e.to_string())?;
            let options = ExchangeDeclareOptions { passive: true, ..ExchangeDeclareOptions::default() };
            let checked =
                scratch.exchange_declare(ex, ExchangeKind::Topic, options, FieldTable::default()).await;
            match checked {
                Ok(()) => {
                    let _ = scratch.close(200, "OK").await;
                }
                Err(e) => {
                    return Err(format!(
                        "exchange {ex:?} is not usable ({e}); create it, or set `declare` to have it declared"
                    ))
                }
            }
        }
    }
    Ok(())
}

fn exchange_kind(kind: &str) -> ExchangeKind {
    match kind {
        "direct" => ExchangeKind::Direct,
        "fanout" => ExchangeKind::Fanout,
        "headers" => ExchangeKind::Headers,
        "topic" => ExchangeKind::Topic,
        other => ExchangeKind::Custom(other.to_owned()),
    }
}

/// True when `payload` is a JSON object or array.
pub(crate) fn looks_like_json(payload: &str) -> bool {
    matches!(payload.trim_start().as_bytes().first(), Some(b'{' | b'['))
        && serde_json::from_str::<serde::de::IgnoredAny>(payload).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_detection() {
        assert!(looks_like_json(r#"{"a":1}"#));
        assert!(looks_like_json(" [1, 2]\n"));
        assert!(!looks_like_json("{not json"));
        assert!(!looks_like_json("hello"));
        assert!(!looks_like_json("42"));
        assert!(!looks_like_json(""));
    }

    #[test]
    fn exchange_kinds() {
        assert_eq!(exchange_kind("topic"), ExchangeKind::Topic);
        assert_eq!(exchange_kind("x-delayed-message"), ExchangeKind::Custom("x-delayed-message".into()));
    }
}
