//! The bridge on real PostgreSQL and real MariaDB/MySQL, with the seed articles' own tables:
//! seed 004's `t_local_message` (status 0 pending / 1 sending / 2 sent / 3 failed, retry_count,
//! next_retry_time, last_exec_time, fail_reason), seed 001's `message` (status 0/1, try_num,
//! next_time) and seed 000's `message_deliver_task` (message_status 0 sending / 1 handled,
//! retry_times). A plain-SQL writer that knows only the legacy table; the outbox side is driven
//! through the store's own claim and settle (the relay's path), so what the legacy table shows
//! is exactly what the relay's writes make of it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use outbox_adopt::{check, install, remove, BridgeConfig, Db};
use outbox_store::{
    ClaimMode, Claims, MessageId, MessageWrite, Outbox, OutboxDatabase, Settlement, Status, Tables,
};
use outbox_testkit::either::Either;

/// The legacy database, whichever it is: the test's plain-SQL writer.
type Legacy<'a> = Either<'a>;

fn db<'a>(legacy: &Legacy<'a>) -> Db<'a> {
    match *legacy {
        Either::Pg(p) => Db::Postgres(p),
        Either::My(p) => Db::MySql(p),
    }
}

/// The one `[[adopt]]` section of `toml_text`.
fn section(toml_text: &str) -> BridgeConfig {
    #[derive(serde::Deserialize)]
    struct File {
        adopt: Vec<BridgeConfig>,
    }
    let mut file: File = toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}\n{toml_text}"));
    assert_eq!(file.adopt.len(), 1);
    file.adopt.remove(0)
}

fn bridge(toml_text: &str) -> outbox_adopt::Bridge {
    section(toml_text).check().unwrap()
}

const T_LOCAL_MESSAGE_MYSQL: &str = include_str!("../../../examples/adopt/seed004_t_local_message.mysql.sql");

const T_LOCAL_MESSAGE_PG: &str = include_str!("../../../examples/adopt/seed004_t_local_message.postgres.sql");

const T_LOCAL_MESSAGE_BRIDGE: &str = include_str!("../../../examples/adopt/seed004_t_local_message.toml");

fn insert_local(biz_key: &str, topic: &str, status: i32) -> String {
    format!(
        "INSERT INTO t_local_message (biz_type, biz_key, topic, message_body, status, created_by, updated_by) \
         VALUES ('order_create', '{biz_key}', '{topic}', '{{\"order\":\"{biz_key}\"}}', {status}, 'order-svc', 'order-svc')"
    )
}

async fn claim_all<S: Claims>(store: &S) -> Vec<outbox_store::OutboxMessage> {
    store.claim_with(ClaimMode::Lease, "relay-t", 100, Duration::from_secs(60)).await.unwrap().messages
}

fn write(id: MessageId, status: Status, attempts: i32, error: &str) -> MessageWrite {
    MessageWrite {
        id,
        status,
        attempts,
        retry_in: Duration::from_secs(3600),
        last_error: Some(error.into()),
        attempted: true,
    }
}

/// Seed 004's table end to end: rows pending before the install are taken over once; committed
/// inserts become messages, rolled-back ones never; the relay's claim, success, retry and final
/// failure show in the legacy columns; an unusable row is refused into the failed value; a
/// foreign status write is counted; removal stops the capture and leaves the legacy rows alone.
async fn local_message<DB: OutboxDatabase>(outbox: &Outbox<DB>, legacy: Legacy<'_>, _url: &str)
where
    Outbox<DB>: Claims,
{
    let tables = Tables::canonical();
    let b = bridge(T_LOCAL_MESSAGE_BRIDGE);
    // Ids of messages and legacy rows differ: a message nobody adopted comes first.
    legacy.exec("INSERT INTO outbox_message (topic, payload) VALUES ('other', 'x')").await;
    legacy.exec("INSERT INTO outbox_message (topic, payload) VALUES ('other', 'y')").await;
    let other: Vec<MessageId> = claim_all(outbox).await.iter().map(|m| m.id).collect();
    outbox
        .settle_held(outbox_store::Hold::Lease, "relay-t", &Settlement { sent: other, ..Default::default() })
        .await
        .unwrap();

    // Before the bridge: two pending rows (the legacy scanner's backlog) and one already sent.
    legacy.exec(&insert_local("A-1", "orders", 0)).await;
    legacy.exec(&insert_local("A-2", "orders", 0)).await;
    legacy.exec(&insert_local("A-0", "orders", 2)).await;

    let report = install(db(&legacy), tables, &b).await.unwrap();
    assert_eq!(report.taken_over, 2, "the two pending rows are taken over");
    assert_eq!(report.triggers.len(), 4, "{:?}", report.triggers);
    let again = install(db(&legacy), tables, &b).await.unwrap();
    assert_eq!(again.taken_over, 0, "never twice");
    let fine = check(db(&legacy), tables, &b).await.unwrap();
    assert!(fine.ok(), "{fine:?}");
    assert_eq!(fine.taken_over, 2);

    // The legacy application's own transactions: one commits, one rolls back.
    legacy
        .tx(
            &[
                &insert_local("B-1", "orders", 0),
                "UPDATE t_local_message SET updated_by = 'x' WHERE biz_key = 'A-0'",
            ],
            true,
        )
        .await;
    legacy.tx(&[&insert_local("B-2", "orders", 0)], false).await;
    assert_eq!(legacy.count("SELECT COUNT(*) FROM t_local_message WHERE biz_key = 'B-2'").await, 0);

    let claimed = claim_all(outbox).await;
    let keys: Vec<(String, String)> =
        claimed.iter().map(|m| (m.biz_key.clone().unwrap_or_default(), m.payload.clone())).collect();
    assert_eq!(
        keys,
        vec![
            ("A-1".to_owned(), r#"{"order":"A-1"}"#.to_owned()),
            ("A-2".to_owned(), r#"{"order":"A-2"}"#.to_owned()),
            ("B-1".to_owned(), r#"{"order":"B-1"}"#.to_owned())
        ],
        "taken-over rows first, then the committed insert; the rolled-back one never"
    );
    assert!(claimed.iter().all(|m| m.topic == "orders" && m.biz_type.as_deref() == Some("order_create")));
    // Claimed: the legacy rows show "sending" (1).
    assert_eq!(legacy.count("SELECT COUNT(*) FROM t_local_message WHERE status = 1").await, 3);

    // Settled: A-1 sent, A-2 retried later with its error, B-1 failed for good.
    let settlement = Settlement {
        sent: vec![claimed[0].id],
        messages: vec![
            write(claimed[1].id, Status::Pending, 1, "broker said no"),
            write(claimed[2].id, Status::Failed, 5, "no route to topic"),
        ],
        deliveries: Vec::new(),
    };
    outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &settlement).await.unwrap();
    // One legacy row: (status, retry_count, fail_reason, retry time later than the insert,
    // tried), read as numbers and text the way both databases return them.
    let show = |k: &'static str| async move {
        let q =
            |what: &str| format!("SELECT {} FROM t_local_message WHERE biz_key = '{k}'", legacy.bigint(what));
        (
            legacy.count(&q("status")).await,
            legacy.count(&q("retry_count")).await,
            legacy
                .text(&format!("SELECT fail_reason FROM t_local_message WHERE biz_key = '{k}'"))
                .await
                .unwrap_or_else(|| "NULL".into()),
            legacy.count(&q("CASE WHEN next_retry_time > gmt_create THEN 1 ELSE 0 END")).await == 1,
            legacy.count(&q("CASE WHEN last_exec_time IS NULL THEN 0 ELSE 1 END")).await == 1,
        )
    };
    let sent = show("A-1").await;
    assert_eq!((sent.0, sent.1), (2, 0), "{sent:?}");
    assert_eq!(show("A-2").await, (0, 1, "broker said no".to_owned(), true, true));
    let failed = show("B-1").await;
    assert_eq!((failed.0, failed.1, failed.2.as_str()), (3, 5, "no route to topic"));
    assert_eq!(show("A-0").await.0, 2, "the row sent before the bridge is untouched");

    // A row that cannot be a message (blank topic): the legacy INSERT succeeds, the row shows
    // the failed value and the reason, and the outbox holds it as failed (never published).
    legacy.exec(&insert_local("C-1", " ", 0)).await;
    let refused = show("C-1").await;
    assert_eq!(refused.0, 3);
    assert!(refused.2.contains("cannot be a message"), "{refused:?}");
    assert!(claim_all(outbox).await.is_empty(), "a refused row is never claimed");
    assert_eq!(
        legacy
            .count("SELECT COUNT(*) FROM outbox_message WHERE status = 'failed' AND topic = '(invalid)'")
            .await,
        1
    );

    // A long error is cut to the legacy column's 512 characters, not refused by it.
    let retried_again = claim_all(outbox).await;
    assert!(retried_again.is_empty(), "A-2 waits an hour");
    legacy.exec("UPDATE outbox_message SET next_attempt_at = next_attempt_at - INTERVAL '2' HOUR WHERE biz_key = 'A-2'").await;
    let due = claim_all(outbox).await;
    assert_eq!(due.len(), 1);
    let long = "e".repeat(1500);
    let settlement =
        Settlement { messages: vec![write(due[0].id, Status::Pending, 2, &long)], ..Default::default() };
    outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &settlement).await.unwrap();
    assert_eq!(show("A-2").await.2.chars().count(), 512);

    // A legacy scanner still running writes the status itself: counted, reported.
    let before = check(db(&legacy), tables, &b).await.unwrap();
    assert_eq!(before.foreign_writes, 0, "the bridge's own writes are not foreign: {before:?}");
    legacy
        .exec("UPDATE t_local_message SET status = 2, retry_count = retry_count + 1 WHERE biz_key = 'A-2'")
        .await;
    let after = check(db(&legacy), tables, &b).await.unwrap();
    assert_eq!(after.foreign_writes, 1, "{after:?}");
    assert!(after.last_foreign_write_at.is_some() && !after.ok());

    // A changed mapping is reported until it is installed.
    let changed = bridge(&T_LOCAL_MESSAGE_BRIDGE.replace("failed = 3", "failed = 4"));
    let stale = check(db(&legacy), tables, &changed).await.unwrap();
    assert!(stale.problems.iter().any(|p| p.contains("another mapping")), "{stale:?}");

    // Removal: the triggers go, the legacy application's inserts are plain inserts again.
    remove(db(&legacy), tables, &b).await.unwrap();
    legacy.exec(&insert_local("D-1", "orders", 0)).await;
    assert_eq!(legacy.count("SELECT COUNT(*) FROM outbox_message WHERE biz_key = 'D-1'").await, 0);
    let gone = check(db(&legacy), tables, &b).await.unwrap();
    assert!(gone.problems.iter().any(|p| p.contains("not installed")), "{gone:?}");
    assert_eq!(
        legacy.count("SELECT COUNT(*) FROM t_local_message").await,
        6,
        "no legacy row is lost or added"
    );
}

const MESSAGE_MYSQL: &str = include_str!("../../../examples/adopt/seed001_message.mysql.sql");

const MESSAGE_PG: &str = include_str!("../../../examples/adopt/seed001_message.postgres.sql");

const MESSAGE_BRIDGE: &str = include_str!("../../../examples/adopt/seed001_message.toml");

/// Seed 001's table: per-key order of the captured rows, the tag carried, a broker outage
/// (retries) leaves the legacy row at 0 with its try count, success sets 1; on MySQL the legacy
/// application's LAST_INSERT_ID() is still its own row's id.
async fn message<DB: OutboxDatabase>(outbox: &Outbox<DB>, legacy: Legacy<'_>, _url: &str)
where
    Outbox<DB>: Claims,
{
    let tables = Tables::canonical();
    let b = bridge(MESSAGE_BRIDGE);
    legacy.exec("INSERT INTO outbox_message (topic, payload) VALUES ('other', 'x')").await;
    install(db(&legacy), tables, &b).await.unwrap();
    let insert = |key: &str, n: u32| {
        format!(
            "INSERT INTO message (topic, tag, msg_key, data) VALUES ('order-topic', 'paid', '{key}', '{{\"n\":{n}}}')"
        )
    };
    if let Either::My(pool) = legacy {
        let mut conn = pool.acquire().await.unwrap();
        sqlx::raw_sql(&insert("k1", 1)).execute(&mut *conn).await.unwrap();
        let own: i64 = sqlx::query_scalar("SELECT CAST(LAST_INSERT_ID() AS SIGNED)")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let legacy_id: i64 =
            sqlx::query_scalar("SELECT MAX(id) FROM message").fetch_one(&mut *conn).await.unwrap();
        assert_eq!(own, legacy_id, "the trigger's insert does not change the application's LAST_INSERT_ID()");
    } else {
        legacy.exec(&insert("k1", 1)).await;
    }
    legacy.tx(&[&insert("k2", 2), &insert("k1", 3)], true).await;
    let first = claim_all(outbox).await;
    let got: Vec<(Option<String>, String, Option<String>)> =
        first.iter().map(|m| (m.key.clone(), m.payload.clone(), m.tag.clone())).collect();
    assert_eq!(got.len(), 3, "the unrelated message plus the heads of k1 and k2: {got:?}");
    assert!(got.contains(&(Some("k1".into()), r#"{"n":1}"#.into(), Some("paid".into()))));
    assert!(got.contains(&(Some("k2".into()), r#"{"n":2}"#.into(), Some("paid".into()))));
    assert!(!got.iter().any(|g| g.1 == r#"{"n":3}"#), "k1's second row waits behind its first");

    // The broker is down: every attempt fails, the rows stay 0 with their try count.
    let outage = Settlement {
        messages: first.iter().map(|m| write(m.id, Status::Pending, 1, "connection refused")).collect(),
        ..Default::default()
    };
    outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &outage).await.unwrap();
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message WHERE status = 0 AND try_num = 1").await, 2);
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message WHERE status = 0 AND try_num = 0").await, 1);
    assert_eq!(
        legacy
            .count("SELECT COUNT(*) FROM message WHERE next_time > update_time + INTERVAL '30' MINUTE")
            .await,
        2,
        "next_time is the retry time"
    );

    // Back up: everything is delivered, k1 in order, and every legacy row shows 1.
    legacy.exec("UPDATE outbox_message SET next_attempt_at = created_at").await;
    let mut order = Vec::new();
    for _ in 0..3 {
        let batch = claim_all(outbox).await;
        order.extend(batch.iter().filter(|m| m.key.as_deref() == Some("k1")).map(|m| m.payload.clone()));
        let sent = Settlement { sent: batch.iter().map(|m| m.id).collect(), ..Default::default() };
        outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &sent).await.unwrap();
    }
    assert_eq!(order, [r#"{"n":1}"#, r#"{"n":3}"#]);
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message WHERE status = 1").await, 3);
    assert!(check(db(&legacy), tables, &b).await.unwrap().ok());
    remove(db(&legacy), tables, &b).await.unwrap();
}

const TASK_MYSQL: &str = include_str!("../../../examples/adopt/seed000_message_deliver_task.mysql.sql");

const TASK_BRIDGE: &str = include_str!("../../../examples/adopt/seed000_message_deliver_task.toml");

/// Seed 000's task table (MySQL only, as in the article): the message code is the topic, a
/// NULL body an empty payload, an unsigned id; the handled value once sent.
async fn deliver_task(outbox: &Outbox<sqlx::MySql>, legacy: Legacy<'_>, _url: &str) {
    let tables = Tables::canonical();
    let b = bridge(TASK_BRIDGE);
    install(db(&legacy), tables, &b).await.unwrap();
    legacy
        .exec("INSERT INTO message_deliver_task (task_no, message_code, scene_type, message_body) VALUES ('t-1', 'material.sync', 'approved', '{\"id\":7}'), ('t-2', 'material.sync', '', NULL)")
        .await;
    let claimed = claim_all(outbox).await;
    let got: Vec<(String, String, Option<String>)> =
        claimed.iter().map(|m| (m.topic.clone(), m.payload.clone(), m.tag.clone())).collect();
    assert_eq!(
        got,
        [
            ("material.sync".to_owned(), r#"{"id":7}"#.to_owned(), Some("approved".to_owned())),
            ("material.sync".to_owned(), String::new(), None)
        ]
    );
    let sent = Settlement { sent: claimed.iter().map(|m| m.id).collect(), ..Default::default() };
    outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &sent).await.unwrap();
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message_deliver_task WHERE message_status = 1").await, 2);
    remove(db(&legacy), tables, &b).await.unwrap();
}

async fn java_writer_postgres(outbox: &Outbox<sqlx::Postgres>, legacy: Legacy<'_>, url: &str) {
    java_writer(outbox, legacy, &jdbc_url(url, "postgresql"), "/usr/share/java/postgresql.jar").await;
}

async fn java_writer_mysql(outbox: &Outbox<sqlx::MySql>, legacy: Legacy<'_>, url: &str) {
    java_writer(outbox, legacy, &jdbc_url(url, "mariadb"), "/usr/share/java/mariadb-java-client.jar").await;
}

/// One test per scenario and database: a fresh migrated database, the legacy table created from
/// the seed's DDL, the scenario, the database dropped.
macro_rules! on_fresh {
    ($($test:ident: $fresh:ident, $legacy:ident, $ddl:expr => $scenario:ident;)+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let db = outbox_testkit::$fresh().await;
            let outbox = Outbox::new(db.pool.clone());
            outbox.migrate().await.unwrap();
            Either::$legacy(&db.pool).exec($ddl).await;
            $scenario(&outbox, Either::$legacy(&db.pool), &db.url).await;
            db.drop_db().await;
        }
    )+};
}

on_fresh! {
    postgres_local_message: fresh_pg, Pg, T_LOCAL_MESSAGE_PG => local_message;
    mysql_local_message: fresh_mysql, My, T_LOCAL_MESSAGE_MYSQL => local_message;
    postgres_message: fresh_pg, Pg, MESSAGE_PG => message;
    mysql_message: fresh_mysql, My, MESSAGE_MYSQL => message;
    mysql_deliver_task: fresh_mysql, My, TASK_MYSQL => deliver_task;
    postgres_java_writer: fresh_pg, Pg, MESSAGE_PG => java_writer_postgres;
    mysql_java_writer: fresh_mysql, My, MESSAGE_MYSQL => java_writer_mysql;
}

#[test]
fn a_bad_mapping_names_its_key() {
    let cases = [
        ("name = \"Bad-Name\"", "adopt.name"),
        ("table = \"t; DROP TABLE x\"", "adopt.local_message.table"),
        ("status_values = { pending = 0, sent = 0 }", "adopt.local_message.status_values.sent"),
        ("status_values = { pending = 0, sent = \"it's\" }", "adopt.local_message.status_values.sent"),
        ("topic = \"orders\"", "adopt.local_message.topic"),
        ("attempts_column = \"status\"", "adopt.local_message"),
    ];
    for (line, key) in cases {
        let field = line.split(' ').next().unwrap();
        let text: String = T_LOCAL_MESSAGE_BRIDGE
            .lines()
            .filter(|l| !l.starts_with(&format!("{field} ")))
            .chain([line])
            .collect::<Vec<_>>()
            .join("\n");
        let err = section(&text).check().unwrap_err().to_string();
        assert!(err.starts_with(key), "{line}: {err}");
    }
}

/// Seed 001's writer in Java over plain JDBC (examples/adopt/LegacyMessageWriter.java), which
/// knows only the legacy table: its committed rows become messages linked to the very ids its
/// driver returned, its rolled-back row never does, and once delivered every row shows 1.
async fn java_writer<DB: OutboxDatabase>(outbox: &Outbox<DB>, legacy: Legacy<'_>, jdbc_url: &str, jar: &str)
where
    Outbox<DB>: Claims,
{
    let tables = Tables::canonical();
    let b = bridge(MESSAGE_BRIDGE);
    install(db(&legacy), tables, &b).await.unwrap();
    let out = run_java_writer(jdbc_url, jar, 5);
    let committed: Vec<i64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("committed "))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let rolled_back: i64 =
        out.lines().find_map(|l| l.strip_prefix("rolled-back ")).unwrap().trim().parse().unwrap();
    assert_eq!(committed.len(), 5, "{out}");
    let linked = |id: i64| format!("SELECT COUNT(*) FROM outbox_adopt_link WHERE legacy_id = {id}");
    for id in &committed {
        assert_eq!(
            legacy.count(&linked(*id)).await,
            1,
            "legacy row {id} (the driver's generated key) is linked"
        );
    }
    assert_eq!(legacy.count(&linked(rolled_back)).await, 0);
    assert_eq!(legacy.count("SELECT COUNT(*) FROM outbox_message").await, 5);
    let mut delivered = 0;
    for _ in 0..5 {
        let batch = claim_all(outbox).await;
        delivered += batch.len();
        let sent = Settlement { sent: batch.iter().map(|m| m.id).collect(), ..Default::default() };
        outbox.settle_held(outbox_store::Hold::Lease, "relay-t", &sent).await.unwrap();
    }
    assert_eq!(delivered, 5);
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message WHERE status = 1").await, 5);
    assert_eq!(legacy.count("SELECT COUNT(*) FROM message").await, 5, "the rolled-back row is not there");
}

const INSTALL_HINT: &str = "run scripts/install-foreign-deps.sh (a JDK and the JDBC drivers)";

fn run_java_writer(jdbc_url: &str, jar: &str, orders: u32) -> String {
    use std::process::Command;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/adopt");
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("adopt-java-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(std::path::Path::new(jar).is_file(), "the JDBC driver {jar} is missing; {INSTALL_HINT}");
    let run = |c: &mut Command| {
        let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}; {INSTALL_HINT}"));
        assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    run(Command::new("javac")
        .args(["-Xlint:all", "-Werror", "-d"])
        .arg(&dir)
        .arg(root.join("LegacyMessageWriter.java")));
    let out = run(Command::new("java")
        .arg("-cp")
        .arg(format!("{}:{jar}", dir.display()))
        .arg("LegacyMessageWriter")
        .arg(jdbc_url)
        .arg(orders.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// `scheme://user[:password]@host[:port]/db` as a JDBC URL.
fn jdbc_url(sqlx_url: &str, subprotocol: &str) -> String {
    let rest = sqlx_url.split_once("://").unwrap().1.split('?').next().unwrap();
    let (auth, rest) = rest.rsplit_once('@').unwrap();
    let (user, password) = auth.split_once(':').map_or((auth, None), |(u, p)| (u, Some(p)));
    let mut jdbc = format!("jdbc:{subprotocol}://{rest}?user={user}");
    if let Some(p) = password {
        jdbc.push_str(&format!("&password={p}"));
    }
    jdbc
}
