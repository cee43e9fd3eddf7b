//! The relay's queries on MySQL 8 / MariaDB 10.6+.
//!
//! The claim runs in a READ COMMITTED transaction: under the default REPEATABLE READ, InnoDB's
//! locking read would take next-key (gap) locks on the due-index range and block the
//! application's concurrent INSERTs until the claim commits. Under READ COMMITTED it locks only
//! the rows it returns, and `SKIP LOCKED` passes over rows another relay is claiming.
//!
//! Steps (one transaction):
//! 1. candidates, one plain read: a window of the first due `sending` (expired lease) and
//!    `pending` rows in due order, and the first due rows without a key;
//! 2. those that are still due and head their key, locked with `SKIP LOCKED`, in due order, at
//!    most `limit`; a locked claim locks first and then probes only the rows it holds for being
//!    their key's head (`lock_first`), a lease claim probes first and then locks (`lock_heads`);
//! 3. only when the window is full and that gave fewer than `limit` (a long run of due rows
//!    held back behind their key's head, e.g. a hot key's backlog): the head of every open
//!    key, by a loose index scan over `open_key` (schema version 4), one index entry per key
//!    instead of one per held-back row, locked the same way;
//! 4. one `UPDATE` leases them.
//!
//! Before version 4 the claim was a locking read over the due range with the head check as a
//! filter, which read every held-back row: 3.2 s per claim with 73,000 rows on 24 keys (found
//! by the chaos suite).

use super::render;
use crate::Tables;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use outbox_core::{MessageId, OutboxMessage, Result, Status};
use sqlx::mysql::{MySql, MySqlConnection};
use sqlx::{QueryBuilder, Row};

use super::{begin_read_committed, begin_read_committed_with, decode_message, in_list, MESSAGE_COLUMNS};
use crate::common::{decode_rows, release_leases, FailSql, Poison};
use crate::error::db;
use crate::outbox::Outbox;
use crate::relay::{runs, settle_isolated, SettleWrites};
use crate::relay::{
    serve, ClaimMode, Claimed, DeliveryState, Hold, Job, Keeper, KeeperSql, Listening, SettleReport,
    Settlement, Wakeups,
};
use crate::signal::CommitSignal;

/// At most this many messages in a locked claim's settlement written in fewer round trips on
/// MySQL/MariaDB (the `UPDATE` with the reset of the idle bound, its ids written into the
/// statement as literals): MySQL parses and optimises a statement on every run either way, so
/// the literals cost it nothing a prepared statement would save, and the round trips saved are
/// on the way of the next message (docs/benchmarks.md, "A claim and a settlement of one round
/// trip each"). PostgreSQL's settlement stays prepared: its plan is kept per connection, and
/// one planned on every run cost more than the round trip ("Tried and not kept: the settlement
/// with its COMMIT").
const ONE_TRIP_SETTLEMENT: usize = 64;

/// Step 1: `(id, source, key, due)` of the window (`sending`, `pending`, `?` rows each) and of
/// the first due rows without a key (`?` rows), `due` being `next_attempt_at` in microseconds
/// (an integer: a zero date a permissive `sql_mode` let in reads as `NULL`, not as an error).
/// Each part reads one index range in index order.
const CANDIDATES: &str = "\
(SELECT id, 1 AS src, msg_key, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', next_attempt_at) AS due FROM outbox_message
 WHERE status = 'sending' AND next_attempt_at <= UTC_TIMESTAMP(6) ORDER BY next_attempt_at, id LIMIT ?)
UNION ALL
(SELECT id, 2 AS src, msg_key, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', next_attempt_at) AS due FROM outbox_message
 WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6) ORDER BY next_attempt_at, id LIMIT ?)
UNION ALL
(SELECT id, 3 AS src, msg_key, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', next_attempt_at) AS due FROM outbox_message
 WHERE msg_key IS NULL AND status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6) ORDER BY id LIMIT ?)";

/// Step 3: the oldest open message of every key (loose index scan on `(open_key, id)`), with
/// its key (remembered for the next walk: [`HeadMemo`](crate::relay::HeadMemo)).
///
/// From the remembered heads instead ([`walk_heads`]): a `UNION ALL` of one probe per key,
/// `open_key = ? AND id >= ? ORDER BY id LIMIT 1` from the key's last known head, which reads one
/// or two index entries instead of stepping over the entries of the key's sent messages that purge
/// has not removed yet.
const HEADS: &str =
    "SELECT open_key, MIN(id) FROM outbox_message WHERE open_key IS NOT NULL GROUP BY open_key";

/// Per-key order: a keyed message is claimable only as the head of its key (no older open
/// message with the same key), so at most one message per key is in flight cluster-wide.
///
/// One probe of `(open_key, id)` that reads ONE index entry: the oldest open id of the key, in
/// index order (`LIMIT 1`), which is not older than the row (or there is none). Written as
/// `NOT EXISTS (... o.open_key = m.msg_key AND o.id < m.id)`, MariaDB probed it by `ref` on
/// `open_key` alone and filtered `o.id < m.id` row by row, so each head read every open entry of
/// its key: with 10^6 due rows, the locking step's read of a 1,000-row window took 72-84 ms on
/// 1,000 keys and 76-161 ms on 10 hot keys; this form takes 7-9 ms and 1.8 ms, and returns the
/// same rows (MariaDB 10.11, `SHOW PROFILES`).
const NOT_BLOCKED: &str = "(m.msg_key IS NULL OR COALESCE((
        SELECT o.id FROM outbox_message o WHERE o.open_key = m.msg_key ORDER BY o.id LIMIT 1), m.id) >= m.id)";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Steps 2 and 3: locks the candidates that are still due and head their key, in due order.
///
/// With `exact`, only the rows taken are locked: InnoDB locks every row a locking read with
/// `ORDER BY ... LIMIT` examines, including those the `LIMIT` then drops, and keeps those locks
/// until the transaction ends. A lease claim commits at once so that does not matter; a locked
/// claim holds its transaction through the publish and would keep other relays off rows it
/// never took. So the choice is made by a plain read, and only the chosen rows are locked (by
/// primary key, re-checked; a row another relay locked meanwhile is skipped), a chunk at a time
/// until `limit` are held. With one chunk only, the second batch in flight took nothing while
/// the first held the window's first heads, and then walked every key's head for nothing: at
/// 10^6 rows on 1,000 keys that walk (through index entries purge had not removed yet) was 95%
/// of the database's time.
async fn lock_heads(
    tx: &mut sqlx::Transaction<'static, MySql>,
    tables: &Tables,
    ids: &HashSet<i64>,
    limit: usize,
    exact: bool,
) -> Result<(Vec<OutboxMessage>, Vec<Poison>)> {
    let claimable = |qb: &mut QueryBuilder<'_, MySql>| {
        qb.push(" AND m.status IN ('pending', 'sending') AND m.next_attempt_at <= UTC_TIMESTAMP(6) AND ");
        qb.push(render(tables, NOT_BLOCKED));
    };
    let cols = MESSAGE_COLUMNS.replace("CAST(headers", "CAST(m.headers");
    let lock = |chosen: &[i64], limit: Option<usize>| {
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, &format!("SELECT {cols} FROM outbox_message m WHERE m.id IN ")).into_owned(),
        );
        in_list(&mut qb, chosen.iter().copied());
        claimable(&mut qb);
        if let Some(limit) = limit {
            qb.push(" ORDER BY m.next_attempt_at, m.id LIMIT ");
            qb.push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        qb.push(" FOR UPDATE SKIP LOCKED");
        qb
    };
    let all: Vec<i64> = ids.iter().copied().collect();
    if !exact {
        let rows = lock(&all, Some(limit)).build().fetch_all(&mut **tx).await.map_err(db)?;
        return Ok(decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message));
    }
    // The heads among the candidates, in due order, by a plain read; then locked `limit` at a
    // time until `limit` are held: the first ones may be held by another claim (this relay's
    // other batch in flight, or another relay), whose rows the plain read still sees.
    let mut qb = QueryBuilder::<MySql>::new(
        render(tables, "SELECT m.id FROM outbox_message m WHERE m.id IN ").into_owned(),
    );
    in_list(&mut qb, all.iter().copied());
    claimable(&mut qb);
    qb.push(" ORDER BY m.next_attempt_at, m.id");
    let chosen: Vec<i64> = qb.build_query_scalar::<i64>().fetch_all(&mut **tx).await.map_err(db)?;
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let mut rest = chosen.as_slice();
    while !rest.is_empty() && good.len() + bad.len() < limit {
        let (chunk, more) = rest.split_at(rest.len().min(limit - good.len() - bad.len()));
        rest = more;
        let rows = lock(chunk, None).build().fetch_all(&mut **tx).await.map_err(db)?;
        let (g, b) = decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message);
        good.extend(g);
        bad.extend(b);
    }
    Ok((good, bad))
}

/// Steps 2 and 3 of a locked claim, lock first: the candidates (`probe`, in due order) are
/// locked `limit` at a time by primary key with `SKIP LOCKED` (re-checked as still due), and
/// only the keyed rows this transaction now holds are probed for being their key's head
/// ([`NOT_BLOCKED`], a plain read); the heads and keyless rows are kept, until `limit` are
/// kept or the candidates run out. A batch in flight (this relay's other batch, or another
/// relay's) costs the claim one skipped lock per row instead of a head probe: the probes
/// read the open-key index and were most of the step with 1,000 keys, where half the window
/// is in flight. Only the rows taken are locked by the locking reads (no `ORDER BY ... LIMIT`
/// on them: see [`lock_heads`]). A locked row that turns out not to head its key stays locked,
/// untouched, until the claim's transaction ends; nobody could claim it meanwhile anyway. An
/// unreadable row is failed only if it heads its key (as [`lock_heads`] does).
async fn lock_first(
    tx: &mut sqlx::Transaction<'static, MySql>,
    tables: &Tables,
    probe: &[Candidate],
    limit: usize,
) -> Result<(Vec<OutboxMessage>, Vec<Poison>)> {
    let cols = MESSAGE_COLUMNS.replace("CAST(headers", "CAST(m.headers");
    let (mut good, mut bad): (Vec<OutboxMessage>, Vec<Poison>) = (Vec::new(), Vec::new());
    let mut rest = probe;
    while !rest.is_empty() && good.len() + bad.len() < limit {
        let (chunk, more) = rest.split_at(rest.len().min(limit - good.len() - bad.len()));
        rest = more;
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, &format!("SELECT {cols} FROM outbox_message m WHERE m.id IN ")).into_owned(),
        );
        in_list(&mut qb, chunk.iter().map(|c| c.0));
        qb.push(" AND m.status IN ('pending', 'sending') AND m.next_attempt_at <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED");
        let rows = qb.build().fetch_all(&mut **tx).await.map_err(db)?;
        let (g, b) = decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message);
        let keyed: HashSet<i64> = chunk.iter().filter(|c| c.2.is_some()).map(|c| c.0).collect();
        let locked_keyed: Vec<i64> =
            g.iter().map(|m| m.id.0).chain(b.iter().map(|p| p.id)).filter(|id| keyed.contains(id)).collect();
        let heads: HashSet<i64> = if locked_keyed.is_empty() {
            HashSet::new()
        } else {
            let mut qb = QueryBuilder::<MySql>::new(
                render(tables, "SELECT m.id FROM outbox_message m WHERE m.id IN ").into_owned(),
            );
            in_list(&mut qb, locked_keyed.iter().copied());
            qb.push(" AND ");
            qb.push(render(tables, NOT_BLOCKED));
            qb.build_query_scalar::<i64>().fetch_all(&mut **tx).await.map_err(db)?.into_iter().collect()
        };
        let takes = |id: i64| !keyed.contains(&id) || heads.contains(&id);
        good.extend(g.into_iter().filter(|m| takes(m.id.0)));
        bad.extend(b.into_iter().filter(|p| takes(p.id)));
    }
    Ok((good, bad))
}

/// The runs behind the heads of `plan` (see `relay::runs`), locked in the claim's
/// transaction: one statement reads the open messages after every head (one sub-select per
/// key over `(open_key, id)`), a second locks the chosen ones by primary key.
async fn lock_runs(
    tx: &mut sqlx::Transaction<'static, MySql>,
    tables: &Tables,
    plan: &runs::RunPlan,
) -> Result<Vec<OutboxMessage>> {
    let per_key = i64::try_from(plan.per_key).unwrap_or(i64::MAX);
    let mut qb = QueryBuilder::<MySql>::new("");
    for (i, (key, head)) in plan.heads.iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("(SELECT id, ");
        qb.push_bind(*head);
        qb.push(render(
            tables,
            " AS head, IF(status IN ('pending', 'sending') AND next_attempt_at <= UTC_TIMESTAMP(6), 1, 0) AS due \
             FROM outbox_message WHERE open_key = ",
        ));
        qb.push_bind(key.clone());
        qb.push(" AND id > ");
        qb.push_bind(*head);
        qb.push(" ORDER BY id LIMIT ");
        qb.push_bind(per_key);
        qb.push(")");
    }
    let found: Vec<(i64, i64, i64)> = qb.build_query_as().fetch_all(&mut **tx).await.map_err(db)?;
    let mut followers: Vec<runs::Follower> =
        found.into_iter().map(|(id, head, due)| runs::Follower { id, head, due: due != 0 }).collect();
    runs::take(&mut followers, plan.per_key, |wanted| async move {
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, &format!("SELECT {MESSAGE_COLUMNS} FROM outbox_message WHERE id IN ")).into_owned(),
        );
        in_list(&mut qb, wanted.iter().copied());
        qb.push(
            " AND status IN ('pending', 'sending') AND next_attempt_at <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED",
        );
        let rows = qb.build().fetch_all(&mut **tx).await.map_err(db)?;
        Ok(decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message).0)
    })
    .await
}

/// A row of [`CANDIDATES`]: id, source, key (as bytes: the `UNION` gives the column as
/// `VARBINARY` on MariaDB), due time in microseconds.
type Candidate = (i64, i64, Option<Vec<u8>>, Option<i64>);

/// The candidates worth a head probe, in due order (`next_attempt_at`, then id): every row
/// without a key, and of each key only its oldest candidate. A later candidate of the same key
/// has an older open message (that one) and cannot head its key, so probing it could only say
/// no: with one hot key, a 1,000-row window cost 1,000 probes of the open-key index for one
/// head (1,831 msg/s on MariaDB with one key). Keys are compared byte for byte: where the
/// column's collation makes two spellings one key, both stay candidates and the SQL probe
/// still orders them, so this only ever drops rows the probe would refuse. A row found twice
/// (an expired lease is both `sending` and in no other part; a keyless `pending` row is in two
/// parts) is kept once.
fn first_of_each_key(found: Vec<Candidate>) -> Vec<Candidate> {
    let mut first: std::collections::HashMap<Vec<u8>, Candidate> = std::collections::HashMap::new();
    let mut seen = HashSet::new();
    let mut probe = Vec::new();
    for c in found {
        if !seen.insert(c.0) {
            continue;
        }
        match &c.2 {
            None => probe.push(c),
            Some(key) => {
                let oldest = first.entry(key.clone()).or_insert_with(|| c.clone());
                if c.0 < oldest.0 {
                    *oldest = c;
                }
            }
        }
    }
    probe.extend(first.into_values());
    probe.sort_by_key(|c| (c.3.unwrap_or(i64::MIN), c.0));
    probe
}

/// Steps 1 to 3 in a new READ COMMITTED transaction: the claimable messages, locked, in id
/// order, with the transaction that holds them; with `run` > 1, each keyed head's run behind it.
///
/// `committed` (the ids this process has just committed, a hint) are tried first when they fit
/// in the batch: locked and probed as step 2 does, without step 1's window (one round trip
/// fewer between a commit and its publication). What that takes is the batch, which then says
/// messages may be left behind (it looked at nothing else); when it takes nothing, the window
/// is claimed in the same transaction.
/// A look's state of a message: 2 `pending` and due by the statement's clock, 1 `pending` and
/// not due yet, 0 any other status or unless `$ours` holds (the claim loop's). One expression
/// for every look (see PostgreSQL's `look_state!`).
macro_rules! look_state {
    ($ours:literal) => {
        concat!(
            "IF(status = 'pending'",
            $ours,
            ", IF(next_attempt_at <= UTC_TIMESTAMP(6), 2, 1), 0) AS state"
        )
    };
}

/// [`Claims::newer_than`](crate::relay::Claims::newer_than) from an id: the next messages by
/// the primary key, each with its state (2 `pending` and due, 1 `pending` and not due by the
/// statement's clock, 0 any other status), whatever the status (see PostgreSQL's
/// `LOOK_NEWER`); the ids looked at again are read by `LOOK_AGAIN`.
const LOOK_NEWER: &str = concat!(
    "SELECT id, ",
    look_state!(""),
    " FROM outbox_message
WHERE id > ? ORDER BY id LIMIT ?"
);
/// [`Claims::newer_than`](crate::relay::Claims::newer_than) without a start: the newest
/// messages (`LIMIT ?`), read backwards by the primary key, each with its state as in
/// `LOOK_NEWER`, a message created more than the first `?` microseconds ago
/// (`crate::relay::LOOK_BACK`) counting as any other status (0): the claim loop's.
const LOOK_FROM_END: &str = concat!(
    "SELECT id, ",
    look_state!(" AND created_at >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"),
    " FROM outbox_message
ORDER BY id DESC LIMIT ?"
);
/// The ids a look reads again, by the primary key (an `IN` list follows).
const LOOK_AGAIN: &str = concat!("SELECT id, ", look_state!(""), " FROM outbox_message WHERE id IN ");

async fn lock_candidates(
    outbox: &Outbox<MySql>,
    committed: &[MessageId],
    limit: usize,
    run: usize,
    locked_by: Option<&str>,
    bound: Option<Duration>,
    only_ids: bool,
) -> Result<Candidates> {
    // A locked claim (of this owner) locks first and probes exactly; a lease claim need not.
    let exact = locked_by.is_some();
    let tables = outbox.tables();
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut tx = match bound {
        Some(lease) => begin_bounded(outbox, lease).await?,
        None => begin_read_committed(outbox).await?,
    };
    // What this process's other locked claims hold (none in lease mode): left out of the
    // candidates instead of refused one by one by `SKIP LOCKED` (see `crate::relay::InFlight`).
    let (held, committed) = outbox.in_flight.leave_out(committed);
    // The window reaches as far past the rows held as it does past one batch in flight.
    let window = crate::relay::held_window(limit, limit.saturating_mul(2).max(256), held.len());
    if !committed.is_empty() && committed.len() <= limit {
        // The key is not known yet: every locked row is probed (a keyless one passes).
        let probe: Vec<Candidate> = committed.iter().map(|id| (id.0, 2, Some(Vec::new()), None)).collect();
        let (mut kept, poison) = lock_first(&mut tx, tables, &probe, limit).await?;
        if !kept.is_empty() || !poison.is_empty() {
            kept.sort_by_key(|m| m.id);
            if !poison.is_empty() {
                FAIL.fail_poison(&mut tx, tables, "", &poison).await;
            }
            return Ok((tx, kept, poison, true, Runs::default()));
        }
    }
    if only_ids {
        return Ok((tx, Vec::new(), Vec::new(), true, Runs::default()));
    }
    let found: Vec<Candidate> = sqlx::query_as(&render(tables, CANDIDATES))
        .bind(as_i64(window))
        .bind(as_i64(window))
        .bind(as_i64(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    let window_full = [1, 2].iter().any(|src| found.iter().filter(|c| c.1 == *src).count() >= window);
    let ids: HashSet<i64> = found.iter().map(|c| c.0).collect();
    let mut probe = first_of_each_key(found);
    // A run could follow a head only if some due row does not head its key; when the window
    // held every due row (not full) and each key once, none does, and the followers' read is
    // skipped (a round trip on every claim of a trickle).
    let followers_possible = window_full || ids.len() > probe.len();
    probe.retain(|c| !held.contains(&c.0));
    let (mut kept, mut poison) = if probe.is_empty() {
        (Vec::new(), Vec::new())
    } else if exact {
        lock_first(&mut tx, tables, &probe, limit).await?
    } else {
        let probe: HashSet<i64> = probe.iter().map(|c| c.0).collect();
        lock_heads(&mut tx, tables, &probe, limit, exact).await?
    };
    // Only when the window is full and did not hold enough heads (rows held back behind their
    // key's head, e.g. a hot key's backlog): the heads of all keys, minus what was seen.
    if window_full && kept.len() + poison.len() < limit {
        let heads = walk_heads(&mut tx, outbox).await?;
        let more: HashSet<i64> =
            heads.into_iter().filter(|id| !ids.contains(id) && !held.contains(id)).collect();
        if !more.is_empty() {
            let (extra, bad) =
                lock_heads(&mut tx, tables, &more, limit - kept.len() - poison.len(), exact).await?;
            kept.extend(extra);
            poison.extend(bad);
        }
    }
    let mut cut = HashSet::new();
    if let Some(plan) =
        runs::plan(&kept, limit.saturating_sub(poison.len()), run).filter(|_| followers_possible)
    {
        let more = lock_runs(&mut tx, tables, &plan).await?;
        cut = runs::cut_at_length(&plan, &more);
        kept.extend(more);
    }
    // A locked claim continues the runs its owner's batches in flight hold, with the room left
    // (see `runs::continuing`; PostgreSQL's `claim_locked` does the same).
    let mut after = Vec::new();
    let room = limit.saturating_sub(kept.len() + poison.len());
    if let Some(owner) = locked_by.filter(|_| room > 0 && run > 1) {
        let taken: HashSet<&str> = kept.iter().filter_map(|m| m.key.as_deref()).collect();
        let held_runs = outbox.in_flight.runs_held(owner, &taken);
        if let Some((plan, runs_held)) = runs::continuing(held_runs, room, run) {
            let more = lock_runs(&mut tx, tables, &plan).await?;
            let keys: HashSet<&str> = more.iter().filter_map(|m| m.key.as_deref()).collect();
            after = runs_held.iter().filter(|r| keys.contains(r.key.as_str())).map(|r| r.after()).collect();
            cut.extend(runs::cut_at_length(&plan, &more));
            kept.extend(more);
        }
    }
    // Nothing left behind when the window held every due row, each heading its key, and the
    // batch was not filled (see `Claimed::left_behind`).
    let left_behind = followers_possible || kept.len() + poison.len() >= limit;
    kept.sort_by_key(|m| m.id);
    if !poison.is_empty() {
        // The rows are locked by this transaction (`pending`): fail them in it.
        FAIL.fail_poison(&mut tx, tables, "", &poison).await;
    }
    Ok((tx, kept, poison, left_behind, Runs { cut, after }))
}

/// The oldest open message of every open key (step 3): a full walk, or one from each key's
/// last known head when the memo says so ([`HeadMemo`](crate::relay::HeadMemo)). A key whose
/// name is not valid text is left out of the memo (its head is still returned).
async fn walk_heads(tx: &mut sqlx::Transaction<'static, MySql>, outbox: &Outbox<MySql>) -> Result<Vec<i64>> {
    let tables = outbox.tables();
    let memo = &outbox.heads;
    let started = std::time::Instant::now();
    let from = match memo.next(started) {
        crate::relay::Walk::Full => None,
        crate::relay::Walk::From(from) => Some(from),
    };
    let rows = match &from {
        None => sqlx::query(&render(tables, HEADS)).fetch_all(&mut **tx).await,
        Some(from) => {
            let mut qb = QueryBuilder::<MySql>::new("");
            for (i, (key, head)) in from.iter().enumerate() {
                if i > 0 {
                    qb.push(" UNION ALL ");
                }
                // One probe per key, from its last known head (see `HEADS`).
                qb.push(render(tables, "(SELECT open_key, id FROM outbox_message WHERE open_key = "));
                qb.push_bind(key.clone());
                qb.push(" AND id >= ");
                qb.push_bind(*head);
                qb.push(" ORDER BY id LIMIT 1)");
            }
            // Not kept in the connection's statement cache: its text changes with the number of keys.
            qb.build().persistent(false).fetch_all(&mut **tx).await
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            memo.memo.forget();
            return Err(db(e));
        }
    };
    let mut heads = Vec::with_capacity(rows.len());
    let mut named = Vec::with_capacity(rows.len());
    for row in &rows {
        let Ok(id) = row.try_get::<i64, _>(1) else { continue };
        heads.push(id);
        // Text, or bytes where a `UNION` gives the column as `VARBINARY` (MariaDB).
        let key = row
            .try_get::<String, _>(0)
            .ok()
            .or_else(|| row.try_get::<Vec<u8>, _>(0).ok().and_then(|b| String::from_utf8(b).ok()));
        if let Some(key) = key {
            named.push((key, id));
        }
    }
    match from {
        None => memo.walked_full(named, started, std::time::Instant::now()),
        Some(_) => memo.walked_from(named),
    }
    Ok(heads)
}

/// What [`lock_candidates`] found: the claim's transaction, the messages locked, the rows that
/// could not be read, and whether due rows were left behind (`Claimed::left_behind`).
type Candidates = (sqlx::Transaction<'static, MySql>, Vec<OutboxMessage>, Vec<Poison>, bool, Runs);

/// A locked claim's runs across claims: the keys whose run stopped at the run's length, and the
/// runs of batches in flight it continued (see `runs::continuing`).
#[derive(Default)]
struct Runs {
    cut: HashSet<String>,
    after: Vec<crate::relay::RunAfter>,
}

/// One message `failed` with its reason, for a row this relay holds (`pending` under its lock,
/// `sending` under its lease): a row that cannot be read, or whose outcome could not be
/// written. Times a permissive `sql_mode` let in as zero dates (before schema version 5
/// refused them) are repaired so that the row passes the table's checks again.
const FAIL_ONE: &str = "UPDATE outbox_message SET status = 'failed', attempts = attempts + 1, last_error = ?, \
     next_attempt_at = UTC_TIMESTAMP(6), last_attempt_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_until = NULL, \
     updated_at = UTC_TIMESTAMP(6), \
     created_at = IF(created_at >= '1970-01-01', created_at, UTC_TIMESTAMP(6)) \
     WHERE id = ? AND (status = 'pending' OR (status = 'sending' AND lease_owner = ?))";

const FAIL: FailSql<MySql> = FailSql::new(FAIL_ONE);

/// [`write_settlement`] and [`FAIL_ONE`] for [`settle_isolated`].
struct MySqlWrites<'a> {
    tables: &'a Tables,
    owner: &'a str,
    owned: &'a HashSet<i64>,
}

impl SettleWrites<MySql> for MySqlWrites<'_> {
    async fn write(&self, conn: &mut MySqlConnection, s: &Settlement) -> Result<SettleReport> {
        write_settlement(conn, self.tables, self.owner, s, self.owned).await
    }

    async fn fail(&self, conn: &mut MySqlConnection, id: i64, reason: &str) -> Result<u64> {
        FAIL.fail_one(conn, self.tables, self.owner, id, reason).await
    }
}

/// The sent mark, up to its owner (`updated_by = `), the ids after it.
const MARK_SENT: &str = "UPDATE outbox_message SET status = 'sent', lease_owner = NULL, lease_until = NULL, \
     next_attempt_at = UTC_TIMESTAMP(6), last_attempt_at = UTC_TIMESTAMP(6), \
     updated_at = UTC_TIMESTAMP(6), updated_by = ";

/// Writes a settlement for the messages in `owned` (the caller holds their row locks) inside
/// `tx`.
async fn write_settlement(
    conn: &mut MySqlConnection,
    tables: &Tables,
    owner: &str,
    s: &Settlement,
    owned: &HashSet<i64>,
) -> Result<SettleReport> {
    let all = s.ids();
    for d in s.deliveries.iter().filter(|d| owned.contains(&d.message_id.0)) {
        let retry_us = ms(d.retry_in) * 1000;
        // NULL when the destination needs no ACK: the deadline is NULL too.
        let ack_us = d.ack_timeout.map(|t| ms(t) * 1000);
        sqlx::query(
            &render(tables, "INSERT INTO outbox_delivery (message_id, destination, status, attempts, next_attempt_at, \
             last_attempt_at, last_error, ack_deadline, updated_at) \
             VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                     IF(?, UTC_TIMESTAMP(6), NULL), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                     UTC_TIMESTAMP(6)) \
             ON DUPLICATE KEY UPDATE ack_deadline = IF(status = 'acked', NULL, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
             status = IF(status = 'acked', status, ?), attempts = ?, \
             next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
             last_attempt_at = IF(?, UTC_TIMESTAMP(6), last_attempt_at), \
             last_error = COALESCE(?, last_error), updated_at = UTC_TIMESTAMP(6)",
        ))
        .bind(d.message_id.0)
        .bind(&d.destination)
        .bind(d.status.as_str())
        .bind(d.attempts)
        .bind(retry_us)
        .bind(d.attempted)
        .bind(d.last_error.as_deref())
        .bind(ack_us)
        // The same values again for the update: `VALUES(col)` there is deprecated since
        // MySQL 8.0.20, and the row alias that replaces it is MySQL-only (not MariaDB).
        // The assignments run in order: `ack_deadline` reads `status` before it changes.
        .bind(ack_us)
        .bind(d.status.as_str())
        .bind(d.attempts)
        .bind(retry_us)
        .bind(d.attempted)
        .bind(d.last_error.as_deref())
        .execute(&mut *conn)
        .await
        .map_err(db)?;
    }
    let sent: Vec<i64> = s.sent.iter().map(|i| i.0).filter(|i| owned.contains(i)).collect();
    if !sent.is_empty() {
        let mut qb = QueryBuilder::<MySql>::new(render(tables, MARK_SENT).into_owned());
        qb.push_bind(owner.to_owned());
        qb.push(" WHERE id IN ");
        in_list(&mut qb, sent);
        qb.build().execute(&mut *conn).await.map_err(db)?;
    }
    for w in s.messages.iter().filter(|w| owned.contains(&w.id.0)) {
        sqlx::query(&render(
            tables,
            "UPDATE outbox_message SET status = ?, attempts = ?, \
             next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
             last_error = COALESCE(?, last_error), \
             last_attempt_at = IF(?, UTC_TIMESTAMP(6), last_attempt_at), \
             lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6), updated_by = ? \
             WHERE id = ?",
        ))
        .bind(w.status.as_str())
        .bind(w.attempts)
        .bind(ms(w.retry_in) * 1000)
        .bind(w.last_error.as_deref())
        .bind(w.attempted)
        .bind(owner)
        .bind(w.id.0)
        .execute(&mut *conn)
        .await
        .map_err(db)?;
    }
    Ok(SettleReport::of(&all, owned))
}

/// The per-destination rows of these messages.
async fn read_deliveries<'e, E: sqlx::Executor<'e, Database = MySql>>(
    e: E,
    tables: &Tables,
    ids: &[MessageId],
) -> Result<Vec<DeliveryState>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut qb = QueryBuilder::<MySql>::new(
        render(
            tables,
            "SELECT message_id, destination, status, attempts, last_error, \
         GREATEST(0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), next_attempt_at)) DIV 1000 AS wait_ms \
         FROM outbox_delivery WHERE message_id IN ",
        )
        .into_owned(),
    );
    in_list(&mut qb, ids.iter().map(|i| i.0));
    let rows = qb.build().fetch_all(e).await.map_err(db)?;
    rows.iter().map(crate::common::delivery_state).collect()
}

/// Every message an owner leases back to `pending`, due now; binds the owner twice (updated by,
/// lease owner).
const RELEASE: &str =
    "UPDATE outbox_message SET status = 'pending', lease_owner = NULL, lease_until = NULL, \
     next_attempt_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6), updated_by = ? \
     WHERE status = 'sending' AND lease_owner = ?";

/// Appends `lease_until` and `next_attempt_at` both `lease` from now (a leased row is due again
/// when its lease expires).
fn push_lease(qb: &mut QueryBuilder<'_, MySql>, lease: Duration) {
    qb.push("lease_until = UTC_TIMESTAMP(6) + INTERVAL ");
    qb.push_bind(ms(lease) * 1000);
    qb.push(" MICROSECOND, next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ");
    qb.push_bind(ms(lease) * 1000);
    qb.push(" MICROSECOND");
}

/// The row locks of a locked claim on this database.
pub type MySqlLock = crate::relay::RowLock<sqlx::Transaction<'static, MySql>>;

crate::relay::row_lock_claims!(MySql, MySqlLock);

impl Outbox<MySql> {
    async fn extend_leases(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
        let tables = self.tables();
        if ids.is_empty() {
            return Ok(0);
        }
        let mut qb = QueryBuilder::<MySql>::new(render(tables, "UPDATE outbox_message SET ").into_owned());
        push_lease(&mut qb, lease);
        qb.push(" WHERE status = 'sending' AND lease_owner = ");
        qb.push_bind(owner.to_owned());
        qb.push(" AND id IN ");
        in_list(&mut qb, ids.iter().map(|i| i.0));
        Ok(qb.build().execute(self.pool()).await.map_err(db)?.rows_affected())
    }

    async fn release_leases(&self, owner: &str) -> Result<u64> {
        release_leases(self, RELEASE, 2, owner).await
    }
}

impl Wakeups for Outbox<MySql> {
    fn spare_connection(&self) -> bool {
        Outbox::spare_connection(self)
    }

    /// A connection is a server thread (from its thread cache when one is free).
    fn cheap_connections(&self) -> bool {
        true
    }

    async fn shed_connections(&self, on: bool) {
        Outbox::shed_connections(self, on).await;
    }

    async fn close_down_to(&self, keep: u32, within: Duration) -> bool {
        Outbox::close_down_to(self, keep, within).await
    }

    async fn room_to_claim(&self, keep: u32, within: Duration) -> bool {
        Outbox::room_to_claim(self, keep, within).await
    }

    async fn set_idle(&self, owner: &str, idle: bool, ttl: Duration) -> Result<()> {
        let tables = self.tables();
        if idle {
            sqlx::query(&render(tables, IDLE_ON))
                .bind(owner)
                .bind(ms(ttl))
                .execute(self.pool())
                .await
                .map_err(db)?;
        } else {
            sqlx::query(&render(tables, IDLE_OFF)).bind(owner).execute(self.pool()).await.map_err(db)?;
        }
        Ok(())
    }

    /// No push channel on MySQL; the keeper holds one pooled connection for the idle relay's
    /// statements, so the rest of the pool closes while the store has nothing to do.
    async fn listen(&self, _signal: CommitSignal) -> Result<Option<Listening>> {
        use crate::admin::AdminSql;
        let tables = self.tables();
        let sql = KeeperSql {
            peek: render(tables, IDLE_PROBE).into_owned(),
            tick: None,
            beat: render(tables, MySql::BEAT).into_owned(),
            sweep: render(
                tables,
                "DELETE FROM outbox_relay WHERE seen_at < UTC_TIMESTAMP(6) - INTERVAL 1 DAY",
            )
            .into_owned(),
            overdue: render(tables, MySql::OVERDUE_MS).into_owned(),
            paused: render(tables, crate::relay::PAUSED).into_owned(),
            idle_on: render(tables, IDLE_ON).into_owned(),
            idle_off: render(tables, IDLE_OFF).into_owned(),
        };
        let (keeper, mut jobs) = Keeper::channel();
        let pool = self.pool().clone();
        let tables = tables.clone();
        let task = tokio::spawn(async move {
            // Connected on the first job, kept while it works; a failed job drops it (the
            // next one connects again).
            let mut conn: Option<sqlx::pool::PoolConnection<MySql>> = None;
            while let Some(job) = jobs.recv().await {
                if conn.is_none() {
                    match pool.acquire().await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            job.fail(db(e));
                            continue;
                        }
                    }
                }
                if let Some(c) = conn.as_mut() {
                    let ok = match job {
                        // The lane's look (a relay of a crowded budget: its pool keeps no
                        // connection between turns; this one is held).
                        Job::Look { after, again, limit, reply } => {
                            let seen = look_newer_on(c, &tables, after, &again, limit).await;
                            let ok = seen.is_ok();
                            let _ = reply.send(seen);
                            ok
                        }
                        job => serve(&mut **c, job, &sql).await,
                    };
                    if !ok {
                        conn = None;
                    }
                }
            }
        });
        Ok(Some(Listening::new(task, Some(keeper)).without_push()))
    }
}

/// [`Claims::newer_than`](crate::relay::Claims::newer_than) on `conn` (a pooled connection,
/// or the keeper's for its looks): one read of the primary key from `after`, and one of the
/// ids read again.
async fn look_newer_on(
    conn: &mut MySqlConnection,
    tables: &Tables,
    after: Option<MessageId>,
    again: &[MessageId],
    limit: usize,
) -> Result<crate::relay::Newer> {
    let state = |s: i64| i16::try_from(s).unwrap_or(0);
    let Some(after) = after else {
        let rows: Vec<(i64, i64)> = sqlx::query_as(&render(tables, LOOK_FROM_END))
            .bind(i64::try_from(crate::relay::LOOK_BACK.as_micros()).unwrap_or(i64::MAX))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *conn)
            .await
            .map_err(db)?;
        let rows: Vec<(i64, i16)> = rows.into_iter().map(|(id, s)| (id, state(s))).collect();
        return Ok(crate::relay::newest_of(&rows));
    };
    let rows: Vec<(i64, i64)> = sqlx::query_as(&render(tables, LOOK_NEWER))
        .bind(after.0)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await
        .map_err(db)?;
    let mut rows: Vec<(i64, i16)> = rows.into_iter().map(|(id, s)| (id, state(s))).collect();
    let again: Vec<i64> = again.iter().map(|id| id.0).filter(|id| *id <= after.0).collect();
    if !again.is_empty() {
        let mut qb = QueryBuilder::<MySql>::new(render(tables, LOOK_AGAIN).into_owned());
        in_list(&mut qb, again.iter().copied());
        let more: Vec<(i64, i64)> = qb.build_query_as().fetch_all(&mut *conn).await.map_err(db)?;
        rows.extend(more.into_iter().map(|(id, s)| (id, state(s))));
    }
    Ok(crate::relay::newer_of(after, &rows))
}

/// Writes a relay's idle row (`owner`, ttl in ms).
const IDLE_ON: &str = "REPLACE INTO outbox_relay_idle (owner, until) \
    VALUES (?, UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND)";

/// Removes a relay's idle row (`owner`).
const IDLE_OFF: &str = "DELETE FROM outbox_relay_idle WHERE owner = ?";

/// Whether a claim could take something: a due pending message or an expired lease (the
/// `(status, next_attempt_at)` index).
const IDLE_PROBE: &str = "SELECT CAST(EXISTS (SELECT 1 FROM outbox_message \
    WHERE status IN ('pending', 'sending') AND next_attempt_at <= UTC_TIMESTAMP(6)) AS SIGNED)";

impl Outbox<MySql> {
    async fn claim_leased(
        &self,
        owner: &str,
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxMessage>> {
        let tables = self.tables();
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (mut tx, mut kept, _poison, _, _) =
            lock_candidates(self, &[], limit, run, None, None, false).await?;
        if kept.is_empty() {
            tx.commit().await.map_err(db)?;
            return Ok(kept);
        }
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, "UPDATE outbox_message SET status = 'sending', lease_owner = ").into_owned(),
        );
        qb.push_bind(owner.to_owned());
        qb.push(", ");
        push_lease(&mut qb, lease);
        qb.push(", updated_at = UTC_TIMESTAMP(6), updated_by = ");
        qb.push_bind(owner.to_owned());
        qb.push(" WHERE id IN ");
        in_list(&mut qb, kept.iter().map(|m| m.id.0));
        qb.build().execute(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)?;
        for m in &mut kept {
            m.status = Status::Sending;
            m.lease_owner = Some(owner.to_owned());
        }
        Ok(kept)
    }

    /// [`Claims::newer_than`]: one read of the primary key from `after`.
    async fn look_newer(
        &self,
        after: Option<MessageId>,
        again: &[MessageId],
        limit: usize,
    ) -> Result<crate::relay::Newer> {
        let mut conn = self.pool().acquire().await.map_err(db)?;
        look_newer_on(&mut conn, self.tables(), after, again, limit).await
    }

    async fn claim_locked(
        &self,
        owner: &str,
        committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
        only_ids: bool,
    ) -> Result<Claimed<MySqlLock>> {
        if limit == 0 {
            return Ok(Claimed::nothing(true));
        }
        if only_ids {
            // A claim by id alone (`Claims::claim_ids`): nothing to do without ids it may take.
            let (_, free) = self.in_flight.leave_out(committed);
            if free.is_empty() || free.len() > limit {
                return Ok(Claimed::nothing(true));
            }
        }
        let bounded_in_begin = self.has_idle_transaction_timeout.load(Ordering::Relaxed);
        let bound = bounded_in_begin.then_some(lease);
        let (mut tx, kept, poison, left_behind, runs) =
            lock_candidates(self, committed, limit, run, Some(owner), bound, only_ids).await?;
        if kept.is_empty() && bounded_in_begin {
            // The bound was set in the `BEGIN`'s round trip: back to the server's default for
            // whoever uses the connection next (an error here ends the claim: nothing is held).
            set_idle_bound(self, &mut tx, "DEFAULT").await?;
        }
        if !kept.is_empty() && !bounded_in_begin {
            // A relay that vanishes without closing its connection (its host frozen, the network
            // cut without a reset) loses the claim after `lease`: MariaDB ends a transaction
            // left idle that long. MySQL has no such variable; its `wait_timeout`, which closes
            // a connection idle that long (in a transaction or not), does the same here, and is
            // set back at the settlement. (A claim dropped without settling leaves it on the
            // pooled connection, which the server then closes once idle that long; the pool
            // replaces it.)
            set_idle_bound(self, &mut tx, &lease.as_secs().max(1).to_string()).await?;
        }
        if kept.is_empty() {
            if poison.is_empty() {
                tx.rollback().await.map_err(db)?;
            } else {
                tx.commit().await.map_err(db)?;
            }
            return Ok(Claimed::nothing(left_behind));
        }
        let (lock, told) = crate::relay::RowLock::with_runs(
            tx,
            &kept,
            &runs.cut,
            self.tables(),
            &self.in_flight,
            owner,
            lease,
        );
        let mut claimed = Claimed::locked(kept, lock, left_behind);
        claimed.runs_cut = !runs.cut.is_empty();
        claimed.after = runs.after;
        claimed.told = Some(told);
        Ok(claimed)
    }

    async fn settle_locked(&self, claim: MySqlLock, owner: &str, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables();
        let mut tx = claim.tx;
        let held: HashSet<i64> = claim.ids.iter().map(|i| i.0).collect();
        if let Some(sql) = sent_and_unbound(self, tables, owner, s, &held) {
            match run_text(&mut tx, &sql).await {
                Ok(_) => {
                    tx.commit().await.map_err(db)?;
                    return Ok(SettleReport::of(&s.ids(), &held));
                }
                // The whole transaction is gone with its locks: nothing left to write in.
                Err(e) if rolled_back(&e) => return Err(db(e)),
                // A statement that fails is undone alone and the transaction goes on: written
                // again below, message by message where the batch fails.
                Err(e) => {
                    tracing::debug!(error = %outbox_core::text::bounded_error(&e.to_string()), "a one-trip settlement failed: writing it in savepoints");
                }
            }
        }
        let report = settle_isolated(&mut *tx, &MySqlWrites { tables, owner, owned: &held }, s).await?;
        // Back to the server's default before the connection returns to the pool, where the
        // application's own transactions may use it (MySQL: see `claim_locked`).
        let _ = set_idle_bound(self, &mut tx, "DEFAULT").await;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn settle_leased(&self, owner: &str, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables();
        let all = s.ids();
        if all.is_empty() {
            return Ok(SettleReport::default());
        }
        let mut tx = begin_read_committed(self).await?;
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, "SELECT id FROM outbox_message WHERE status = 'sending' AND lease_owner = ")
                .into_owned(),
        );
        qb.push_bind(owner.to_owned());
        qb.push(" AND id IN ");
        in_list(&mut qb, all.iter().map(|i| i.0));
        qb.push(" FOR UPDATE");
        let owned: HashSet<i64> =
            qb.build_query_scalar::<i64>().fetch_all(&mut *tx).await.map_err(db)?.into_iter().collect();
        let report = settle_isolated(&mut *tx, &MySqlWrites { tables, owner, owned: &owned }, s).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }
}

/// The settlement of a locked claim whose messages were all sent, with the idle bound set back
/// to the server's default, as one text query of two statements (against a savepoint, the
/// update, its release and the reset: four round trips), the `COMMIT` after it: the sent mark
/// with the ids and the owner written in, the owner as a hexadecimal string literal, which reads
/// the same whatever `sql_mode` says of backslashes. `None` when the settlement writes anything
/// else, above [`ONE_TRIP_SETTLEMENT`] messages, or before a claim has learned which variable
/// bounds the idle transaction on this server ([`set_idle_bound`]).
fn sent_and_unbound(
    outbox: &Outbox<MySql>,
    tables: &Tables,
    owner: &str,
    s: &Settlement,
    held: &HashSet<i64>,
) -> Option<String> {
    use std::fmt::Write as _;
    if !s.messages.is_empty() || !s.deliveries.is_empty() {
        return None;
    }
    let sent: Vec<i64> = s.sent.iter().map(|i| i.0).filter(|i| held.contains(i)).collect();
    if sent.is_empty() || sent.len() > ONE_TRIP_SETTLEMENT {
        return None;
    }
    let variable = if outbox.has_idle_transaction_timeout.load(Ordering::Relaxed) {
        "idle_transaction_timeout"
    } else if outbox.no_idle_transaction_timeout.load(Ordering::Relaxed) {
        "wait_timeout"
    } else {
        return None;
    };
    let mut sql = render(tables, MARK_SENT).into_owned();
    sql.push_str("_utf8mb4 X'");
    for b in owner.bytes() {
        let _ = write!(sql, "{b:02x}");
    }
    sql.push_str("' WHERE id IN (");
    for (i, id) in sent.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(sql, "{sep}{id}");
    }
    let _ = write!(sql, "); SET SESSION {variable} = DEFAULT");
    Some(sql)
}

/// Runs `sql` as a text query (several statements, one round trip).
async fn run_text(conn: &mut MySqlConnection, sql: &str) -> sqlx::Result<()> {
    use sqlx::Executor as _;
    conn.execute(sql).await.map(drop)
}

/// A deadlock (1213), or a lock wait timeout (1205, which rolls back the whole transaction where
/// `innodb_rollback_on_timeout` is on): the transaction may be gone with its locks.
fn rolled_back(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1205 | 1213))
}

/// Sets how long this session's transaction may sit idle to `value` (seconds, or `DEFAULT`):
/// MariaDB's `idle_transaction_timeout`, or `wait_timeout` where the server has no such variable
/// (MySQL). Which of the two the server has is learned on the first try and remembered in the
/// outbox, only from the server's "unknown system variable" (any other error is tried again
/// next time).
async fn set_idle_bound(outbox: &Outbox<MySql>, conn: &mut MySqlConnection, value: &str) -> Result<()> {
    let learned_mysql = &outbox.no_idle_transaction_timeout;
    if !learned_mysql.load(Ordering::Relaxed) {
        match sqlx::query(&format!("SET SESSION idle_transaction_timeout = {value}"))
            .execute(&mut *conn)
            .await
        {
            Ok(_) => {
                outbox.has_idle_transaction_timeout.store(true, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) => {
                if unknown_variable(&e) {
                    learned_mysql.store(true, Ordering::Relaxed);
                }
                tracing::debug!(error = %e, "idle_transaction_timeout is not available: wait_timeout instead");
            }
        }
    }
    sqlx::query(&format!("SET SESSION wait_timeout = {value}")).execute(conn).await.map(drop).map_err(db)
}

/// Begins a locked claim's transaction as [`begin_read_committed`] does, with MariaDB's
/// `idle_transaction_timeout` set to the lease in the same round trip (one round trip fewer on
/// the way of every message claimed): used once a claim has seen the server has the variable
/// (`Outbox::has_idle_transaction_timeout`). The settlement, or an empty claim, sets it back.
async fn begin_bounded(outbox: &Outbox<MySql>, lease: Duration) -> Result<sqlx::Transaction<'static, MySql>> {
    let secs = lease.as_secs().max(1);
    begin_read_committed_with(outbox, &format!("SET SESSION idle_transaction_timeout = {secs}; ")).await
}

/// The server's "unknown system variable" (ER_UNKNOWN_SYSTEM_VARIABLE, 1193): MySQL's answer
/// to MariaDB's `idle_transaction_timeout`.
fn unknown_variable(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| d.number() == 1193)
}

#[cfg(test)]
mod tests {
    use super::first_of_each_key;

    #[test]
    fn only_the_oldest_candidate_of_a_key_is_probed_in_due_order() {
        let k = |s: &str| Some(s.as_bytes().to_vec());
        // A hot key's window, a second key, rows without a key (one found twice: it is in the
        // pending window and among the keyless rows), a lease-expired row (source 1) older than
        // the key's pending ones, a key whose oldest row was retried later than a younger one,
        // and two spellings kept apart. Due times in microseconds; a zero date reads as NULL.
        let found = vec![
            (3, 1, k("hot"), Some(50)),
            (7, 2, k("hot"), Some(10)),
            (9, 2, k("hot"), Some(20)),
            (12, 2, k("other"), Some(30)),
            (4, 2, None, Some(40)),
            (10, 2, k("other"), Some(60)),
            (11, 2, k("Hot"), Some(70)),
            (13, 2, k("retried"), Some(80)),
            (6, 2, k("retried"), Some(90)),
            (4, 3, None, Some(40)),
            (8, 3, None, None),
        ];
        let probe: Vec<i64> = first_of_each_key(found).into_iter().map(|c| c.0).collect();
        assert_eq!(probe, vec![8, 4, 3, 10, 11, 6]);
        assert!(first_of_each_key(Vec::new()).is_empty());
    }
}
