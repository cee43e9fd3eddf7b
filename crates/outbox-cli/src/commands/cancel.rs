//! `outbox cancel ID`: a pending or failed message will never be published.

use anyhow::Context;
use outbox_store::{MessageAdmin, MessageId};

use super::ops::{default_actor, open};
use crate::cli::CancelArgs;

pub(crate) async fn run(args: CancelArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let actor = args.actor.clone().unwrap_or_else(default_actor);
    let message = outbox.cancel(MessageId(args.id), &actor).await.with_context(|| shown.clone())?;
    if args.json {
        println!("{}", super::ops::to_json(&message)?);
    } else {
        println!(
            "message {}: cancelled (it will not be published; `outbox retry {}` re-drives it)",
            args.id, args.id
        );
    }
    Ok(())
}
