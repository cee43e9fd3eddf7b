//! [`impl_admin!`]: a dialect's `impl MessageAdmin` (and the relay's `Backlog`, `Presence` and
//! `Pauses`), every call the shared [`Admin`](super::Admin).

/// `impl MessageAdmin for Outbox<$db>`, every call the shared [`Admin`](super::Admin).
macro_rules! impl_admin {
    ($db:ty) => {
        impl $crate::admin::MessageAdmin for $crate::outbox::Outbox<$db> {
            $crate::admin::to_admin! {
                stats() -> $crate::admin::Stats;
                list(filter: &$crate::admin::ListFilter) -> Vec<::outbox_core::OutboxMessage>;
                show(id: ::outbox_core::MessageId) -> $crate::admin::MessageDetail;
                retry(id: ::outbox_core::MessageId, actor: &str) -> ::outbox_core::OutboxMessage;
                retry_failed(
                    filter: &$crate::admin::ListFilter,
                    actor: &str,
                    batch: usize,
                    progress: $crate::admin::Progress<'_>,
                ) -> u64;
                cancel(id: ::outbox_core::MessageId, actor: &str) -> ::outbox_core::OutboxMessage;
                failure_groups(scan: usize) -> $crate::admin::FailureReport;
                bulk(
                    action: $crate::admin::BulkAction,
                    selection: &$crate::admin::Selection,
                    actor: &str,
                    dry_run: bool,
                    progress: $crate::admin::Progress<'_>,
                ) -> u64;
                resend(
                    id: ::outbox_core::MessageId,
                    edit: &$crate::admin::MessageEdit,
                    actor: &str,
                ) -> $crate::admin::Resent;
                relays() -> Vec<$crate::admin::RelayPresence>;
                backlog() -> (
                    $crate::admin::Stats,
                    ::outbox_core::Result<Vec<$crate::admin::RelayPresence>>,
                );
                pauses() -> Vec<$crate::admin::DestinationPause>;
                pause(destination: &str, actor: &str, reason: Option<&str>) -> bool;
                resume(destination: &str, actor: &str) -> bool;
                purge(
                    older_than: ::std::time::Duration,
                    batch: usize,
                    progress: $crate::admin::Progress<'_>,
                ) -> u64;
            }
        }

        impl $crate::relay::Backlog for $crate::outbox::Outbox<$db> {
            $crate::admin::to_admin! {
                overdue() -> Option<::std::time::Duration>;
            }
        }

        impl $crate::relay::Presence for $crate::outbox::Outbox<$db> {
            $crate::admin::to_admin! {
                beat(beat: &$crate::relay::RelayBeat) -> ();
                leave(owner: &str) -> ();
            }
        }

        impl $crate::relay::Pauses for $crate::outbox::Outbox<$db> {
            async fn paused_destinations(&self) -> ::outbox_core::Result<Vec<String>> {
                let pauses = $crate::admin::Admin(self).pauses().await?;
                Ok(pauses.into_iter().map(|p| p.destination).collect())
            }
        }
    };
}
pub(crate) use impl_admin;

/// Trait methods, each `name(arguments) -> output;`, that call the shared
/// [`Admin`](super::Admin)'s method of the same name with the same arguments.
macro_rules! to_admin {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty;)*) => {
        $(
            async fn $name(&self, $($arg: $ty),*) -> ::outbox_core::Result<$out> {
                $crate::admin::Admin(self).$name($($arg),*).await
            }
        )*
    };
}
pub(crate) use to_admin;
