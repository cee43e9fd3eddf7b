//! Publishing a batch that holds runs: several messages of one key, claimed together behind
//! their head (`outbox_store`'s `Claims::claim_runs`). The batch goes out in waves: wave `w`
//! holds the `w`-th message (in id order) of every key, and messages without a key go in the
//! first. A wave starts once the one before it has been answered, and a message goes out only
//! if every older message of its key in the batch was delivered to every destination. The
//! first message of a key that is not delivered (failed, deferred by an open circuit, waiting
//! for a retry at another destination) holds the rest of its key's run back: they are put back
//! `pending`, not attempted, and wait behind it as they would have without runs. So a message
//! never overtakes an older one of its key (SPEC guarantee 5), and a batch with one message
//! per key is one wave, exactly as before.
//!
//! A run continued from a batch still in flight (`outbox_store::Claimed::after`) starts held
//! back when that batch did not deliver every message of its key ([`Waves::hold_keys`]): the
//! same rule across batches.

use std::collections::{HashMap, HashSet};

/// The waves of one batch and the keys held back so far.
#[derive(Debug)]
pub(crate) struct Waves<'a> {
    /// Per message: its key.
    keys: Vec<Option<&'a str>>,
    /// Per message: its wave (its position among its key's messages, in id order).
    rank: Vec<usize>,
    count: usize,
    held: HashSet<&'a str>,
}

impl<'a> Waves<'a> {
    /// The waves of a batch given as `(id, key)` per message, in batch order.
    pub(crate) fn new(messages: impl IntoIterator<Item = (i64, Option<&'a str>)>) -> Self {
        let messages: Vec<(i64, Option<&'a str>)> = messages.into_iter().collect();
        let mut order: Vec<usize> = (0..messages.len()).collect();
        order.sort_by_key(|&i| messages[i].0);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut rank = vec![0; messages.len()];
        for i in order {
            if let Some(k) = messages[i].1 {
                let n = seen.entry(k).or_insert(0);
                rank[i] = *n;
                *n += 1;
            }
        }
        let count = rank.iter().max().map_or(0, |r| r + 1);
        Waves { keys: messages.into_iter().map(|(_, k)| k).collect(), rank, count, held: HashSet::new() }
    }

    /// How many waves.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The wave of message `mi`.
    pub(crate) fn wave_of(&self, mi: usize) -> usize {
        self.rank[mi]
    }

    /// Holds back every message of `keys` from the start: their older messages, in another
    /// batch, were not delivered.
    pub(crate) fn hold_keys(&mut self, keys: impl IntoIterator<Item = &'a str>) {
        self.held.extend(keys);
    }

    /// Whether message `mi` is held back: an older message of its key was not delivered.
    pub(crate) fn is_held(&self, mi: usize) -> bool {
        self.keys[mi].is_some_and(|k| self.held.contains(k))
    }

    /// After wave `w` was answered: every keyed message of it that is not `delivered` holds
    /// back the rest of its key.
    pub(crate) fn answered(&mut self, w: usize, delivered: impl Fn(usize) -> bool) {
        for mi in 0..self.keys.len() {
            if self.rank[mi] == w {
                if let Some(k) = self.keys[mi] {
                    if !delivered(mi) {
                        self.held.insert(k);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_message_per_key_is_one_wave() {
        let w = Waves::new([(3, Some("a")), (1, Some("b")), (2, None), (4, None)]);
        assert_eq!(w.count(), 1);
    }

    #[test]
    fn a_keys_messages_go_in_id_order_one_wave_each() {
        let w = Waves::new([(9, Some("a")), (2, Some("a")), (5, Some("b")), (4, Some("a")), (1, None)]);
        assert_eq!(w.count(), 3);
        assert_eq!((0..5).map(|mi| w.wave_of(mi)).collect::<Vec<_>>(), [2, 0, 0, 1, 0]);
    }

    /// Drives the waves as `batch::publish_all` does over a batch (`keys` in id order, `None`
    /// for no key) where `fails[i]` says whether message `i` fails when published; returns
    /// the order messages were published in, and which were held back.
    fn drive(keys: &[Option<u8>], fails: &[bool]) -> (Vec<usize>, Vec<usize>) {
        let names: Vec<Option<String>> = keys.iter().map(|k| k.map(|k| format!("k{k}"))).collect();
        let mut waves = Waves::new(names.iter().enumerate().map(|(i, k)| (i as i64, k.as_deref())));
        let mut published = Vec::new();
        let mut held = Vec::new();
        let mut delivered = vec![false; keys.len()];
        for w in 0..waves.count() {
            for mi in 0..keys.len() {
                if waves.wave_of(mi) != w {
                    continue;
                }
                if waves.is_held(mi) {
                    held.push(mi);
                } else {
                    published.push(mi);
                    delivered[mi] = !fails[mi];
                }
            }
            waves.answered(w, |mi| delivered[mi]);
        }
        (published, held)
    }

    proptest! {
        /// Guarantee 5 over the planner: whatever fails, a message is published only after every
        /// older message of its key was published and delivered; after a key's first failure
        /// nothing more of the key is published; every message is published or held, once.
        #[test]
        fn no_message_overtakes_an_older_one_of_its_key(
            batch in prop::collection::vec((prop::option::weighted(0.9, 0u8..4), any::<bool>()), 0..40),
        ) {
            let keys: Vec<Option<u8>> = batch.iter().map(|(k, _)| *k).collect();
            let fails: Vec<bool> = batch.iter().map(|(_, f)| *f).collect();
            let (published, held) = drive(&keys, &fails);
            let mut all: Vec<usize> = published.iter().chain(&held).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..keys.len()).collect::<Vec<_>>());
            for (pos, &mi) in published.iter().enumerate() {
                let Some(k) = keys[mi] else { continue };
                for older in (0..mi).filter(|&o| keys[o] == Some(k)) {
                    let at = published.iter().position(|&p| p == older);
                    prop_assert!(at.is_some_and(|at| at < pos), "{} before the older {} of its key", mi, older);
                    prop_assert!(!fails[older], "{} published after the older {} of its key failed", mi, older);
                }
            }
            for &mi in &held {
                let k = keys[mi].expect("only keyed messages are held");
                prop_assert!((0..mi).any(|o| keys[o] == Some(k) && (fails[o] || held.contains(&o))));
            }
        }
    }
}
