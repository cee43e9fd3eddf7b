//! The claim against real PostgreSQL, real MariaDB/MySQL and a SQLite file, when a long backlog
//! of one busy key sits in front of other messages: the heads of the other keys and the messages
//! without a key are claimed at once, not after the busy key's backlog (found by the chaos suite:
//! the claim used to read every held-back row, and a windowed claim must not starve what lies
//! behind the window).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::time::Duration;

use outbox_store::{
    ClaimMode, Claims, Hold, MessageId, MessageWrite, NewMessage, Outbox, OutboxDatabase, OutboxMessage,
    Settlement, Status,
};

const LEASE: Duration = Duration::from_secs(30);

/// A claim held by row locks: the messages and the hold, `None` when nothing was claimable.
async fn lock<S: Claims>(
    store: &S,
    owner: &str,
    limit: usize,
) -> Option<(Vec<OutboxMessage>, Hold<S::Lock>)> {
    let c = store.claim_with(ClaimMode::Lock, owner, limit, LEASE).await.unwrap();
    (!c.messages.is_empty()).then_some((c.messages, c.hold))
}

/// One test per dialect and generic test named: each runs on a fresh, migrated database.
macro_rules! suite {
    ([$($dialect:ident = $fresh:path),+], $tests:tt) => {
        $(suite!($dialect, $fresh, $tests);)+
    };
    ($dialect:ident, $fresh:path, [$($test:ident),+ $(,)?]) => {
        mod $dialect {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let db = $fresh().await;
                    let outbox = outbox_store::Outbox::new(db.pool.clone());
                    outbox.migrate().await.unwrap();
                    super::$test(&outbox).await;
                    drop(outbox);
                    db.drop_db().await;
                }
            )+
        }
    };
}

async fn heads_behind_a_busy_keys_backlog_are_claimed_at_once<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    // 1,200 messages on two busy keys, far more than the claim's window...
    let mut busy = Vec::new();
    for chunk in 0..12 {
        let mut tx = outbox.begin().await.unwrap();
        for i in 0..100 {
            let n = chunk * 100 + i;
            let m = NewMessage::new("t", "{}").key(format!("busy-{}", n % 2));
            busy.push(tx.enqueue(&m).await.unwrap().id);
        }
        tx.commit().await.unwrap();
    }
    // ...then a message of a quiet key and one without a key.
    let quiet = outbox.enqueue(&NewMessage::new("t", "{}").key("quiet")).await.unwrap().id;
    let keyless = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;

    let first: HashSet<MessageId> =
        outbox.claim("relay-a", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
    let expected: HashSet<MessageId> = [busy[0], busy[1], quiet, keyless].into_iter().collect();
    assert_eq!(first, expected, "the heads of every key and the keyless message");

    // With every head in flight, nothing else is claimable: the busy keys' later
    // messages wait for their heads.
    let second = outbox.claim("relay-b", 10, LEASE).await.unwrap();
    assert!(second.is_empty(), "{:?}", second.iter().map(|m| m.id).collect::<Vec<_>>());
}

/// Locked claims (PostgreSQL, MySQL/MariaDB): the rows stay `pending` and locked until the
/// settlement commits. Meanwhile a second claimer, locked or leased, takes neither those rows
/// nor the younger messages of their keys; dropping the claim rolls back and leaves the rows
/// exactly as they were; settling writes the outcomes once.
async fn a_locked_claim_holds_its_rows_and_keys_until_it_settles<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    let mut ids = Vec::new();
    for i in 0..6 {
        let m = NewMessage::new("t", "{}").key(format!("k{}", i % 3));
        ids.push(outbox.enqueue(&m).await.unwrap().id);
    }
    let keyless = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;

    // Takes two: the heads of k0 and k1 (id order).
    let (first, claim) = lock(outbox, "relay-a", 2).await.expect("claimed");
    let first_ids: Vec<MessageId> = first.iter().map(|m| m.id).collect();
    assert_eq!(first_ids, vec![ids[0], ids[1]]);
    assert!(matches!(claim, Hold::Lock(_)), "held by row locks, not a lease");
    for id in &first_ids {
        let m = outbox.get(*id).await.unwrap().unwrap();
        assert_eq!((m.status, m.lease_owner), (Status::Pending, None), "nothing written");
    }

    // Another relay gets k2's head and the keyless message; not the locked rows,
    // not k0's or k1's younger messages.
    let leased: HashSet<MessageId> =
        outbox.claim("relay-b", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(leased, [ids[2], keyless].into_iter().collect::<HashSet<_>>());
    let none = lock(outbox, "relay-c", 10).await;
    assert!(none.is_none(), "{:?}", none.map(|(b, _)| b.iter().map(|m| m.id).collect::<Vec<_>>()));

    // Dropped: rolled back, the rows are as they were and claimable again.
    drop(claim);
    let (again, claim) = loop {
        if let Some(c) = lock(outbox, "relay-a", 2).await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(again.iter().map(|m| m.id).collect::<Vec<_>>(), first_ids);
    assert!(again.iter().all(|m| m.attempts == 0));

    // Settled: ids[0] sent, ids[1] retried later with its error.
    let settlement = Settlement {
        sent: vec![ids[0]],
        messages: vec![MessageWrite {
            id: ids[1],
            status: Status::Pending,
            attempts: 1,
            retry_in: Duration::from_secs(60),
            last_error: Some("broker said no".into()),
            attempted: true,
        }],
        deliveries: Vec::new(),
    };
    let report = outbox.settle_held(claim, "relay-a", &settlement).await.unwrap();
    assert_eq!((report.settled, report.lost_lease.len()), (2, 0));
    let sent = outbox.get(ids[0]).await.unwrap().unwrap();
    assert_eq!((sent.status, sent.updated_by.as_deref()), (Status::Sent, Some("relay-a")));
    let retried = outbox.get(ids[1]).await.unwrap().unwrap();
    assert_eq!((retried.status, retried.attempts), (Status::Pending, 1));
    assert_eq!(retried.last_error.as_deref(), Some("broker said no"));

    // k0's next message is free now; k1's waits behind its retried head; k2's behind
    // relay-b's lease.
    let (next, claim) = lock(outbox, "relay-a", 10).await.expect("k0 is free");
    assert_eq!(next.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[3]]);
    drop(claim);
}

/// A claimer that freezes with its connection open (its host stopped, the network
/// cut without a reset) holds its rows for `lease`, not for as long as the server
/// keeps an idle connection (8 hours by MySQL's default `wait_timeout`): the
/// database ends its transaction, another relay takes the rows, and the frozen
/// claimer's late settlement writes nothing.
async fn a_frozen_claimer_loses_its_rows_after_the_lease<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    // A first claim, settled: the frozen one is not this outbox's first (MariaDB's claims set
    // the bound in their BEGIN's round trip once one has seen the server has it).
    let first = outbox.enqueue(&NewMessage::new("t", "{}").key("first")).await.unwrap().id;
    let claim = outbox.claim_with(ClaimMode::Lock, "first", 10, Duration::from_secs(1)).await.unwrap();
    assert_eq!(claim.messages.iter().map(|m| m.id).collect::<Vec<_>>(), vec![first]);
    let sent = Settlement { sent: vec![first], messages: Vec::new(), deliveries: Vec::new() };
    outbox.settle_held(claim.hold, "first", &sent).await.unwrap();
    let id = outbox.enqueue(&NewMessage::new("t", "{}").key("k")).await.unwrap().id;
    let frozen = outbox.claim_with(ClaimMode::Lock, "frozen", 10, Duration::from_secs(1)).await.unwrap();
    assert_eq!(frozen.messages.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id]);
    let slot = std::sync::Mutex::new(None);
    outbox_testkit::eventually_within(
        Duration::from_secs(30),
        "another relay's claim of the rows (still held after 30 s, lease 1 s)",
        || async {
            let claimed = lock(outbox, "heir", 10).await;
            let got = claimed.is_some();
            *slot.lock().unwrap() = claimed;
            got
        },
    )
    .await;
    let (taken, hold) = slot.into_inner().unwrap().unwrap();
    assert_eq!(taken.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id]);
    let settlement = |sent| Settlement { sent: vec![sent], messages: Vec::new(), deliveries: Vec::new() };
    let late = outbox.settle_held(frozen.hold, "frozen", &settlement(id)).await;
    assert!(late.is_err(), "the frozen claimer's transaction is gone: {late:?}");
    outbox.settle_held(hold, "heir", &settlement(id)).await.unwrap();
    let m = outbox.get(id).await.unwrap().unwrap();
    assert_eq!((m.status, m.updated_by.as_deref()), (Status::Sent, Some("heir")));
}

/// Per-key runs (`claim_runs`, locked): a key's head brings the due messages behind it in the
/// same claim, in id order, at most `run` per key; a run stops before a message that is not due
/// and takes nothing after it. Another relay, locked or leased, takes nothing of those keys.
/// A run settled in part (the relay puts back what a failure held back) continues from its new
/// head in the next claim.
async fn a_keys_run_comes_with_its_head<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    runs_in(outbox, ClaimMode::Lock).await;
}

/// The same with leases (SQLite's only claim; the lease claims of MySQL/MariaDB and PostgreSQL):
/// the run is leased with its head (in the same transaction, or on PostgreSQL right after the
/// heads' own statement, behind heads no other claim can take).
async fn a_leased_run_comes_with_its_head<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    runs_in(outbox, ClaimMode::Lease).await;
}

async fn runs_in<DB: OutboxDatabase>(outbox: &Outbox<DB>, mode: ClaimMode)
where
    Outbox<DB>: Claims,
{
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let mut a = Vec::new();
    for _ in 0..4 {
        a.push(enqueue(NewMessage::new("t", "{}").key("a")).await);
    }
    let b1 = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let b2 = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let b3 = enqueue(NewMessage::new("t", "{}").key("b").delay(Duration::from_secs(3600))).await;
    let b4 = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let keyless = enqueue(NewMessage::new("t", "{}")).await;

    let claimed = outbox.claim_runs(mode, "relay-a", 100, 3, LEASE).await.unwrap();
    let ids: Vec<MessageId> = claimed.messages.iter().map(|m| m.id).collect();
    assert_eq!(ids, [a[0], a[1], a[2], b1, b2, keyless], "runs of 3 at most, up to b's delayed message");
    assert!(!ids.contains(&b4), "nothing after a message that is not due");
    if mode == ClaimMode::Lock {
        assert!(matches!(claimed.hold, Hold::Lock(_)));
    } else {
        assert!(matches!(claimed.hold, Hold::Lease));
        for id in &ids {
            let m = outbox.get(*id).await.unwrap().unwrap();
            assert_eq!((m.status, m.lease_owner.as_deref()), (Status::Sending, Some("relay-a")), "{id:?}");
        }
    }

    let other = lock(outbox, "relay-b", 100).await;
    assert!(other.is_none(), "{:?}", other.map(|(b, _)| b.iter().map(|m| m.id).collect::<Vec<_>>()));
    let leased = outbox.claim("relay-c", 100, LEASE).await.unwrap();
    assert!(leased.is_empty(), "{:?}", leased.iter().map(|m| m.id).collect::<Vec<_>>());

    // a[2] is held back by the relay (as after a failure of an older message): put back.
    let settlement = Settlement {
        sent: vec![a[0], a[1], b1, b2, keyless],
        messages: vec![MessageWrite {
            id: a[2],
            status: Status::Pending,
            attempts: 0,
            retry_in: Duration::ZERO,
            last_error: None,
            attempted: false,
        }],
        deliveries: Vec::new(),
    };
    let report = outbox.settle_held(claimed.hold, "relay-a", &settlement).await.unwrap();
    assert_eq!(report.settled, 6);
    let next = outbox.claim_runs(mode, "relay-a", 100, 3, LEASE).await.unwrap();
    assert_eq!(next.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [a[2], a[3]]);
    let claimed_as = if mode == ClaimMode::Lock { Status::Pending } else { Status::Sending };
    assert!(next.messages.iter().all(|m| m.attempts == 0 && m.status == claimed_as));
    for id in [b3, b4] {
        let m = outbox.get(id).await.unwrap().unwrap();
        assert_eq!(
            (m.status, m.attempts),
            (Status::Pending, 0),
            "b's delayed message and the one behind it wait"
        );
    }
}

/// `Claimed::left_behind` of a locked claim (what lets an idle relay skip the claim after a
/// batch): false when the claim saw every due message and none waits behind one of its keys;
/// true when a due message waits behind one of the claim's keys (it may head its key once the
/// batch settles) or when the batch was full.
async fn a_locked_claim_tells_whether_it_left_messages_behind<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let claim = |limit: usize| async move {
        outbox.claim_runs(ClaimMode::Lock, "relay-a", limit, 1, LEASE).await.unwrap()
    };
    let settle = |c: outbox_store::Claimed<<Outbox<DB> as Claims>::Lock>| async move {
        let sent = c.messages.iter().map(|m| m.id).collect();
        outbox.settle_held(c.hold, "relay-a", &Settlement { sent, ..Settlement::default() }).await.unwrap();
    };

    // Every due message taken, each the head of its own key or without one: nothing behind.
    let a = enqueue(NewMessage::new("t", "{}").key("a")).await;
    let none = enqueue(NewMessage::new("t", "{}")).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [a, none]);
    assert!(!c.left_behind, "every due message was taken, none held back");
    settle(c).await;

    // A younger message of a claimed key waits behind it (runs of one: heads only).
    let a1 = enqueue(NewMessage::new("t", "{}").key("a")).await;
    let a2 = enqueue(NewMessage::new("t", "{}").key("a")).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [a1]);
    assert!(c.left_behind, "{a2:?} waits behind {a1:?}");
    settle(c).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [a2]);
    assert!(!c.left_behind);
    settle(c).await;

    // A full batch may leave more behind.
    let b = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let _c2 = enqueue(NewMessage::new("t", "{}").key("c")).await;
    let c = claim(1).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [b]);
    assert!(c.left_behind, "a full batch");
    settle(c).await;
    // What that batch left (c2): out of the way of the cases below.
    let c = claim(10).await;
    settle(c).await;

    // A message another batch holds is in flight, not behind: a claim beside that batch leaves
    // nothing behind (and reads no followers: on PostgreSQL it counted the row it skipped as
    // held back, a round trip on most claims of a trickle).
    let x = enqueue(NewMessage::new("t", "{}").key("x")).await;
    let in_flight = claim(1).await;
    assert_eq!(in_flight.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [x]);
    // A claim beside it that takes nothing says so too (the late wake-up for a message an
    // earlier claim took): its batch's settlement makes nothing claimable.
    let c = claim(10).await;
    assert!(c.messages.is_empty(), "{x:?} is in flight");
    assert!(!c.left_behind, "only {x:?} is due, and it is in flight");
    let y = enqueue(NewMessage::new("t", "{}").key("y")).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [y]);
    assert!(!c.left_behind, "{x:?} is in flight, nothing waits behind this claim's keys");
    settle(c).await;
    // An empty claim that held a younger message back behind the batch in flight: once that
    // batch settles, the younger one heads its key.
    let x2 = enqueue(NewMessage::new("t", "{}").key("x")).await;
    let c = claim(10).await;
    assert!(c.messages.is_empty(), "{x2:?} waits behind {x:?}");
    assert!(c.left_behind, "{x2:?} waits behind {x:?}, in flight");
    settle(in_flight).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [x2]);
    settle(c).await;

    // A due message behind a head that is not due waits for time, not for this batch.
    let _late = enqueue(NewMessage::new("t", "{}").key("late").delay(Duration::from_secs(60))).await;
    let late_next = enqueue(NewMessage::new("t", "{}").key("late")).await;
    let z = enqueue(NewMessage::new("t", "{}").key("z")).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [z]);
    assert!(!c.left_behind, "{late_next:?} waits for its key's head to be due, not for this batch");
    settle(c).await;

    // A message without a key and one whose key is that message's id written as text are two
    // keys: both are heads, taken in one claim, nothing behind (PostgreSQL grouped the window by
    // the key or else the id as text, so the two were one key and the younger waited a claim).
    let keyless = enqueue(NewMessage::new("t", "{}")).await;
    let id_as_key = enqueue(NewMessage::new("t", "{}").key(keyless.0.to_string())).await;
    let c = claim(10).await;
    assert_eq!(c.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [keyless, id_as_key]);
    assert!(!c.left_behind, "each key once, every due message taken");
    settle(c).await;
}

/// A locked claim beside a batch in flight (PostgreSQL and MySQL/MariaDB lock first, then
/// check the head): it skips the rows the other batch holds without counting them, fills its
/// limit with the next heads in due order, and never takes a due message whose key's head is
/// not due (that row is locked, found not to head its key, and left out).
async fn a_locked_claim_beside_a_batch_in_flight_takes_the_next_heads<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    // A key whose head is not due for a minute, then a younger message of it that is due.
    let late_head =
        outbox.enqueue(&NewMessage::new("t", "{}").key("late").delay(Duration::from_secs(60))).await;
    let late_head = late_head.unwrap().id;
    let late_next = outbox.enqueue(&NewMessage::new("t", "{}").key("late")).await.unwrap().id;
    // Ten keys, three messages each, interleaved: ids of k0..k9, then again, then again.
    let mut ids = Vec::new();
    for _round in 0..3 {
        let mut tx = outbox.begin().await.unwrap();
        for k in 0..10 {
            ids.push(tx.enqueue(&NewMessage::new("t", "{}").key(format!("k{k}"))).await.unwrap().id);
        }
        tx.commit().await.unwrap();
    }
    let got = |batch: &[OutboxMessage]| batch.iter().map(|m| m.id).collect::<Vec<_>>();

    let (a, hold_a) = lock(outbox, "relay-a", 4).await.expect("the first heads");
    assert_eq!(got(&a), ids[0..4].to_vec(), "the heads of k0..k3, in due order");
    let (b, hold_b) = lock(outbox, "relay-b", 4).await.expect("the next heads");
    assert_eq!(got(&b), ids[4..8].to_vec(), "k4..k7: the held rows skipped, not counted");
    let (c, hold_c) = lock(outbox, "relay-c", 10).await.expect("the last heads");
    assert_eq!(
        got(&c),
        ids[8..10].to_vec(),
        "k8 and k9 only: every other key's head is in flight or not due"
    );
    assert!(!got(&c).contains(&late_next) && !got(&c).contains(&late_head));
    // With every head held, nothing more.
    let none = lock(outbox, "relay-d", 10).await;
    assert!(none.is_none(), "{:?}", none.map(|(m, _)| got(&m)));
    drop((hold_a, hold_b, hold_c));
}

/// A claim told which messages were just committed (the commit signal's ids, a hint) claims
/// them by id and looks at nothing else (so it says messages may be left behind): never one out
/// of its key's order, one not due, or one another claim holds. When none of them can go, it
/// claims the window; with more of them than the batch holds (a backlog), too.
async fn a_claim_of_committed_ids_keeps_key_order_and_looks_no_further<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
) where
    Outbox<DB>: Claims,
{
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let older = enqueue(NewMessage::new("t", "{}").key("other")).await;
    let k1 = enqueue(NewMessage::new("t", "{}").key("k")).await;
    let k2 = enqueue(NewMessage::new("t", "{}").key("k")).await;
    let later = enqueue(NewMessage::new("t", "{}").key("later").delay(Duration::from_secs(60))).await;
    let j1 = enqueue(NewMessage::new("t", "{}").key("j")).await;
    let free = enqueue(NewMessage::new("t", "{}")).await;
    let got = |c: &outbox_store::Claimed<<Outbox<DB> as Claims>::Lock>| {
        c.messages.iter().map(|m| m.id).collect::<Vec<_>>()
    };

    let committed = [k2, later, j1, free, MessageId(i64::MAX)];
    let a = outbox.claim_committed(ClaimMode::Lock, "relay-a", &committed, 10, 1, LEASE).await.unwrap();
    let a_ids = got(&a);
    assert!(!a_ids.contains(&k2), "k2 waits behind k1: {a_ids:?}");
    assert!(!a_ids.contains(&later), "not due: {a_ids:?}");
    assert!(a.left_behind, "a claim by id looked at nothing else");
    assert!(matches!(a.hold, Hold::Lock(_)));
    assert_eq!(a_ids, vec![j1, free], "the committed ids that may go, nothing else");

    // Held by the first claim, the same ids give nothing: the second claim takes the window's
    // heads instead.
    let b = outbox.claim_committed(ClaimMode::Lock, "relay-b", &[j1, free], 10, 1, LEASE).await.unwrap();
    assert_eq!(got(&b), vec![older, k1]);
    // Settled with nothing to write: committed, the rows free again (and still `pending`) once
    // the calls return.
    for (c, owner) in [(a, "relay-a"), (b, "relay-b")] {
        outbox.settle_held(c.hold, owner, &Settlement::default()).await.unwrap();
    }

    // More ids than the batch holds: a backlog, claimed by the window in due order.
    let c = outbox.claim_committed(ClaimMode::Lock, "relay-c", &[j1, free], 1, 1, LEASE).await.unwrap();
    assert_eq!(got(&c), vec![older]);
}

/// A claim by id alone (`Claims::claim_ids`, the relay's lane) takes the ids that may go, each
/// the head of its key and due, and nothing else: when none of them can go it takes nothing,
/// although other messages are due (no window, unlike `claim_committed`), and it brings no run
/// behind a head. With a lease it takes nothing.
async fn a_claim_by_id_alone_takes_nothing_it_was_not_named<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let older = enqueue(NewMessage::new("t", "{}").key("other")).await;
    let k1 = enqueue(NewMessage::new("t", "{}").key("k")).await;
    let k2 = enqueue(NewMessage::new("t", "{}").key("k")).await;
    let later = enqueue(NewMessage::new("t", "{}").key("later").delay(Duration::from_secs(60))).await;
    let free = enqueue(NewMessage::new("t", "{}")).await;
    let got = |c: &outbox_store::Claimed<<Outbox<DB> as Claims>::Lock>| {
        c.messages.iter().map(|m| m.id).collect::<Vec<_>>()
    };

    // None of these may go: k2 waits behind k1, `later` is not due, the last is no message.
    let none =
        outbox.claim_ids(ClaimMode::Lock, "relay-a", &[k2, later, MessageId(i64::MAX)], 10, LEASE).await;
    let none = none.unwrap();
    assert_eq!(got(&none), Vec::<MessageId>::new(), "no window behind the ids");
    assert!(matches!(none.hold, Hold::Lease), "no transaction kept");
    // No ids at all: nothing either.
    assert!(outbox.claim_ids(ClaimMode::Lock, "relay-a", &[], 10, LEASE).await.unwrap().messages.is_empty());
    // With a lease: nothing, whatever the ids.
    let leased = outbox.claim_ids(ClaimMode::Lease, "relay-a", &[k1, free], 10, LEASE).await.unwrap();
    assert!(leased.messages.is_empty(), "{:?}", got(&leased));

    // k1 heads its key: taken alone, without k2 behind it, and `free`; not `older`.
    let a = outbox.claim_ids(ClaimMode::Lock, "relay-a", &[k1, free], 10, LEASE).await.unwrap();
    assert_eq!(got(&a), vec![k1, free]);
    assert!(matches!(a.hold, Hold::Lock(_)));
    assert!(a.after.is_empty() && !a.runs_cut, "no run");
    // Held by that claim, the same ids give nothing, and still no window.
    let b = outbox.claim_ids(ClaimMode::Lock, "relay-b", &[k1, free], 10, LEASE).await.unwrap();
    assert_eq!(got(&b), Vec::<MessageId>::new());
    outbox.settle_held(a.hold, "relay-a", &Settlement::default()).await.unwrap();
    // The window is still there for a claim that looks: `older` first.
    let c = outbox.claim_committed(ClaimMode::Lock, "relay-c", &[], 1, 1, LEASE).await.unwrap();
    assert_eq!(got(&c), vec![older]);
}

/// A message's creation time moved an hour back (a message committed long ago).
trait Backdate {
    async fn backdate(&self, id: MessageId);
}

impl Backdate for Outbox<sqlx::Postgres> {
    async fn backdate(&self, id: MessageId) {
        let sql = "UPDATE outbox_message SET created_at = created_at - interval '1 hour' WHERE id = $1";
        assert_eq!(sqlx::query(sql).bind(id.0).execute(self.pool()).await.unwrap().rows_affected(), 1);
    }
}

impl Backdate for Outbox<sqlx::MySql> {
    async fn backdate(&self, id: MessageId) {
        let sql = "UPDATE outbox_message SET created_at = created_at - INTERVAL 1 HOUR WHERE id = ?";
        assert_eq!(sqlx::query(sql).bind(id.0).execute(self.pool()).await.unwrap().rows_affected(), 1);
    }
}

/// `Claims::newer_than`: without a start, where the messages end, and the `pending` ones among
/// the newest created in the last `LOOK_BACK` named; from a start, the messages after it in id
/// order, the due `pending` ones named, and a start for the next look past every message seen,
/// sent ones included; ids below the start looked at again are read too.
async fn a_look_at_newer_messages_names_the_due_ones_after_its_start<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims + Backdate,
{
    let newer = |due: &[MessageId], later: &[MessageId], seen: &[MessageId], newest: Option<MessageId>| {
        outbox_store::Newer { due: due.to_vec(), later: later.to_vec(), seen: seen.to_vec(), newest }
    };
    let empty = outbox.newer_than(None, &[], 10).await.unwrap();
    assert_eq!(empty, newer(&[], &[], &[], None), "an empty table");
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let before = enqueue(NewMessage::new("t", "{}").key("k")).await;
    let start = outbox.newer_than(None, &[], 10).await.unwrap();
    assert_eq!(start, newer(&[before], &[], &[before], Some(before)), "committed just now: named");

    let a = enqueue(NewMessage::new("t", "{}").key("a")).await;
    let sent = enqueue(NewMessage::new("t", "{}").key("s")).await;
    let later = enqueue(NewMessage::new("t", "{}").delay(Duration::from_secs(60))).await;
    let b = enqueue(NewMessage::new("t", "{}")).await;
    // `sent` is claimed and settled sent: seen, not named.
    let c = outbox.claim_ids(ClaimMode::Lock, "relay-a", &[sent], 10, LEASE).await.unwrap();
    assert_eq!(c.messages.len(), 1);
    let s = Settlement { sent: vec![sent], ..Settlement::default() };
    outbox.settle_held(c.hold, "relay-a", &s).await.unwrap();

    // `later` is pending and not due: named as such.
    let seen = outbox.newer_than(Some(before), &[], 10).await.unwrap();
    assert_eq!(seen, newer(&[a, b], &[later], &[a, sent, later, b], Some(b)));
    // At most `limit` messages: the next look starts after the last one seen.
    let two = outbox.newer_than(Some(before), &[], 2).await.unwrap();
    assert_eq!(two, newer(&[a], &[], &[a, sent], Some(sent)));
    let rest = outbox.newer_than(two.newest, &[], 2).await.unwrap();
    assert_eq!(rest, newer(&[b], &[later], &[later, b], Some(b)));
    // Nothing newer: the start stays. Ids below it looked at again are read (one that is no
    // message is not seen).
    let nothing = outbox.newer_than(Some(b), &[], 10).await.unwrap();
    assert_eq!(nothing, newer(&[], &[], &[], Some(b)));
    let again = outbox.newer_than(Some(b), &[a, sent, later, MessageId(b.0 + 100)], 10).await.unwrap();
    assert_eq!(again, newer(&[a], &[later], &[a, sent, later], Some(b)));

    // Without a start: the newest `limit` messages read back from the end; of those, the
    // `pending` ones created in the last `LOOK_BACK` named (due or not yet), not one created
    // long ago (the claim loop's) nor a sent one.
    let x = enqueue(NewMessage::new("t", "{}").key("x")).await;
    let old = enqueue(NewMessage::new("t", "{}").key("o")).await;
    outbox.backdate(old).await;
    let soon = enqueue(NewMessage::new("t", "{}").delay(Duration::from_secs(60))).await;
    let fresh = enqueue(NewMessage::new("t", "{}").key("f")).await;
    let back = outbox.newer_than(None, &[], 4).await.unwrap();
    assert_eq!(back, newer(&[x, fresh], &[soon], &[x, old, soon, fresh], Some(fresh)));
    let back = outbox.newer_than(None, &[], 2).await.unwrap();
    assert_eq!(back, newer(&[fresh], &[soon], &[soon, fresh], Some(fresh)));
}

/// Locked claims (PostgreSQL, MySQL/MariaDB): a key's run cut at the run's length is continued by the same
/// relay's next claim while the first is in flight, from the newest message it holds, and the
/// continuing claim learns whether the first delivered the key's messages. Another relay takes
/// nothing of the key; a run that reached the end of its key's due messages is not continued.
async fn a_run_cut_at_its_length_is_continued_behind_its_claim<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    Outbox<DB>: Claims,
{
    let enqueue = |m: NewMessage| async move { outbox.enqueue(&m).await.unwrap().id };
    let mut a = Vec::new();
    for _ in 0..10 {
        a.push(enqueue(NewMessage::new("t", "{}").key("a")).await);
    }
    let b1 = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let b2 = enqueue(NewMessage::new("t", "{}").key("b")).await;
    let ids = |c: &outbox_store::Claimed<_>| c.messages.iter().map(|m| m.id).collect::<Vec<_>>();

    let mut first = outbox.claim_runs(ClaimMode::Lock, "relay-a", 100, 4, LEASE).await.unwrap();
    assert_eq!(ids(&first), [a[0], a[1], a[2], a[3], b1, b2]);
    assert!(first.runs_cut, "a's run stopped at 4 of 10");
    assert!(first.after.is_empty());

    let second = outbox.claim_runs(ClaimMode::Lock, "relay-a", 100, 4, LEASE).await.unwrap();
    assert_eq!(ids(&second), [a[4], a[5], a[6], a[7]], "a continued, b (run ended) not");
    assert_eq!(second.after.iter().map(|r| r.key()).collect::<Vec<_>>(), ["a"]);
    assert!(second.runs_cut);

    let other = outbox.claim_runs(ClaimMode::Lock, "relay-b", 100, 4, LEASE).await.unwrap();
    assert!(other.messages.is_empty(), "{:?}", ids(&other));

    // The first claim tells that it delivered a's messages: the second may publish its own.
    let mut waits = second.after;
    first.told.take().unwrap().tell(HashSet::from(["a".to_owned()]));
    assert!(waits[0].delivered(Duration::from_secs(5)).await);

    // A third claim continues from the second's newest (a[7]), to the end of a's due messages.
    let third = outbox.claim_runs(ClaimMode::Lock, "relay-a", 100, 4, LEASE).await.unwrap();
    assert_eq!(ids(&third), [a[8], a[9]]);
    assert!(!third.runs_cut, "a's due messages ended before the run's length");
    let mut after_second: Vec<_> = third.after;
    // The second ends without telling (its batch given up): nothing of a may go in the third.
    drop(second.told);
    assert!(!after_second[0].delivered(Duration::from_secs(5)).await);
    // Settled with nothing to write: committed, the rows free again once the calls return.
    for hold in [third.hold, second.hold, first.hold] {
        outbox.settle_held(hold, "relay-a", &Settlement::default()).await.unwrap();
    }
    let again = outbox.claim_runs(ClaimMode::Lock, "relay-a", 100, 4, LEASE).await.unwrap();
    assert_eq!(ids(&again), [a[0], a[1], a[2], a[3], b1, b2], "every claim settled with nothing written");
    assert!(again.after.is_empty());
}

suite!(
    [postgres_runs = outbox_testkit::fresh_pg, mysql_runs = outbox_testkit::fresh_mysql],
    [a_run_cut_at_its_length_is_continued_behind_its_claim]
);

suite!(
    [postgres = outbox_testkit::fresh_pg, mysql = outbox_testkit::fresh_mysql],
    [
        heads_behind_a_busy_keys_backlog_are_claimed_at_once,
        a_locked_claim_holds_its_rows_and_keys_until_it_settles,
        a_frozen_claimer_loses_its_rows_after_the_lease,
        a_keys_run_comes_with_its_head,
        a_locked_claim_tells_whether_it_left_messages_behind,
        a_locked_claim_beside_a_batch_in_flight_takes_the_next_heads,
        a_claim_of_committed_ids_keeps_key_order_and_looks_no_further,
        a_claim_by_id_alone_takes_nothing_it_was_not_named,
        a_look_at_newer_messages_names_the_due_ones_after_its_start,
    ]
);
suite!(
    [postgres_leased = outbox_testkit::fresh_pg, mysql_leased = outbox_testkit::fresh_mysql],
    [a_leased_run_comes_with_its_head]
);
suite!(
    sqlite,
    outbox_testkit::fresh_sqlite,
    [heads_behind_a_busy_keys_backlog_are_claimed_at_once, a_leased_run_comes_with_its_head]
);

/// MySQL/MariaDB (schema 4): `open_key` is kept by triggers whoever writes the row, so a foreign
/// application's plain INSERT takes part in per-key order, and a finished message stops holding
/// its key back.
/// 70 messages (more than a settlement written in one trip holds) claimed and settled sent by
/// `owner` in one batch; their ids.
async fn settle_more_than_one_trip<DB: OutboxDatabase>(outbox: &Outbox<DB>, owner: &str) -> Vec<MessageId>
where
    Outbox<DB>: Claims,
{
    let mut tx = outbox.begin().await.unwrap();
    let mut many = Vec::new();
    for i in 0..70 {
        many.push(tx.enqueue(&NewMessage::new("t", "{}").key(format!("k{i}"))).await.unwrap().id);
    }
    tx.commit().await.unwrap();
    let (claimed, hold) = lock(outbox, owner, 100).await.expect("claimed");
    assert_eq!(claimed.len(), 70);
    let sent = Settlement { sent: many.clone(), ..Settlement::default() };
    let report = outbox.settle_held(hold, owner, &sent).await.unwrap();
    assert_eq!(report.settled, 70, "{report:?}");
    many
}

/// A message settled sent beside one retried in an hour, in one batch of `owner`'s: the retry is
/// written and not due; the sent message's id.
async fn settle_sent_beside_a_retry<DB: OutboxDatabase>(outbox: &Outbox<DB>, owner: &str) -> MessageId
where
    Outbox<DB>: Claims,
{
    let sent = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    let retried = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    let (claimed, hold) = lock(outbox, owner, 10).await.expect("claimed");
    assert_eq!(claimed.len(), 2);
    let retry = MessageWrite {
        id: retried,
        status: Status::Pending,
        attempts: 1,
        retry_in: Duration::from_secs(3600),
        last_error: Some("broker said no".into()),
        attempted: true,
    };
    let mixed = Settlement { sent: vec![sent], messages: vec![retry], ..Settlement::default() };
    assert_eq!(outbox.settle_held(hold, owner, &mixed).await.unwrap().settled, 2);
    let r = outbox.get(retried).await.unwrap().unwrap();
    assert_eq!((r.status, r.attempts), (Status::Pending, 1));
    assert!(lock(outbox, owner, 10).await.is_none(), "the retry is not due yet");
    sent
}

/// MySQL/MariaDB: a settlement of a few sent messages goes as one text query with the reset of
/// the idle bound (then the `COMMIT`), its ids and owner written in, and records an owner full
/// of quotes, backslashes and non-ASCII exactly, whether `sql_mode` has `NO_BACKSLASH_ESCAPES`
/// or not; a settlement above the one-trip size and a mixed one take the statements' own round
/// trips, with the same outcome; and the session's idle bound is the server's default after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_small_settlement_goes_in_one_query_and_keeps_an_owner_exactly() {
    let db = outbox_testkit::fresh_mysql().await;
    // One connection: the session's `sql_mode` is the claims' and settlements'.
    let pool = sqlx::mysql::MySqlPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let outbox: Outbox<sqlx::MySql> = Outbox::new(pool.clone());
    outbox.migrate().await.unwrap();
    let owner = "relay 'a' \\x\\' ? %s \"b\" caf\u{e9} \u{2603}";
    let by = |id: MessageId| {
        let pool = pool.clone();
        async move {
            // utf8mb4_bin text arrives as bytes.
            let (status, by): (Vec<u8>, Option<Vec<u8>>) =
                sqlx::query_as("SELECT status, updated_by FROM outbox_message WHERE id = ?")
                    .bind(id.0)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            (String::from_utf8(status).unwrap(), by.map(|b| String::from_utf8(b).unwrap()))
        }
    };
    let defaults = || {
        let pool = pool.clone();
        async move {
            let both = "SELECT @@session.wait_timeout = @@global.wait_timeout \
                        AND @@session.idle_transaction_timeout = @@global.idle_transaction_timeout";
            match sqlx::query_scalar::<_, i64>(both).fetch_one(&pool).await {
                Ok(same) => same,
                // MySQL: no idle_transaction_timeout.
                Err(_) => {
                    sqlx::query_scalar::<_, i64>("SELECT @@session.wait_timeout = @@global.wait_timeout")
                        .fetch_one(&pool)
                        .await
                        .unwrap()
                }
            }
        }
    };
    // The one-trip settlement takes no savepoint (nor does a claim without poison); the others do.
    let savepoints = || {
        let pool = pool.clone();
        async move {
            let (_, n): (Vec<u8>, Vec<u8>) =
                sqlx::query_as("SHOW SESSION STATUS LIKE 'Com_savepoint'").fetch_one(&pool).await.unwrap();
            String::from_utf8(n).unwrap().parse::<u64>().unwrap()
        }
    };
    for mode in ["", ",NO_BACKSLASH_ESCAPES"] {
        sqlx::query(&format!("SET SESSION sql_mode = CONCAT(@@global.sql_mode, '{mode}')"))
            .execute(&pool)
            .await
            .unwrap();
        // The first claim learns which variable bounds an idle transaction; each settlement after
        // it is one of a few sent messages.
        for round in 0..3 {
            let id = outbox.enqueue(&NewMessage::new("t", "{}").key(format!("k{round}"))).await.unwrap().id;
            // Counted on the pool's one connection, which the claim holds until it settles.
            let before = savepoints().await;
            let (claimed, hold) = lock(&outbox, owner, 10).await.expect("claimed");
            assert_eq!(claimed.len(), 1);
            let report = outbox
                .settle_held(hold, owner, &Settlement { sent: vec![id], ..Settlement::default() })
                .await
                .unwrap();
            assert_eq!((report.settled, report.lost_lease.len()), (1, 0), "{mode} {round}: {report:?}");
            assert_eq!(savepoints().await, before, "{mode} {round}: written in one query, no savepoint");
            assert_eq!(by(id).await, ("sent".to_owned(), Some(owner.to_owned())), "{mode} {round}");
            assert_eq!(defaults().await, 1, "{mode} {round}: the idle bound is back to the default");
        }
        let before = savepoints().await;
        for id in settle_more_than_one_trip(&outbox, owner).await {
            assert_eq!(by(id).await, ("sent".to_owned(), Some(owner.to_owned())), "{mode}");
        }
        assert!(savepoints().await > before, "{mode}: more than one trip holds are written in a savepoint");
        assert_eq!(defaults().await, 1, "{mode}: the idle bound is back to the default");
        let sent = settle_sent_beside_a_retry(&outbox, owner).await;
        assert_eq!(by(sent).await, ("sent".to_owned(), Some(owner.to_owned())), "{mode}");
    }
    drop(outbox);
    drop(pool);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_open_key_follows_the_status_whoever_writes_it() {
    let db = outbox_testkit::fresh_mysql().await;
    let outbox: Outbox<sqlx::MySql> = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    let open_key = |id: i64| {
        let pool = db.pool.clone();
        async move {
            // utf8mb4_bin text arrives as bytes.
            sqlx::query_scalar::<_, Option<Vec<u8>>>("SELECT open_key FROM outbox_message WHERE id = ?")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
                .map(|b| String::from_utf8(b).unwrap())
        }
    };
    // A foreign insert that even tries to set the column gets the trigger's value.
    let foreign = sqlx::query(
        "INSERT INTO outbox_message (topic, payload, msg_key, open_key) VALUES ('t', '{}', 'k', 'other')",
    )
    .execute(&db.pool)
    .await
    .unwrap()
    .last_insert_id() as i64;
    assert_eq!(open_key(foreign).await.as_deref(), Some("k"));
    let second = outbox.enqueue(&NewMessage::new("t", "{}").key("k")).await.unwrap().id;
    let keyless = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    assert_eq!(open_key(keyless.0).await, None);

    // The foreign row heads key k: the library's younger message waits for it.
    let claimed: Vec<MessageId> = outbox.claim("r", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(claimed, vec![MessageId(foreign), keyless]);
    assert_eq!(open_key(foreign).await.as_deref(), Some("k"), "sending is still open");
    // Once it is sent (here by hand, as an operator would), it no longer holds k back.
    sqlx::query(
        "UPDATE outbox_message SET status = 'sent', lease_owner = NULL, lease_until = NULL WHERE id = ?",
    )
    .bind(foreign)
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(open_key(foreign).await, None);
    let next: Vec<MessageId> = outbox.claim("r", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(next, vec![second]);
    db.drop_db().await;
}

/// MySQL/MariaDB: schema 4 can run again after an attempt that stopped part-way. With binary
/// logging on (MySQL's default) a user without SUPER is refused the second `CREATE TRIGGER`
/// unless `log_bin_trust_function_creators` is set (error 1419); MySQL commits each DDL
/// statement, so the column and the first trigger stay. Once that is fixed, migrating again
/// finishes the version, and the keyed message written before it takes part in per-key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_open_key_migration_finishes_after_an_interrupted_attempt() {
    let db = outbox_testkit::fresh_mysql().await;
    for sql in [
        include_str!("../migrations/mysql/0001_outbox.sql"),
        include_str!("../migrations/mysql/0002_relay_wakeup.sql"),
        include_str!("../migrations/mysql/0003_claim_heads.sql"),
    ] {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
    let before = sqlx::query("INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('t', '{}', 'k')")
        .execute(&db.pool)
        .await
        .unwrap()
        .last_insert_id() as i64;
    // What the refused attempt left: the column and its index, and the first trigger.
    sqlx::raw_sql(
        "ALTER TABLE outbox_message ADD COLUMN open_key VARCHAR(255) NULL, \
             ADD KEY outbox_message_open_head_idx (open_key, id); \
         CREATE TRIGGER outbox_message_open_key_insert BEFORE INSERT ON outbox_message FOR EACH ROW \
             SET NEW.open_key = CASE WHEN NEW.status IN ('pending', 'sending', 'failed') THEN NEW.msg_key END;",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let outbox: Outbox<sqlx::MySql> = Outbox::new(db.pool.clone());
    let report = outbox.migrate().await.expect("migrating again finishes version 4");
    assert_eq!((report.from, report.applied.first()), (3, Some(&4)), "{report:?}");
    let triggers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = DATABASE() \
         AND trigger_name LIKE 'outbox\\_message\\_open\\_key\\_%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(triggers, 2);
    let open_key: Option<Vec<u8>> = sqlx::query_scalar("SELECT open_key FROM outbox_message WHERE id = ?")
        .bind(before)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(open_key.as_deref(), Some(&b"k"[..]), "the backfill covers the row written before");
    // The older message heads key k: a younger one waits behind it.
    let younger = outbox.enqueue(&NewMessage::new("t", "{}").key("k")).await.unwrap().id;
    let claimed: Vec<MessageId> = outbox.claim("r", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(claimed, vec![MessageId(before)]);
    assert!(!claimed.contains(&younger));
    db.drop_db().await;
}

/// MySQL/MariaDB: the walk of every key's head can start from the heads the last walk found
/// (`HeadMemo`, taken when a full walk is slow). Behind a busy key's backlog that fills the
/// window: the walk from the memo finds every remembered key's next head, as a full walk would;
/// a key that opened after the last full walk is found only by the next full walk (the memo's
/// documented blind spot, which is why a full walk still runs at least every second); and
/// nothing ever overtakes an older message of its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_the_walk_from_the_remembered_heads_finds_each_keys_next_head() {
    let db = outbox_testkit::fresh_mysql().await;
    let outbox: Outbox<sqlx::MySql> = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    // 300 messages of one busy key (more than the 256-row window), then two of each quiet key.
    let mut tx = outbox.begin().await.unwrap();
    let mut busy = Vec::new();
    for _ in 0..300 {
        busy.push(tx.enqueue(&NewMessage::new("t", "{}").key("busy")).await.unwrap().id);
    }
    let mut quiet = vec![Vec::new(); 4];
    for _ in 0..2 {
        for (k, ids) in quiet.iter_mut().enumerate() {
            ids.push(tx.enqueue(&NewMessage::new("t", "{}").key(format!("q{k}"))).await.unwrap().id);
        }
    }
    tx.commit().await.unwrap();
    outbox.__walk_heads_from_memo(true);

    let claim_and_send = |owner: &'static str| {
        let outbox = outbox.clone();
        async move {
            let c = outbox.claim_with(ClaimMode::Lease, owner, 10, LEASE).await.unwrap();
            let mut ids: Vec<MessageId> = c.messages.iter().map(|m| m.id).collect();
            ids.sort();
            let sent = Settlement { sent: ids.clone(), messages: Vec::new(), deliveries: Vec::new() };
            outbox.settle_held(c.hold, owner, &sent).await.unwrap();
            ids
        }
    };
    // Nothing remembered yet: a full walk, which the memo keeps.
    let mut want = vec![busy[0], quiet[0][0], quiet[1][0], quiet[2][0], quiet[3][0]];
    assert_eq!(claim_and_send("a").await, want);
    // A new key opens; then the walk from the memo: every remembered key's next head, not the
    // new key's (it is behind the window and was not open at the full walk).
    let new_key = outbox.enqueue(&NewMessage::new("t", "{}").key("new")).await.unwrap().id;
    want = vec![busy[1], quiet[0][1], quiet[1][1], quiet[2][1], quiet[3][1]];
    assert_eq!(claim_and_send("b").await, want, "the next heads, from the memo");
    // The quiet keys are done: the memo drops them, and keeps the busy key.
    assert_eq!(claim_and_send("c").await, vec![busy[2]]);
    // Back to the measured choice (nothing remembered): the next walk is a full one and finds
    // the new key.
    outbox.__walk_heads_from_memo(false);
    assert_eq!(claim_and_send("d").await, vec![busy[3], new_key]);
    db.drop_db().await;
}

/// MySQL/MariaDB: schema 9 rebuilds the key index without the status (`(msg_key, status, id)`
/// to `(msg_key, id)`, so a status change no longer moves the row's entry), keeps every message and
/// per-key order, and can run again after an attempt that stopped between the rebuild and the
/// version row. With the canonical names and with a prefix (the migration finds the index by its
/// rendered name: under a name it did not render, it would skip the rebuild without a word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_key_index_migration_drops_the_status_and_can_run_again() {
    let db = outbox_testkit::fresh_mysql().await;
    for prefix in ["outbox_", "kix_"] {
        let tables = outbox_store::Tables::new(None, prefix).unwrap();
        let outbox: Outbox<sqlx::MySql> = Outbox::new(db.pool.clone()).with_tables(tables).unwrap();
        outbox.migrate().await.unwrap();
        let (table, index) = (format!("{prefix}message"), format!("{prefix}message_open_key_idx"));
        let columns = || {
            let (pool, table, index) = (db.pool.clone(), table.clone(), index.clone());
            async move {
                sqlx::query_scalar::<_, String>(
                    "SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() \
                     AND table_name = ? AND index_name = ? ORDER BY seq_in_index",
                )
                .bind(table)
                .bind(index)
                .fetch_all(&pool)
                .await
                .unwrap()
            }
        };
        // Back to version 8, as a table that has lived before this release, with messages in it.
        sqlx::raw_sql(&format!(
            "ALTER TABLE {table} DROP INDEX {index}, ADD INDEX {index} (msg_key, status, id); \
             DELETE FROM {prefix}schema_migrations WHERE version >= 9"
        ))
        .execute(&db.pool)
        .await
        .unwrap();
        assert_eq!(columns().await, ["msg_key", "status", "id"]);
        let older = outbox.enqueue(&NewMessage::new("t", "{}").key("k")).await.unwrap().id;
        let keyless = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;

        for attempt in ["from version 8", "after a stop between the rebuild and the version row"] {
            let report = outbox.migrate().await.unwrap();
            let later: Vec<i64> = (9..=outbox_store::SCHEMA_VERSION).collect();
            assert_eq!((report.from, &report.applied), (8, &later), "{prefix} {attempt}");
            assert_eq!(columns().await, ["msg_key", "id"], "{prefix} {attempt}");
            sqlx::raw_sql(&format!("DELETE FROM {prefix}schema_migrations WHERE version >= 9"))
                .execute(&db.pool)
                .await
                .unwrap();
        }
        outbox.migrate().await.unwrap();
        outbox.check_schema().await.expect("at the version this build needs");
        // The messages written before are all there, and the younger message of key k still
        // waits behind the older one.
        let younger = outbox.enqueue(&NewMessage::new("t", "{}").key("k")).await.unwrap().id;
        let mut claimed: Vec<MessageId> =
            outbox.claim("r", 10, LEASE).await.unwrap().iter().map(|m| m.id).collect();
        claimed.sort();
        assert_eq!(claimed, vec![older, keyless], "{prefix}");
        assert!(!claimed.contains(&younger));
    }
    db.drop_db().await;
}

/// PostgreSQL: a locked claim's settlement updates its rows in the claim's own transaction, not
/// in a savepoint, when nothing on the table can refuse the update. A row locked by a
/// transaction and updated in a subtransaction gets a MultiXact as the `xmax` of its old version
/// (`HEAP_XMAX_IS_MULTI`, 0x1000), which every later reader resolves through `pg_multixact`: 20%
/// more server CPU per message in a drain of 10^6. Read off the heap page with `pageinspect`, in the
/// test's own database; with the canonical names and with a schema and prefix (the check of
/// the table's triggers and constraints must find the migrations' own under their names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_settled_locked_claim_leaves_no_multixact() {
    let db = outbox_testkit::fresh_pg().await;
    for tables in [outbox_store::Tables::default(), outbox_store::Tables::new(Some("mx_s"), "mx_").unwrap()] {
        let outbox = Outbox::new(db.pool.clone()).with_tables(tables.clone()).unwrap();
        outbox.migrate().await.unwrap();
        let mut ids = Vec::new();
        for i in 0..20 {
            ids.push(outbox.enqueue(&NewMessage::new("t", "{}").key(format!("k{i}"))).await.unwrap().id);
        }
        let (claimed, hold) = lock(&outbox, "relay-a", 20).await.expect("claimed");
        assert_eq!(claimed.len(), 20);
        let settlement = Settlement { sent: ids.clone(), ..Settlement::default() };
        let report = outbox.settle_held(hold, "relay-a", &settlement).await.unwrap();
        assert_eq!(report.settled, 20);
        for id in &ids {
            assert_eq!(outbox.get(*id).await.unwrap().unwrap().status, Status::Sent);
        }
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pageinspect").execute(&db.pool).await.unwrap();
        let table = tables.table(outbox_store::Dialect::Postgres, "outbox_message");
        let (versions, multi): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE t_infomask & 4096 <> 0) \
             FROM heap_page_items(get_raw_page($1, 0)) WHERE t_xmax <> '0'",
        )
        .bind(&table)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(versions >= 20, "{table}: the 20 old versions are on the page: {versions}");
        assert_eq!(multi, 0, "{table}: {multi} of {versions} old versions have a MultiXact xmax");
    }
    db.drop_db().await;
}

/// PostgreSQL: in a backlog, the locked claim's window starts where the last one began
/// (`WindowMemo`), not at the due index's first entry (the entries of messages already sent).
/// What it cannot see is an open message due before that start (a late commit, a writer setting
/// `next_attempt_at` in the past): such a message waits for the next full window, and meanwhile
/// the younger messages of its key wait behind it (the head check does not use the memo), so
/// order holds either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_window_starts_where_the_last_began_and_a_message_before_it_waits_for_a_full_one() {
    let db = outbox_testkit::fresh_pg().await;
    let outbox: Outbox<sqlx::Postgres> = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    outbox.__window_from_memo(true);
    // 300 due messages (more than the 256-row window of a claim of 100), keyless but for the
    // two at 100 and 101, which share a key.
    let mut tx = outbox.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..300 {
        let m = NewMessage::new("t", "{}");
        let m = if i == 100 || i == 101 { m.key("k") } else { m };
        ids.push(tx.enqueue(&m).await.unwrap().id);
    }
    tx.commit().await.unwrap();
    let claim_and_send = |owner: &'static str| {
        let outbox = outbox.clone();
        async move {
            let (claimed, hold) = lock(&outbox, owner, 100).await.expect("claimed");
            let mut got: Vec<MessageId> = claimed.iter().map(|m| m.id).collect();
            got.sort();
            let sent = Settlement { sent: got.clone(), ..Settlement::default() };
            assert_eq!(outbox.settle_held(hold, owner, &sent).await.unwrap().settled, got.len());
            got
        }
    };
    // A full window (nothing remembered yet), full of due rows: its start is remembered.
    assert_eq!(claim_and_send("a").await, ids[..100].to_vec());
    // The message at 100 moves before that start, as a late commit would land there.
    sqlx::query("UPDATE outbox_message SET next_attempt_at = now() - interval '1 hour' WHERE id = $1")
        .bind(ids[100].0)
        .execute(&db.pool)
        .await
        .unwrap();
    // From the remembered start: the next 100 that head their keys. Not the message at 100 (before
    // the start), and not the one at 101 (its key's older message is open).
    assert_eq!(claim_and_send("b").await, ids[102..202].to_vec());
    // A full window finds the message at 100 first; the one at 101 still waits behind it.
    outbox.__window_from_memo(false);
    let mut want = vec![ids[100]];
    want.extend_from_slice(&ids[202..300]);
    assert_eq!(claim_and_send("c").await, want);
    assert_eq!(claim_and_send("d").await, vec![ids[101]]);
    assert!(lock(&outbox, "e", 100).await.is_none(), "everything sent");
    db.drop_db().await;
}

/// A message with every optional field set, text with quotes and non-ASCII: read back through
/// a claim's text-format path, it must equal the row as stored.
fn every_field() -> NewMessage {
    NewMessage::new("orders.created", "{\"total\": 12.5, \"note\": \"caf\u{e9} \u{2603} 'quoted'\"}")
        .key("customer-7")
        .tag("eu")
        .biz("order", "o-1001")
        .header("trace-id", "a b c")
        .max_attempts(9)
        .created_by("svc-a")
}

/// PostgreSQL: the claim by id travels with its `BEGIN` as one simple query, its statement
/// prepared once per connection by name and its rows read in text format. A message claimed that
/// way reads exactly as the table holds it (every column, the times to the microsecond), with
/// the canonical names and with a schema and prefix; a connection that lost the statement
/// (`DEALLOCATE`, as `DISCARD ALL` does) prepares it again within the same claim; and a claim
/// dropped unsettled closes its connection rather than handing it back to the pool inside the
/// transaction, so its rows are free at once and the pool's next connection is a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_by_id_reads_every_column_and_prepares_again_when_its_statement_is_lost() {
    let db = outbox_testkit::fresh_pg().await;
    // One connection: every statement below runs in the session the claims use.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    for tables in
        [outbox_store::Tables::default(), outbox_store::Tables::new(Some("byid_s"), "byid_").unwrap()]
    {
        let outbox = Outbox::new(pool.clone()).with_tables(tables.clone()).unwrap();
        outbox.migrate().await.unwrap();
        let msg = every_field();
        let id = outbox.enqueue(&msg).await.unwrap().id;
        let stored = outbox.get(id).await.unwrap().unwrap();
        let statements = || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, String>(
                    "SELECT name FROM pg_prepared_statements WHERE name LIKE 'outbox\\_claim\\_committed\\_%'",
                )
                .fetch_all(&pool)
                .await
                .unwrap()
            }
        };
        let before = statements().await;
        let pid = || {
            let pool = pool.clone();
            async move { sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(&pool).await.unwrap() }
        };
        let session = pid().await;

        for round in ["prepared on the first claim", "prepared again after DEALLOCATE"] {
            let c = outbox.claim_committed(ClaimMode::Lock, "relay-a", &[id], 10, 1, LEASE).await.unwrap();
            assert_eq!(c.messages, vec![stored.clone()], "{round}: the claim by id reads the row as stored");
            assert!(c.left_behind, "{round}: a claim by id looked at nothing else");
            outbox.settle_held(c.hold, "relay-a", &Settlement::default()).await.unwrap();
            let now = statements().await;
            assert_eq!(now.len(), before.len() + 1, "{round}: one statement of this outbox's: {now:?}");
            assert_eq!(pid().await, session, "{round}: a settled claim hands its connection back");
            let ours: Vec<&String> = now.iter().filter(|n| !before.contains(n)).collect();
            sqlx::query(&format!("DEALLOCATE {}", ours[0])).execute(&pool).await.unwrap();
        }

        // Dropped unsettled: the connection is closed, which ends the transaction; the next
        // claim (on the pool's one connection) takes the message at once, in a new session.
        let c = outbox.claim_committed(ClaimMode::Lock, "relay-a", &[id], 10, 1, LEASE).await.unwrap();
        assert_eq!(c.messages.len(), 1);
        drop(c);
        let again = outbox.claim_committed(ClaimMode::Lock, "relay-b", &[id], 10, 1, LEASE).await.unwrap();
        assert_eq!(
            again.messages,
            vec![stored.clone()],
            "free again once the dropped claim's connection closed"
        );
        outbox
            .settle_held(again.hold, "relay-b", &Settlement { sent: vec![id], ..Settlement::default() })
            .await
            .unwrap();
        assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Sent);
        // Two statements in one transaction would see one transaction id.
        let xid = || {
            let pool = pool.clone();
            async move { sqlx::query_scalar::<_, i64>("SELECT txid_current()").fetch_one(&pool).await.unwrap() }
        };
        assert_ne!(xid().await, xid().await, "the pool's connection is not left inside a transaction");
        assert_ne!(pid().await, session, "the dropped claim's session was closed, not reused");
    }
    drop(pool);
    db.drop_db().await;
}

/// PostgreSQL: a locked claim with no ids to claim by id sends its window's first pass with its
/// `BEGIN` (one simple query, the statement prepared once per connection by name, its rows read
/// in text format). Messages claimed that way read exactly as stored, and the window's statement
/// is prepared again on a session that lost it. The settlement is a statement prepared once per
/// connection whatever its size (one written with its `COMMIT`, planned on every run, cost the
/// server more than the round trip it saved: docs/benchmarks.md, "Tried and not kept: the
/// settlement with its COMMIT"), and an owner full of quotes, backslashes and placeholders is
/// recorded exactly, on a session with `standard_conforming_strings` off (where a backslash in a
/// plain literal is an escape); a settlement of more than a few and a mixed one (a retry beside
/// the sent) likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_window_claim_goes_with_its_begin_and_a_settlement_is_prepared() {
    let db = outbox_testkit::fresh_pg().await;
    // One connection: every statement below runs in the session the claims use.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap();
    let both = [outbox_store::Tables::default(), outbox_store::Tables::new(Some("win_s"), "win_").unwrap()];
    for tables in &both {
        Outbox::new(db.pool.clone()).with_tables(tables.clone()).unwrap().migrate().await.unwrap();
    }
    sqlx::query("SET standard_conforming_strings = off").execute(&pool).await.unwrap();
    let owner = "relay 'a' \\x\\' $1 $2 E'\\n' caf\u{e9}";
    for tables in both {
        let outbox = Outbox::new(pool.clone()).with_tables(tables.clone()).unwrap();
        let table = tables.table(outbox_store::Dialect::Postgres, "outbox_message");
        let msg = every_field();
        let first = outbox.enqueue(&msg).await.unwrap().id;
        let stored = outbox.get(first).await.unwrap().unwrap();
        let statements = || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, String>("SELECT name FROM pg_prepared_statements WHERE name LIKE $1")
                    .bind("outbox\\_claim\\_window\\_%")
                    .fetch_all(&pool)
                    .await
                    .unwrap()
            }
        };
        let before = statements().await;
        for round in ["prepared on the first claim", "prepared again after DEALLOCATE"] {
            let (claimed, hold) = lock(&outbox, owner, 10).await.expect("claimed");
            assert_eq!(
                claimed,
                vec![stored.clone()],
                "{round}: the window's first pass reads the row as stored"
            );
            // Nothing settled: the message is due again.
            outbox.settle_held(hold, owner, &Settlement::default()).await.unwrap();
            let now = statements().await;
            assert_eq!(now.len(), before.len() + 1, "{round}: one statement of this outbox's: {now:?}");
            let ours: Vec<&String> = now.iter().filter(|n| !before.contains(n)).collect();
            sqlx::query(&format!("DEALLOCATE {}", ours[0])).execute(&pool).await.unwrap();
        }

        // The statement a settlement prepares (sqlx's own, by protocol).
        let mark_prepared = || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1",
                )
                .bind("%SET status = 'sent'%")
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        };
        let prepared_before = mark_prepared().await;
        // A settlement of one: the owner exactly as given.
        let (claimed, hold) = lock(&outbox, owner, 10).await.expect("claimed");
        assert_eq!(claimed.len(), 1);
        let report = outbox
            .settle_held(hold, owner, &Settlement { sent: vec![first], ..Settlement::default() })
            .await
            .unwrap();
        assert_eq!((report.settled, report.lost_lease.len()), (1, 0), "{report:?}");
        let by = |id: MessageId| {
            let pool = pool.clone();
            let table = table.clone();
            async move {
                sqlx::query_as::<_, (String, Option<String>)>(&format!(
                    "SELECT status, updated_by FROM {table} WHERE id = $1"
                ))
                .bind(id.0)
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        };
        assert_eq!(by(first).await, ("sent".to_owned(), Some(owner.to_owned())));
        assert_eq!(mark_prepared().await, prepared_before + 1, "a settlement of one: the prepared statement");

        // 70 messages, then a retry beside a sent one: the same outcome, the same statement.
        for id in settle_more_than_one_trip(&outbox, owner).await {
            assert_eq!(by(id).await, ("sent".to_owned(), Some(owner.to_owned())));
        }
        assert_eq!(mark_prepared().await, prepared_before + 1, "70 messages: the same prepared statement");
        let sent = settle_sent_beside_a_retry(&outbox, owner).await;
        assert_eq!(by(sent).await, ("sent".to_owned(), Some(owner.to_owned())));
    }
    drop(pool);
    db.drop_db().await;
}

/// PostgreSQL: a trigger that refuses one row's update, added while the relay still takes the
/// table for plain (it checks every 30 s), fails that row alone: the batch's write fails, its
/// rows are locked again and written one by one, the refused one `failed` with the reason. The
/// next settlement checks the table again and writes in savepoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_row_refused_on_a_table_taken_for_plain_fails_alone() {
    let db = outbox_testkit::fresh_pg().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    // A first settlement finds the table plain.
    let first = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    let (_, hold) = lock(&outbox, "relay-a", 10).await.expect("claimed");
    let sent = Settlement { sent: vec![first], ..Settlement::default() };
    assert_eq!(outbox.settle_held(hold, "relay-a", &sent).await.unwrap().settled, 1);

    sqlx::raw_sql(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.payload = 'poison' AND NEW.status = 'sent' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER test_refuse BEFORE UPDATE ON outbox_message FOR EACH ROW EXECUTE FUNCTION test_refuse()",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let good = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    let bad = outbox.enqueue(&NewMessage::new("t", "poison")).await.unwrap().id;
    let (claimed, hold) = lock(&outbox, "relay-a", 10).await.expect("claimed");
    assert_eq!(claimed.iter().map(|m| m.id).collect::<Vec<_>>(), vec![good, bad]);
    let both = Settlement { sent: vec![good, bad], ..Settlement::default() };
    let report = outbox.settle_held(hold, "relay-a", &both).await.unwrap();
    assert_eq!(report.settled, 1, "{report:?}");
    assert_eq!(report.isolated.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![bad], "{report:?}");
    assert!(report.lost_lease.is_empty(), "{report:?}");
    assert_eq!(outbox.get(good).await.unwrap().unwrap().status, Status::Sent);
    let failed = outbox.get(bad).await.unwrap().unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert!(failed.last_error.unwrap().contains("refused by a trigger"));

    // Checked again: the trigger is seen, the next batch goes through a savepoint and its old
    // version carries a MultiXact (the price of isolating a row with the locks held throughout).
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pageinspect").execute(&db.pool).await.unwrap();
    let multis = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM heap_page_items(get_raw_page('outbox_message', 0)) WHERE t_infomask & 4096 <> 0",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let before = multis().await;
    let more = outbox.enqueue(&NewMessage::new("t", "{}")).await.unwrap().id;
    let (_, hold) = lock(&outbox, "relay-a", 10).await.expect("claimed");
    let one = Settlement { sent: vec![more], ..Settlement::default() };
    assert_eq!(outbox.settle_held(hold, "relay-a", &one).await.unwrap().settled, 1);
    assert_eq!(multis().await, before + 1, "the last settlement went through a savepoint");
    drop(outbox);
    db.drop_db().await;
}

/// The keeper's look (`Keeper::peek`, the quicker looks of a store without push) answers what
/// its idle tick answers, whether a claim could take something, and writes nothing; the tick
/// also refreshes the relay's idle row. `idle_rows` counts the rows of `outbox_relay_idle`.
async fn the_keepers_look_reads_and_its_tick_writes<DB, F, Fut>(outbox: &Outbox<DB>, idle_rows: F)
where
    DB: OutboxDatabase,
    Outbox<DB>: outbox_store::Wakeups + Claims,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    use outbox_store::Wakeups as _;
    let listening =
        outbox.listen(outbox.signal().clone()).await.unwrap().expect("a push channel or a keeper");
    let keeper = listening.keeper().expect("a keeper").clone();
    assert!(!keeper.peek().await.unwrap(), "nothing is due in an empty table");
    assert_eq!(idle_rows().await, 0, "a look writes no idle row");
    assert!(!keeper.idle_tick("r1", Duration::from_secs(3)).await.unwrap());
    assert_eq!(idle_rows().await, 1, "the tick writes the relay's idle row");
    let later =
        outbox.enqueue(&NewMessage::new("t", "later").delay(Duration::from_secs(3600))).await.unwrap().id;
    assert!(!keeper.peek().await.unwrap(), "a message due in an hour is not due");
    let x = outbox.enqueue(&NewMessage::new("t", "x")).await.unwrap().id;
    assert!(keeper.peek().await.unwrap(), "a due message is seen");
    assert!(keeper.idle_tick("r1", Duration::from_secs(3)).await.unwrap());
    assert_eq!(idle_rows().await, 1, "looks never wrote a row of their own");

    // The lane's look on the keeper (a relay of a crowded budget, whose pool keeps no
    // connection) answers as the pool's does: without a start, and from one with an id read again.
    let newer =
        |due: &[MessageId], later: &[MessageId], seen: &[MessageId], newest: MessageId| outbox_store::Newer {
            due: due.to_vec(),
            later: later.to_vec(),
            seen: seen.to_vec(),
            newest: Some(newest),
        };
    let first = keeper.newer_than(None, &[], 10).await.unwrap();
    assert_eq!(first, newer(&[x], &[later], &[later, x], x));
    assert_eq!(first, outbox.newer_than(None, &[], 10).await.unwrap());
    let y = outbox.enqueue(&NewMessage::new("t", "y")).await.unwrap().id;
    let next = keeper.newer_than(Some(x), &[later], 10).await.unwrap();
    assert_eq!(next, newer(&[y], &[later], &[later, y], y));
    assert_eq!(next, outbox.newer_than(Some(x), &[later], 10).await.unwrap());
    assert!(keeper.peek().await.unwrap(), "the keeper still serves its other jobs");
    listening.abort();
}

/// [`the_keepers_look_reads_and_its_tick_writes`] on a fresh database of `$fresh`.
macro_rules! keepers_look {
    ($name:ident, $fresh:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let db = $fresh().await;
            let outbox = Outbox::new(db.pool.clone());
            outbox.migrate().await.unwrap();
            let pool = db.pool.clone();
            the_keepers_look_reads_and_its_tick_writes(&outbox, || async {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_relay_idle").fetch_one(&pool).await.unwrap()
            })
            .await;
            drop(outbox);
            db.drop_db().await;
        }
    };
}
keepers_look!(postgres_the_keepers_look_reads_and_its_tick_writes, outbox_testkit::fresh_pg);
keepers_look!(mysql_the_keepers_look_reads_and_its_tick_writes, outbox_testkit::fresh_mysql);

/// A claim begins on an idle pooled connection without the pool's ping; when the server has
/// ended that connection since it was released (a restart, an administrator), the claim begins
/// on a tested one instead of failing. A pool of one connection, whose session `end` ends from
/// outside (`$pid`: the statement that names the session, `$end`/`$gone`: ending it, counting
/// it among the server's sessions).
macro_rules! ended_connection {
    ($name:ident, $fresh:path, $pid:literal, $end:literal, $gone:literal) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let db = $fresh().await;
            let pool = db.pool.options().clone().max_connections(1).connect(&db.url).await.unwrap();
            let outbox = Outbox::new(pool.clone());
            outbox.migrate().await.unwrap();
            for round in 0..2 {
                let id = outbox.enqueue(&NewMessage::new("t", "x")).await.unwrap().id;
                let session: i64 = sqlx::query_scalar($pid).fetch_one(&pool).await.unwrap();
                sqlx::query(&format!($end, session)).execute(&db.pool).await.unwrap();
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let left: i64 =
                        sqlx::query_scalar($gone).bind(session).fetch_one(&db.pool).await.unwrap();
                    if left == 0 {
                        break;
                    }
                    assert!(std::time::Instant::now() < deadline, "round {round}: the session outlived 30 s");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let (got, hold) =
                    lock(&outbox, "relay", 10).await.expect("the claim begins on a new connection");
                assert_eq!(got.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id], "round {round}");
                let settlement = Settlement { sent: vec![id], messages: Vec::new(), deliveries: Vec::new() };
                outbox.settle_held(hold, "relay", &settlement).await.unwrap();
            }
            drop((outbox, pool));
            db.drop_db().await;
        }
    };
}
ended_connection!(
    postgres_a_claim_on_a_connection_the_server_ended_begins_on_another,
    outbox_testkit::fresh_pg,
    "SELECT pg_backend_pid()::int8",
    "SELECT pg_terminate_backend({})",
    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int8"
);
ended_connection!(
    mysql_a_claim_on_a_connection_the_server_ended_begins_on_another,
    outbox_testkit::fresh_mysql,
    "SELECT CAST(CONNECTION_ID() AS SIGNED)",
    "KILL CONNECTION {}",
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
);
