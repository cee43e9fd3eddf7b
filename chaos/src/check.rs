//! The checker: compares the ledger, the outbox table and what the consumers recorded, per
//! guarantee, and prints one screen.
//!
//! Definitions (at-least-once delivery):
//! - **committed**: a message id in `chaos_ledger` (written in the message's own transaction);
//! - **lost**: committed, settled (`sent`/`acked`) or without its outbox row, and never
//!   received by the group (`failed` is not lost; still open is *in flight*);
//! - **phantom**: received, but not committed (its id is in no ledger row; the ids of the
//!   deliberately rolled-back transactions are in `chaos_rolledback`);
//! - **order violation** (per key): a message received for the first time after a message of
//!   the same key with a higher sequence was first received. "First received" is the broker's
//!   position of the first delivery (JetStream stream sequence, Redis entry id), which is the
//!   order the relay published in; for RabbitMQ (no broker position) the consumer's receive
//!   order. For the inbox group, the order of the business effects;
//! - **duplicates before the inbox**: deliveries to the raw group beyond the first per id
//!   (allowed: at-least-once);
//! - **duplicates after the inbox**: business effects beyond the first per id (must be 0);
//! - **in flight**: committed messages still `pending` or `sending` after the drain.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::db::{on_pool, Db};

/// One consumer record: message id, key, seq, broker position, receive order.
type Rec = (i64, i32, i64, Option<i64>, i64);

/// Everything the checker reads.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// `(msg_id, k, seq)` of every committed message.
    pub(crate) ledger: Vec<(i64, i32, i64)>,
    /// Ids of deliberately rolled-back messages.
    pub(crate) rolled_back: HashSet<i64>,
    /// Status and last error of every outbox row.
    pub(crate) outbox: HashMap<i64, (String, Option<String>)>,
    /// Every delivery to the raw group.
    pub(crate) raw: Vec<Rec>,
    /// Every business effect of the inbox group.
    pub(crate) effect: Vec<Rec>,
}

impl Snapshot {
    /// Reads the run's tables.
    pub(crate) async fn load(url: &str) -> anyhow::Result<Snapshot> {
        let db = Db::connect(url).await?;
        let outbox_rows = db.dialect().pick(
            "SELECT id, status, last_error FROM outbox_message",
            "SELECT id, CAST(status AS CHAR), CAST(last_error AS CHAR) FROM outbox_message",
        );
        let s = on_pool!(&db, pool => {
            let rb: Vec<(i64,)> = sqlx::query_as("SELECT msg_id FROM chaos_rolledback").fetch_all(pool).await?;
            let ob: Vec<(i64, String, Option<String>)> = sqlx::query_as(outbox_rows).fetch_all(pool).await?;
            Snapshot {
                ledger: sqlx::query_as("SELECT msg_id, k, seq FROM chaos_ledger").fetch_all(pool).await?,
                rolled_back: rb.into_iter().map(|r| r.0).collect(),
                outbox: ob.into_iter().map(|(id, st, e)| (id, (st, e))).collect(),
                raw: sqlx::query_as("SELECT msg_id, k, seq, pos, n FROM chaos_raw").fetch_all(pool).await?,
                effect: sqlx::query_as("SELECT msg_id, k, seq, pos, n FROM chaos_effect").fetch_all(pool).await?,
            }
        });
        db.close().await;
        Ok(s)
    }
}

/// The counts per guarantee.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    /// Committed messages.
    pub(crate) committed: usize,
    /// Deliberately rolled-back transactions.
    pub(crate) rolled_back: usize,
    /// Committed messages `sent` / `acked`.
    pub(crate) sent: usize,
    /// Committed messages `failed` (with the first few reasons).
    pub(crate) failed: usize,
    /// A few failure reasons.
    pub(crate) failed_reasons: Vec<String>,
    /// Committed messages still `pending` / `sending`.
    pub(crate) in_flight: usize,
    /// Committed messages whose outbox row is missing.
    pub(crate) missing_rows: usize,
    /// Outbox rows without a ledger row (a message committed without its business row).
    pub(crate) orphan_rows: usize,
    /// Keys whose committed sequence is not 1..n.
    pub(crate) ledger_gaps: usize,
    /// Deliveries to the raw group.
    pub(crate) raw_deliveries: usize,
    /// Lost for the raw group.
    pub(crate) lost_raw: usize,
    /// Lost for the inbox group.
    pub(crate) lost_inbox: usize,
    /// Received but never committed (raw ∪ inbox), and how many of them were rolled back on purpose.
    pub(crate) phantom: usize,
    /// Of the phantoms, those rolled back on purpose.
    pub(crate) phantom_rolled_back: usize,
    /// Order violations per key, raw group.
    pub(crate) order_raw: usize,
    /// Order violations per key, inbox group.
    pub(crate) order_inbox: usize,
    /// Raw deliveries beyond the first per id.
    pub(crate) dup_before_inbox: usize,
    /// Of those, copies the broker stored again at a new position (a relay published the message
    /// again); the rest are the broker redelivering a copy it had (a consumer's ack not seen in
    /// time, a consumer killed before its ack). `None` without broker positions (RabbitMQ).
    pub(crate) dup_published_again: Option<usize>,
    /// Effects beyond the first per id.
    pub(crate) dup_after_inbox: usize,
    /// Business effects.
    pub(crate) effects: usize,
}

fn order_violations(recs: &[Rec], use_pos: bool) -> usize {
    // First reception of each id.
    let mut first: HashMap<i64, (i64, i32, i64)> = HashMap::new();
    for &(id, k, seq, pos, n) in recs {
        let at = if use_pos { pos.unwrap_or(n) } else { n };
        let e = first.entry(id).or_insert((at, k, seq));
        if at < e.0 {
            *e = (at, k, seq);
        }
    }
    let mut by_key: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    for (at, k, seq) in first.into_values() {
        by_key.entry(k).or_default().push((at, seq));
    }
    let mut violations = 0;
    for v in by_key.values_mut() {
        v.sort_unstable();
        let mut max = i64::MIN;
        for &(_, seq) in v.iter() {
            if seq < max {
                violations += 1;
            }
            max = max.max(seq);
        }
    }
    violations
}

impl Report {
    /// Computes the report.
    pub(crate) fn of(s: &Snapshot, broker_positions: bool) -> Report {
        let mut r =
            Report { committed: s.ledger.len(), rolled_back: s.rolled_back.len(), ..Default::default() };
        let committed: HashSet<i64> = s.ledger.iter().map(|l| l.0).collect();
        let raw_ids: HashSet<i64> = s.raw.iter().map(|x| x.0).collect();
        let effect_ids: HashSet<i64> = s.effect.iter().map(|x| x.0).collect();
        let mut per_key: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for &(id, k, seq) in &s.ledger {
            per_key.entry(k).or_default().push(seq);
            let mut open = false;
            let failed = match s.outbox.get(&id) {
                None => {
                    r.missing_rows += 1;
                    false
                }
                Some((st, err)) => match st.as_str() {
                    "sent" | "acked" => {
                        r.sent += 1;
                        false
                    }
                    "failed" => {
                        r.failed += 1;
                        if r.failed_reasons.len() < 3 {
                            r.failed_reasons.push(format!("{id}: {}", err.clone().unwrap_or_default()));
                        }
                        true
                    }
                    _ => {
                        r.in_flight += 1;
                        open = true;
                        false
                    }
                },
            };
            // Still open after the drain is counted as in flight, not as lost.
            if !failed && !open && !raw_ids.contains(&id) {
                r.lost_raw += 1;
            }
            if !failed && !open && !effect_ids.contains(&id) {
                r.lost_inbox += 1;
            }
        }
        r.orphan_rows = s.outbox.keys().filter(|id| !committed.contains(id)).count();
        for seqs in per_key.values_mut() {
            seqs.sort_unstable();
            if seqs.iter().enumerate().any(|(i, &q)| q != i as i64 + 1) {
                r.ledger_gaps += 1;
            }
        }
        let received: HashSet<i64> = raw_ids.union(&effect_ids).copied().collect();
        for id in &received {
            if !committed.contains(id) {
                r.phantom += 1;
                if s.rolled_back.contains(id) {
                    r.phantom_rolled_back += 1;
                }
            }
        }
        r.raw_deliveries = s.raw.len();
        r.dup_before_inbox = s.raw.len() - raw_ids.len();
        if broker_positions {
            let copies: HashSet<(i64, i64)> = s.raw.iter().filter_map(|x| Some((x.0, x.3?))).collect();
            let ids: HashSet<i64> = copies.iter().map(|c| c.0).collect();
            r.dup_published_again = Some(copies.len() - ids.len());
        }
        r.effects = s.effect.len();
        r.dup_after_inbox = s.effect.len() - effect_ids.len();
        r.order_raw = order_violations(&s.raw, broker_positions);
        r.order_inbox = order_violations(&s.effect, broker_positions);
        r
    }

    /// The violations, by name (empty when every guarantee held).
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut add = |n: usize, what: &str| {
            if n > 0 {
                v.push(format!("{what}: {n}"));
            }
        };
        add(self.lost_raw, "lost (raw group)");
        add(self.lost_inbox, "lost (inbox group)");
        add(self.phantom, "phantom");
        add(self.order_raw, "order violations (raw group)");
        add(self.order_inbox, "order violations (inbox group)");
        add(self.dup_after_inbox, "duplicates after the inbox");
        add(self.in_flight, "left in flight");
        add(self.missing_rows, "committed messages without an outbox row");
        add(self.orphan_rows, "outbox rows without a committed ledger row");
        add(self.ledger_gaps, "keys with a gap in their committed sequence");
        add(self.failed, "failed (nothing should fail: unlimited attempts)");
        if self.committed == 0 {
            v.push("nothing was committed: the writers did not run".into());
        }
        v
    }

    /// The one-screen table.
    pub(crate) fn table(&self) -> String {
        let ok = |n: usize| if n == 0 { "ok" } else { "VIOLATION" };
        let mut t = String::new();
        let mut row = |name: &str, n: usize, verdict: &str| {
            t.push_str(&format!("  {name:<44} {n:>10}  {verdict}\n"));
        };
        row("committed (ledger)", self.committed, "");
        row("rolled back on purpose", self.rolled_back, "");
        row("sent", self.sent, "");
        row("failed (with reason)", self.failed, ok(self.failed));
        row("1 no phantom: received but not committed", self.phantom, ok(self.phantom));
        row("2 no loss: lost, raw group", self.lost_raw, ok(self.lost_raw));
        row("2 no loss: lost, inbox group", self.lost_inbox, ok(self.lost_inbox));
        row("2 no loss: left in flight after the drain", self.in_flight, ok(self.in_flight));
        row("2 no loss: committed without an outbox row", self.missing_rows, ok(self.missing_rows));
        row("1 outbox rows without a committed ledger row", self.orphan_rows, ok(self.orphan_rows));
        row("4 deliveries to the raw group", self.raw_deliveries, "");
        row("4 duplicates before the inbox", self.dup_before_inbox, "allowed");
        if let Some(again) = self.dup_published_again {
            row("    published again (new broker position)", again, "allowed");
            row(
                "    redelivered (same broker position)",
                self.dup_before_inbox.saturating_sub(again),
                "allowed",
            );
        }
        row("4 duplicates after the inbox", self.dup_after_inbox, ok(self.dup_after_inbox));
        row("5 order violations per key, raw group", self.order_raw, ok(self.order_raw));
        row("5 order violations per key, inbox group", self.order_inbox, ok(self.order_inbox));
        row("  keys with a gap in the committed sequence", self.ledger_gaps, ok(self.ledger_gaps));
        for reason in &self.failed_reasons {
            t.push_str(&format!("    failed {reason}\n"));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_message_first_received_after_a_newer_one_is_an_order_violation() {
        // key 1: seq 1 at 10, seq 2 at 11, seq 1 again at 12 (a duplicate: fine).
        let ok = vec![(1, 1, 1, Some(10), 1), (2, 1, 2, Some(11), 2), (1, 1, 1, Some(12), 3)];
        assert_eq!(order_violations(&ok, true), 0);
        // seq 2 first received before seq 1.
        let bad = vec![(2, 1, 2, Some(10), 1), (1, 1, 1, Some(11), 2)];
        assert_eq!(order_violations(&bad, true), 1);
        // Broker positions decide, not the receive order of a re-reading consumer.
        let reread = vec![(2, 1, 2, Some(11), 1), (1, 1, 1, Some(10), 2)];
        assert_eq!(order_violations(&reread, true), 0);
        assert_eq!(order_violations(&reread, false), 1);
    }

    #[test]
    fn the_report_counts_each_guarantee() {
        let mut s = Snapshot {
            ledger: vec![(1, 0, 1), (2, 0, 2), (4, 1, 1)],
            rolled_back: HashSet::from([3]),
            ..Default::default()
        };
        s.outbox.insert(1, ("sent".into(), None));
        s.outbox.insert(2, ("sent".into(), None));
        s.outbox.insert(4, ("pending".into(), None));
        s.raw =
            vec![(1, 0, 1, Some(1), 1), (1, 0, 1, Some(2), 2), (2, 0, 2, Some(3), 3), (3, 0, 9, Some(4), 4)];
        s.effect = vec![(1, 0, 1, Some(1), 1), (2, 0, 2, Some(3), 2)];
        let r = Report::of(&s, true);
        assert_eq!((r.committed, r.sent, r.in_flight), (3, 2, 1));
        assert_eq!((r.lost_raw, r.lost_inbox), (0, 0), "message 4 is in flight, not lost");
        assert_eq!((r.phantom, r.phantom_rolled_back), (1, 1));
        assert_eq!((r.dup_before_inbox, r.dup_after_inbox), (1, 0));
        assert_eq!(r.dup_published_again, Some(1), "message 1 is stored at positions 1 and 2");
        assert!(!r.violations().is_empty());
        // The broker redelivering the copy it has is not a second publish.
        s.raw.push((2, 0, 2, Some(3), 5));
        let r = Report::of(&s, true);
        assert_eq!((r.dup_before_inbox, r.dup_published_again), (2, Some(1)));
        assert_eq!(Report::of(&s, false).dup_published_again, None);
    }
}
