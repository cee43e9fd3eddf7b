//! [`impl_admin!`]: a dialect's `impl MessageAdmin` (and the relay's `Backlog`, `Presence` and
//! `Pauses`), every call the shared [`Admin`](super::Admin).

/// `impl MessageAdmin for Outbox<$db>`, every call the shared [`Admin`](super::Admin).
macro_rules! impl_admin {
    ($db:ty) => {
        impl $crate::admin::MessageAdmin for $crate::outbox::Outbox<$db> {
            async fn stats(&self) -> ::outbox_core::Result<$crate::admin::Stats> {
                $crate::admin::Admin(self).stats().await
            }

            async fn list(
                &self,
                filter: &$crate::admin::ListFilter,
            ) -> ::outbox_core::Result<Vec<::outbox_core::OutboxMessage>> {
                $crate::admin::Admin(self).list(filter).await
            }

            async fn show(
                &self,
                id: ::outbox_core::MessageId,
            ) -> ::outbox_core::Result<$crate::admin::MessageDetail> {
                $crate::admin::Admin(self).show(id).await
            }

            async fn retry(
                &self,
                id: ::outbox_core::MessageId,
                actor: &str,
            ) -> ::outbox_core::Result<::outbox_core::OutboxMessage> {
                $crate::admin::Admin(self).retry(id, actor).await
            }

            async fn retry_failed(
                &self,
                filter: &$crate::admin::ListFilter,
                actor: &str,
                batch: usize,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).retry_failed(filter, actor, batch, progress).await
            }

            async fn cancel(
                &self,
                id: ::outbox_core::MessageId,
                actor: &str,
            ) -> ::outbox_core::Result<::outbox_core::OutboxMessage> {
                $crate::admin::Admin(self).cancel(id, actor).await
            }

            async fn failure_groups(
                &self,
                scan: usize,
            ) -> ::outbox_core::Result<$crate::admin::FailureReport> {
                $crate::admin::Admin(self).failure_groups(scan).await
            }

            async fn bulk(
                &self,
                action: $crate::admin::BulkAction,
                selection: &$crate::admin::Selection,
                actor: &str,
                dry_run: bool,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).bulk(action, selection, actor, dry_run, progress).await
            }

            async fn resend(
                &self,
                id: ::outbox_core::MessageId,
                edit: &$crate::admin::MessageEdit,
                actor: &str,
            ) -> ::outbox_core::Result<$crate::admin::Resent> {
                $crate::admin::Admin(self).resend(id, edit, actor).await
            }

            async fn relays(&self) -> ::outbox_core::Result<Vec<$crate::admin::RelayPresence>> {
                $crate::admin::Admin(self).relays().await
            }

            async fn pauses(&self) -> ::outbox_core::Result<Vec<$crate::admin::DestinationPause>> {
                $crate::admin::Admin(self).pauses().await
            }

            async fn pause(
                &self,
                destination: &str,
                actor: &str,
                reason: Option<&str>,
            ) -> ::outbox_core::Result<bool> {
                $crate::admin::Admin(self).pause(destination, actor, reason).await
            }

            async fn resume(&self, destination: &str, actor: &str) -> ::outbox_core::Result<bool> {
                $crate::admin::Admin(self).resume(destination, actor).await
            }

            async fn purge(
                &self,
                older_than: ::std::time::Duration,
                batch: usize,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).purge(older_than, batch, progress).await
            }
        }

        impl $crate::relay::Backlog for $crate::outbox::Outbox<$db> {
            async fn overdue(&self) -> ::outbox_core::Result<Option<::std::time::Duration>> {
                $crate::admin::Admin(self).overdue().await
            }
        }

        impl $crate::relay::Presence for $crate::outbox::Outbox<$db> {
            async fn beat(&self, beat: &$crate::relay::RelayBeat) -> ::outbox_core::Result<()> {
                $crate::admin::Admin(self).beat(beat).await
            }

            async fn leave(&self, owner: &str) -> ::outbox_core::Result<()> {
                $crate::admin::Admin(self).leave(owner).await
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
