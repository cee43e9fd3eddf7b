//! `outbox status`: counts per status, topic and destination, and the oldest pending age.

use anyhow::Context;
use outbox_store::{MessageAdmin, Stats};

use super::ops::{age, open, Table};
use crate::cli::StatusArgs;

pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let stats = outbox.stats().await.with_context(|| format!("reading the outbox in {shown}"))?;
    if args.json {
        println!("{}", serde_json::to_string(&stats)?);
    } else {
        print!("{}", render(&shown, &stats));
    }
    Ok(())
}

fn render(shown: &str, s: &Stats) -> String {
    let oldest = match s.oldest_pending_age {
        Some(d) => format!("oldest pending {} old", age(d)),
        None => "nothing pending".to_owned(),
    };
    let mut out = format!("{shown}: {} messages, {} failed, {oldest}\n\n", s.total, s.failed);
    let mut t = Table::new(&["STATUS", "COUNT"]);
    for c in &s.by_status {
        t.row(vec![c.status.to_string(), c.count.to_string()]);
    }
    out.push_str(&t.render(""));
    if !s.by_topic.is_empty() {
        let mut t = Table::new(&["TOPIC", "STATUS", "COUNT"]);
        for c in &s.by_topic {
            t.row(vec![c.topic.clone(), c.status.to_string(), c.count.to_string()]);
        }
        out.push('\n');
        out.push_str(&t.render(""));
    }
    if !s.by_destination.is_empty() {
        let mut t = Table::new(&["DESTINATION", "STATUS", "COUNT"]);
        for c in &s.by_destination {
            t.row(vec![c.destination.clone(), c.status.to_string(), c.count.to_string()]);
        }
        out.push('\n');
        out.push_str(&t.render(""));
    }
    if s.failed > 0 {
        out.push_str(&format!(
            "\n{} failed message(s) need a person: `outbox list --status failed` to see them, \
             `outbox retry --failed` to re-drive them\n",
            s.failed
        ));
    }
    out
}
