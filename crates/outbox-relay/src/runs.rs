//! Publishing a batch that holds runs: several messages of one key, claimed together behind
//! their head (`outbox_store`'s `Claims::claim_runs`). The batch goes out in waves: each wave
//! holds the next message (in id order) of every key that may go on, and messages without a
//! key go in the first. A wave starts once the one before it has been answered, and a message
//! goes out only if every older message of its key in the batch was delivered to every
//! destination. The first message of a key that is not delivered (failed, deferred by an open
//! circuit, waiting for a retry at another destination) holds the rest of its key's run back:
//! they are put back `pending`, not attempted, and wait behind it as they would have without
//! runs. So a message never overtakes an older one of its key (SPEC guarantee 5), and a batch
//! with one message per key is one wave, exactly as before.
//!
//! A run continued from a batch still in flight (`outbox_store::Claimed::after`) waits for that
//! batch's word on its key ([`Waves::wait_for`]): its messages join the waves once the word
//! says every older message of the key was delivered ([`Waves::heard`]), and are held back
//! when it says not. The batch's other keys do not wait for it: they go out from the first
//! wave.

use std::collections::{HashMap, HashSet};

/// The waves of one batch: what was published, what was delivered, the keys held back and
/// the keys that wait for word from a batch in front.
#[derive(Debug)]
pub(crate) struct Waves<'a> {
    /// Per message: its key.
    keys: Vec<Option<&'a str>>,
    /// Per message: its position among its key's messages, in id order.
    rank: Vec<usize>,
    count: usize,
    /// Per message: whether it was handed out to be published.
    sent: Vec<bool>,
    /// Per key: how many of its messages were delivered (the rank that may go next).
    next: HashMap<&'a str, usize>,
    held: HashSet<&'a str>,
    waiting: HashSet<&'a str>,
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
        Waves {
            sent: vec![false; messages.len()],
            keys: messages.into_iter().map(|(_, k)| k).collect(),
            rank,
            count,
            next: HashMap::new(),
            held: HashSet::new(),
            waiting: HashSet::new(),
        }
    }

    /// The most messages any key has in the batch: the waves needed when no key waits.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Holds back every message of `keys` from the start: their older messages, in another
    /// batch, were not delivered.
    pub(crate) fn hold_keys(&mut self, keys: impl IntoIterator<Item = &'a str>) {
        self.held.extend(keys);
    }

    /// Makes `key`'s messages wait until [`Waves::heard`] tells about it; false (nothing waits)
    /// when the batch holds none of its messages or it is held back already.
    pub(crate) fn wait_for(&mut self, key: &str) -> bool {
        match self.keys.iter().flatten().find(|k| **k == key) {
            Some(k) if !self.held.contains(k) => self.waiting.insert(k),
            _ => false,
        }
    }

    /// The word on a key [`Waves::wait_for`] waits for: whether every older message of it was
    /// delivered. If so its messages go on; if not they are held back.
    pub(crate) fn heard(&mut self, key: &str, delivered: bool) {
        let Some(k) = self.waiting.iter().copied().find(|k| *k == key) else { return };
        self.waiting.remove(k);
        if !delivered {
            self.held.insert(k);
        }
    }

    /// Whether some key still waits for word.
    #[cfg(test)]
    pub(crate) fn waits(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The next wave, marked as handed out: every message without a key not handed out yet,
    /// and per key that is neither held back nor waiting, its next message once every older
    /// one of the key was delivered. Empty when nothing may go now.
    pub(crate) fn next_wave(&mut self) -> Vec<usize> {
        let mut wave = Vec::new();
        for mi in 0..self.keys.len() {
            if self.sent[mi] {
                continue;
            }
            let go = match self.keys[mi] {
                None => true,
                Some(k) => {
                    !self.held.contains(k)
                        && !self.waiting.contains(k)
                        && self.rank[mi] == self.next.get(k).copied().unwrap_or(0)
                }
            };
            if go {
                self.sent[mi] = true;
                wave.push(mi);
            }
        }
        wave
    }

    /// After `wave` was answered: every keyed message of it that is `delivered` lets its key go
    /// on; one that is not holds back the rest of its key.
    pub(crate) fn answered(&mut self, wave: &[usize], delivered: impl Fn(usize) -> bool) {
        for &mi in wave {
            if let Some(k) = self.keys[mi] {
                if delivered(mi) {
                    *self.next.entry(k).or_insert(0) += 1;
                } else {
                    self.held.insert(k);
                }
            }
        }
    }

    /// Whether message `mi` was handed out; one that was not is held back.
    pub(crate) fn was_sent(&self, mi: usize) -> bool {
        self.sent[mi]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Hands out every wave with `delivered` deciding each message's answer; the waves.
    fn all_waves(w: &mut Waves<'_>, delivered: impl Fn(usize) -> bool) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        loop {
            let wave = w.next_wave();
            if wave.is_empty() {
                return out;
            }
            w.answered(&wave, &delivered);
            out.push(wave);
        }
    }

    #[test]
    fn one_message_per_key_is_one_wave() {
        let mut w = Waves::new([(3, Some("a")), (1, Some("b")), (2, None), (4, None)]);
        assert_eq!(w.count(), 1);
        assert_eq!(all_waves(&mut w, |_| true), [vec![0, 1, 2, 3]]);
    }

    #[test]
    fn a_keys_messages_go_in_id_order_one_wave_each() {
        let mut w = Waves::new([(9, Some("a")), (2, Some("a")), (5, Some("b")), (4, Some("a")), (1, None)]);
        assert_eq!(w.count(), 3);
        assert_eq!(all_waves(&mut w, |_| true), [vec![1, 2, 4], vec![3], vec![0]]);
    }

    #[test]
    fn a_failure_holds_back_the_rest_of_its_key() {
        let mut w =
            Waves::new([(1, Some("a")), (2, Some("a")), (3, Some("a")), (4, Some("b")), (5, Some("b"))]);
        assert_eq!(all_waves(&mut w, |mi| mi != 1), [vec![0, 3], vec![1, 4]]);
        assert!(!w.was_sent(2), "held back behind the failed one");
    }

    #[test]
    fn a_key_waiting_for_word_goes_once_heard_and_the_others_do_not_wait() {
        let mut w = Waves::new([
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, None),
            (5, Some("c")),
            (6, Some("b")),
        ]);
        assert!(w.wait_for("a"));
        assert!(w.wait_for("c"));
        assert!(!w.wait_for("z"), "no message of it in the batch");
        assert!(!w.wait_for("a"), "waits already");
        assert_eq!(w.next_wave(), [2, 3], "the keys not waiting go at once");
        w.answered(&[2, 3], |_| true);
        assert_eq!(w.next_wave(), [5]);
        w.answered(&[5], |_| true);
        assert!(w.next_wave().is_empty(), "nothing more until word comes");
        assert!(w.waits());
        w.heard("a", true);
        w.heard("c", false);
        assert!(!w.waits());
        assert_eq!(all_waves(&mut w, |_| true), [vec![0], vec![1]]);
        assert!(!w.was_sent(4), "its older messages in the batch in front were not delivered");
    }

    #[test]
    fn a_key_held_back_from_the_start_waits_for_nothing() {
        let mut w = Waves::new([(1, Some("a")), (2, Some("b"))]);
        w.hold_keys(["a"]);
        assert!(!w.wait_for("a"));
        assert_eq!(all_waves(&mut w, |_| true), [vec![1]]);
        assert!(!w.was_sent(0));
    }

    /// What [`drive`] saw: per message published, its wave's number; the messages held back;
    /// per key that waited, the wave number before which its word was heard.
    type Driven = (Vec<(usize, usize)>, Vec<usize>, HashMap<u8, usize>);

    /// Drives the waves as `batch::publish_all` does over a batch (`keys` in id order, `None`
    /// for no key) where `fails[i]` says whether message `i` fails when published, and the
    /// keys of `words` wait for word: `(key, wave, delivered)`, heard before that wave, or
    /// when nothing else can go.
    fn drive(keys: &[Option<u8>], fails: &[bool], words: &[(u8, usize, bool)]) -> Driven {
        let name = |k: u8| format!("k{k}");
        let names: Vec<Option<String>> = keys.iter().map(|k| k.map(name)).collect();
        let mut waves = Waves::new(names.iter().enumerate().map(|(i, k)| (i as i64, k.as_deref())));
        let mut pending: Vec<(u8, usize, bool)> =
            words.iter().filter(|(k, _, _)| waves.wait_for(&name(*k))).copied().collect();
        let (mut published, mut heard) = (Vec::new(), HashMap::new());
        let mut n = 0;
        loop {
            pending.retain(|&(k, at, delivered)| {
                if at > n {
                    return true;
                }
                waves.heard(&name(k), delivered);
                heard.insert(k, n);
                false
            });
            let wave = waves.next_wave();
            if wave.is_empty() {
                match pending.iter().map(|w| w.1).min() {
                    Some(at) => {
                        n = at;
                        continue;
                    }
                    None => break,
                }
            }
            published.extend(wave.iter().map(|&mi| (mi, n)));
            waves.answered(&wave, |mi| !fails[mi]);
            n += 1;
        }
        assert!(!waves.waits());
        let held = (0..keys.len()).filter(|&mi| !waves.was_sent(mi)).collect();
        (published, held, heard)
    }

    proptest! {
        /// Guarantee 5 over the planner: whatever fails and whatever word comes when, a message
        /// is published only after every older message of its key was published and
        /// delivered, and a key that waits for word only once word came that its older ones
        /// were delivered; after a key's first failure nothing more of the key is published;
        /// every message is published or held, once; and the keys that wait for nothing go out
        /// from the first wave.
        #[test]
        fn no_message_overtakes_an_older_one_of_its_key(
            batch in prop::collection::vec((prop::option::weighted(0.9, 0u8..4), any::<bool>()), 0..40),
            words in prop::collection::vec((0u8..4, 0usize..6, any::<bool>()), 0..3),
        ) {
            let keys: Vec<Option<u8>> = batch.iter().map(|(k, _)| *k).collect();
            let fails: Vec<bool> = batch.iter().map(|(_, f)| *f).collect();
            let (published, held, heard) = drive(&keys, &fails, &words);
            let mut all: Vec<usize> = published.iter().map(|(mi, _)| *mi).chain(held.iter().copied()).collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..keys.len()).collect::<Vec<_>>());
            let first_word = |k: u8| words.iter().find(|w| w.0 == k).copied();
            for (pos, &(mi, n)) in published.iter().enumerate() {
                let Some(k) = keys[mi] else {
                    prop_assert_eq!(n, 0, "a message without a key waits for nothing");
                    continue;
                };
                for older in (0..mi).filter(|&o| keys[o] == Some(k)) {
                    let at = published.iter().position(|&(p, _)| p == older);
                    prop_assert!(at.is_some_and(|at| at < pos), "{} before the older {} of its key", mi, older);
                    prop_assert!(!fails[older], "{} published after the older {} of its key failed", mi, older);
                }
                match (first_word(k), heard.get(&k)) {
                    (Some((_, _, delivered)), Some(&at)) => {
                        prop_assert!(delivered, "{} published though its key's older ones were not delivered", mi);
                        prop_assert!(n >= at, "{} published in wave {} before word came (wave {})", mi, n, at);
                    }
                    (Some(_), None) => prop_assert!(false, "key k{} waited and never heard", k),
                    (None, _) => {
                        let first = (0..mi).all(|o| keys[o] != Some(k));
                        prop_assert!(!first || n == 0, "{} heads a key that waits for nothing: wave 0, not {}", mi, n);
                    }
                }
            }
            for &mi in &held {
                let k = keys[mi].expect("only keyed messages are held");
                let word_not = first_word(k).is_some_and(|(_, _, delivered)| !delivered);
                prop_assert!(word_not || (0..mi).any(|o| keys[o] == Some(k) && (fails[o] || held.contains(&o))));
            }
        }
    }
}
