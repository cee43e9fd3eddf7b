//! The claim against real PostgreSQL, real MariaDB/MySQL and a SQLite file, when a long backlog
//! of one busy key sits in front of other messages: the heads of the other keys and the messages
//! without a key are claimed at once, not after the busy key's backlog (found by the chaos suite:
//! the claim used to read every held-back row, and a windowed claim must not starve what lies
//! behind the window).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::time::Duration;

use outbox_store::{MessageId, NewMessage, Outbox, RelayStore};

const LEASE: Duration = Duration::from_secs(30);

macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty) => {
        mod $dialect {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn heads_behind_a_busy_keys_backlog_are_claimed_at_once() {
                let db = $fresh().await;
                let outbox: Outbox<$db> = Outbox::new(db.pool.clone());
                outbox.migrate().await.unwrap();
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
                db.drop_db().await;
            }
        }
    };
}

suite!(postgres, outbox_testkit::fresh_pg, sqlx::Postgres);
suite!(mysql, outbox_testkit::fresh_mysql, sqlx::MySql);
suite!(sqlite, outbox_testkit::fresh_sqlite, sqlx::Sqlite);
