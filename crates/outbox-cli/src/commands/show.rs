//! `outbox show ID`: one message with its headers, payload and per-destination state.

use anyhow::Context;
use outbox_store::{MessageAdmin, MessageDetail, MessageId};

use super::ops::{open, or_dash, short, time, Table};
use crate::cli::ShowArgs;

pub(crate) async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let detail = outbox.show(MessageId(args.id)).await.with_context(|| shown.clone())?;
    if args.json {
        println!("{}", serde_json::to_string(&detail)?);
    } else {
        print!("{}", render(&detail));
    }
    Ok(())
}

fn render(d: &MessageDetail) -> String {
    let m = &d.message;
    let by = |who: &Option<String>| who.as_deref().map(|w| format!(" by {w}")).unwrap_or_default();
    let mut fields: Vec<(&str, String)> = vec![
        ("id", m.id.to_string()),
        ("status", m.status.to_string()),
        ("topic", m.topic.clone()),
        ("key", or_dash(m.key.as_deref())),
        ("tag", or_dash(m.tag.as_deref())),
        (
            "biz",
            match (&m.biz_type, &m.biz_key) {
                (Some(t), Some(k)) => format!("{t} / {k}"),
                _ => "-".to_owned(),
            },
        ),
        (
            "attempts",
            match m.max_attempts {
                Some(max) => format!("{} (max {max})", m.attempts),
                None => format!("{} (max: the destination's policy)", m.attempts),
            },
        ),
        ("next attempt", time(m.next_attempt_at)),
        ("last attempt", m.last_attempt_at.map_or_else(|| "-".to_owned(), time)),
        ("last error", or_dash(m.last_error.as_deref())),
    ];
    if let Some(owner) = &m.lease_owner {
        fields
            .push(("lease", format!("{owner} until {}", m.lease_until.map_or_else(|| "-".to_owned(), time))));
    }
    fields.push(("created", format!("{}{}", time(m.created_at), by(&m.created_by))));
    fields.push(("updated", format!("{}{}", time(m.updated_at), by(&m.updated_by))));
    let mut out = String::new();
    for (name, value) in fields {
        out.push_str(&format!("{name:<13} {value}\n"));
    }
    out.push_str("headers");
    if m.headers.is_empty() {
        out.push_str("       -\n");
    } else {
        out.push('\n');
        for (k, v) in &m.headers {
            out.push_str(&format!("  {k}: {v}\n"));
        }
    }
    out.push_str(&format!("payload ({} bytes)\n  {}\n", m.payload.len(), m.payload.replace('\n', "\n  ")));
    if d.deliveries.is_empty() {
        out.push_str("deliveries    - (no per-destination state recorded)\n");
    } else {
        let mut t =
            Table::new(&["DESTINATION", "STATUS", "ATTEMPTS", "NEXT ATTEMPT", "LAST ATTEMPT", "LAST ERROR"]);
        for r in &d.deliveries {
            t.row(vec![
                r.destination.clone(),
                r.status.to_string(),
                r.attempts.to_string(),
                time(r.next_attempt_at),
                r.last_attempt_at.map_or_else(|| "-".to_owned(), time),
                short(&or_dash(r.last_error.as_deref()), 60),
            ]);
        }
        out.push_str("deliveries\n");
        out.push_str(&t.render("  "));
    }
    out
}
