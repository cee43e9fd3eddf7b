//! `outbox migrate`.

use anyhow::Context;
use outbox_store::{redact_url, AnyOutbox};

use crate::cli::MigrateArgs;

pub(crate) async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let shown = super::ops::clean(&redact_url(&args.db.database_url), 1000);
    let outbox = AnyOutbox::connect(&args.db.database_url, 2).await?;
    let report = outbox.migrate().await.with_context(|| format!("migrating {shown}"))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else if report.applied.is_empty() {
        println!("{shown}: outbox schema already at version {} (nothing to do)", report.to);
    } else {
        println!(
            "{shown}: outbox schema migrated from version {} to {} (applied {:?})",
            report.from, report.to, report.applied
        );
    }
    Ok(())
}
