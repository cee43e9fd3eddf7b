//! The consumer role: a real consumer of the broker, resuming from its durable position
//! (JetStream durable consumer, durable RabbitMQ queue with manual acks, Redis consumer group
//! with `XACK`), acknowledging only after its database write committed.
//!
//! - group `raw` records every delivery, duplicates included, in `chaos_raw`;
//! - group `inbox` applies the business effect (a row in `chaos_effect`) through
//!   [`outbox_inbox::Inbox::process`], so a redelivery has no second effect.
//!
//! Each row keeps the broker's position of the delivery (JetStream stream sequence, Redis entry
//! id; `NULL` for RabbitMQ, whose queue order is the receive order), so the checker can tell the
//! order in which the relay published from the order in which a restarted consumer re-read.
//! Any error ends the process; the harness restarts it.

use std::time::Duration;

use anyhow::{anyhow, Context};
use futures::StreamExt;
use outbox_inbox::{Inbox, InboxMessage};

use crate::combo::{Broker, Names};
use crate::db::{on_pool, Db};

/// What one consumer does.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConsumerArgs {
    /// Direct URL of the run's database.
    #[arg(long)]
    pub(crate) db_url: String,
    /// Client URL of the broker.
    #[arg(long)]
    pub(crate) broker_url: String,
    /// `nats`, `rabbitmq` or `redis`.
    #[arg(long)]
    pub(crate) broker: String,
    /// `raw` or `inbox`.
    #[arg(long)]
    pub(crate) group: String,
    /// The run id (names the stream, queues, groups).
    #[arg(long)]
    pub(crate) run: String,
}

/// Where a consumer records its deliveries.
struct Sink {
    db: Db,
    /// The raw group's insert.
    raw: String,
    /// The inbox group's business effect.
    effect: String,
}

fn parse(msg: &InboxMessage) -> anyhow::Result<(i64, i32, i64)> {
    let id: i64 = msg.id.parse().with_context(|| format!("message id {:?}", msg.id))?;
    let v: serde_json::Value = serde_json::from_slice(&msg.payload).context("payload is not JSON")?;
    let k = v["k"].as_i64().context("payload without k")? as i32;
    let seq = v["seq"].as_i64().context("payload without seq")?;
    Ok((id, k, seq))
}

impl Sink {
    async fn connect(url: &str) -> anyhow::Result<Sink> {
        let db = Db::connect_small(url).await?;
        let raw = db.sql("INSERT INTO chaos_raw (msg_id, k, seq, pos) VALUES (?, ?, ?, ?)");
        let effect = db.sql("INSERT INTO chaos_effect (msg_id, k, seq, pos) VALUES (?, ?, ?, ?)");
        Ok(Sink { db, raw, effect })
    }

    /// Records one delivery for `group`; returns once it is committed.
    async fn record(&self, group: &str, msg: &InboxMessage, pos: Option<i64>) -> anyhow::Result<()> {
        let (id, k, seq) = parse(msg)?;
        let effect = self.effect.as_str();
        on_pool!(&self.db, pool => {
            if group == "raw" {
                sqlx::query(&self.raw).bind(id).bind(k).bind(seq).bind(pos).execute(pool).await?;
            } else {
                let mut tx = pool.begin().await?;
                let _first_or_duplicate = Inbox::new(pool.clone())
                    .process(&mut tx, group, msg, |conn| {
                        Box::pin(async move {
                            sqlx::query(effect).bind(id).bind(k).bind(seq).bind(pos).execute(&mut *conn).await?;
                            Ok::<_, anyhow::Error>(())
                        })
                    })
                    .await?;
                tx.commit().await?;
            }
        });
        Ok(())
    }
}

/// Runs until killed (or until an error, which the harness answers with a restart).
pub(crate) async fn run(args: ConsumerArgs) -> anyhow::Result<()> {
    let sink = Sink::connect(&args.db_url).await.context("connecting to the database")?;
    let names = Names { run: args.run.clone() };
    let broker = Broker::of_name(&args.broker).ok_or_else(|| anyhow!("unknown broker {:?}", args.broker))?;
    match broker {
        Broker::Nats => nats(&args, &names, &sink).await,
        Broker::Rabbit => rabbit(&args, &names, &sink).await,
        Broker::Redis => redis_streams(&args, &names, &sink).await,
    }
}

async fn nats(args: &ConsumerArgs, names: &Names, sink: &Sink) -> anyhow::Result<()> {
    use async_nats::jetstream::{self, consumer::pull};
    let client = async_nats::connect(&args.broker_url).await?;
    let js = jetstream::new(client);
    let stream = js.get_stream(names.stream()).await.map_err(|e| anyhow!("{e}"))?;
    let consumer = stream
        .get_or_create_consumer(
            &args.group,
            pull::Config {
                durable_name: Some(args.group.clone()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(5),
                max_ack_pending: 1000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let mut messages = consumer.messages().await.map_err(|e| anyhow!("{e}"))?;
    while let Some(delivery) = messages.next().await {
        let delivery = delivery.map_err(|e| anyhow!("{e}"))?;
        let pos = delivery.info().map_err(|e| anyhow!("{e}"))?.stream_sequence as i64;
        let msg = outbox_inbox::from_nats(&delivery.message)?;
        sink.record(&args.group, &msg, Some(pos)).await?;
        delivery.ack().await.map_err(|e| anyhow!("{e}"))?;
    }
    Err(anyhow!("the JetStream subscription ended"))
}

async fn rabbit(args: &ConsumerArgs, names: &Names, sink: &Sink) -> anyhow::Result<()> {
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
    let conn = lapin::Connection::connect(&args.broker_url, lapin::ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.basic_qos(50, BasicQosOptions::default()).await?;
    let mut consumer = ch
        .basic_consume(
            &names.queue(&args.group),
            &format!("chaos-{}", args.group),
            BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await?;
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery?;
        let msg = outbox_inbox::from_amqp(&delivery)?;
        sink.record(&args.group, &msg, None).await?;
        delivery.ack(BasicAckOptions::default()).await?;
    }
    Err(anyhow!("the RabbitMQ consumer ended"))
}

/// Redis entry id `ms-n` as one sortable number.
fn entry_pos(id: &str) -> Option<i64> {
    let (ms, n) = id.split_once('-')?;
    Some(ms.parse::<i64>().ok()? * 100_000 + n.parse::<i64>().ok()?)
}

async fn redis_streams(args: &ConsumerArgs, names: &Names, sink: &Sink) -> anyhow::Result<()> {
    use redis::streams::{StreamReadOptions, StreamReadReply};
    use redis::AsyncCommands;
    let client = redis::Client::open(args.broker_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let stream = names.redis_stream();
    // First what this consumer read before a crash and never acknowledged, then new entries.
    let mut cursor = "0".to_owned();
    loop {
        let opts = StreamReadOptions::default().group(&args.group, "c1").count(100).block(1000);
        let reply: StreamReadReply = conn.xread_options(&[&stream], &[&cursor], &opts).await?;
        let entries: Vec<_> = reply.keys.into_iter().flat_map(|k| k.ids).collect();
        if entries.is_empty() && cursor != ">" {
            cursor = ">".into();
            continue;
        }
        for entry in &entries {
            let msg = outbox_inbox::from_redis_stream(entry)?;
            sink.record(&args.group, &msg, entry_pos(&entry.id)).await?;
            let _: i64 = conn.xack(&stream, &args.group, &[&entry.id]).await?;
            if cursor != ">" {
                cursor = entry.id.clone();
            }
        }
    }
}
