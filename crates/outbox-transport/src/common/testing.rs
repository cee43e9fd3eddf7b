//! What the unit tests of every broker inspect: the kind and reason of a failure, and the key a
//! configuration error names.

use outbox_core::{FailureKind, Outcome};

use crate::{Result, TransportError};

/// The kind of a failure (panics on `Delivered`).
pub(crate) fn kind(o: &Outcome) -> FailureKind {
    match o {
        Outcome::Failed { kind, .. } => *kind,
        Outcome::Delivered => panic!("expected a failure, got Delivered"),
    }
}

/// The reason of a failure (panics on `Delivered`).
pub(crate) fn reason(o: &Outcome) -> &str {
    match o {
        Outcome::Failed { reason, .. } => reason,
        Outcome::Delivered => panic!("expected a failure, got Delivered"),
    }
}

/// The key a configuration error names (panics on anything else).
pub(crate) fn key_of<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
    match r {
        Err(TransportError::Config { key, .. }) => key,
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// The key named when `config`, changed by `change`, is checked by `validate`.
pub(crate) fn invalid_key<C>(
    mut config: C,
    change: impl FnOnce(&mut C),
    validate: impl Fn(&C) -> Result<()>,
) -> &'static str {
    change(&mut config);
    key_of(validate(&config))
}
