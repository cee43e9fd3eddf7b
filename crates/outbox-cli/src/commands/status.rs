//! `outbox status`: counts per status, topic and destination, and the oldest pending age.

use anyhow::Context;
use outbox_store::{MessageAdmin, Stats};

use super::ops::{age, clean, open, to_json, Table};
use crate::cli::StatusArgs;

pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let stats = outbox.stats().await.with_context(|| format!("reading the outbox in {shown}"))?;
    if args.json {
        println!("{}", to_json(&stats)?);
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
    let mut out = format!("{}: {} messages, {} failed, {oldest}\n\n", clean(shown, 500), s.total, s.failed);
    let mut t = Table::new(&["STATUS", "COUNT"]);
    for c in &s.by_status {
        t.row(vec![c.status.to_string(), c.count.to_string()]);
    }
    out.push_str(&t.render(""));
    if !s.by_topic.is_empty() {
        let mut t = Table::new(&["TOPIC", "STATUS", "COUNT"]);
        for c in &s.by_topic {
            t.row(vec![
                clean(&c.topic, outbox_core::limits::TOPIC),
                c.status.to_string(),
                c.count.to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&t.render(""));
    }
    if !s.by_destination.is_empty() {
        let mut t = Table::new(&["DESTINATION", "STATUS", "COUNT"]);
        for c in &s.by_destination {
            t.row(vec![
                clean(&c.destination, outbox_core::limits::DESTINATION),
                c.status.to_string(),
                c.count.to_string(),
            ]);
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
