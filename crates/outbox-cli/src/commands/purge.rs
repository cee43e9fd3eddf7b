//! `outbox purge --sent-before DURATION`: retention of finished messages, in small batches.

use anyhow::Context;
use outbox_store::MessageAdmin;

use super::ops::{age, open, progress};
use crate::cli::PurgeArgs;

pub(crate) async fn run(args: PurgeArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    let bar = progress(args.json, "purged");
    let mut report = |n: u64| {
        if let Some(bar) = &bar {
            bar.set_position(n);
        }
    };
    let result = outbox.purge(args.sent_before, batch, Some(&mut report)).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let n = result.with_context(|| format!("purging finished messages in {shown}"))?;
    if args.json {
        println!("{}", serde_json::json!({ "purged": n, "older_than_secs": args.sent_before.as_secs_f64() }));
    } else if args.sent_before.is_zero() {
        println!("{n} finished message(s) (sent, acked, cancelled) purged");
    } else {
        println!(
            "{n} finished message(s) (sent, acked, cancelled) last changed more than {} ago purged",
            age(args.sent_before)
        );
    }
    Ok(())
}
