//! `outbox retry ID` and `outbox retry --failed [filters]`: re-drive messages.

use anyhow::Context;
use outbox_store::{ListFilter, MessageAdmin, MessageId, Status};

use super::ops::{default_actor, open, progress};
use crate::cli::RetryArgs;

pub(crate) async fn run(args: RetryArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let actor = args.actor.clone().unwrap_or_else(default_actor);
    let Some(id) = args.id.filter(|_| !args.failed) else {
        return retry_failed(&outbox, &shown, &actor, args).await;
    };
    let before =
        outbox.get(MessageId(id)).await.with_context(|| format!("reading message {id} in {shown}"))?;
    let message = outbox.retry(MessageId(id), &actor).await.with_context(|| shown.clone())?;
    if args.json {
        println!("{}", super::ops::to_json(&message)?);
    } else {
        let from = before.map_or_else(|| "?".to_owned(), |m| m.status.to_string());
        println!(
            "message {id}: {from} -> {}, attempts reset to 0, due now (the relay publishes it on its next scan)",
            message.status
        );
    }
    Ok(())
}

async fn retry_failed(
    outbox: &outbox_store::AnyOutbox,
    shown: &str,
    actor: &str,
    args: RetryArgs,
) -> anyhow::Result<()> {
    let filter = ListFilter {
        status: Some(Status::Failed),
        topic: args.topic,
        biz_type: args.biz_type,
        key: args.key,
        created_after: args.since,
        created_before: args.until,
        ..ListFilter::default()
    };
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    let bar = progress(args.json, "re-driven");
    let mut report = |n: u64| {
        if let Some(bar) = &bar {
            bar.set_position(n);
        }
    };
    let result = outbox.retry_failed(&filter, actor, batch, Some(&mut report)).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let n = result.with_context(|| format!("re-driving failed messages in {shown}"))?;
    if args.json {
        println!("{}", serde_json::json!({ "retried": n }));
    } else if n == 0 {
        println!("no failed messages match");
    } else {
        println!("{n} failed message(s) re-driven: pending again, attempts reset, due now");
    }
    Ok(())
}
