//! Operations on the outbox ([`MessageAdmin`]) against real PostgreSQL, real MariaDB/MySQL and a
//! SQLite file: counts and the oldest pending age, search and pages, re-drive (one and in bulk),
//! cancel, and retention in batches. Messages are put into `failed`, `sent` or `sending` with
//! plain UPDATE statements, as a relay (or a foreign application) would leave them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use chrono::Utc;
use outbox_store::{
    Claims, Error, ListFilter, MessageAdmin, MessageId, NewMessage, Outbox, Status, MAX_LIST_LIMIT,
};

/// The same suite, stamped out once per dialect. `ago(secs)` is the SQL for "the database's now
/// minus `secs` seconds" in that dialect (a negative `secs` is in the future).
macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty, ago = $ago:expr) => {
        mod $dialect {
            use super::*;

            fn ago(secs: i64) -> String {
                let f: fn(i64) -> String = $ago;
                f(secs)
            }

            async fn setup() -> (outbox_testkit::TestDb<$db>, Outbox<$db>) {
                let db = $fresh().await;
                let outbox = Outbox::new(db.pool.clone());
                outbox.migrate().await.expect("migrate");
                (db, outbox)
            }

            async fn exec(pool: &sqlx::Pool<$db>, sql: &str) -> u64 {
                sqlx::query(sql).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}")).rows_affected()
            }

            async fn count(pool: &sqlx::Pool<$db>, sql: &str) -> i64 {
                sqlx::query_scalar(sql).fetch_one(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
            }

            async fn enqueue(outbox: &Outbox<$db>, topic: &str, n: usize) -> Vec<MessageId> {
                let msgs: Vec<NewMessage> =
                    (0..n).map(|i| NewMessage::new(topic, format!("{{\"n\":{i}}}"))).collect();
                let mut tx = outbox.begin().await.unwrap();
                let out = tx.enqueue_batch(&msgs).await.unwrap();
                tx.commit().await.unwrap();
                out.into_iter().map(|e| e.id).collect()
            }

            async fn mark_failed(pool: &sqlx::Pool<$db>, id: MessageId) {
                let sql = format!(
                    "UPDATE outbox_message SET status = 'failed', attempts = 5, last_error = 'broker said no', \
                     next_attempt_at = {}, last_attempt_at = {} WHERE id = {id}",
                    ago(-86_400),
                    ago(10)
                );
                assert_eq!(exec(pool, &sql).await, 1);
            }

            async fn mark_sending(pool: &sqlx::Pool<$db>, id: MessageId) {
                let sql = format!(
                    "UPDATE outbox_message SET status = 'sending', lease_owner = 'relay-1', lease_until = {0}, \
                     next_attempt_at = {0} WHERE id = {id}",
                    ago(-60)
                );
                assert_eq!(exec(pool, &sql).await, 1);
            }

            async fn mark(pool: &sqlx::Pool<$db>, id: MessageId, status: &str) {
                let sql = format!("UPDATE outbox_message SET status = '{status}' WHERE id = {id}");
                assert_eq!(exec(pool, &sql).await, 1);
            }

            async fn add_delivery(pool: &sqlx::Pool<$db>, id: MessageId, dest: &str, status: &str, attempts: i32) {
                let sql = format!(
                    "INSERT INTO outbox_delivery (message_id, destination, status, attempts, last_error) \
                     VALUES ({id}, '{dest}', '{status}', {attempts}, 'x')"
                );
                exec(pool, &sql).await;
            }

            #[tokio::test]
            async fn stats_count_statuses_topics_destinations_and_the_oldest_pending_age() {
                let (db, outbox) = setup().await;
                let empty = outbox.stats().await.unwrap();
                assert_eq!((empty.total, empty.failed, empty.oldest_pending_age), (0, 0, None));
                assert_eq!(empty.by_status.len(), Status::ALL.len());

                let orders = enqueue(&outbox, "order.paid", 3).await;
                let users = enqueue(&outbox, "user.created", 2).await;
                mark_failed(&db.pool, orders[0]).await;
                mark_sending(&db.pool, orders[1]).await;
                mark(&db.pool, users[0], "sent").await;
                let backdate =
                    format!("UPDATE outbox_message SET created_at = {} WHERE id = {}", ago(3600), orders[2]);
                exec(&db.pool, &backdate).await;
                add_delivery(&db.pool, users[0], "kafka", "sent", 0).await;
                add_delivery(&db.pool, orders[0], "kafka", "failed", 3).await;
                add_delivery(&db.pool, orders[0], "webhook", "pending", 1).await;

                let s = outbox.stats().await.unwrap();
                assert_eq!(s.total, 5);
                assert_eq!(s.failed, 1);
                let per_status: Vec<(Status, u64)> = s.by_status.iter().map(|c| (c.status, c.count)).collect();
                assert_eq!(
                    per_status,
                    vec![
                        (Status::Pending, 2),
                        (Status::Sending, 1),
                        (Status::Sent, 1),
                        (Status::Acked, 0),
                        (Status::Failed, 1),
                        (Status::Cancelled, 0)
                    ]
                );
                let per_topic: Vec<(&str, Status, u64)> =
                    s.by_topic.iter().map(|c| (c.topic.as_str(), c.status, c.count)).collect();
                assert_eq!(
                    per_topic,
                    vec![
                        ("order.paid", Status::Pending, 1),
                        ("order.paid", Status::Sending, 1),
                        ("order.paid", Status::Failed, 1),
                        ("user.created", Status::Pending, 1),
                        ("user.created", Status::Sent, 1),
                    ]
                );
                let per_dest: Vec<(&str, Status, u64)> =
                    s.by_destination.iter().map(|c| (c.destination.as_str(), c.status, c.count)).collect();
                assert_eq!(
                    per_dest,
                    vec![("kafka", Status::Sent, 1), ("kafka", Status::Failed, 1), ("webhook", Status::Pending, 1)]
                );
                let age = s.oldest_pending_age.expect("something is pending").as_secs();
                assert!((3590..3700).contains(&age), "oldest pending age by the database clock: {age} s");
                db.drop_db().await;
            }

            #[tokio::test]
            async fn list_filters_and_pages_in_id_order() {
                let (db, outbox) = setup().await;
                let mut ids = Vec::new();
                for i in 0..10 {
                    let topic = if i % 2 == 0 { "a" } else { "b" };
                    let msg = NewMessage::new(topic, "{}").key(format!("k{}", i % 3)).biz("order", i.to_string());
                    ids.push(outbox.enqueue(&msg).await.unwrap().id);
                }
                mark_failed(&db.pool, ids[2]).await;
                mark_failed(&db.pool, ids[5]).await;
                let backdate = format!(
                    "UPDATE outbox_message SET created_at = {} WHERE id IN ({}, {}, {})",
                    ago(2 * 86_400),
                    ids[0],
                    ids[1],
                    ids[2]
                );
                exec(&db.pool, &backdate).await;

                let list = |f: ListFilter| {
                    let outbox = outbox.clone();
                    async move { outbox.list(&f).await.unwrap().into_iter().map(|m| m.id).collect::<Vec<_>>() }
                };
                assert_eq!(list(ListFilter::default()).await, ids);
                assert_eq!(
                    list(ListFilter { status: Some(Status::Failed), ..Default::default() }).await,
                    vec![ids[2], ids[5]]
                );
                let a: Vec<MessageId> = ids.iter().copied().step_by(2).collect();
                assert_eq!(list(ListFilter { topic: Some("a".into()), ..Default::default() }).await, a);
                assert_eq!(
                    list(ListFilter { biz_type: Some("order".into()), biz_key: Some("7".into()), ..Default::default() })
                        .await,
                    vec![ids[7]]
                );
                assert_eq!(
                    list(ListFilter { key: Some("k1".into()), ..Default::default() }).await,
                    vec![ids[1], ids[4], ids[7]]
                );
                assert_eq!(
                    list(ListFilter {
                        key: Some("k1".into()),
                        status: Some(Status::Pending),
                        topic: Some("b".into()),
                        ..Default::default()
                    })
                    .await,
                    vec![ids[1], ids[7]]
                );
                let hour_ago = Utc::now() - chrono::Duration::hours(1);
                assert_eq!(list(ListFilter { created_after: Some(hour_ago), ..Default::default() }).await, ids[3..]);
                assert_eq!(list(ListFilter { created_before: Some(hour_ago), ..Default::default() }).await, ids[..3]);
                // Values are bound, never spliced into the SQL.
                assert!(list(ListFilter { topic: Some("a' OR '1'='1".into()), ..Default::default() })
                    .await
                    .is_empty());

                // Keyset pages: 4 + 4 + 2, no overlap, in id order.
                let mut pages = Vec::new();
                let mut after = None;
                loop {
                    let page = list(ListFilter { limit: 4, after_id: after, ..Default::default() }).await;
                    if page.is_empty() {
                        break;
                    }
                    after = page.last().copied();
                    pages.push(page);
                }
                assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
                assert_eq!(pages.concat(), ids);

                for limit in [0, MAX_LIST_LIMIT + 1] {
                    let err = outbox.list(&ListFilter { limit, ..Default::default() }).await.unwrap_err();
                    assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
                }
                assert_eq!(outbox.list(&ListFilter { limit: MAX_LIST_LIMIT, ..Default::default() }).await.unwrap().len(), 10);
                db.drop_db().await;
            }

            #[tokio::test]
            async fn retry_redrives_a_failed_message_and_refuses_a_sent_one() {
                let (db, outbox) = setup().await;
                let ids = enqueue(&outbox, "order.paid", 2).await;
                let (failed, sent) = (ids[0], ids[1]);
                mark_failed(&db.pool, failed).await;
                mark(&db.pool, sent, "sent").await;
                add_delivery(&db.pool, failed, "kafka", "failed", 3).await;
                add_delivery(&db.pool, failed, "webhook", "sent", 0).await;
                assert!(outbox.claim("relay-a", 10, Duration::from_secs(30)).await.unwrap().is_empty());

                let m = outbox.retry(failed, "ops:alice").await.unwrap();
                assert_eq!(m.status, Status::Pending);
                assert_eq!(m.attempts, 0);
                assert!(m.lease_owner.is_none() && m.lease_until.is_none());
                assert_eq!(m.updated_by.as_deref(), Some("ops:alice"));
                assert_eq!(m.last_error.as_deref(), Some("broker said no"), "the reason stays visible");
                assert!(m.next_attempt_at <= Utc::now() + chrono::Duration::seconds(5), "{}", m.next_attempt_at);
                // The relay sees it at once.
                let claimed = outbox.claim("relay-a", 10, Duration::from_secs(30)).await.unwrap();
                assert_eq!(claimed.iter().map(|m| m.id).collect::<Vec<_>>(), vec![failed]);
                let detail = outbox.show(failed).await.unwrap();
                assert_eq!(detail.message.id, failed);
                let deliveries: Vec<(&str, Status, i32)> =
                    detail.deliveries.iter().map(|d| (d.destination.as_str(), d.status, d.attempts)).collect();
                assert_eq!(
                    deliveries,
                    vec![("kafka", Status::Pending, 0), ("webhook", Status::Sent, 0)],
                    "only the failed destination is re-driven"
                );

                let err = outbox.retry(sent, "ops:alice").await.unwrap_err();
                assert!(
                    matches!(err, Error::InvalidTransition { id, from: Status::Sent, action: "retry" } if id == sent),
                    "{err:?}"
                );
                assert!(err.to_string().contains("status is sent"), "{err}");
                assert_eq!(outbox.get(sent).await.unwrap().unwrap().status, Status::Sent, "untouched");
                let err = outbox.retry(MessageId(987_654), "ops:alice").await.unwrap_err();
                assert!(matches!(err, Error::NotFound { id: MessageId(987_654) }), "{err:?}");
                let err = outbox.show(MessageId(987_654)).await.unwrap_err();
                assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
                // Sending (just claimed above) is refused too.
                let err = outbox.retry(failed, "ops:alice").await.unwrap_err();
                assert!(matches!(err, Error::InvalidTransition { from: Status::Sending, .. }), "{err:?}");
                db.drop_db().await;
            }

            #[tokio::test]
            async fn retry_failed_redrives_every_match_in_batches() {
                let (db, outbox) = setup().await;
                let a = enqueue(&outbox, "a", 25).await;
                let b = enqueue(&outbox, "b", 5).await;
                let pending = enqueue(&outbox, "a", 1).await;
                for id in a.iter().chain(&b) {
                    mark_failed(&db.pool, *id).await;
                }
                add_delivery(&db.pool, a[0], "kafka", "failed", 2).await;

                let mut seen = Vec::new();
                let mut progress = |n: u64| seen.push(n);
                let filter = ListFilter { topic: Some("a".into()), ..Default::default() };
                let n = outbox.retry_failed(&filter, "ops:bob", 10, Some(&mut progress)).await.unwrap();
                assert_eq!(n, 25);
                assert_eq!(seen, vec![10, 20, 25]);
                let failed = ListFilter { status: Some(Status::Failed), ..Default::default() };
                assert_eq!(outbox.list(&failed).await.unwrap().iter().map(|m| m.id).collect::<Vec<_>>(), b);
                let again = outbox.get(a[24]).await.unwrap().unwrap();
                assert_eq!((again.status, again.attempts, again.updated_by.as_deref()), (Status::Pending, 0, Some("ops:bob")));
                assert_eq!(outbox.get(pending[0]).await.unwrap().unwrap().updated_by, None, "pending untouched");
                assert_eq!(outbox.show(a[0]).await.unwrap().deliveries[0].status, Status::Pending);

                assert_eq!(outbox.retry_failed(&ListFilter::default(), "ops:bob", 500, None).await.unwrap(), 5);
                assert_eq!(outbox.stats().await.unwrap().failed, 0);
                let wrong = ListFilter { status: Some(Status::Sent), ..Default::default() };
                let err = outbox.retry_failed(&wrong, "ops:bob", 10, None).await.unwrap_err();
                assert!(matches!(err, Error::InvalidArgument { name: "status", .. }), "{err:?}");
                let err = outbox.retry_failed(&ListFilter::default(), "ops:bob", 0, None).await.unwrap_err();
                assert!(matches!(err, Error::InvalidArgument { name: "batch", .. }), "{err:?}");
                db.drop_db().await;
            }

            /// Failure groups, bulk actions by ids / filter / group with dry runs, destination
            /// pauses and edit-and-resend, on this dialect (the admin API tests cover the HTTP
            /// side on PostgreSQL and MariaDB).
            #[tokio::test]
            async fn groups_bulk_actions_pauses_and_resend() {
                use outbox_store::{BulkAction, MessageEdit, Pauses, Selection};
                let (db, outbox) = setup().await;
                let ids = enqueue(&outbox, "t", 6).await;
                for (i, id) in ids[..4].iter().enumerate() {
                    let error = if i < 3 { format!("[k] timed out after {} ms", 5000 + i) } else { "[k] HTTP 400".into() };
                    let sql = format!("UPDATE outbox_message SET status = 'failed', last_error = '{error}' WHERE id = {id}");
                    assert_eq!(exec(&db.pool, &sql).await, 1);
                }
                let report = outbox.failure_groups(1000).await.unwrap();
                assert_eq!((report.scanned, report.truncated, report.groups.len()), (4, false, 2), "{report:?}");
                let top = &report.groups[0];
                assert_eq!((top.count, top.cause.as_str(), top.destination.as_deref()), (3, "timed out after # ms", Some("k")));
                let group = Selection::Group { id: top.id.clone(), scan: 1000 };
                assert_eq!(outbox.bulk(BulkAction::Retry, &group, "ops", true, None).await.unwrap(), 3);
                assert_eq!(outbox.stats().await.unwrap().failed, 4, "a dry run changes nothing");
                assert_eq!(outbox.bulk(BulkAction::Retry, &group, "ops", false, None).await.unwrap(), 3);
                assert_eq!(outbox.stats().await.unwrap().failed, 1);
                // Ids: the pending ones are cancelled; a second time nothing is left to move.
                let sel = Selection::Ids(vec![ids[4], ids[5]]);
                assert_eq!(outbox.bulk(BulkAction::Cancel, &sel, "ops", false, None).await.unwrap(), 2);
                assert_eq!(outbox.bulk(BulkAction::Cancel, &sel, "ops", true, None).await.unwrap(), 0);
                let errors = Selection::Filter(ListFilter { error: Some("HTTP 4".into()), ..Default::default() });
                assert_eq!(outbox.bulk(BulkAction::Retry, &errors, "ops", true, None).await.unwrap(), 1);
                let wildcard = Selection::Filter(ListFilter { error: Some("%".into()), ..Default::default() });
                assert_eq!(outbox.bulk(BulkAction::Retry, &wildcard, "ops", true, None).await.unwrap(), 0, "% is literal");

                // Pauses: idempotent, visible to every relay through the table.
                assert!(outbox.pause("k", "ops", Some("maintenance")).await.unwrap());
                assert!(!outbox.pause("k", "ops", None).await.unwrap());
                assert_eq!(outbox.paused_destinations().await.unwrap(), vec!["k".to_owned()]);
                assert_eq!(outbox.pauses().await.unwrap()[0].reason.as_deref(), Some("maintenance"));
                assert!(outbox.pause("bad\nname", "ops", None).await.is_err());
                assert!(outbox.resume("k", "ops").await.unwrap());
                assert!(!outbox.resume("k", "ops").await.unwrap());
                assert!(outbox.paused_destinations().await.unwrap().is_empty());

                // Resend: the failed one becomes a copy; the original cannot be resent twice.
                let edit = MessageEdit { payload: Some("{\"fixed\":true}".into()), ..Default::default() };
                let r = outbox.resend(ids[3], &edit, "ops").await.unwrap();
                assert_eq!((r.original.status, r.copy.status), (Status::Cancelled, Status::Pending));
                assert_eq!(r.copy.payload, "{\"fixed\":true}");
                assert_eq!(r.copy.headers.get("outbox-resent-from"), Some(&ids[3].0.to_string()));
                let err = outbox.resend(ids[3], &edit, "ops").await.unwrap_err();
                assert!(matches!(err, Error::InvalidTransition { action: "resend", .. }), "{err:?}");
                db.drop_db().await;
            }

            /// How late the most overdue message is: none when nothing is due (empty, only
            /// scheduled for later, only being sent), else since its due time.
            #[tokio::test]
            async fn overdue_is_measured_from_the_due_time_of_pending_messages() {
                use outbox_store::Backlog;
                let (db, outbox) = setup().await;
                assert_eq!(outbox.overdue().await.unwrap(), None, "empty");
                let later = NewMessage::new("t", "{}").delay(Duration::from_secs(3600));
                outbox.enqueue(&later).await.unwrap();
                assert_eq!(outbox.overdue().await.unwrap(), None, "scheduled for later is not overdue");
                let ids = enqueue(&outbox, "t", 2).await;
                let sql = format!("UPDATE outbox_message SET next_attempt_at = {} WHERE id = {}", ago(120), ids[0]);
                assert_eq!(exec(&db.pool, &sql).await, 1);
                let late = outbox.overdue().await.unwrap().unwrap();
                assert!((119..200).contains(&late.as_secs()), "{late:?}");
                mark_sending(&db.pool, ids[0]).await;
                let late = outbox.overdue().await.unwrap().unwrap();
                assert!(late < Duration::from_secs(60), "a message being sent is not overdue: {late:?}");
                db.drop_db().await;
            }

            /// Each relay's row in `outbox_relay`: written, refreshed (same start, new
            /// counters), listed with how long it has been silent, removed; a hand-written row
            /// with an unknown state and control characters is listed, escaped, not fatal.
            #[tokio::test]
            async fn relays_register_refresh_and_leave() {
                use outbox_store::{Presence, RelayBeat, RelayState};
                let (db, outbox) = setup().await;
                let started_at = Utc::now() - chrono::Duration::minutes(5);
                let mut beat = RelayBeat {
                    owner: "relay-a".into(),
                    host: "pod-7".into(),
                    pid: 4242,
                    version: "0.1.0".into(),
                    state: RelayState::Busy,
                    started_at,
                    last_claim_at: None,
                    claimed: 3,
                    delivered: 2,
                    failed: 1,
                };
                outbox.beat(&beat).await.unwrap();
                beat.state = RelayState::Idle;
                beat.claimed = u64::MAX;
                beat.last_claim_at = Some(Utc::now());
                outbox.beat(&beat).await.unwrap();
                outbox.beat(&RelayBeat { owner: "relay-b".into(), ..beat.clone() }).await.unwrap();
                let relays = outbox.relays().await.unwrap();
                let owners: Vec<&str> = relays.iter().map(|r| r.beat.owner.as_str()).collect();
                assert_eq!(owners, ["relay-a", "relay-b"]);
                let a = &relays[0];
                assert_eq!((a.beat.state, a.beat.pid, a.beat.host.as_str()), (RelayState::Idle, 4242, "pod-7"));
                assert_eq!(a.beat.claimed, i64::MAX as u64, "a counter is capped, never wraps");
                assert_eq!(a.beat.started_at.timestamp_millis(), started_at.timestamp_millis());
                assert!(a.beat.last_claim_at.is_some());
                assert!((0..60_000).contains(&a.silent_ms), "silent for {} ms", a.silent_ms);
                let err = outbox.beat(&RelayBeat { owner: "bad\nowner".into(), ..beat.clone() }).await.unwrap_err();
                assert!(matches!(err, Error::InvalidArgument { name: "owner", .. }), "{err:?}");

                outbox.leave("relay-b").await.unwrap();
                outbox.leave("relay-b").await.unwrap();
                // A row written by hand: an unknown state, a control character in the host.
                let seen = ago(3 * 86_400);
                let sql = format!(
                    "INSERT INTO outbox_relay (owner, host, pid, version, state, started_at, seen_at) \
                     VALUES ('by-hand', 'h\u{1b}[31m', -1, 'v', 'dancing', {seen}, {seen})"
                );
                assert_eq!(exec(&db.pool, &sql).await, 1);
                let relays = outbox.relays().await.unwrap();
                assert_eq!(relays.len(), 2, "{relays:?}");
                let by_hand = &relays[0];
                assert_eq!((by_hand.beat.owner.as_str(), by_hand.beat.state), ("by-hand", RelayState::Unknown));
                assert_eq!((by_hand.beat.host.as_str(), by_hand.beat.pid), ("h\\u{1b}[31m", 0));
                assert!(by_hand.silent_ms > 86_400_000, "{by_hand:?}");
                // The next beat prunes rows silent for more than a day.
                outbox.beat(&beat).await.unwrap();
                let owners: Vec<String> = outbox.relays().await.unwrap().into_iter().map(|r| r.beat.owner).collect();
                assert_eq!(owners, ["relay-a"]);
                db.drop_db().await;
            }

            #[tokio::test]
            async fn cancel_refuses_a_message_being_sent() {
                let (db, outbox) = setup().await;
                let ids = enqueue(&outbox, "t", 4).await;
                let (pending, failed, sending, sent) = (ids[0], ids[1], ids[2], ids[3]);
                mark_failed(&db.pool, failed).await;
                mark_sending(&db.pool, sending).await;
                mark(&db.pool, sent, "sent").await;
                add_delivery(&db.pool, failed, "kafka", "failed", 1).await;
                add_delivery(&db.pool, failed, "webhook", "sent", 0).await;

                let m = outbox.cancel(pending, "ops:carol").await.unwrap();
                assert_eq!((m.status, m.updated_by.as_deref()), (Status::Cancelled, Some("ops:carol")));
                let m = outbox.cancel(failed, "ops:carol").await.unwrap();
                assert_eq!(m.status, Status::Cancelled);
                let d = outbox.show(failed).await.unwrap().deliveries;
                assert_eq!(d.iter().map(|d| d.status).collect::<Vec<_>>(), vec![Status::Cancelled, Status::Sent]);

                let err = outbox.cancel(sending, "ops:carol").await.unwrap_err();
                assert!(matches!(err, Error::InvalidTransition { from: Status::Sending, action: "cancel", .. }), "{err:?}");
                let text = err.to_string();
                assert!(text.contains("status is sending") && text.contains("a relay is publishing it"), "{text}");
                assert_eq!(outbox.get(sending).await.unwrap().unwrap().status, Status::Sending);
                let err = outbox.cancel(sent, "ops:carol").await.unwrap_err();
                assert!(matches!(err, Error::InvalidTransition { from: Status::Sent, .. }), "{err:?}");
                let err = outbox.cancel(pending, "ops:carol").await.unwrap_err();
                assert!(matches!(err, Error::InvalidTransition { from: Status::Cancelled, .. }), "{err:?}");
                assert!(matches!(outbox.cancel(MessageId(424_242), "ops").await, Err(Error::NotFound { .. })));

                // Cancelled messages are never claimed; a cancelled one can be re-driven.
                assert!(outbox.claim("relay-a", 10, Duration::from_secs(30)).await.unwrap().is_empty());
                let m = outbox.retry(pending, "ops:carol").await.unwrap();
                assert_eq!(m.status, Status::Pending);
                let claimed = outbox.claim("relay-a", 10, Duration::from_secs(30)).await.unwrap();
                assert_eq!(claimed.iter().map(|m| m.id).collect::<Vec<_>>(), vec![pending]);
                db.drop_db().await;
            }

            #[tokio::test]
            async fn purge_deletes_only_old_finished_rows_in_batches() {
                let (db, outbox) = setup().await;
                let old_sent = enqueue(&outbox, "old", 2500).await;
                exec(
                    &db.pool,
                    &format!("UPDATE outbox_message SET status = 'sent', updated_at = {} WHERE topic = 'old'", ago(2 * 86_400)),
                )
                .await;
                let keep = enqueue(&outbox, "keep", 6).await;
                let gone = enqueue(&outbox, "gone", 2).await;
                // Old but unfinished: pending, failed, sending. Finished but recent: sent now.
                mark_failed(&db.pool, keep[3]).await;
                mark_failed(&db.pool, keep[4]).await;
                mark_sending(&db.pool, keep[5]).await;
                mark(&db.pool, keep[2], "sent").await;
                mark(&db.pool, gone[0], "cancelled").await;
                mark(&db.pool, gone[1], "acked").await;
                let backdate = format!(
                    "UPDATE outbox_message SET updated_at = {} WHERE topic = 'gone' OR id IN ({}, {}, {}, {})",
                    ago(2 * 86_400),
                    keep[0],
                    keep[1],
                    keep[3],
                    keep[5]
                );
                exec(&db.pool, &backdate).await;
                for id in &old_sent[..3] {
                    add_delivery(&db.pool, *id, "kafka", "sent", 0).await;
                    add_delivery(&db.pool, *id, "webhook", "sent", 0).await;
                }
                add_delivery(&db.pool, keep[3], "kafka", "failed", 4).await;

                let mut seen = Vec::new();
                let mut progress = |n: u64| seen.push(n);
                let n = outbox.purge(Duration::from_secs(86_400), 500, Some(&mut progress)).await.unwrap();
                assert_eq!(n, 2502);
                assert_eq!(seen, vec![500, 1000, 1500, 2000, 2500, 2502], "one short statement per batch");
                assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM outbox_message").await, 6);
                let left: Vec<MessageId> = outbox.list(&ListFilter::default()).await.unwrap().iter().map(|m| m.id).collect();
                assert_eq!(left, keep);
                assert_eq!(
                    count(&db.pool, "SELECT COUNT(*) FROM outbox_delivery").await,
                    1,
                    "the purged messages' deliveries went with them (ON DELETE CASCADE)"
                );

                // Everything finished, however recent: the sent message of a moment ago.
                assert_eq!(outbox.purge(Duration::ZERO, 500, None).await.unwrap(), 1);
                assert!(outbox.get(keep[2]).await.unwrap().is_none());
                assert_eq!(outbox.purge(Duration::ZERO, 500, None).await.unwrap(), 0);
                assert_eq!(outbox.stats().await.unwrap().total, 5);
                let err = outbox.purge(Duration::ZERO, 0, None).await.unwrap_err();
                assert!(matches!(err, Error::InvalidArgument { name: "batch", .. }), "{err:?}");
                db.drop_db().await;
            }
        }
    };
}

suite!(
    postgres,
    outbox_testkit::fresh_pg,
    sqlx::Postgres,
    ago = |s| format!("(now() - interval '{s} seconds')")
);

suite!(
    mysql,
    outbox_testkit::fresh_mysql,
    sqlx::MySql,
    ago = |s| format!("(UTC_TIMESTAMP(6) - INTERVAL {s} SECOND)")
);

suite!(
    sqlite,
    outbox_testkit::fresh_sqlite,
    sqlx::Sqlite,
    ago = |s| format!("(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - ({s}) * 1000)")
);

/// The relay's start-up warning reads the server's own setting, and only PostgreSQL has one.
#[tokio::test]
async fn autovacuum_on_reports_the_postgres_setting_and_nothing_elsewhere() {
    let pg = outbox_testkit::fresh_pg().await;
    let shown: String = sqlx::query_scalar("SHOW autovacuum").fetch_one(&pg.pool).await.unwrap();
    let outbox = outbox_store::AnyOutbox::connect(&pg.url, 2).await.unwrap();
    assert_eq!(outbox.autovacuum_on().await.unwrap(), Some(shown == "on"), "SHOW autovacuum = {shown}");
    pg.drop_db().await;

    let lite = outbox_testkit::fresh_sqlite().await;
    let outbox = outbox_store::AnyOutbox::connect(&lite.url, 2).await.unwrap();
    assert_eq!(outbox.autovacuum_on().await.unwrap(), None);
    lite.drop_db().await;
}

/// A pool built by `AnyOutbox::connect` counts the connections it opens (`outbox relay` exports
/// the count as `outbox_pool_connections_opened_total`: connection churn on a crowded budget), on
/// each store; a pool of one's own is not counted.
#[tokio::test]
async fn a_connected_pool_counts_the_connections_it_opens() {
    async fn check(url: &str) {
        let outbox = outbox_store::AnyOutbox::connect(url, 2).await.unwrap();
        // `connect` opens one to check the URL and keeps it.
        assert_eq!(outbox.connections_opened(), Some(1), "{url}");
        outbox.migrate().await.unwrap();
        let none = MessageId(1);
        assert!(outbox.get(none).await.unwrap().is_none());
        // The migration may close the one it locked the schema on.
        let opened = outbox.connections_opened().unwrap();
        assert!((1..=3).contains(&opened), "{opened} ({url})");
        for _ in 0..3 {
            assert!(outbox.get(none).await.unwrap().is_none());
        }
        assert_eq!(outbox.connections_opened(), Some(opened), "an idle one was reused: {url}");
        // Closed while unused (and, on a server's pool, none kept once handed back: a store's
        // between its turns of a crowded budget), the next statement opens another; the
        // backlog's reads open one for all of them, not one per statement.
        let keeps = url.starts_with("sqlite");
        if keeps {
            // A SQLite store sheds nothing (a file: no server to spare); its idle one is reused.
            outbox_store::Wakeups::shed_connections(&outbox, true).await;
        } else {
            // The last statement's connection may still be on its way back (sqlx pings it in a
            // task of its own): closed once it is idle.
            outbox_testkit::eventually("the pool empty", || async {
                outbox_store::Wakeups::shed_connections(&outbox, true).await;
                outbox.pool_connections().0 == 0
            })
            .await;
        }
        for round in 0..2 {
            let before = outbox.connections_opened().unwrap();
            let (stats, relays) = outbox.backlog().await.unwrap();
            assert_eq!((stats.total, relays.unwrap().len()), (0, 0), "{url}");
            let stats = outbox.stats().await.unwrap();
            assert_eq!(stats.total, 0, "{url}");
            let want = if keeps { 0 } else { 2 };
            assert_eq!(
                outbox.connections_opened(),
                Some(before + want),
                "one for the backlog's reads and one for the stats' (round {round}): {url}"
            );
        }
    }
    let pg = outbox_testkit::fresh_pg().await;
    check(&pg.url).await;
    let own = Outbox::new(pg.pool.clone());
    assert_eq!(own.connections_opened(), None, "a pool of one's own is not counted");
    pg.drop_db().await;
    let my = outbox_testkit::fresh_mysql().await;
    check(&my.url).await;
    my.drop_db().await;
    let lite = outbox_testkit::fresh_sqlite().await;
    check(&lite.url).await;
    lite.drop_db().await;
}
