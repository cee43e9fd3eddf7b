//! `outbox status`: counts per status, topic and destination, and the oldest pending age.

use anyhow::Context;
use outbox_core::limits;
use outbox_store::{MessageAdmin, Stats, Status};

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
    let topics = s.by_topic.iter().map(|c| (clean(&c.topic, limits::TOPIC), c.status, c.count));
    push_breakdown(&mut out, "TOPIC", topics.collect());
    let destinations =
        s.by_destination.iter().map(|c| (clean(&c.destination, limits::DESTINATION), c.status, c.count));
    push_breakdown(&mut out, "DESTINATION", destinations.collect());
    if s.failed > 0 {
        out.push_str(&format!(
            "\n{} failed message(s) need a person: `outbox list --status failed` to see them, \
             `outbox retry --failed` to re-drive them\n",
            s.failed
        ));
    }
    out
}

/// A `<name> STATUS COUNT` table after a blank line; nothing when there are no rows.
fn push_breakdown(out: &mut String, name: &str, rows: Vec<(String, Status, u64)>) {
    if rows.is_empty() {
        return;
    }
    let mut t = Table::new(&[name, "STATUS", "COUNT"]);
    for (what, status, count) in rows {
        t.row(vec![what, status.to_string(), count.to_string()]);
    }
    out.push('\n');
    out.push_str(&t.render(""));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use outbox_store::{DestinationCount, StatusCount, TopicCount};

    use super::*;

    fn stats(topics: bool, destinations: bool) -> Stats {
        Stats {
            total: 7,
            by_status: vec![
                StatusCount { status: Status::Pending, count: 2 },
                StatusCount { status: Status::Failed, count: 5 },
            ],
            by_topic: if topics {
                vec![
                    TopicCount { topic: "order.paid".into(), status: Status::Pending, count: 2 },
                    TopicCount { topic: "a\u{1b}[2J".into(), status: Status::Failed, count: 5 },
                ]
            } else {
                vec![]
            },
            by_destination: if destinations {
                vec![DestinationCount { destination: "hook".into(), status: Status::Sent, count: 12 }]
            } else {
                vec![]
            },
            oldest_pending_age: Some(Duration::from_secs(90)),
            failed: 5,
        }
    }

    #[test]
    fn each_breakdown_is_shown_only_when_it_has_rows() {
        let head = "db: 7 messages, 5 failed, oldest pending 1m 30s old\n\n\
                    STATUS   COUNT\npending  2\nfailed   5\n";
        let topics = "\nTOPIC       STATUS   COUNT\norder.paid  pending  2\na\\u{1b}[2J  failed   5\n";
        let destinations = "\nDESTINATION  STATUS  COUNT\nhook         sent    12\n";
        let tail = "\n5 failed message(s) need a person: `outbox list --status failed` to see them, \
                    `outbox retry --failed` to re-drive them\n";
        assert_eq!(render("db", &stats(true, true)), format!("{head}{topics}{destinations}{tail}"));
        assert_eq!(render("db", &stats(true, false)), format!("{head}{topics}{tail}"));
        assert_eq!(render("db", &stats(false, true)), format!("{head}{destinations}{tail}"));
        assert_eq!(render("db", &stats(false, false)), format!("{head}{tail}"));
    }
}
