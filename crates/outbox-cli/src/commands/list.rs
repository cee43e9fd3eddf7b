//! `outbox list`: messages matching filters, a keyset page at a time.

use anyhow::Context;
use outbox_store::{ListFilter, MessageAdmin, MessageId, OutboxMessage};
use serde::Serialize;

use super::ops::{open, or_dash, short, time, to_json, Table};
use crate::cli::ListArgs;

#[derive(Debug, Serialize)]
struct Page<'a> {
    messages: &'a [OutboxMessage],
    /// Pass as `--after-id` for the next page; `null` on the last page.
    next_after_id: Option<MessageId>,
}

pub(crate) async fn run(args: ListArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let filter = ListFilter {
        status: args.status,
        topic: args.topic,
        biz_type: args.biz_type,
        biz_key: args.biz_key,
        key: args.key,
        error: args.error,
        created_after: args.since,
        created_before: args.until,
        after_id: args.after_id.map(MessageId),
        limit: usize::try_from(args.limit).unwrap_or(usize::MAX),
    };
    let messages = outbox.list(&filter).await.with_context(|| format!("listing messages in {shown}"))?;
    let next_after_id = if messages.len() == filter.limit { messages.last().map(|m| m.id) } else { None };
    if args.json {
        println!("{}", to_json(&Page { messages: &messages, next_after_id })?);
        return Ok(());
    }
    if messages.is_empty() {
        println!("no messages match");
        return Ok(());
    }
    let mut t = Table::new(&["ID", "STATUS", "TOPIC", "KEY", "BIZ", "ATTEMPTS", "CREATED", "LAST ERROR"]);
    for m in &messages {
        let biz = match (&m.biz_type, &m.biz_key) {
            (Some(t), Some(k)) => short(&format!("{t}/{k}"), 32),
            _ => "-".to_owned(),
        };
        t.row(vec![
            m.id.to_string(),
            m.status.to_string(),
            short(&m.topic, 40),
            short(&or_dash(m.key.as_deref()), 24),
            biz,
            m.attempts.to_string(),
            time(m.created_at),
            short(&or_dash(m.last_error.as_deref()), 60),
        ]);
    }
    print!("{}", t.render(""));
    match next_after_id {
        Some(id) => println!("{} messages; next page: --after-id {id}", messages.len()),
        None => println!("{} messages", messages.len()),
    }
    Ok(())
}
