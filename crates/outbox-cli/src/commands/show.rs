//! `outbox show ID`: one message with its headers, payload and per-destination state.
//!
//! Every value comes from the database, where any application (or attacker) may have written
//! it: each is escaped ([`clean`], [`short`]) before it reaches the terminal.

use anyhow::Context;
use outbox_store::{MessageAdmin, MessageDetail, MessageId};

use outbox_core::limits;

use super::ops::{clean, open, short, time, to_json, Table};
use crate::cli::ShowArgs;

pub(crate) async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let (outbox, shown) = open(&args.db).await?;
    let detail = outbox.show(MessageId(args.id)).await.with_context(|| shown.clone())?;
    if args.json {
        println!("{}", to_json(&detail)?);
    } else {
        print!("{}", render(&detail));
    }
    Ok(())
}

/// Largest payload shown; `--json` shows all of it.
const PAYLOAD_SHOWN: usize = 64 * 1024;

fn render(d: &MessageDetail) -> String {
    let m = &d.message;
    let opt = |v: &Option<String>, max: usize| v.as_deref().map_or_else(|| "-".to_owned(), |v| clean(v, max));
    let by = |who: &Option<String>| {
        who.as_deref().map(|w| format!(" by {}", clean(w, limits::ACTOR))).unwrap_or_default()
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("id", m.id.to_string()),
        ("status", m.status.to_string()),
        ("topic", clean(&m.topic, limits::TOPIC)),
        ("key", opt(&m.key, limits::KEY)),
        ("tag", opt(&m.tag, limits::TAG)),
        (
            "biz",
            match (&m.biz_type, &m.biz_key) {
                (Some(t), Some(k)) => {
                    format!("{} / {}", clean(t, limits::BIZ_TYPE), clean(k, limits::BIZ_KEY))
                }
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
        ("last error", opt(&m.last_error, limits::ERROR)),
    ];
    if let Some(owner) = &m.lease_owner {
        fields.push((
            "lease",
            format!(
                "{} until {}",
                clean(owner, limits::OWNER),
                m.lease_until.map_or_else(|| "-".to_owned(), time)
            ),
        ));
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
            out.push_str(&format!(
                "  {}: {}\n",
                clean(k, limits::HEADER_NAME),
                clean(v, limits::HEADER_VALUE)
            ));
        }
    }
    // The payload keeps its line breaks (indented, so no line of it can pass for a field);
    // every other control character, a CR included, is escaped.
    out.push_str(&format!("payload ({} bytes)\n", m.payload.len()));
    let mut budget = PAYLOAD_SHOWN;
    for line in m.payload.split('\n') {
        if budget == 0 {
            out.push_str("  … (cut: `--json` shows the whole payload)\n");
            break;
        }
        out.push_str("  ");
        out.push_str(&clean(line, budget));
        out.push('\n');
        budget = budget.saturating_sub(line.chars().count().max(1));
    }
    if d.deliveries.is_empty() {
        out.push_str("deliveries    - (no per-destination state recorded)\n");
    } else {
        let mut t =
            Table::new(&["DESTINATION", "STATUS", "ATTEMPTS", "NEXT ATTEMPT", "LAST ATTEMPT", "LAST ERROR"]);
        for r in &d.deliveries {
            t.row(vec![
                short(&r.destination, limits::DESTINATION),
                r.status.to_string(),
                r.attempts.to_string(),
                time(r.next_attempt_at),
                r.last_attempt_at.map_or_else(|| "-".to_owned(), time),
                short(r.last_error.as_deref().unwrap_or("-"), 60),
            ]);
        }
        out.push_str("deliveries\n");
        out.push_str(&t.render("  "));
    }
    out
}
