//! The broker side of a scenario: the relay's transport (built through the product's own
//! `TransportConfig`), a real consumer that reports when each message id arrives, and the raw
//! pipelined publish loop that gives the broker's limit. Each scenario gets its own stream /
//! queue, deleted at the end.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use outbox_core::{header, Transport};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_util::sync::CancellationToken;

use crate::db::{payload, KEYS, TOPIC};
use crate::null::NullTransport;
use crate::{BenchConfig, Error, Result, TransportKind};

/// Publishes in flight at once in the raw loops (acknowledgements not yet received).
const WINDOW: usize = 4_096;

fn broker(e: impl std::fmt::Display) -> Error {
    Error::Broker(e.to_string())
}

/// Waits for the broker's confirmations until at most `most` are pending; a refused one is
/// the run's error.
async fn confirm_down_to<F, T, E>(pending: &mut FuturesUnordered<F>, most: usize) -> Result<()>
where
    F: std::future::Future<Output = std::result::Result<T, E>>,
    E: std::fmt::Display,
{
    while pending.len() > most {
        if let Some(r) = pending.next().await {
            r.map_err(broker)?;
        }
    }
    Ok(())
}

/// The broker objects of one scenario.
pub(crate) struct Broker {
    kind: TransportKind,
    cfg: BenchConfig,
    /// Unique name part: stream, subject prefix, queue, exchange.
    tag: String,
    null: Arc<NullTransport>,
    stop: CancellationToken,
}

/// Message ids as the consumer receives them, with the receive instant.
pub(crate) type Arrivals = UnboundedReceiver<(i64, Instant)>;

impl Broker {
    pub(crate) fn new(cfg: &BenchConfig) -> Broker {
        Broker {
            kind: cfg.transport,
            cfg: cfg.clone(),
            tag: format!("outbox_bench_{}_{:08x}", std::process::id(), rand::random::<u32>()),
            null: Arc::new(NullTransport::new()),
            stop: CancellationToken::new(),
        }
    }

    fn nats_stream(&self) -> String {
        self.tag.to_uppercase()
    }

    fn redis_key(&self) -> String {
        format!("{}:{TOPIC}", self.tag)
    }

    /// The relay's transport: the product's transport for the broker, or the null transport.
    pub(crate) async fn transport(&self) -> Result<Arc<dyn Transport>> {
        use outbox_transport::TransportConfig;
        let config = match self.kind {
            TransportKind::Null => return Ok(self.null.clone()),
            TransportKind::Nats => TransportConfig::Nats(outbox_transport::nats::NatsConfig {
                url: self.cfg.nats_url.clone(),
                subject_prefix: Some(self.tag.clone()),
                stream: Some(self.nats_stream()),
                create_stream: true,
                ..Default::default()
            }),
            TransportKind::Redis => TransportConfig::Redis(outbox_transport::redis::RedisConfig {
                url: self.cfg.redis_url.clone(),
                stream: format!("{}:{{topic}}", self.tag),
                ..Default::default()
            }),
            TransportKind::Rabbitmq => {
                let mut c = outbox_transport::rabbitmq::RabbitMqConfig::new(&self.cfg.amqp_url, &self.tag);
                c.declare = Some(outbox_transport::rabbitmq::DeclareConfig {
                    kind: "topic".into(),
                    durable: true,
                    queue: Some(self.tag.clone()),
                    binding_key: "#".into(),
                });
                TransportConfig::Rabbitmq(c)
            }
        };
        config.build().await.map_err(broker)
    }

    /// Starts a consumer of everything the relay publishes in this scenario. Call after
    /// [`transport`](Self::transport) (which creates the stream / queue).
    pub(crate) async fn consume(&self) -> Result<Arrivals> {
        let (tx, rx) = unbounded_channel();
        let stop = self.stop.clone();
        match self.kind {
            TransportKind::Null => self.null.tap(tx),
            TransportKind::Nats => {
                use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
                let client = async_nats::connect(&self.cfg.nats_url).await.map_err(broker)?;
                let js = async_nats::jetstream::new(client);
                let stream = js.get_stream(self.nats_stream()).await.map_err(broker)?;
                // A consumer of the stream from `start` on (stream sequence numbers).
                let pull_from = move |stream: async_nats::jetstream::stream::Stream, start: u64| async move {
                    let deliver_policy = if start <= 1 {
                        DeliverPolicy::All
                    } else {
                        DeliverPolicy::ByStartSequence { start_sequence: start }
                    };
                    let consumer = stream
                        .create_consumer(pull::Config {
                            ack_policy: AckPolicy::None,
                            deliver_policy,
                            // An ephemeral consumer is deleted after 5 s without a pull by
                            // default; a starved bench process must not lose its consumer.
                            inactive_threshold: Duration::from_secs(600),
                            ..Default::default()
                        })
                        .await
                        .map_err(broker)?;
                    // A pull that stalls is noticed by its missed idle heartbeats, two of them.
                    // The default heartbeat (15 s) let a stall under load last as long as the
                    // 30 s a drain waits for a silent consumer, which then failed the drain of
                    // 10^6 with 870,789 of its messages received (2026-12-02): beats of 1 s
                    // notice it within seconds, and a false alarm costs only a pull anew.
                    consumer
                        .stream()
                        .max_messages_per_batch(1000)
                        .expires(Duration::from_secs(5))
                        .heartbeat(Duration::from_secs(1))
                        .messages()
                        .await
                        .map_err(broker)
                };
                let mut messages = pull_from(stream.clone(), 1).await?;
                tokio::spawn(async move {
                    // The stream sequence of the last message received: a pull consumer
                    // delivers in stream order, so everything up to it has been received.
                    let mut last_seq = 0_u64;
                    loop {
                        let next = tokio::select! {
                            _ = stop.cancelled() => break,
                            m = messages.next() => m,
                        };
                        let m = match next {
                            Some(Ok(m)) => m,
                            // The pull ended or failed (a missed idle heartbeat under load,
                            // say): a new consumer from the message after the last one
                            // received. Without acknowledgements the old consumer counts what
                            // it had sent to the failed pull as delivered, so pulling it again
                            // lost those messages: 87,800 of a drain of 10^6 once.
                            other => {
                                if let Some(Err(e)) = other {
                                    tracing::warn!(error = %e, after = last_seq, "bench consumer: JetStream pull error; pulling anew");
                                }
                                match pull_from(stream.clone(), last_seq + 1).await {
                                    Ok(fresh) => messages = fresh,
                                    Err(e) => {
                                        tracing::warn!(error = %e, "bench consumer: cannot pull");
                                        tokio::time::sleep(Duration::from_millis(50)).await;
                                    }
                                }
                                continue;
                            }
                        };
                        if let Ok(info) = m.info() {
                            last_seq = last_seq.max(info.stream_sequence);
                        }
                        let now = Instant::now();
                        let id = m
                            .headers
                            .as_ref()
                            .and_then(|h| h.get(header::MESSAGE_ID))
                            .and_then(|v| v.as_str().parse::<i64>().ok());
                        if let Some(id) = id {
                            let _ = tx.send((id, now));
                        }
                    }
                });
            }
            TransportKind::Redis => {
                use redis::streams::{StreamReadOptions, StreamReadReply};
                use redis::AsyncCommands;
                let client = redis::Client::open(self.cfg.redis_url.as_str()).map_err(broker)?;
                let mut conn = client.get_multiplexed_async_connection().await.map_err(broker)?;
                let key = self.redis_key();
                tokio::spawn(async move {
                    let mut last = "0-0".to_owned();
                    let opts = StreamReadOptions::default().count(1000).block(100);
                    while !stop.is_cancelled() {
                        let reply: redis::RedisResult<StreamReadReply> =
                            conn.xread_options(&[&key], &[&last], &opts).await;
                        let Ok(reply) = reply else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        let now = Instant::now();
                        for k in reply.keys {
                            for entry in k.ids {
                                if let Some(id) = entry.get::<i64>("id") {
                                    let _ = tx.send((id, now));
                                }
                                last = entry.id;
                            }
                        }
                    }
                });
            }
            TransportKind::Rabbitmq => {
                use lapin::options::{BasicConsumeOptions, BasicQosOptions};
                let conn =
                    lapin::Connection::connect(&self.cfg.amqp_url, lapin::ConnectionProperties::default())
                        .await
                        .map_err(broker)?;
                let ch = conn.create_channel().await.map_err(broker)?;
                ch.basic_qos(2000, BasicQosOptions::default()).await.map_err(broker)?;
                let mut consumer = ch
                    .basic_consume(
                        &self.tag,
                        "outbox-bench",
                        BasicConsumeOptions { no_ack: true, ..Default::default() },
                        lapin::types::FieldTable::default(),
                    )
                    .await
                    .map_err(broker)?;
                tokio::spawn(async move {
                    let _keep = (conn, ch);
                    loop {
                        let next = tokio::select! {
                            _ = stop.cancelled() => break,
                            d = consumer.next() => d,
                        };
                        let Some(Ok(d)) = next else { break };
                        let now = Instant::now();
                        if let Some(id) =
                            d.properties.message_id().as_ref().and_then(|s| s.as_str().parse::<i64>().ok())
                        {
                            let _ = tx.send((id, now));
                        }
                    }
                });
            }
        }
        Ok(rx)
    }

    /// The broker's raw confirmed-publish rate, msgs/s: `n` messages of the bench's size with the
    /// headers the relay sends, pipelined with up to [`WINDOW`] unconfirmed (Redis: pipelines of
    /// 1,000 `XADD`s, 4 in flight). `None` for the null transport (no limit).
    pub(crate) async fn raw_publish(&self, n: usize) -> Result<Option<f64>> {
        let headers: Vec<(String, String)> = vec![
            (header::TOPIC.into(), TOPIC.into()),
            (header::ATTEMPT.into(), "1".into()),
            (header::CREATED_AT.into(), chrono::Utc::now().to_rfc3339()),
            (header::KEY.into(), "k-1".into()),
        ];
        let start;
        match self.kind {
            TransportKind::Null => return Ok(None),
            TransportKind::Nats => {
                use async_nats::jetstream::message::PublishMessage;
                let client = async_nats::connect(&self.cfg.nats_url).await.map_err(broker)?;
                let js = async_nats::jetstream::new(client);
                js.get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: self.nats_stream(),
                    subjects: vec![format!("{}.>", self.tag)],
                    duplicate_window: Duration::from_secs(120),
                    ..Default::default()
                })
                .await
                .map_err(broker)?;
                let subject = format!("{}.{TOPIC}", self.tag);
                let mut acks = FuturesUnordered::new();
                start = Instant::now();
                for i in 0..n {
                    let mut h = async_nats::HeaderMap::new();
                    for (k, v) in &headers {
                        h.insert(k.as_str(), v.as_str());
                    }
                    h.insert(header::MESSAGE_ID, i.to_string().as_str());
                    h.insert(async_nats::header::NATS_MESSAGE_ID, i.to_string().as_str());
                    let msg = PublishMessage::build().headers(h).payload(payload(i as u64, KEYS).into());
                    let ack = js.send_publish(subject.clone(), msg).await.map_err(broker)?;
                    acks.push(ack.into_future());
                    confirm_down_to(&mut acks, WINDOW - 1).await?;
                }
                confirm_down_to(&mut acks, 0).await?;
            }
            TransportKind::Redis => {
                let client = redis::Client::open(self.cfg.redis_url.as_str()).map_err(broker)?;
                let conn = client.get_multiplexed_async_connection().await.map_err(broker)?;
                let key = format!("{}:raw", self.tag);
                start = Instant::now();
                let chunks: Vec<(usize, usize)> =
                    (0..n).step_by(1000).map(|lo| (lo, (lo + 1000).min(n))).collect();
                let mut results = futures::stream::iter(chunks)
                    .map(|(lo, hi)| {
                        let mut conn = conn.clone();
                        let mut pipe = redis::pipe();
                        for i in lo..hi {
                            let cmd = pipe
                                .cmd("XADD")
                                .arg(&key)
                                .arg("*")
                                .arg("payload")
                                .arg(payload(i as u64, KEYS))
                                .arg("id")
                                .arg(i);
                            for (k, v) in &headers {
                                cmd.arg(format!("h:{k}")).arg(v);
                            }
                        }
                        async move { pipe.query_async::<Vec<String>>(&mut conn).await }
                    })
                    .buffer_unordered(4);
                while let Some(r) = results.next().await {
                    r.map_err(broker)?;
                }
                let mut c = conn.clone();
                let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query_async(&mut c).await;
            }
            TransportKind::Rabbitmq => {
                use lapin::options::{
                    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
                    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
                };
                use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
                let conn =
                    lapin::Connection::connect(&self.cfg.amqp_url, lapin::ConnectionProperties::default())
                        .await
                        .map_err(broker)?;
                let ch = conn.create_channel().await.map_err(broker)?;
                ch.confirm_select(ConfirmSelectOptions::default()).await.map_err(broker)?;
                let ex = format!("{}_raw", self.tag);
                ch.exchange_declare(
                    &ex,
                    lapin::ExchangeKind::Topic,
                    ExchangeDeclareOptions { durable: true, ..Default::default() },
                    FieldTable::default(),
                )
                .await
                .map_err(broker)?;
                ch.queue_declare(
                    &ex,
                    QueueDeclareOptions { durable: true, ..Default::default() },
                    FieldTable::default(),
                )
                .await
                .map_err(broker)?;
                ch.queue_bind(&ex, &ex, "#", QueueBindOptions::default(), FieldTable::default())
                    .await
                    .map_err(broker)?;
                let mut table = std::collections::BTreeMap::new();
                for (k, v) in &headers {
                    table.insert(
                        ShortString::from(k.clone()),
                        AMQPValue::LongString(LongString::from(v.clone())),
                    );
                }
                let table = FieldTable::from(table);
                let mut confirms = FuturesUnordered::new();
                start = Instant::now();
                for i in 0..n {
                    let props = lapin::BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_content_type("application/json".into())
                        .with_message_id(i.to_string().into())
                        .with_headers(table.clone());
                    let confirm = ch
                        .basic_publish(
                            &ex,
                            TOPIC,
                            BasicPublishOptions { mandatory: true, ..Default::default() },
                            payload(i as u64, KEYS).as_bytes(),
                            props,
                        )
                        .await
                        .map_err(broker)?;
                    confirms.push(confirm.into_future());
                    confirm_down_to(&mut confirms, WINDOW - 1).await?;
                }
                confirm_down_to(&mut confirms, 0).await?;
                let _ = ch.queue_delete(&ex, QueueDeleteOptions::default()).await;
                let _ = ch.exchange_delete(&ex, ExchangeDeleteOptions::default()).await;
                let _ = conn.close(200, "OK").await;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        Ok(Some(n as f64 / secs.max(1e-9)))
    }

    /// Stops the consumer and deletes the scenario's stream / queue / exchange.
    pub(crate) async fn cleanup(&self) {
        self.stop.cancel();
        match self.kind {
            TransportKind::Null => {}
            TransportKind::Nats => {
                if let Ok(client) = async_nats::connect(&self.cfg.nats_url).await {
                    let js = async_nats::jetstream::new(client);
                    let _ = js.delete_stream(self.nats_stream()).await;
                }
            }
            TransportKind::Redis => {
                if let Ok(client) = redis::Client::open(self.cfg.redis_url.as_str()) {
                    if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                        let _: redis::RedisResult<i64> =
                            redis::cmd("DEL").arg(self.redis_key()).query_async(&mut c).await;
                    }
                }
            }
            TransportKind::Rabbitmq => {
                use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
                if let Ok(conn) =
                    lapin::Connection::connect(&self.cfg.amqp_url, lapin::ConnectionProperties::default())
                        .await
                {
                    if let Ok(ch) = conn.create_channel().await {
                        let _ = ch.queue_delete(&self.tag, QueueDeleteOptions::default()).await;
                        let _ = ch.exchange_delete(&self.tag, ExchangeDeleteOptions::default()).await;
                    }
                    let _ = conn.close(200, "OK").await;
                }
            }
        }
    }
}

/// What a consumer saw: the first arrival of every id, and how many arrivals were repeats.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) first: HashMap<i64, Instant>,
    pub(crate) duplicates: u64,
}

impl Seen {
    fn note(&mut self, id: i64, at: Instant) {
        match self.first.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => self.duplicates += 1,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(at);
            }
        }
    }

    /// Drains what has arrived so far.
    pub(crate) fn drain(&mut self, rx: &mut Arrivals) {
        while let Ok((id, at)) = rx.try_recv() {
            self.note(id, at);
        }
    }

    /// Collects arrivals until `expected` distinct ids arrived, or until no new one has arrived
    /// for `quiet`. A consumer still catching up is waited for: a drain's consumer shares the two
    /// cores with the relay and can end hundreds of thousands of messages behind it (a fixed 30 s
    /// after the relay stopped failed a drain of 10^6 whose consumer was 360,000 behind and still
    /// receiving); one that has stopped receiving is not.
    pub(crate) async fn collect(&mut self, rx: &mut Arrivals, expected: usize, quiet: Duration) -> bool {
        let mut deadline = tokio::time::Instant::now() + quiet;
        loop {
            self.drain(rx);
            if self.first.len() >= expected {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((id, at))) => {
                    let known = self.first.len();
                    self.note(id, at);
                    // Only a message not seen before counts as progress.
                    if self.first.len() > known {
                        deadline = tokio::time::Instant::now() + quiet;
                    }
                }
                Ok(None) | Err(_) => {
                    self.drain(rx);
                    return self.first.len() >= expected;
                }
            }
        }
    }
}
