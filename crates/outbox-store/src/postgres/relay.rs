//! The relay's queries on PostgreSQL.
//!
//! The claim is ONE statement: a CTE locks due candidates with `FOR UPDATE SKIP LOCKED` (rows
//! another relay is claiming are skipped, not waited for) and leases them, returning them.
//! Per-key order: a keyed message is a candidate only when it is the *head* of its key, i.e. no
//! older message with that key is open (`pending`, `sending` or `failed`). So at most one message
//! per key is in flight in the whole cluster, a failing head blocks only its own key, and a
//! younger message can never overtake an older one, whatever fails or crashes. The check reads
//! the statement's snapshot; a concurrent claimer's uncommitted lease on the head still shows the
//! head as open, so the younger message waits either way.

use super::render;
use crate::Tables;
use std::collections::HashSet;
use std::time::Duration;

use outbox_core::{MessageId, OutboxMessage, Result};
use sqlx::postgres::{PgListener, Postgres};
use sqlx::Row;

use super::decode_message;
use super::ClaimTx;
use crate::common::{decode_rows, release_leases, FailSql};
use crate::error::db;
use crate::outbox::Outbox;
use crate::relay::{runs, settle_isolated, SettleWrites};
use crate::relay::{
    serve, ClaimMode, Claimed, DeliveryState, Hold, Job, Keeper, KeeperSql, Listening, SettleReport,
    Settlement, Wakeups,
};
use crate::signal::CommitSignal;
use sqlx::postgres::PgConnection;

/// The heads of every key, found by a loose index scan over the open-key index (one probe per
/// distinct open key), run only when `need_heads` says so (see `claim_ctes`).
macro_rules! walk_heads {
    () => {
        "\
), open_keys(k) AS (
    (SELECT o.msg_key FROM outbox_message o
     WHERE (SELECT yes FROM need_heads) AND o.msg_key IS NOT NULL AND o.status IN ('pending', 'sending', 'failed')
     ORDER BY o.msg_key LIMIT 1)
    UNION ALL
    SELECT (SELECT o.msg_key FROM outbox_message o
            WHERE o.msg_key > open_keys.k AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key LIMIT 1)
    FROM open_keys WHERE open_keys.k IS NOT NULL
), heads AS (
    SELECT h.id FROM open_keys
    CROSS JOIN LATERAL (
        SELECT o.msg_key, o.id, o.status, o.next_attempt_at FROM outbox_message o
        WHERE o.msg_key >= open_keys.k AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1) h
    WHERE open_keys.k IS NOT NULL AND h.msg_key = open_keys.k AND h.status IN ('pending', 'sending')
      AND h.next_attempt_at <= now()
)"
    };
}

/// The lease claim's candidates (the locked claim, [`CLAIM_LOCKED`], takes the window's heads
/// lock-first and stops at its limit) are looked for in three places, then re-checked and
/// locked together:
/// - `win_heads`: the heads among the first `$2` due rows in due order (the common case: heads
///   are dense, e.g. one message per key, or many keys);
/// - `nokey`: due rows without a key, through their own index;
/// - `heads`: only when the window is full *and* holds fewer than `$1` (the limit) heads (a long run of due
///   rows held back by an older message of their key, e.g. a hot key's backlog), the head of
///   every open key, found by a loose index scan over the open-key index: one probe per
///   distinct open key instead of one per held-back row. Without it, a backlog of N rows on a
///   few busy keys made every claim read all N rows (found by the chaos suite: 3.2 s per claim
///   with 73,000 rows on 24 keys). It is not run when the window already has enough heads, so
///   a deep backlog of many keys (one per message, say) costs a window, not a walk of every key.
///   The guard is a scalar subquery (`WHERE (SELECT yes FROM need_heads)`), which PostgreSQL
///   plans as a one-time filter: written as a join with `need_heads`, it became a nested loop
///   that walked the whole open-key index testing the (false) guard on every entry. `EXPLAIN
///   ANALYZE` of the locked claim (limit 500, window 1,000) on 10^6 due rows: 1,000 keys 215 ms
///   before, 11 ms after; a key per message 262-313 ms before, 12-16 ms after; 10 hot keys (the
///   walk runs) 7.3 ms both.
/// - `win_heads` probes each distinct key of the window once (`win_keys`, `key_heads`), not each
///   row: a window of one hot key's backlog made 1,000 identical probes, each walking the key's
///   index entries of messages already sent that vacuum had not removed yet (a locked claim's
///   open transaction holds them back): 130 ms per claim in a drain of 10,000 rows on one key.
/// - The oldest open message of a key (the head check of `win_heads`, the head in `heads`) is
///   the first entry at or after the key in the open-key index, `(msg_key, id)`: `msg_key >= k
///   ORDER BY msg_key, id LIMIT 1`, then compared. Written as `msg_key = k ... ORDER BY id`
///   (or `NOT EXISTS (... msg_key = k AND id < w.id)`), a few hot keys made the planner walk
///   the primary key from the lowest id, filtering on the key: every message of the key
///   already sent was read again by every probe, and the drain of a hot-key backlog slowed
///   as it progressed (2,000 rows on 10 keys, half sent: 86 ms per claim, 158,000 buffers;
///   `msg_key >= k` with that ordering can only be served by the open-key index).
///
/// Written so that the plan does not depend on row estimates, which are always wrong for a
/// queue (every new row lies past the statistics' histogram; seen in the chaos suite: 9 due
/// rows estimated, 30,481 present). The window and `nokey` read the first rows of their
/// partial index in order and filter on due-ness *outside* the `LIMIT`, so the ordered index
/// scan is the only sensible plan; the candidates are handed over as an array
/// (`id = ANY (ARRAY(...))`) and the re-check is wrapped in `IS TRUE`, so the partial due index
/// cannot serve the locking step and the candidates are looked up by primary key. Before, the
/// planner sometimes drove the locking step from the due index and ran the head check on every
/// due row again: 140 ms to 1 s per claim with 30,000 rows on 24 keys.
macro_rules! claim_ctes {
    () => {
        concat!(
            "\
WITH RECURSIVE win AS (
    SELECT w.id, w.msg_key FROM (
        SELECT m.id, m.msg_key, m.next_attempt_at FROM outbox_message m
        WHERE m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $2 OFFSET $3) w
    WHERE w.next_attempt_at <= now()
), win_keys AS (
    SELECT DISTINCT w.msg_key FROM win w WHERE w.msg_key IS NOT NULL
), key_heads AS (
    SELECT f.id FROM win_keys k
    CROSS JOIN LATERAL (
        SELECT o.msg_key, o.id FROM outbox_message o
        WHERE o.msg_key >= k.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1) f
    WHERE f.msg_key = k.msg_key
), win_heads AS (
    SELECT w.id FROM win w
    WHERE w.msg_key IS NULL OR w.id IN (SELECT id FROM key_heads)
), need_heads AS (
    SELECT (SELECT count(*) FROM win) >= $2 AND (SELECT count(*) FROM win_heads) < $1 AS yes
), nokey AS (
    SELECT w.id FROM (
        SELECT m.id, m.next_attempt_at FROM outbox_message m
        WHERE m.msg_key IS NULL AND m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $1) w
    WHERE w.next_attempt_at <= now()
",
            walk_heads!(),
            "\n"
        )
    };
}

/// The locking step shared by both claims: the candidates that are still due, in due order,
/// locked, at most `$1`. Every candidate heads its key in the statement's snapshot (that is how
/// the CTEs chose it), and the whole statement reads that one snapshot, so the head check is
/// not repeated here: it cost one more index probe per candidate (3 of the 9.5 ms of a
/// 500-row claim). The due check is, because `FOR UPDATE` re-evaluates it on the newest version
/// of a row another relay changed meanwhile.
macro_rules! claim_pick {
    () => {
        "\
FROM outbox_message m
WHERE m.id = ANY (ARRAY(
        SELECT id FROM win_heads UNION SELECT id FROM nokey UNION SELECT id FROM heads))
  AND (m.status IN ('pending', 'sending') AND m.next_attempt_at <= now()) IS TRUE
  AND NOT (m.id = ANY ($4::int8[]))
ORDER BY m.next_attempt_at, m.id
LIMIT $1
FOR UPDATE SKIP LOCKED"
    };
}

/// The lease claim: one statement that locks the candidates and leases them (`$3` = 0 and `$4`
/// empty: see `CLAIM_LOCKED`; `$5` owner, `$6` lease in ms).
const CLAIM: &str = concat!(
    claim_ctes!(),
    ", cand AS (\nSELECT m.id ",
    claim_pick!(),
    "\n)
UPDATE outbox_message m
SET status = 'sending', lease_owner = $5,
    lease_until = now() + $6 * interval '1 millisecond',
    next_attempt_at = now() + $6 * interval '1 millisecond',
    updated_at = now(), updated_by = $5
FROM cand WHERE m.id = cand.id
RETURNING ",
    message_columns!("m")
);

/// The locked claim: due heads, locked and returned, nothing written (the caller keeps the
/// transaction open until it settles), each with the number of due rows in the window, when the
/// window is not full the number of distinct keys among them (a keyless row counts as a key of
/// its own), and whether the heads of every key were walked (one row with `NULL` message columns
/// when nothing was taken).
///
/// A run can follow a head taken here only if a due row of its key was left in the window: when
/// the window held every due row (not full) and each key once, no head has a due follower, and
/// the followers' read (a round trip) is skipped. Counted by key, not by rows not taken: a row
/// skipped because another batch holds it (a batch in flight during a trickle, most of the time
/// at 1,000 msg/s) is no follower, and counting it as one cost a followers' read on 72% of the
/// claims of the latency bench.
///
/// Unlike the lease claim, it stops at the limit, locking before it checks:
/// - `taken`: the window's rows in due order, of each key only the one with the lowest id (the
///   key's head if its head is in the window at all: a message retried later can be due after a
///   younger one of its key, and must still be the one taken), are locked one by one (`SKIP LOCKED`: a
///   batch in flight, this relay's or another's, is skipped at the cost of one failed lock,
///   with no head probe); a locked row is kept if it heads its key (the probe of the open-key
///   index as above), and the scan stops at `$1` kept. A batch in flight no longer costs the
///   next claim its head probes: with 1,000 keys and a batch of 500 in flight, the window's
///   probes went from 1,000 to 500.
/// - Only when the window is full and `taken` is short (a long run of rows held back behind
///   their keys): the keyless rows beyond the window and the heads of every key, picked and
///   locked as the lease claim picks them, minus `taken`.
///
/// A row locked that turns out not to head its key (its head is `failed` or not due, so not in
/// the window) stays locked by this transaction, untouched, until it ends: nobody could claim
/// it meanwhile anyway.
///
/// The window starts at `($5, $6)`, the `(next_attempt_at, id)` where the last claim's window
/// began in a backlog (`$5` NULL: at the due index's first entry), so that it does not step
/// over the entries of the messages sent since, which only vacuum removes
/// ([`crate::relay::WindowMemo`]; a row comparison the due index serves as its start, whatever
/// the parameters). Each row also returns where this window began (`first_at`, `first_id`: its
/// first due row, `first_at` NULL outside the times the driver can read).
///
/// Another relay's locked rows are still due `pending` rows to this statement (a lease would
/// have made them not due): a window full of them yields nothing. So the claim may take
/// further passes in the same transaction, each with the window `$3` rows further on and
/// without the rows already taken (`$4`).
///
/// `$4` also names the rows this process's other claims hold, not yet settled
/// ([`crate::relay::InFlight`]): they are left out of `firsts` before anything is locked.
/// With 1,000 keys and a batch of 500 in flight, half of a drain's window is that batch, and
/// each of its rows cost a primary-key lookup and a refused lock. Left out by a hashed
/// anti-join (`NOT IN (SELECT unnest($4))`, one hash of the array per statement), not by
/// `NOT (id = ANY ($4))`, which searches the array once per row: measured on the statement
/// alone with 500 rows in flight, 9.1-9.2 ms against 9.3-13.5 ms with the refused locks, and
/// 16.4-16.7 ms written with `ANY`. Rows held by another process are still skipped by their
/// locks.
const CLAIM_LOCKED: &str = concat!(
    "\
WITH RECURSIVE win AS (
    SELECT w.id, w.msg_key, w.next_attempt_at FROM (
        SELECT m.id, m.msg_key, m.next_attempt_at FROM outbox_message m
        WHERE m.status IN ('pending', 'sending')
          AND (m.next_attempt_at, m.id) >= (COALESCE($5::timestamptz, '-infinity'::timestamptz), $6::int8)
        ORDER BY m.next_attempt_at, m.id
        LIMIT $2 OFFSET $3) w
    WHERE w.next_attempt_at <= now()
), firsts AS (
    SELECT f.id FROM (
        SELECT DISTINCT ON (w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END) w.id, w.next_attempt_at
        FROM win w
        ORDER BY w.msg_key, CASE WHEN w.msg_key IS NULL THEN w.id END, w.id) f
    WHERE f.id NOT IN (SELECT unnest($4::int8[]))
    ORDER BY f.next_attempt_at, f.id
), taken AS (
    SELECT l.* FROM firsts k
    CROSS JOIN LATERAL (
        SELECT ",
    message_columns!("x"),
    " FROM outbox_message x
        WHERE x.id = k.id AND (x.status IN ('pending', 'sending') AND x.next_attempt_at <= now()) IS TRUE
        FOR UPDATE SKIP LOCKED) l
    WHERE l.msg_key IS NULL OR l.id = (
        SELECT o.id FROM outbox_message o
        WHERE o.msg_key >= l.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1)
    LIMIT $1
), need_heads AS (
    SELECT (SELECT count(*) FROM win) >= $2 AND (SELECT count(*) FROM taken) < $1 AS yes
), nokey AS (
    SELECT w.id FROM (
        SELECT m.id, m.next_attempt_at FROM outbox_message m
        WHERE (SELECT yes FROM need_heads) AND m.msg_key IS NULL AND m.status IN ('pending', 'sending')
        ORDER BY m.next_attempt_at, m.id
        LIMIT $1) w
    WHERE w.next_attempt_at <= now()
",
    walk_heads!(),
    ", more AS (
    SELECT ",
    message_columns!("m"),
    "
    FROM outbox_message m
    WHERE (SELECT yes FROM need_heads)
      AND m.id = ANY (ARRAY(SELECT id FROM nokey UNION SELECT id FROM heads))
      AND (m.status IN ('pending', 'sending') AND m.next_attempt_at <= now()) IS TRUE
      AND m.id NOT IN (SELECT unnest($4::int8[]))
      AND NOT (m.id = ANY (ARRAY(SELECT id FROM taken)))
    ORDER BY m.next_attempt_at, m.id
    LIMIT $1 - (SELECT count(*) FROM taken)
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM taken UNION ALL SELECT * FROM more
)
SELECT w.n AS win_rows,
    CASE WHEN w.n < $2 THEN (SELECT count(DISTINCT x.msg_key) + count(*) FILTER (WHERE x.msg_key IS NULL) FROM win x) END AS win_keys,
    (SELECT yes FROM need_heads) AS walked, f.first_at, f.first_id, p.*
FROM (SELECT count(*) AS n FROM win) w
LEFT JOIN (
    SELECT CASE WHEN x.next_attempt_at BETWEEN '1970-01-01 00:00:00+00'::timestamptz AND '9999-12-31 00:00:00+00'::timestamptz
                THEN x.next_attempt_at END AS first_at, x.id AS first_id
    FROM win x ORDER BY x.next_attempt_at, x.id LIMIT 1) f ON true
LEFT JOIN picked p ON true"
);

/// The locked claim's fast path: the messages this process has just committed (`$1`, the ids
/// its [`CommitSignal`] handed over), each locked and kept, at most `$2`, if it is still due and
/// heads its key, exactly as `CLAIM_LOCKED`'s `taken` keeps the window's rows (lock first, then
/// the probe of the open-key index; a row locked that does not head its key stays locked,
/// untouched, until the transaction ends). One probe of the primary key per id instead of the
/// window's CTEs: the claim between a commit and its publication when messages come one by
/// one. It looks at nothing else, so a claim that took something here says that due messages
/// may be left behind (the relay claims again once the batch is settled).
const CLAIM_COMMITTED: &str = concat!(
    "\
SELECT l.* FROM unnest($1::int8[]) AS k(id)
CROSS JOIN LATERAL (
    SELECT ",
    message_columns!("x"),
    " FROM outbox_message x
    WHERE x.id = k.id AND (x.status IN ('pending', 'sending') AND x.next_attempt_at <= now()) IS TRUE
    FOR UPDATE SKIP LOCKED) l
WHERE l.msg_key IS NULL OR l.id = (
    SELECT o.id FROM outbox_message o
    WHERE o.msg_key >= l.msg_key AND o.status IN ('pending', 'sending', 'failed')
    ORDER BY o.msg_key, o.id LIMIT 1)
LIMIT $2"
);

/// A look's state of the message `m`: 2 `pending` and due by `now()` (a claim by id may take
/// it), 1 `pending` and not due yet, 0 any other status or when `$other` holds (the claim
/// loop's). One expression for every look (`crate::relay::LOOKED_DUE`, `LOOKED_LATER`).
macro_rules! look_state {
    ($other:literal) => {
        concat!(
            "(CASE WHEN m.status <> 'pending'",
            $other,
            " THEN 0 WHEN m.next_attempt_at <= now() THEN 2 ELSE 1 END)::int2"
        )
    };
}

/// [`Claims::newer_than`](crate::relay::Claims::newer_than) from an id (`$1`): the next `$2`
/// messages by the primary key, and those of the ids `$3` looked at again, each with its state:
/// 2 `pending` and due (a claim by id may take it), 1 `pending` and not due by `now()`, 0 any
/// other status (`crate::relay::LOOKED_DUE`, `LOOKED_LATER`). Read in id order from `$1` whatever the
/// status, so that where the next look starts moves past messages sent meanwhile; two branches,
/// so that each is an index scan of its own (an `OR` would scan the key from its first entry).
const LOOK_NEWER: &str = concat!(
    "(SELECT m.id, ",
    look_state!(""),
    "
 FROM outbox_message m WHERE m.id > $1 ORDER BY m.id LIMIT $2)
UNION ALL
SELECT m.id, ",
    look_state!(""),
    "
FROM outbox_message m WHERE m.id = ANY ($3::int8[]) AND m.id <= $1"
);

/// [`Claims::newer_than`](crate::relay::Claims::newer_than) without a start: the newest `$1`
/// messages, read backwards by the primary key, each with its state as in [`LOOK_NEWER`], a
/// message created more than `$2` milliseconds ago (`crate::relay::LOOK_BACK`) counting as any
/// other status (0): the claim loop's.
const LOOK_FROM_END: &str = concat!(
    "SELECT m.id, ",
    look_state!(" OR m.created_at < now() - $2::int8 * interval '1 millisecond'"),
    "
FROM outbox_message m ORDER BY m.id DESC LIMIT $1"
);

/// `sql` for these tables as `PREPARE` and `EXECUTE` statements for [`ClaimTx::begin`], its
/// parameters (`types`) given as `args`, written into the `EXECUTE`. The statement's name is
/// `prefix` and a hash of its text, so that two outboxes over different tables sharing a pool,
/// or two versions of the statement, never run each other's.
fn prepared(tables: &Tables, sql: &str, prefix: &str, types: &str, args: &str) -> (String, String) {
    use std::hash::{Hash as _, Hasher as _};
    let sql = render(tables, sql);
    // SipHash with fixed keys: the same name for the same text.
    let mut h = std::hash::DefaultHasher::new();
    sql.hash(&mut h);
    let name = format!("{prefix}_{:016x}", h.finish());
    (format!("PREPARE {name}({types}) AS {sql}"), format!("EXECUTE {name}({args})"))
}

/// An `int8[]` literal of `ids`: `'{1,2,3}'`.
fn int8_array(ids: impl IntoIterator<Item = i64>) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("'{");
    for (i, id) in ids.into_iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(out, "{sep}{id}");
    }
    out.push_str("}'");
    out
}

/// [`CLAIM_COMMITTED`] for [`ClaimTx::begin`]: the ids (`$1`) and the limit (`$2`) written in.
fn by_id_claim(tables: &Tables, committed: &[MessageId], limit: i64) -> (String, String) {
    let args = format!("{}, {limit}", int8_array(committed.iter().map(|i| i.0)));
    prepared(tables, CLAIM_COMMITTED, "outbox_claim_committed", "int8[], int8", &args)
}

/// The first pass of [`CLAIM_LOCKED`] for [`ClaimTx::begin`], from the due index's first entry
/// (no remembered start), so that a claim that has no ids to claim by id still claims in the
/// round trip of its `BEGIN`: `limit`, `window` and the rows left out (`held`) written in.
fn window_claim(
    tables: &Tables,
    limit: i64,
    window: i64,
    held: impl IntoIterator<Item = i64>,
) -> (String, String) {
    let args = format!("{limit}, {window}, 0, {}, NULL, '{}'", int8_array(held), i64::MIN);
    prepared(
        tables,
        CLAIM_LOCKED,
        "outbox_claim_window",
        "int8, int8, int8, int8[], timestamptz, int8",
        &args,
    )
}

/// The open messages that follow each head (`$1` keys, `$2` head ids) in its key, at most `$3`
/// per key, in id order, each with whether it is due. One probe of the open-key index per key,
/// in `(msg_key, id)` order from the head (as the head probes, so only that index can serve
/// it); entries of the next key are dropped outside the `LIMIT`.
const RUN_FOLLOWERS: &str = "\
SELECT f.id, h.hid AS head, (f.status IN ('pending', 'sending') AND f.next_attempt_at <= now()) AS due
FROM unnest($1::text[], $2::int8[]) AS h(k, hid)
CROSS JOIN LATERAL (
    SELECT o.id, o.msg_key, o.status, o.next_attempt_at FROM outbox_message o
    WHERE o.msg_key IS NOT NULL AND o.status IN ('pending', 'sending', 'failed') AND (o.msg_key, o.id) > (h.k, h.hid)
    ORDER BY o.msg_key, o.id LIMIT $3) f
WHERE f.msg_key = h.k";

/// Locks the followers chosen (`$1`) that are still due; another relay's are skipped.
const RUN_LOCK: &str = concat!(
    "SELECT ",
    message_columns!("m"),
    "\nFROM outbox_message m
WHERE m.id = ANY($1) AND (m.status IN ('pending', 'sending') AND m.next_attempt_at <= now()) IS TRUE
FOR UPDATE SKIP LOCKED"
);

/// Leases the followers a lease claim locked (`$1`) to `$2` for `$3` ms, as `CLAIM` leases heads.
const LEASE_RUNS: &str = "\
UPDATE outbox_message
SET status = 'sending', lease_owner = $2,
    lease_until = now() + $3 * interval '1 millisecond',
    next_attempt_at = now() + $3 * interval '1 millisecond',
    updated_at = now(), updated_by = $2
WHERE id = ANY($1)";

/// Whether the message table (`$1`) carries nothing but what the migrations create: no trigger
/// but the wake-up one (`$2`), no rule, no row security, no constraint not named in `$3` (NOT
/// NULL ones aside: the settlement writes no NULL into such a column), and no unique index but
/// those of those constraints. No row when the table is not found.
const PLAIN_TABLE: &str = "\
SELECT NOT c.relrowsecurity
   AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgname <> $2)
   AND NOT EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid)
   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype <> 'n' AND NOT (k.conname = ANY($3)))
   AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique
                   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.conindid = i.indexrelid))
FROM pg_class c WHERE c.oid = to_regclass($1)";

/// The message table's constraints as the migrations leave them at the schema version this
/// build requires: the primary key, the unique business key (0001) and, since version 11, the one
/// check of every rule (the thirteen constraints of versions 1-10 no longer exist there).
const OWN_CONSTRAINTS: [&str; 3] =
    ["outbox_message_pkey", "outbox_message_biz_unique", "outbox_message_rules"];

/// Asks [`PLAIN_TABLE`] in the claim's transaction, in a savepoint of its own (a read: the
/// subtransaction takes no transaction id), so that a refused catalog read cannot cost the
/// claim: it counts as not plain.
async fn plain_table(tx: &mut ClaimTx, tables: &Tables) -> Result<bool> {
    use sqlx::Executor as _;
    tx.execute("SAVEPOINT outbox_plain").await.map_err(db)?;
    let asked: std::result::Result<Option<bool>, sqlx::Error> = sqlx::query_scalar(PLAIN_TABLE)
        .bind(tables.table(crate::names::Dialect::Postgres, "outbox_message"))
        .bind(tables.name("outbox_message_notify").into_owned())
        .bind(OWN_CONSTRAINTS.iter().map(|c| tables.name(c).into_owned()).collect::<Vec<_>>())
        .fetch_optional(&mut **tx)
        .await
        .map(Option::flatten);
    match asked {
        Ok(plain) => {
            tx.execute("RELEASE SAVEPOINT outbox_plain").await.map_err(db)?;
            Ok(plain.unwrap_or(false))
        }
        Err(e) => {
            tx.execute("ROLLBACK TO SAVEPOINT outbox_plain").await.map_err(db)?;
            let e = outbox_core::text::bounded_error(&e.to_string());
            tracing::warn!(error = %e, "Reading the message table's triggers and constraints failed; settling in savepoints");
            Ok(false)
        }
    }
}

/// Passes of a locked claim over successive windows.
const LOCKED_PASSES: i64 = 4;

const MARK_SENT: &str = "\
UPDATE outbox_message
SET status = 'sent', lease_owner = NULL, lease_until = NULL, next_attempt_at = now(),
    last_attempt_at = now(), updated_at = now(), updated_by = $2
WHERE id = ANY($1) AND status = 'sending' AND lease_owner = $2";

/// `sent` for the messages of a locked claim (the transaction holds their row locks).
const MARK_SENT_LOCKED: &str = "\
UPDATE outbox_message
SET status = 'sent', lease_owner = NULL, lease_until = NULL, next_attempt_at = now(),
    last_attempt_at = now(), updated_at = now(), updated_by = $2
WHERE id = ANY($1) AND status IN ('pending', 'sending')";

/// The rows of a locked claim whose settlement failed, locked again (`$1`): those still due as
/// the claim found them, not claimed by another relay meanwhile (locked by a locked claim, or
/// leased: a lease makes its row not due).
const RELOCK: &str = "\
SELECT id FROM outbox_message
WHERE id = ANY($1) AND (status IN ('pending', 'sending') AND next_attempt_at <= now()) IS TRUE
FOR UPDATE SKIP LOCKED";

const OWNED: &str = "\
SELECT id FROM outbox_message WHERE id = ANY($1) AND status = 'sending' AND lease_owner = $2 FOR UPDATE";

const WRITE_MESSAGES: &str = "\
UPDATE outbox_message m
SET status = w.status, attempts = w.attempts,
    next_attempt_at = now() + w.retry_ms * interval '1 millisecond',
    last_error = COALESCE(w.last_error, m.last_error),
    last_attempt_at = CASE WHEN w.attempted THEN now() ELSE m.last_attempt_at END,
    lease_owner = NULL, lease_until = NULL, updated_at = now(), updated_by = $7
FROM unnest($1::int8[], $2::text[], $3::int4[], $4::int8[], $5::text[], $6::bool[])
     AS w(id, status, attempts, retry_ms, last_error, attempted)
WHERE m.id = w.id AND m.id = ANY($8)";

const WRITE_DELIVERIES: &str = "\
INSERT INTO outbox_delivery AS d
    (message_id, destination, status, attempts, next_attempt_at, last_attempt_at, last_error, ack_deadline,
     updated_at)
SELECT w.message_id, w.destination, w.status, w.attempts, now() + w.retry_ms * interval '1 millisecond',
       CASE WHEN w.attempted THEN now() END, w.last_error, now() + w.ack_ms * interval '1 millisecond', now()
FROM unnest($1::int8[], $2::text[], $3::text[], $4::int4[], $5::int8[], $6::text[], $7::bool[], $9::int8[])
     AS w(message_id, destination, status, attempts, retry_ms, last_error, attempted, ack_ms)
WHERE w.message_id = ANY($8)
ON CONFLICT (message_id, destination) DO UPDATE
SET status = CASE WHEN d.status = 'acked' THEN d.status ELSE EXCLUDED.status END,
    attempts = EXCLUDED.attempts, next_attempt_at = EXCLUDED.next_attempt_at,
    last_attempt_at = COALESCE(EXCLUDED.last_attempt_at, d.last_attempt_at),
    last_error = COALESCE(EXCLUDED.last_error, d.last_error),
    ack_deadline = CASE WHEN d.status = 'acked' THEN NULL ELSE EXCLUDED.ack_deadline END,
    updated_at = now()";

/// One message `failed` with its reason, for a row this relay holds (`pending` under its lock,
/// `sending` under its lease): a row that cannot be read, or whose outcome could not be
/// written. A `created_at` out of range (written before schema version 5 refused it) is
/// repaired so that the row passes the table's checks again.
const FAIL_ONE: &str = "\
UPDATE outbox_message
SET status = 'failed', attempts = attempts + 1, last_error = $1, next_attempt_at = now(),
    last_attempt_at = now(), lease_owner = NULL, lease_until = NULL, updated_at = now(),
    created_at = CASE WHEN created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00'
                      THEN created_at ELSE now() END
WHERE id = $2 AND (status = 'pending' OR (status = 'sending' AND lease_owner = $3))";

const FAIL: FailSql<Postgres> = FailSql::new(FAIL_ONE);

/// Every message an owner leases back to `pending`, due now; binds the owner.
const RELEASE: &str =
    "UPDATE outbox_message SET status = 'pending', lease_owner = NULL, lease_until = NULL, \
     next_attempt_at = now(), updated_at = now(), updated_by = $1 \
     WHERE status = 'sending' AND lease_owner = $1";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn raw_ids(ids: &[MessageId]) -> Vec<i64> {
    ids.iter().map(|i| i.0).collect()
}

/// `(limit, window)` of a claim: the window is twice the limit, at least 256 rows.
fn claim_sizes(limit: usize) -> (i64, i64) {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    (limit, limit.saturating_mul(2).max(256))
}

/// The window of a locked claim that leaves `held` rows out (see [`crate::relay::held_window`]).
fn locked_window(limit: i64, window: i64, held: usize) -> i64 {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let window = usize::try_from(window).unwrap_or(usize::MAX);
    i64::try_from(crate::relay::held_window(limit, window, held)).unwrap_or(i64::MAX)
}

/// Writes a settlement for the messages in `owned` (the caller holds their row locks) inside
/// `tx`; `mark_sent` is [`MARK_SENT`] (lease) or [`MARK_SENT_LOCKED`].
async fn write_settlement(
    conn: &mut PgConnection,
    tables: &Tables,
    owner: &str,
    s: &Settlement,
    owned: &[i64],
    mark_sent: &str,
) -> Result<SettleReport> {
    let all = s.ids();
    let held: HashSet<i64> = owned.iter().copied().collect();
    if !s.deliveries.is_empty() {
        let d = &s.deliveries;
        sqlx::query(&render(tables, WRITE_DELIVERIES))
            .bind(d.iter().map(|w| w.message_id.0).collect::<Vec<_>>())
            .bind(d.iter().map(|w| w.destination.clone()).collect::<Vec<_>>())
            .bind(d.iter().map(|w| w.status.as_str().to_owned()).collect::<Vec<_>>())
            .bind(d.iter().map(|w| w.attempts).collect::<Vec<_>>())
            .bind(d.iter().map(|w| ms(w.retry_in)).collect::<Vec<_>>())
            .bind(d.iter().map(|w| w.last_error.clone()).collect::<Vec<_>>())
            .bind(d.iter().map(|w| w.attempted).collect::<Vec<_>>())
            .bind(owned)
            .bind(d.iter().map(|w| w.ack_timeout.map(ms)).collect::<Vec<_>>())
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    if !s.sent.is_empty() {
        let sent: Vec<i64> = s.sent.iter().map(|i| i.0).filter(|i| held.contains(i)).collect();
        sqlx::query(&render(tables, mark_sent))
            .bind(sent)
            .bind(owner)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    if !s.messages.is_empty() {
        let m = &s.messages;
        sqlx::query(&render(tables, WRITE_MESSAGES))
            .bind(m.iter().map(|w| w.id.0).collect::<Vec<_>>())
            .bind(m.iter().map(|w| w.status.as_str().to_owned()).collect::<Vec<_>>())
            .bind(m.iter().map(|w| w.attempts).collect::<Vec<_>>())
            .bind(m.iter().map(|w| ms(w.retry_in)).collect::<Vec<_>>())
            .bind(m.iter().map(|w| w.last_error.clone()).collect::<Vec<_>>())
            .bind(m.iter().map(|w| w.attempted).collect::<Vec<_>>())
            .bind(owner)
            .bind(owned)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    Ok(SettleReport::of(&all, &held))
}

/// [`write_settlement`] and [`FAIL_ONE`] for [`settle_isolated`].
struct PgWrites<'a> {
    tables: &'a Tables,
    owner: &'a str,
    owned: &'a [i64],
    mark_sent: &'static str,
}

impl SettleWrites<Postgres> for PgWrites<'_> {
    async fn write(&self, conn: &mut PgConnection, s: &Settlement) -> Result<SettleReport> {
        write_settlement(conn, self.tables, self.owner, s, self.owned, self.mark_sent).await
    }

    async fn fail(&self, conn: &mut PgConnection, id: i64, reason: &str) -> Result<u64> {
        FAIL.fail_one(conn, self.tables, self.owner, id, reason).await
    }
}

/// The per-destination rows of these messages.
async fn read_deliveries<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    e: E,
    tables: &Tables,
    ids: &[MessageId],
) -> Result<Vec<DeliveryState>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(&render(
        tables,
        "SELECT message_id, destination, status, attempts, last_error, \
         GREATEST(0, (EXTRACT(EPOCH FROM (next_attempt_at - now())) * 1000))::int8 AS wait_ms \
         FROM outbox_delivery WHERE message_id = ANY($1)",
    ))
    .bind(raw_ids(ids))
    .fetch_all(e)
    .await
    .map_err(db)?;
    rows.iter().map(crate::common::delivery_state).collect()
}

/// The runs behind the heads of `plan`, locked in the claim's transaction.
async fn lock_runs(
    tx: &mut PgConnection,
    tables: &Tables,
    plan: &runs::RunPlan,
) -> Result<Vec<OutboxMessage>> {
    let per_key = i64::try_from(plan.per_key).unwrap_or(i64::MAX);
    let rows = sqlx::query(&render(tables, RUN_FOLLOWERS))
        .bind(plan.heads.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>())
        .bind(plan.heads.iter().map(|(_, id)| *id).collect::<Vec<_>>())
        .bind(per_key)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    let mut followers = rows
        .iter()
        .map(|r| {
            Ok(runs::Follower {
                id: r.try_get("id").map_err(db)?,
                head: r.try_get("head").map_err(db)?,
                due: r.try_get::<Option<bool>, _>("due").map_err(db)?.unwrap_or(false),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    runs::take(&mut followers, plan.per_key, |wanted| async move {
        let rows =
            sqlx::query(&render(tables, RUN_LOCK)).bind(&wanted).fetch_all(&mut *tx).await.map_err(db)?;
        Ok(decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message).0)
    })
    .await
}

/// The row locks of a locked claim on this database.
pub type PgLock = crate::relay::RowLock<ClaimTx>;

crate::relay::row_lock_claims!(Postgres, PgLock);

impl Outbox<Postgres> {
    async fn extend_leases(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
        let tables = self.tables();
        let done = sqlx::query(&render(
            tables,
            "UPDATE outbox_message SET lease_until = now() + $3 * interval '1 millisecond', \
             next_attempt_at = now() + $3 * interval '1 millisecond' \
             WHERE id = ANY($1) AND status = 'sending' AND lease_owner = $2",
        ))
        .bind(raw_ids(ids))
        .bind(owner)
        .bind(ms(lease))
        .execute(self.pool())
        .await
        .map_err(db)?;
        Ok(done.rows_affected())
    }

    async fn release_leases(&self, owner: &str) -> Result<u64> {
        release_leases(self, RELEASE, 1, owner).await
    }
}

impl Wakeups for Outbox<Postgres> {
    fn spare_connection(&self) -> bool {
        Outbox::spare_connection(self)
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
        let sql = render(self.tables(), if idle { IDLE_ON } else { IDLE_OFF });
        let q = sqlx::query(&sql).bind(owner);
        let q = if idle { q.bind(ms(ttl)) } else { q };
        q.execute(self.pool()).await.map_err(db)?;
        Ok(())
    }

    async fn listen(&self, signal: CommitSignal) -> Result<Option<Listening>> {
        let mut listener = PgListener::connect_with(self.pool()).await.map_err(db)?;
        listener.listen(&self.tables().channel()).await.map_err(db)?;
        let (keeper, jobs) = Keeper::channel();
        let task = tokio::spawn(listen_and_keep(listener, jobs, self.tables().clone(), signal));
        Ok(Some(Listening::new(task, Some(keeper))))
    }
}

/// The idle row's writes commit without waiting for the WAL flush: `set_config(...,
/// 'off', true)` sets `synchronous_commit` for the statement's own transaction, and a commit
/// reads it before the setting is undone at the transaction's end. The row is a hint (writers
/// send a `NOTIFY` while it lives), so a write lost in a server crash costs nothing: a lost
/// declaration of idle is written again by the next idle tick (within `idle_interval`; the idle
/// relay looks that often anyway), a lost removal expires with its row's time to live (writers
/// wake a busy relay for nothing meanwhile). It is visible to other sessions at its commit as
/// before, so the claim once more after declaring idle still sees every row whose writer did
/// not see the declaration. The claim loop waits for these writes between two claims: with
/// the flush, each took 2.1-3.6 ms on the shared server beside a CI build (pgbench, 0.16-0.18
/// ms without), and a relay in a trickle declares idle and busy again around most messages.
macro_rules! async_commit {
    () => {
        "(SELECT set_config('synchronous_commit', 'off', true) AS async_commit)"
    };
}

/// Writes a relay's idle row (`$1` owner, `$2` ttl in ms), committed without waiting for the
/// flush (see [`async_commit`]).
const IDLE_ON: &str = concat!(
    "\
INSERT INTO outbox_relay_idle (owner, until)
SELECT $1, now() + $2 * interval '1 millisecond' FROM ",
    async_commit!(),
    " s
ON CONFLICT (owner) DO UPDATE SET until = EXCLUDED.until"
);

/// Removes a relay's idle row (`$1` owner), committed without waiting for the flush (see
/// [`async_commit`]; when there is no row, nothing is written and nothing waits).
const IDLE_OFF: &str =
    concat!("DELETE FROM outbox_relay_idle WHERE owner = $1 AND ", async_commit!(), " IS NOT NULL");

/// Whether a claim could take something, through the partial index of open messages
/// (`sending` rows carry their lease expiry in `next_attempt_at`): the answer of both statements
/// below.
macro_rules! due_answer {
    () => {
        "SELECT CASE WHEN EXISTS (
    SELECT 1 FROM outbox_message WHERE status IN ('pending', 'sending') AND next_attempt_at <= now())
    THEN 1::int8 ELSE 0::int8 END"
    };
}

/// The idle tick on the listening connection (see [`Keeper::idle_tick`]): refreshes the idle
/// row (committed without waiting for the flush: [`async_commit`]) and answers whether a claim
/// could take something. One statement.
const IDLE_TICK: &str = concat!(
    "WITH idle AS (
    INSERT INTO outbox_relay_idle (owner, until)
    SELECT $1, now() + $2 * interval '1 millisecond' FROM ",
    async_commit!(),
    " s
    ON CONFLICT (owner) DO UPDATE SET until = EXCLUDED.until)
",
    due_answer!()
);

/// [`IDLE_TICK`]'s answer alone, writing nothing (see [`Keeper::peek`]).
const PEEK: &str = due_answer!();

/// [`Claims::newer_than`](crate::relay::Claims::newer_than) on `conn` (the pool, or the
/// listening connection for the keeper's looks): one statement.
async fn look_newer_on<'c, E>(
    conn: E,
    tables: &Tables,
    after: Option<MessageId>,
    again: &[MessageId],
    limit: usize,
) -> Result<crate::relay::Newer>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    let Some(after) = after else {
        let rows: Vec<(i64, i16)> = sqlx::query_as(&render(tables, LOOK_FROM_END))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(i64::try_from(crate::relay::LOOK_BACK.as_millis()).unwrap_or(i64::MAX))
            .fetch_all(conn)
            .await
            .map_err(db)?;
        return Ok(crate::relay::newest_of(&rows));
    };
    let rows: Vec<(i64, i16)> = sqlx::query_as(&render(tables, LOOK_NEWER))
        .bind(after.0)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(raw_ids(again))
        .fetch_all(conn)
        .await
        .map_err(db)?;
    Ok(crate::relay::newer_of(after, &rows))
}

/// Forwards the channel's notifications to `signal` and, between them, runs the keeper's jobs
/// on the same connection (notifications that arrive during a job are buffered by the
/// listener and read on the next turn). Runs until aborted.
async fn listen_and_keep(
    mut listener: PgListener,
    mut jobs: tokio::sync::mpsc::Receiver<Job>,
    tables: Tables,
    signal: CommitSignal,
) {
    use crate::admin::AdminSql;
    let sql = KeeperSql {
        peek: render(&tables, PEEK).into_owned(),
        tick: Some(render(&tables, IDLE_TICK).into_owned()),
        beat: render(&tables, Postgres::BEAT).into_owned(),
        sweep: render(&tables, "DELETE FROM outbox_relay WHERE seen_at < now() - interval '1 day'")
            .into_owned(),
        overdue: render(&tables, Postgres::OVERDUE_MS).into_owned(),
        paused: render(&tables, crate::relay::PAUSED).into_owned(),
        idle_on: render(&tables, IDLE_ON).into_owned(),
        idle_off: render(&tables, IDLE_OFF).into_owned(),
    };
    let mut kept = true;
    loop {
        tokio::select! {
            // `recv` is cancel-safe: a notification partly read stays in the connection's buffer.
            n = listener.recv() => {
                if let Err(e) = n {
                    // PgListener reconnects on the next recv; notifications sent meanwhile are
                    // lost, which the scan covers. Wake once so nothing waits a full idle period
                    // after a reconnect.
                    tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                    signal.wake();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                } else if let Ok(n) = n {
                    pushed(&signal, n.payload());
                }
            }
            job = jobs.recv(), if kept => match job {
                // A failed job needs nothing more: PgListener reconnects by itself.
                // The lane's look (a relay of a crowded budget: its pool keeps no connection).
                Some(Job::Look { after, again, limit, reply }) => {
                    let seen = look_newer_on(&mut listener, &tables, after, &again, limit).await;
                    forward_buffered(&mut listener, &signal);
                    let _ = reply.send(seen);
                }
                Some(job) => {
                    let (job, look) = job.take_look_answer();
                    serve(&mut listener, job, &sql).await;
                    if let Some((reply, answer)) = look {
                        let answer = answer.await.unwrap_or_else(|_| Err(outbox_core::Error::Database("the look gave no answer".into())));
                        forward_buffered(&mut listener, &signal);
                        let _ = reply.send(answer);
                    }
                }
                // Every keeper is gone: only the notifications are left to forward.
                None => kept = false,
            },
        }
    }
}

/// After a look on the listening connection, before its answer goes back: the notifications the
/// server sent before that answer, which the connection buffered while reading it, wake the
/// relay now. When the look said something is due, the claim it starts spends that wake-up
/// (`CommitSignal::claiming`), since it begins after those commits; left to the listener's next
/// turn, it could come after the claim started and run a second, empty one (an idle relay whose
/// look had claimed a message before its notification was forwarded).
fn forward_buffered(listener: &mut PgListener, signal: &CommitSignal) {
    while let Some(n) = listener.next_buffered() {
        pushed(signal, n.payload());
    }
}

/// Longest payload [`pushed_rows`] reads: three 19-digit numbers and their separators.
const MAX_PUSH_PAYLOAD: usize = 3 * 20;

/// A notification on the relay's channel: wakes the relay unless it announces rows this process
/// committed, whose commit wakes the relay itself (`CommitSignal::announcing`).
fn pushed(signal: &CommitSignal, payload: &str) {
    match pushed_rows(payload) {
        Some(rows) if signal.announces(MessageId(rows.first)) && signal.announces(MessageId(rows.last)) => {}
        _ => signal.wake(),
    }
}

/// The rows one `INSERT` statement added, as its notification names them (schema 8's trigger:
/// `<first id> <last id> <rows>`, decimal, one space apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PushedRows {
    first: i64,
    last: i64,
    count: i64,
}

/// Reads a notification's payload. Anything on the channel can send one (`pg_notify` is open to
/// every role), so it is checked before it is believed: `None` (then the relay is simply woken)
/// unless it is exactly three decimal numbers that can describe an `INSERT`'s ids.
fn pushed_rows(payload: &str) -> Option<PushedRows> {
    if payload.len() > MAX_PUSH_PAYLOAD {
        return None;
    }
    let mut parts = payload.split(' ');
    let mut number = || -> Option<i64> {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let rows = PushedRows { first: number()?, last: number()?, count: number()? };
    let span = rows.last.checked_sub(rows.first)?.checked_add(1)?;
    (parts.next().is_none() && rows.count >= 1 && rows.count <= span).then_some(rows)
}

impl Outbox<Postgres> {
    /// The lease claim: the heads are leased by one statement, committed on its own. When runs
    /// are on and the heads leave room, their keys' runs are then locked and leased in a second
    /// transaction: a follower waits behind its leased head, which no other claim takes, so
    /// nothing can take it in between. Should that second step fail, the heads go alone (the
    /// followers stay `pending`, claimed once their head is settled).
    async fn claim_leased(
        &self,
        owner: &str,
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxMessage>> {
        let tables = self.tables();
        let max = limit;
        let (limit, window) = claim_sizes(limit);
        let rows = sqlx::query(&render(tables, CLAIM))
            .bind(limit)
            .bind(window)
            .bind(0_i64)
            .bind(Vec::<i64>::new())
            .bind(owner)
            .bind(ms(lease))
            .fetch_all(self.pool())
            .await
            .map_err(db)?;
        let mut heads = FAIL.leased(self.pool(), tables, owner, &rows, decode_message).await?;
        // The unreadable rows the claim failed take room, as in MySQL's and SQLite's claims.
        let failed = rows.len().saturating_sub(heads.len());
        let Some(plan) = runs::plan(&heads, max.saturating_sub(failed), run) else {
            return Ok(heads);
        };
        match self.lease_runs(owner, &plan, lease).await {
            Ok(more) => {
                heads.extend(more);
                heads.sort_by_key(|m| m.id);
            }
            Err(e) => {
                tracing::warn!(error = %e, "leasing the runs behind the claimed heads failed: the heads go alone");
            }
        }
        Ok(heads)
    }

    /// Locks the runs of `plan` (behind heads this relay has leased) and leases them.
    async fn lease_runs(
        &self,
        owner: &str,
        plan: &runs::RunPlan,
        lease: Duration,
    ) -> Result<Vec<OutboxMessage>> {
        let tables = self.tables();
        let mut tx = crate::begin::begin(self.pool()).await.map_err(db)?;
        let mut more = lock_runs(&mut tx, tables, plan).await?;
        if !more.is_empty() {
            sqlx::query(&render(tables, LEASE_RUNS))
                .bind(more.iter().map(|m| m.id.0).collect::<Vec<_>>())
                .bind(owner)
                .bind(ms(lease))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        for m in &mut more {
            m.status = outbox_core::Status::Sending;
            m.lease_owner = Some(owner.to_owned());
        }
        Ok(more)
    }

    /// [`Claims::newer_than`]: one read of the primary key from `after`.
    async fn look_newer(
        &self,
        after: Option<MessageId>,
        again: &[MessageId],
        limit: usize,
    ) -> Result<crate::relay::Newer> {
        look_newer_on(self.pool(), self.tables(), after, again, limit).await
    }

    async fn claim_locked(
        &self,
        owner: &str,
        committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
        only_ids: bool,
    ) -> Result<Claimed<PgLock>> {
        let tables = self.tables();
        let max = limit;
        let (limit, window) = claim_sizes(limit);
        // A relay that vanishes without closing its connection loses the claim after `lease`.
        // The claim's plan does not depend on row estimates (see `claim_ctes`), so a generic
        // plan runs as fast as a custom one at every backlog (measured: 0.1 ms with 3 rows,
        // 10-17 ms with 10^5 and 10^6 due rows on 10 to 10^5 keys, both ways); forced, the
        // statement is planned once per connection instead of 0.5-1.2 ms on each of its first
        // five runs and whenever PostgreSQL's own choice stays with custom plans.
        //
        // Without JIT compilation: PostgreSQL decides to compile a statement's expressions when
        // it plans it, on the plan's estimated cost (`jit_above_cost`, 100,000 by default), and
        // compiles them again on every run. A generic plan's cost grows with the due index (its
        // `LIMIT` is a parameter, estimated as a tenth of the rows), so with somewhat more than
        // 10^6 entries in it (a backlog, or the entries of sent rows vacuum has not removed yet)
        // every claim compiled about 60 functions: 42 ms against 40-60 ms for the claim itself
        // (`EXPLAIN ANALYZE`), and a drain of 2*10^6 to NATS ran at 5,905 msg/s with JIT,
        // 14,347 without (docs/benchmarks.md, "JIT compilation in the claim"). These are
        // index lookups of a few thousand rows at most: compiling never pays. `SET LOCAL`
        // covers the claim, its runs' read and the settlement, all in this transaction.
        let begin = format!(
            "BEGIN; SET LOCAL idle_in_transaction_session_timeout = {}; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL jit = off",
            ms(lease).max(1)
        );
        // The fast path: the ids just committed in this process, when they fit in the batch
        // (more means a backlog, which the window claims in due order), claimed in the round
        // trip of the `BEGIN` (see `ClaimTx`). What it takes is the batch; when it takes nothing
        // (they were claimed already, or wait behind their keys' heads), the window is claimed
        // in the same transaction.
        // What this process's other claims hold: left out of this claim's candidates.
        let (held, committed) = self.in_flight.leave_out(committed);
        if only_ids && (committed.is_empty() || committed.len() > max) {
            // A claim by id alone (`Claims::claim_ids`) with nothing it may take by id.
            return Ok(Claimed::nothing(true));
        }
        // The window reaches as far past the rows held as it does past one batch in flight.
        let window = locked_window(limit, window, held.len());
        // Where the window starts: where the last one began, in a backlog (see `WindowMemo`).
        let from = self.window.start(std::time::Instant::now());
        let by_id =
            (!committed.is_empty() && committed.len() <= max).then(|| by_id_claim(tables, &committed, limit));
        // Without ids to claim by id, the window's first pass travels with the `BEGIN` when no
        // backlog is remembered: its rows then come in text format, which for a full batch
        // costs the server more than the round trip (a drain of 10^5 measured 44 against 37 µs
        // of database CPU per message; docs/benchmarks.md, "A claim and a settlement of one
        // round trip each").
        let first_window = by_id.is_none() && from.is_none();
        let first =
            by_id.or_else(|| first_window.then(|| window_claim(tables, limit, window, held.iter().copied())));
        let (mut tx, rows) = ClaimTx::begin(self.pool(), begin, first).await.map_err(|e| {
            if first_window {
                self.window.memo.forget();
            }
            db(e)
        })?;
        let (mut out, mut poison, mut first_rows) = if first_window {
            (Vec::new(), Vec::new(), Some(rows))
        } else {
            let (out, poison) =
                decode_rows(&rows, |r| r.try_get::<Option<i64>, _>("id").ok().flatten(), decode_message);
            (out, poison, None)
        };
        let by_id = !out.is_empty() || !poison.is_empty();
        if only_ids && !by_id {
            tx.rollback().await.map_err(db)?;
            return Ok(Claimed::nothing(true));
        }
        // Whether a run could follow a head: not when the first pass's window held every due
        // row and each key once (a due follower is a second due row of its key).
        let mut followers_possible = true;
        for pass in (0..LOCKED_PASSES).filter(|_| !by_id) {
            let offset = pass * window;
            let rows = match first_rows.take() {
                Some(rows) => rows,
                None => {
                    let taken: Vec<i64> = out
                        .iter()
                        .map(|m| m.id.0)
                        .chain(poison.iter().map(|p| p.id))
                        .chain(held.iter().copied())
                        .collect();
                    let want = limit - i64::try_from(out.len()).unwrap_or(limit);
                    sqlx::query(&render(tables, CLAIM_LOCKED))
                        .bind(want)
                        .bind(window)
                        .bind(offset)
                        .bind(taken)
                        .bind(from.map(|(at, _)| at))
                        .bind(from.map_or(i64::MIN, |(_, id)| id))
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(|e| {
                            self.window.memo.forget();
                            db(e)
                        })?
                }
            };
            let mut win_rows = 0_i64;
            let mut win_keys = None;
            let mut walked = false;
            let mut first = None;
            for r in &rows {
                win_rows = r.try_get("win_rows").map_err(db)?;
                win_keys = r.try_get::<Option<i64>, _>("win_keys").map_err(db)?;
                walked = r.try_get::<Option<bool>, _>("walked").map_err(db)?.unwrap_or(false);
                let at = r.try_get::<Option<chrono::DateTime<chrono::Utc>>, _>("first_at").ok().flatten();
                let id = r.try_get::<Option<i64>, _>("first_id").ok().flatten();
                first = at.zip(id);
            }
            if pass == 0 {
                self.window.found(from, first, win_rows >= window, std::time::Instant::now());
            }
            if pass == 0 && win_rows < window && win_keys == Some(win_rows) {
                followers_possible = false;
            }
            let (good, bad) =
                decode_rows(&rows, |r| r.try_get::<Option<i64>, _>("id").ok().flatten(), decode_message);
            out.extend(good);
            poison.extend(bad);
            // Done when the batch is full, when this window was the last due one, or when the
            // pass walked the heads of every key (a further window holds nothing new).
            if i64::try_from(out.len() + poison.len()).unwrap_or(limit) >= limit
                || win_rows < window
                || walked
            {
                break;
            }
        }
        if !poison.is_empty() {
            // Written in the claim's transaction: committed with the batch's settlement.
            FAIL.fail_poison(&mut tx, tables, owner, &poison).await;
        }
        // Nothing left behind when the first window held every due row, each key once, and the
        // batch was not filled: a row of it not taken is held by another batch (this
        // process's, left out of the window's heads, or another's, skipped locked), or waits
        // behind an open message of its key that is not due (failed, retried later, another
        // relay's lease), which no batch's settlement makes claimable. A claim by id looked
        // at nothing else.
        let left_behind = by_id || followers_possible || out.len() + poison.len() >= max;
        let mut cut = std::collections::HashSet::new();
        if let Some(plan) = runs::plan(&out, max, run).filter(|_| followers_possible && !by_id) {
            let more = lock_runs(&mut tx, tables, &plan).await?;
            cut = runs::cut_at_length(&plan, &more);
            out.extend(more);
        }
        // Runs this process holds in its batches in flight, continued behind them with the room
        // left (see `runs::continuing`): with a few hot keys every head is in flight, and
        // without this the claim took nothing until those batches settled.
        let mut after = Vec::new();
        let room = max.saturating_sub(out.len() + poison.len());
        if !by_id && room > 0 && run > 1 {
            let taken: std::collections::HashSet<&str> =
                out.iter().filter_map(|m| m.key.as_deref()).collect();
            let held = self.in_flight.runs_held(owner, &taken);
            if let Some((plan, runs_held)) = runs::continuing(held, room, run) {
                let more = lock_runs(&mut tx, tables, &plan).await?;
                let keys: std::collections::HashSet<&str> =
                    more.iter().filter_map(|m| m.key.as_deref()).collect();
                after =
                    runs_held.iter().filter(|r| keys.contains(r.key.as_str())).map(|r| r.after()).collect();
                cut.extend(runs::cut_at_length(&plan, &more));
                out.extend(more);
            }
        }
        if out.is_empty() {
            if !poison.is_empty() {
                tx.commit().await.map_err(db)?;
            } else {
                tx.rollback().await.map_err(db)?;
            }
            return Ok(Claimed::nothing(left_behind));
        }
        out.sort_by_key(|m| m.id);
        let (lock, told) =
            crate::relay::RowLock::with_runs(tx, &out, &cut, self.tables(), &self.in_flight, owner, lease);
        let mut claimed = Claimed::locked(out, lock, left_behind);
        claimed.after = after;
        claimed.told = Some(told);
        claimed.runs_cut = !cut.is_empty();
        Ok(claimed)
    }

    /// Writes the settlement in the claim's transaction and commits.
    ///
    /// When the message table is plain ([`crate::relay::PlainTable`]: nothing on it can refuse
    /// the update for one row), the batch is written without a savepoint. A row locked by a
    /// transaction and then updated inside a subtransaction gets a MultiXact as the `xmax` of its
    /// old version (the lock and the update have different transaction ids, and the lock must
    /// survive should the subtransaction roll back), which every later reader of that version
    /// resolves through `pg_multixact`. Measured on drains to NATS (release build, the same
    /// binary both ways): at 10^6 pending messages 49.2-51.9 µs of server CPU per message and
    /// 17,010-17,243 msg/s with the savepoint, 39.1-41.7 µs and 20,636-23,570 msg/s without; at
    /// 10^5 no difference beyond the noise (docs/benchmarks.md, "Where the CPU goes, and a
    /// settlement without a savepoint").
    ///
    /// Otherwise (a trigger, a rule, row security, a constraint or unique index the migrations
    /// did not create) the batch is written in a savepoint, and message by message in their own
    /// where that fails, as [`settle_isolated`] does: SPEC guarantee 7 without any gap. Should a
    /// plain table's batch write fail all the same, the transaction is lost with its locks: it is
    /// rolled back, the answer forgotten, the settlement's rows locked again in a new transaction
    /// (`SKIP LOCKED`: a row another claim took in between is that claim's now, reported as
    /// `lost_lease` and published again by it, at least once) and written there by
    /// [`settle_isolated`].
    async fn settle_locked(&self, claim: PgLock, owner: &str, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables();
        let mut tx = claim.tx;
        let held: Vec<i64> = raw_ids(&claim.ids);
        let plain = match self.plain.known() {
            Some(plain) => plain,
            None => {
                let plain = plain_table(&mut tx, tables).await?;
                self.plain.set(plain);
                plain
            }
        };
        if !plain {
            // Savepoints need the transaction counted by sqlx (see `ClaimTx::counted`).
            let w = PgWrites { tables, owner, owned: &held, mark_sent: MARK_SENT_LOCKED };
            let mut counted = tx.counted().await.map_err(db)?;
            let report = settle_isolated(&mut *counted, &w, s).await?;
            counted.commit().await.map_err(db)?;
            tx.ended();
            return Ok(report);
        }
        let bounded = s.bounded();
        // Prepared statements in their own round trips, `UPDATE` then `COMMIT`: written with
        // its `COMMIT` as one simple query, with the ids and the owner as literals, the
        // settlement saved a round trip but was planned on every run, 117-130 µs of the server's
        // time per message at 500 msg/s, more than the round trip, for no latency measured
        // (docs/benchmarks.md, "Tried and not kept: the settlement with its COMMIT").
        let batch_error =
            match write_settlement(&mut tx, tables, owner, &bounded, &held, MARK_SENT_LOCKED).await {
                Ok(report) => {
                    tx.commit().await.map_err(db)?;
                    return Ok(report);
                }
                Err(e) => e,
            };
        self.plain.forget();
        tx.rollback().await.map_err(db)?;
        let batch_error = outbox_core::text::bounded_error(&batch_error.to_string());
        tracing::warn!(error = %batch_error, messages = held.len(), "Writing a batch's outcomes failed; locking its messages again to write them one by one");
        let mut tx = crate::begin::begin(self.pool()).await.map_err(db)?;
        let owned: Vec<i64> =
            sqlx::query_scalar(&render(tables, RELOCK)).bind(&held).fetch_all(&mut *tx).await.map_err(db)?;
        let w = PgWrites { tables, owner, owned: &owned, mark_sent: MARK_SENT_LOCKED };
        let report = settle_isolated(&mut *tx, &w, s).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn settle_leased(&self, owner: &str, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables();
        if s.messages.is_empty() && s.deliveries.is_empty() {
            // The common case: one statement, no transaction round trips. Should it fail for
            // another reason than the connection, the general path below isolates the row.
            let done = sqlx::query(&render(tables, MARK_SENT))
                .bind(raw_ids(&s.sent))
                .bind(owner)
                .execute(self.pool())
                .await;
            if let Ok(done) = done {
                let settled = usize::try_from(done.rows_affected()).unwrap_or(usize::MAX);
                let lost_lease =
                    if settled == s.sent.len() { Vec::new() } else { self.not_owned(owner, &s.sent).await? };
                return Ok(SettleReport { settled, lost_lease, ..SettleReport::default() });
            }
        }
        let mut tx = crate::begin::begin(self.pool()).await.map_err(db)?;
        let owned: Vec<i64> = sqlx::query_scalar(&render(tables, OWNED))
            .bind(raw_ids(&s.ids()))
            .bind(owner)
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
        let w = PgWrites { tables, owner, owned: &owned, mark_sent: MARK_SENT };
        let report = settle_isolated(&mut *tx, &w, s).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn not_owned(&self, owner: &str, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        let tables = self.tables();
        let owned_sent: Vec<i64> = sqlx::query_scalar(&render(
            tables,
            "SELECT id FROM outbox_message WHERE id = ANY($1) AND status = 'sent' AND updated_by = $2",
        ))
        .bind(raw_ids(ids))
        .bind(owner)
        .fetch_all(self.pool())
        .await
        .map_err(db)?;
        Ok(ids.iter().copied().filter(|id| !owned_sent.contains(&id.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    #[test]
    fn a_push_payload_is_believed_only_when_it_can_name_an_inserts_rows() {
        use super::{pushed_rows, PushedRows};
        assert_eq!(pushed_rows("7 7 1"), Some(PushedRows { first: 7, last: 7, count: 1 }));
        assert_eq!(pushed_rows("3 9 4"), Some(PushedRows { first: 3, last: 9, count: 4 }));
        let max = i64::MAX;
        assert_eq!(pushed_rows(&format!("1 {max} 2")), Some(PushedRows { first: 1, last: max, count: 2 }));
        for bad in [
            "", // schema 7's trigger, or a hand-made NOTIFY
            "7",
            "7 7",
            "7 7 1 1",
            "7 7 0", // no rows
            "7 7 2", // more rows than ids
            "9 3 1", // backwards
            "-1 7 1",
            "+1 7 1",
            "1  7 1",
            " 1 7 1",
            "1 7 1 ",
            "1\t7\t1",
            "0x10 20 1",
            "1 99999999999999999999 1", // beyond i64
            "1 7 \u{1b}[2J",
            "\u{661} 7 1", // a digit, but not an ASCII one
        ] {
            assert_eq!(pushed_rows(bad), None, "{bad:?}");
        }
        assert_eq!(pushed_rows(&"1".repeat(10_000)), None, "a long payload is not read");
    }

    #[test]
    fn a_push_for_rows_this_process_announced_wakes_nothing() {
        use super::pushed;
        use crate::signal::CommitSignal;
        use futures::FutureExt as _;
        use outbox_core::MessageId;
        let woken = |s: &CommitSignal| s.notified().now_or_never().is_some();
        let s = CommitSignal::new();
        s.announcing(&[MessageId(5), MessageId(6)]);
        pushed(&s, "5 6 2");
        assert!(!woken(&s), "its own commit wakes the relay");
        for other in ["5 7 2", "4 6 2", "7 7 1", "", "garbage"] {
            pushed(&s, other);
            assert!(woken(&s), "{other:?} wakes the relay");
        }
    }

    use crate::relay::{ClaimMode, Claims, Hold, Settlement};
    use crate::Outbox;

    /// The idle row's writes (declaring idle and busy, the idle tick) run with
    /// `synchronous_commit` off for their own transaction only: inside a transaction the
    /// setting reads `off` after each of them, and the session's own setting is untouched once
    /// it ends. The writes themselves still do what they did.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_the_idle_rows_writes_do_not_wait_for_the_flush_and_change_no_session() {
        use super::{render, IDLE_OFF, IDLE_ON, IDLE_TICK};
        use crate::relay::Wakeups as _;
        let db = outbox_testkit::fresh_pg().await;
        let outbox = Outbox::new(db.pool.clone());
        outbox.migrate().await.unwrap();
        let tables = outbox.tables().clone();
        let ttl = std::time::Duration::from_secs(60);
        let rows = |pool: sqlx::PgPool| async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM outbox_relay_idle WHERE owner = 'r1' AND until > now()",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        };
        outbox.set_idle("r1", true, ttl).await.unwrap();
        assert_eq!(rows(db.pool.clone()).await, 1, "declared idle");
        outbox.set_idle("r1", false, ttl).await.unwrap();
        assert_eq!(rows(db.pool.clone()).await, 0, "declared busy");

        let mut conn = db.pool.acquire().await.unwrap();
        async fn setting(c: &mut sqlx::PgConnection) -> sqlx::Result<String> {
            sqlx::query_scalar("SELECT current_setting('synchronous_commit')").fetch_one(c).await
        }
        assert_eq!(setting(&mut conn).await.unwrap(), "on", "the server's default");
        for (name, sql) in [("on", IDLE_ON), ("tick", IDLE_TICK), ("off", IDLE_OFF)] {
            sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
            let sql = render(&tables, sql);
            let q = sqlx::query(&sql).bind("r1");
            let q = if name == "off" { q } else { q.bind(60_000_i64) };
            q.execute(&mut *conn).await.map_err(|e| format!("{name}: {e}")).unwrap();
            assert_eq!(setting(&mut conn).await.unwrap(), "off", "{name}: for its own transaction");
            sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();
            assert_eq!(setting(&mut conn).await.unwrap(), "on", "{name}: the session keeps its own");
            let want = if name == "off" { 0 } else { 1 };
            assert_eq!(rows(db.pool.clone()).await, want, "{name}: written");
        }
        drop(conn);
        db.drop_db().await;
    }

    /// Whether `EXPLAIN ANALYZE` of a statement on `conn` reports JIT compilation.
    async fn compiles(conn: &mut sqlx::PgConnection) -> bool {
        let plan: serde_json::Value = sqlx::query_scalar(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM outbox_message WHERE id > 0",
        )
        .fetch_one(conn)
        .await
        .unwrap();
        plan[0].get("JIT").is_some()
    }

    /// A locked claim's transaction (the claim, its runs' read, the settlement) is never
    /// JIT-compiled, however high the plans' estimated costs: here every statement of the
    /// database is above `jit_above_cost` (0), and one outside the claim is compiled, on a
    /// server that has JIT.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_a_locked_claim_is_never_jit_compiled() {
        let db = outbox_testkit::fresh_pg().await;
        sqlx::query(&format!("ALTER DATABASE {} SET jit = on", db.name)).execute(&db.pool).await.unwrap();
        sqlx::query(&format!("ALTER DATABASE {} SET jit_above_cost = 0", db.name))
            .execute(&db.pool)
            .await
            .unwrap();
        // New connections read the database's settings.
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&db.url).await.unwrap();
        let outbox = Outbox::new(pool.clone());
        outbox.migrate().await.unwrap();
        let available: bool = sqlx::query_scalar("SELECT pg_jit_available()").fetch_one(&pool).await.unwrap();
        let mut conn = pool.acquire().await.unwrap();
        assert_eq!(
            compiles(&mut conn).await,
            available,
            "outside a claim, JIT follows the server's settings"
        );
        drop(conn);

        let id = outbox.enqueue(&crate::NewMessage::new("t", "{}")).await.unwrap().id;
        let claim = outbox
            .claim_with(ClaimMode::Lock, "relay", 10, std::time::Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(claim.messages.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id]);
        let Hold::Lock(mut lock) = claim.hold else { panic!("a locked claim holds row locks") };
        let jit: String =
            sqlx::query_scalar("SELECT current_setting('jit')").fetch_one(&mut *lock.tx).await.unwrap();
        assert_eq!(jit, "off");
        assert!(!compiles(&mut lock.tx).await, "nothing in the claim's transaction is compiled");
        let settlement = Settlement { sent: vec![id], messages: Vec::new(), deliveries: Vec::new() };
        let report = outbox.settle_held(Hold::Lock(lock), "relay", &settlement).await.unwrap();
        assert_eq!(report.settled, 1);
        // `SET LOCAL`: the connection is back to the database's settings for its next user.
        let mut conn = pool.acquire().await.unwrap();
        let jit: String =
            sqlx::query_scalar("SELECT current_setting('jit')").fetch_one(&mut *conn).await.unwrap();
        assert_eq!(jit, "on");
        assert_eq!(compiles(&mut conn).await, available);
        drop(conn);
        drop((outbox, pool));
        db.drop_db().await;
    }
}
