//! Per-key runs: after a claim has taken the head of a key, the messages that follow the head
//! in that key can travel in the same claim, so that a few busy keys no longer cap the drain
//! at one message per key per claim-to-settle cycle.
//!
//! A follower joins only behind an unbroken line from its head: the open messages of the key
//! after the head are read in id order, and the run stops at the first one that is not a due
//! `pending` (or lease-expired `sending`) row, at the first one another relay holds (the
//! locking read skipped it), and at the first one that cannot be decoded. So every message of
//! a run has all the older open messages of its key in the same claim; the relay publishes a
//! run in id order, each message only once the one before it is delivered, and defers the
//! rest of the run when one fails (`outbox_relay`'s `runs`). Other relays' claims still see the
//! head open and take nothing of the key.
//!
//! The dialects read the followers and lock them; what is kept is decided here, once.

use std::collections::{HashMap, HashSet};

use outbox_core::OutboxMessage;

/// At most this many keys are followed per claim (bounds the statement that reads the
/// followers; MySQL/MariaDB send one sub-select per key).
pub(crate) const MAX_KEYS: usize = 64;

/// The heads to follow in a claim and how many followers each may bring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunPlan {
    /// `(key, head id)`, one per key, in id order.
    pub(crate) heads: Vec<(String, i64)>,
    /// Followers read (and at most taken) per key.
    pub(crate) per_key: usize,
}

/// What a claim of `claimed` (its heads) may add with runs of at most `run` messages per key
/// under `limit`; `None` when nothing: runs off (`run` ≤ 1), a full claim, or no keyed head.
pub(crate) fn plan(claimed: &[OutboxMessage], limit: usize, run: usize) -> Option<RunPlan> {
    plan_keys(claimed.iter().map(|m| (m.id.0, m.key.as_deref())), claimed.len(), limit, run)
}

/// [`plan`] over `(id, key)` of the `taken` messages claimed.
fn plan_keys<'a>(
    claimed: impl Iterator<Item = (i64, Option<&'a str>)>,
    taken: usize,
    limit: usize,
    run: usize,
) -> Option<RunPlan> {
    let room = limit.saturating_sub(taken);
    if run <= 1 || room == 0 {
        return None;
    }
    let mut keyed: Vec<(i64, &str)> = claimed.filter_map(|(id, k)| k.map(|k| (id, k))).collect();
    keyed.sort_unstable();
    let mut seen = HashSet::new();
    let mut heads: Vec<(String, i64)> = Vec::new();
    for (id, k) in keyed {
        if seen.insert(k) {
            heads.push((k.to_owned(), id));
        }
    }
    if heads.is_empty() {
        return None;
    }
    heads.truncate(room.min(MAX_KEYS));
    let per_key = (room / heads.len()).clamp(1, run - 1);
    Some(RunPlan { heads, per_key })
}

/// The runs a claim may continue (`held`: keys whose older messages other claims of this
/// process hold, each with its newest id held, in id order) with `room` messages left in the
/// claim and runs of at most `run`: the plan, whose "heads" are those newest ids (the followers
/// read after each are the next messages of its key), and the runs it follows. `None` when
/// nothing: runs off, no room, nothing held.
///
/// A message taken so has every older open message of its key held by this process (the
/// claims that hold them took each key's head and an unbroken line behind it, or continued
/// such a line), so what keeps per-key order is the publication: none of these is published
/// before the claim holding the key's newest older message has delivered all of the key's
/// ([`super::RunAfter`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn continuing(
    held: Vec<super::RunHeld>,
    room: usize,
    run: usize,
) -> Option<(RunPlan, Vec<super::RunHeld>)> {
    if run <= 1 || room == 0 || held.is_empty() {
        return None;
    }
    let mut held = held;
    held.truncate(room.min(MAX_KEYS));
    let per_key = (room / held.len()).clamp(1, run);
    let heads = held.iter().map(|r| (r.key.clone(), r.last)).collect();
    Some((RunPlan { heads, per_key }, held))
}

/// The keys whose run among `taken` (followers read by `plan`) stopped at the plan's length:
/// more of the key may be due behind it, for a claim made while this one is in flight to
/// continue ([`continuing`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn cut_at_length(plan: &RunPlan, taken: &[OutboxMessage]) -> HashSet<String> {
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for k in taken.iter().filter_map(|m| m.key.as_deref()) {
        *per_key.entry(k).or_insert(0) += 1;
    }
    per_key.into_iter().filter(|&(_, n)| n >= plan.per_key).map(|(k, _)| k.to_owned()).collect()
}

/// One open message after a head, as the dialect read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Follower {
    pub(crate) id: i64,
    /// The head it follows.
    pub(crate) head: i64,
    /// A due `pending` row, or a `sending` row whose lease expired.
    pub(crate) due: bool,
}

/// Sorts `followers` by head, then id, and keeps per head the unbroken line of due rows, at
/// most `per_key`: the ids to lock.
pub(crate) fn wanted(followers: &mut [Follower], per_key: usize) -> Vec<i64> {
    followers.sort_by_key(|f| (f.head, f.id));
    let mut out = Vec::new();
    let mut i = 0;
    while i < followers.len() {
        let head = followers[i].head;
        let mut taken = 0;
        let mut broken = false;
        while i < followers.len() && followers[i].head == head {
            if !broken && followers[i].due && taken < per_key {
                out.push(followers[i].id);
                taken += 1;
            } else {
                broken = true;
            }
            i += 1;
        }
    }
    out
}

/// Keeps the [`wanted`] followers, has `lock` lock them (it gets their ids and returns the rows
/// that came back, decoded), and returns the runs as [`cut`] makes them; nothing is locked when
/// no follower is wanted. The dialects differ only in how they read and lock.
pub(crate) async fn take<F, Fut>(
    followers: &mut [Follower],
    per_key: usize,
    lock: F,
) -> crate::Result<Vec<OutboxMessage>>
where
    F: FnOnce(Vec<i64>) -> Fut,
    Fut: std::future::Future<Output = crate::Result<Vec<OutboxMessage>>>,
{
    let wanted = wanted(followers, per_key);
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let got = lock(wanted.clone()).await?;
    Ok(cut(followers, &wanted, got.into_iter().map(|m| (m.id.0, m)).collect()))
}

/// The runs to claim: per head, the wanted followers (sorted by [`wanted`]) up to the first
/// one that did not come back from the locking read (held by another relay, no longer due, or
/// undecodable: it is claimed, or failed, as a head later, in its turn).
pub(crate) fn cut<T>(followers: &[Follower], wanted: &[i64], mut got: HashMap<i64, T>) -> Vec<T> {
    let wanted: HashSet<i64> = wanted.iter().copied().collect();
    let mut out = Vec::new();
    let mut broken_head = None;
    for f in followers.iter().filter(|f| wanted.contains(&f.id)) {
        if broken_head == Some(f.head) {
            continue;
        }
        match got.remove(&f.id) {
            Some(m) => out.push(m),
            None => broken_head = Some(f.head),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(claimed: &[(i64, Option<&str>)], limit: usize, run: usize) -> Option<RunPlan> {
        plan_keys(claimed.iter().copied(), claimed.len(), limit, run)
    }

    #[test]
    fn no_plan_when_runs_are_off_the_claim_is_full_or_nothing_is_keyed() {
        let heads = [(1, Some("a")), (2, None)];
        assert_eq!(plan_of(&heads, 10, 1), None);
        assert_eq!(plan_of(&heads, 2, 50), None);
        assert_eq!(plan_of(&[(2, None)], 10, 50), None);
    }

    #[test]
    fn the_room_is_shared_between_the_keyed_heads() {
        let heads = [(5, Some("b")), (1, Some("a")), (3, None)];
        let p = plan_of(&heads, 11, 50).unwrap();
        assert_eq!(p.heads, [("a".to_owned(), 1), ("b".to_owned(), 5)]);
        assert_eq!(p.per_key, 4, "8 free places over 2 keys");
        assert_eq!(plan_of(&heads, 500, 10).unwrap().per_key, 9, "a run is at most `run` with its head");
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let many: Vec<(i64, Option<&str>)> =
            keys.iter().zip(0..).map(|(k, i)| (i, Some(k.as_str()))).collect();
        let p = plan_of(&many, 103, 10).unwrap();
        assert_eq!((p.heads.len(), p.per_key), (3, 1), "no more heads followed than places left");
    }

    #[test]
    fn a_run_stops_at_the_first_row_not_due_and_at_its_length() {
        let f = |id, head, due| Follower { id, head, due };
        let mut rows =
            vec![f(12, 10, true), f(11, 10, true), f(13, 10, false), f(14, 10, true), f(21, 20, true)];
        assert_eq!(wanted(&mut rows, 5), [11, 12, 21]);
        assert_eq!(wanted(&mut rows, 1), [11, 21]);
    }

    #[test]
    fn a_run_stops_at_the_first_row_the_lock_did_not_return() {
        let f = |id, head| Follower { id, head, due: true };
        let mut rows = vec![f(11, 10), f(12, 10), f(13, 10), f(21, 20), f(22, 20)];
        let want = wanted(&mut rows, 10);
        let got: HashMap<i64, i64> = [11, 13, 21, 22].into_iter().map(|id| (id, id)).collect();
        assert_eq!(cut(&rows, &want, got), [11, 21, 22], "13 would overtake 12, which another relay holds");
    }
}
