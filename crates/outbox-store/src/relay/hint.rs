//! A remembered hint that a claim may start from ([`super::HeadMemo`], [`super::WindowMemo`]):
//! the value itself, and a switch for tests that makes the claim use it whenever there is one.
//!
//! A hint only ever decides where a claim looks, never what it takes, so losing it is always
//! safe: a poisoned lock reads as "nothing remembered" and the next claim does the full look.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// See the module's documentation.
#[derive(Debug)]
pub(crate) struct Hint<T> {
    value: Mutex<Option<T>>,
    /// For tests: use the hint whenever there is one, whatever the measured choice says.
    always: AtomicBool,
}

impl<T> Default for Hint<T> {
    fn default() -> Self {
        Self { value: Mutex::new(None), always: AtomicBool::new(false) }
    }
}

impl<T> Hint<T> {
    /// The remembered value, locked; `None` when the lock is poisoned (treated as nothing
    /// remembered by the callers, and never written through).
    pub(crate) fn lock(&self) -> Option<MutexGuard<'_, Option<T>>> {
        self.value.lock().ok()
    }

    /// Whether a test asked for the hint to be used whenever there is one.
    pub(crate) fn always(&self) -> bool {
        self.always.load(Ordering::Relaxed)
    }

    /// For tests: see [`Hint::always`]; `false` goes back to the measured choice and forgets
    /// the value.
    pub(crate) fn always_from_memo(&self, always: bool) {
        self.always.store(always, Ordering::Relaxed);
        if !always {
            self.forget();
        }
    }

    /// Forgets the value: the next claim does the full look (after an error, the value may not
    /// match what the database holds).
    pub(crate) fn forget(&self) {
        if let Some(mut value) = self.lock() {
            *value = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(hint: &Hint<u8>) -> Option<u8> {
        hint.lock().and_then(|v| *v)
    }

    fn set(hint: &Hint<u8>, to: u8) {
        if let Some(mut v) = hint.lock() {
            *v = Some(to);
        }
    }

    #[test]
    fn switching_always_off_forgets_and_on_keeps() {
        let hint: Hint<u8> = Hint::default();
        assert!(!hint.always());
        set(&hint, 1);
        hint.always_from_memo(true);
        assert!(hint.always());
        assert_eq!(get(&hint), Some(1), "switching on keeps the value");
        hint.always_from_memo(false);
        assert!(!hint.always());
        assert_eq!(get(&hint), None, "switching off forgets it");
        set(&hint, 2);
        hint.forget();
        assert_eq!(get(&hint), None);
    }
}
